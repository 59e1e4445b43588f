--- The model table: per provider kind, each model's context window, maximum output
--- and prices in US dollars per million tokens (input, output, cache read, cache
--- write; Anthropic's 1 h cache writes cost `cache_write_1h`). The one place to
--- update when prices change. A model missing here still works: its cost is unknown.
local M = {}

--- The model a provider uses when neither `model` nor `providers.<name>.model` is set.
M.defaults = {
  anthropic = "claude-sonnet-4-6",
  openai = "gpt-5.4",
  vertex = "gemini-3.1-pro-preview",
  deepseek = "deepseek-chat",
}

---@class flemma.models.Model
---@field context integer context window in tokens
---@field max_output integer maximum output tokens
---@field input number $ per Mtok
---@field output number $ per Mtok
---@field cache_read? number $ per Mtok
---@field cache_write? number $ per Mtok (Anthropic: 5 min cache)
---@field cache_write_1h? number $ per Mtok (Anthropic: 1 h cache)

---@type table<string, table<string, flemma.models.Model>>
M.by_kind = {
  anthropic = {
    ["claude-sonnet-4-6"] = {
      context = 1000000,
      max_output = 64000,
      input = 3,
      output = 15,
      cache_read = 0.3,
      cache_write = 3.75,
      cache_write_1h = 6,
    },
    ["claude-opus-4-6"] = {
      context = 1000000,
      max_output = 128000,
      input = 5,
      output = 25,
      cache_read = 0.5,
      cache_write = 6.25,
      cache_write_1h = 10,
    },
    ["claude-sonnet-4-5"] = {
      context = 200000,
      max_output = 64000,
      input = 3,
      output = 15,
      cache_read = 0.3,
      cache_write = 3.75,
      cache_write_1h = 6,
    },
    ["claude-opus-4-5"] = {
      context = 200000,
      max_output = 64000,
      input = 5,
      output = 25,
      cache_read = 0.5,
      cache_write = 6.25,
      cache_write_1h = 10,
    },
    ["claude-haiku-4-5"] = {
      context = 200000,
      max_output = 64000,
      input = 1,
      output = 5,
      cache_read = 0.1,
      cache_write = 1.25,
      cache_write_1h = 2,
    },
    ["claude-opus-4-1"] = {
      context = 200000,
      max_output = 32000,
      input = 15,
      output = 75,
      cache_read = 1.5,
      cache_write = 18.75,
      cache_write_1h = 30,
    },
    ["claude-sonnet-4-0"] = {
      context = 200000,
      max_output = 64000,
      input = 3,
      output = 15,
      cache_read = 0.3,
      cache_write = 3.75,
      cache_write_1h = 6,
    },
  },
  openai = {
    ["gpt-5.5"] = { context = 1050000, max_output = 128000, input = 5, output = 30, cache_read = 0.5 },
    ["gpt-5.4"] = { context = 1050000, max_output = 128000, input = 2.5, output = 15, cache_read = 0.25 },
    ["gpt-5.4-mini"] = { context = 1050000, max_output = 128000, input = 0.75, output = 4.5, cache_read = 0.075 },
    ["gpt-5.4-nano"] = { context = 1050000, max_output = 128000, input = 0.2, output = 1.25, cache_read = 0.02 },
    ["gpt-5.4-pro"] = { context = 1050000, max_output = 128000, input = 30, output = 180 },
  },
  vertex = {
    ["gemini-3.1-pro-preview"] = { context = 1048576, max_output = 65536, input = 2, output = 12, cache_read = 0.2 },
    ["gemini-2.5-pro"] = { context = 1048576, max_output = 65536, input = 1.25, output = 10, cache_read = 0.125 },
    ["gemini-2.5-flash"] = { context = 1048576, max_output = 65536, input = 0.3, output = 2.5, cache_read = 0.03 },
    ["gemini-2.5-flash-lite"] = { context = 1048576, max_output = 65536, input = 0.1, output = 0.4, cache_read = 0.01 },
  },
  openai_chat = {
    ["deepseek-chat"] = { context = 128000, max_output = 8192, input = 0.28, output = 0.42, cache_read = 0.028 },
    ["deepseek-reasoner"] = { context = 128000, max_output = 65536, input = 0.28, output = 0.42, cache_read = 0.028 },
    ["kimi-k2-0905-preview"] = { context = 262144, max_output = 32768, input = 0.6, output = 2.5, cache_read = 0.15 },
    ["kimi-k2-thinking"] = { context = 262144, max_output = 32768, input = 0.6, output = 2.5, cache_read = 0.15 },
  },
}

--- The entry of a model (nil when unknown).
---@param kind string
---@param model string
---@return flemma.models.Model|nil
function M.get(kind, model)
  local t = M.by_kind[kind]
  return t and model and t[model] or nil
end

--- The cost in dollars of a usage record, or nil when the model's prices are unknown.
---@param kind string
---@param model string
---@param usage { input_tokens?: integer, output_tokens?: integer, cache_read_tokens?: integer, cache_write_tokens?: integer }
---@param cache_retention? string "long" prices cache writes at the 1 h rate
---@return number|nil
function M.cost(kind, model, usage, cache_retention)
  local m = M.get(kind, model)
  if not m then
    return nil
  end
  local write_rate = m.cache_write or m.input
  if cache_retention == "long" and m.cache_write_1h then
    write_rate = m.cache_write_1h
  end
  local cost = (usage.input_tokens or 0) * m.input
    + (usage.output_tokens or 0) * m.output
    + (usage.cache_read_tokens or 0) * (m.cache_read or m.input)
    + (usage.cache_write_tokens or 0) * write_rate
  return cost / 1e6
end

return M
