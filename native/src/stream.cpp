#include "stream.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "guard.hpp"

namespace flemma::stream {

using json = nlohmann::json;

bool Event::operator==(const Event& o) const {
  return type == o.type && index == o.index && status == o.status && mask == o.mask && a == o.a &&
         b == o.b && std::equal(std::begin(usage), std::end(usage), std::begin(o.usage));
}

std::optional<Kind> kind_from_name(std::string_view name) {
  if (name == "anthropic") return Kind::Anthropic;
  if (name == "openai_chat") return Kind::OpenAIChat;
  if (name == "openai") return Kind::OpenAIResponses;
  if (name == "vertex") return Kind::Vertex;
  if (name == "mcp") return Kind::Mcp;
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------

namespace detail {
namespace {

// Length of the valid UTF-8 sequence at p (n bytes available), 0 if none.
inline size_t utf8_seq(const unsigned char* p, size_t n) {
  unsigned char c = p[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && p[i] >= lo && p[i] <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

}  // namespace

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t k = utf8_seq(p + i, n - i);
    if (k == 0) return false;
    i += k;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    size_t k = utf8_seq(p + i, n - i);
    if (k == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, k);
      i += k;
    }
  }
  return out;
}

size_t utf8_boundary(std::string_view s, size_t max) {
  size_t k = std::min(max, s.size());
  if (k == s.size()) return k;
  for (int back = 0; back < 3 && k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80; ++back)
    --k;
  return k;
}

bool json_depth_within(std::string_view s, size_t max) {
  const char* p = s.data();
  const char* e = p + s.size();
  size_t depth = 0;
  while (p < e) {
    char c = *p++;
    if (c == '"') {
      // Skip the string: to its closing quote, over escapes.
      while (p < e) {
        const void* q = std::memchr(p, '"', static_cast<size_t>(e - p));
        const char* end = q ? static_cast<const char*>(q) : e;
        const char* b =
            static_cast<const char*>(std::memchr(p, '\\', static_cast<size_t>(end - p)));
        if (b) {
          p = e - b > 2 ? b + 2 : e;  // the escaped byte is skipped
          continue;
        }
        p = q ? end + 1 : e;
        break;
      }
    } else if (c == '[' || c == '{') {
      if (++depth > max) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------
// The fast path for Anthropic's content_block_delta events
// ---------------------------------------------------------------------------

namespace {

inline int hex4(const char* p) {
  int v = 0;
  for (int i = 0; i < 4; ++i) {
    char c = p[i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return -1;
    v = v * 16 + d;
  }
  return v;
}

// Writes code point cp as UTF-8 at o and moves o past it.
inline void put_utf8(char*& o, uint32_t cp) {
  if (cp < 0x80) {
    *o++ = static_cast<char>(cp);
  } else if (cp < 0x800) {
    *o++ = static_cast<char>(0xC0 | (cp >> 6));
    *o++ = static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *o++ = static_cast<char>(0xE0 | (cp >> 12));
    *o++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *o++ = static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *o++ = static_cast<char>(0xF0 | (cp >> 18));
    *o++ = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *o++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *o++ = static_cast<char>(0x80 | (cp & 0x3F));
  }
}

#if defined(__SSE2__)
// The bytes of v that end a plain run, as a bit mask: a quote, a backslash, a
// control or a non-ASCII byte (those compare below 0x20 as signed bytes).
inline unsigned special_bytes(__m128i v) {
  const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                space = _mm_set1_epi8(0x20);
  __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                           _mm_cmplt_epi8(v, space));
  return static_cast<unsigned>(_mm_movemask_epi8(m));
}
#endif

// Copies the plain bytes of a JSON string from s[i] on as they are, up to the
// first quote, backslash, control or non-ASCII byte (or n), to o; moves i and o
// past them. o has room for n - i bytes.
inline void copy_plain(const char* s, size_t n, size_t& i, char*& o) {
#if defined(__SSE2__)
  // Sixteen bytes at a time; o has room for the whole block: its room is n - i.
  while (i + 16 <= n) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), v);
    unsigned m = special_bytes(v);
    if (m) {
      unsigned k = static_cast<unsigned>(__builtin_ctz(m));
      o += k;
      i += k;
      return;
    }
    o += 16;
    i += 16;
  }
  // The last bytes: the final sixteen of d (d is longer than that: it
  // starts with the event's prefix), those before i masked off.
  size_t left = n - i;
  unsigned m = n >= 16
                   ? special_bytes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + n - 16))) >>
                         (16 - left)
                   : 0;
  size_t k = left;
  if (n < 16) {
    k = 0;
    while (k < left && static_cast<unsigned char>(s[i + k]) >= 0x20 && s[i + k] != '"' &&
           s[i + k] != '\\' && static_cast<unsigned char>(s[i + k]) < 0x80)
      ++k;
  } else if (m) {
    k = static_cast<unsigned>(__builtin_ctz(m));
  }
  std::memcpy(o, s + i, k);
  o += k;
  i += k;
#else
  // Eight bytes at a time while none is a quote, a backslash, a control or a
  // non-ASCII byte (copied as they are; the test may stop early, never late).
  constexpr uint64_t k01 = 0x0101010101010101ull, k80 = 0x8080808080808080ull;
  while (i + 8 <= n) {
    uint64_t w;
    std::memcpy(&w, s + i, 8);
    uint64_t q = w ^ (k01 * '"'), b = w ^ (k01 * '\\');
    uint64_t special = (w | ((w - k01 * 0x20) & ~w) | ((q - k01) & ~q) | ((b - k01) & ~b)) & k80;
    if (special) break;
    std::memcpy(o, &w, 8);
    o += 8;
    i += 8;
  }
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
    *o++ = static_cast<char>(c);
    ++i;
  }
#endif
}

// Decodes the \u escape whose four hex digits start at s[i] (a surrogate pair
// with the \u escape after it) to o as UTF-8; moves i past it. False on a
// lone or broken surrogate or a bad digit.
inline bool json_unicode_escape(const char* s, size_t n, size_t& i, char*& o) {
  if (i + 4 > n) return false;
  int cp = hex4(s + i);
  if (cp < 0) return false;
  i += 4;
  if (cp >= 0xDC00 && cp <= 0xDFFF) return false;
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u') return false;
    int lo = hex4(s + i + 2);
    if (lo < 0xDC00 || lo > 0xDFFF) return false;
    i += 6;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  put_utf8(o, static_cast<uint32_t>(cp));
  return true;
}

// Decodes the escape at s[i] (a backslash) to o; moves i past it. False on an
// escape JSON does not have.
inline bool json_escape(const char* s, size_t n, size_t& i, char*& o) {
  if (i + 1 >= n) return false;
  char e = s[i + 1];
  i += 2;
  switch (e) {
    case '"':
      *o++ = '"';
      return true;
    case '\\':
      *o++ = '\\';
      return true;
    case '/':
      *o++ = '/';
      return true;
    case 'b':
      *o++ = '\b';
      return true;
    case 'f':
      *o++ = '\f';
      return true;
    case 'n':
      *o++ = '\n';
      return true;
    case 'r':
      *o++ = '\r';
      return true;
    case 't':
      *o++ = '\t';
      return true;
    case 'u':
      return json_unicode_escape(s, n, i, o);
    default:
      return false;
  }
}

// Decodes the JSON string body starting at d[i] (after the opening quote) to
// o, which has room for d.size() - i bytes (a decoded string is never longer
// than its JSON form); on success i is just past the closing quote and o past
// the decoded bytes. False on anything that a strict JSON parser would reject.
bool json_string(std::string_view d, size_t& i, char*& o) {
  const char* s = d.data();
  size_t n = d.size();
  while (i < n) {
    copy_plain(s, n, i, o);
    if (i >= n) return false;
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"') {
      ++i;
      return true;
    }
    if (c < 0x20) return false;
    if (c >= 0x80) {
      size_t k = utf8_seq(reinterpret_cast<const unsigned char*>(s + i), n - i);
      if (k == 0) return false;
      std::memcpy(o, s + i, k);
      o += k;
      i += k;
      continue;
    }
    if (!json_escape(s, n, i, o)) return false;  // a backslash escape
  }
  return false;
}

inline bool eat(std::string_view d, size_t& i, std::string_view lit) {
  if (d.size() - i < lit.size() || std::memcmp(d.data() + i, lit.data(), lit.size()) != 0)
    return false;
  i += lit.size();
  return true;
}

}  // namespace

bool fast_anthropic_delta(std::string_view d, Type& type, int32_t& index, std::string& text) {
  size_t i = 0;
  if (!eat(d, i, R"({"type":"content_block_delta","index":)")) return false;
  if (i >= d.size()) return false;
  int64_t v = 0;
  if (d[i] == '0') {
    ++i;
  } else if (d[i] >= '1' && d[i] <= '9') {
    size_t start = i;
    while (i < d.size() && d[i] >= '0' && d[i] <= '9' && i - start < 9) v = v * 10 + (d[i++] - '0');
  } else {
    return false;
  }
  if (!eat(d, i, R"(,"delta":{"type":")")) return false;
  if (eat(d, i, R"(text_delta","text":")"))
    type = Type::Text;
  else if (eat(d, i, R"(thinking_delta","thinking":")"))
    type = Type::Thinking;
  else if (eat(d, i, R"(input_json_delta","partial_json":")"))
    type = Type::ToolInputDelta;
  else
    return false;
  text.resize(d.size() - i);  // room for the decoded text, never longer than its JSON form
  char* o = text.data();
  bool ok = json_string(d, i, o);
  text.resize(ok ? static_cast<size_t>(o - text.data()) : 0);
  if (!ok) return false;
  if (!eat(d, i, "}}")) return false;
  for (; i < d.size(); ++i) {
    char c = d[i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
  }
  index = static_cast<int32_t>(v);
  return true;
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

namespace {

Event make(Type t, int32_t index = -1, std::string a = {}, std::string b = {}) {
  Event e;
  e.type = t;
  e.index = index;
  e.a = std::move(a);
  e.b = std::move(b);
  return e;
}

std::string quote(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

void coalesce(std::vector<Event>& out, Event&& ev) {
  if (!out.empty()) {
    Event& last = out.back();
    bool delta =
        ev.type == Type::Text || ev.type == Type::Thinking || ev.type == Type::ToolInputDelta;
    if (delta && last.type == ev.type && last.index == ev.index) {
      last.a += ev.a;
      return;
    }
  }
  out.push_back(std::move(ev));
}

std::string describe(const Event& e) {
  std::string s;
  auto idx = [&] { s += " " + std::to_string(e.index); };
  switch (e.type) {
    case Type::Http: {
      s = "http " + std::to_string(e.status);
      size_t pos = 0;
      while (pos < e.a.size()) {
        size_t nl = e.a.find('\n', pos);
        if (nl == std::string::npos) nl = e.a.size();
        std::string_view line(e.a.data() + pos, nl - pos);
        size_t colon = line.find(": ");
        if (colon != std::string_view::npos)
          s += " " + std::string(line.substr(0, colon)) + "=" +
               quote(std::string(line.substr(colon + 2)));
        pos = nl + 1;
      }
      break;
    }
    case Type::MessageStart:
      s = "message_start " + quote(e.a) + " " + quote(e.b);
      break;
    case Type::Text:
      s = "text";
      idx();
      s += " " + quote(e.a);
      break;
    case Type::Thinking:
      s = "thinking";
      idx();
      s += " " + quote(e.a);
      break;
    case Type::ThinkingSignature:
      s = "thinking_signature";
      idx();
      s += " " + quote(e.a);
      break;
    case Type::RedactedThinking:
      s = "redacted_thinking";
      idx();
      s += " " + quote(e.a);
      break;
    case Type::ToolUseStart:
      s = "tool_use_start";
      idx();
      s += " " + quote(e.a) + " " + quote(e.b);
      break;
    case Type::ToolInputDelta:
      s = "tool_input_delta";
      idx();
      s += " " + quote(e.a);
      break;
    case Type::ToolUseStop:
      s = "tool_use_stop";
      idx();
      break;
    case Type::Usage: {
      static const char* names[kUsageFields] = {"input", "output", "cache_read", "cache_write",
                                                "thinking"};
      s = "usage";
      for (int i = 0; i < kUsageFields; ++i)
        if (e.mask & (1u << i)) s += std::string(" ") + names[i] + "=" + std::to_string(e.usage[i]);
      break;
    }
    case Type::Stop:
      s = "stop " + quote(e.a);
      break;
    case Type::Error:
      s = "error " + quote(e.a) + " " + quote(e.b);
      break;
    case Type::End:
      s = e.status ? "end complete" : "end incomplete";
      if (e.mask & 1u) s += " body " + quote(e.a);
      break;
    case Type::JsonRpc:
      s = "jsonrpc " + std::to_string(e.status) + " " + quote(e.a) + " " + quote(e.b);
      if (e.usage[0]) s += " blobs=" + std::to_string(e.usage[0]);
      break;
    case Type::SseId:
      s = "sse_id " + quote(e.a);
      break;
    case Type::Blob:
      s = "blob " + e.a + " " + quote(e.b);
      break;
  }
  return s;
}

// ---------------------------------------------------------------------------
// Providers
// ---------------------------------------------------------------------------

// A field of a known event has the wrong type (reported as malformed_event).
struct Malformed {
  std::string what;
};

// An event passed a limit: the decoder fails (Decoder::fail) with this message.
struct LimitExceeded {
  std::string what;
};

class Provider {
 public:
  virtual ~Provider() = default;
  // Strings with room, from events the caller is done with (Decoder::recycle).
  std::vector<std::string>* spare = nullptr;
  // Kind mcp: string values longer than this are taken out of a message (Type::Blob).
  size_t blob_min = kBlobMin;
  // One SSE event: its `event:` name ("" if none) and its data.
  virtual void on_event(std::string_view name, std::string_view data, std::vector<Event>& out) = 0;
  // The stream closed (before `end`): whether the provider's end marker was seen.
  virtual bool on_close(std::vector<Event>& out) = 0;
  // An SSE event with an `id` field was dispatched (after its own events).
  virtual void on_id(std::string_view /*id*/, std::vector<Event>& /*out*/) {}
  // How many bytes of a body that is no SSE stream are kept (then it is cut).
  virtual size_t body_limit() const { return kMaxBody; }
  // A whole body that is no SSE stream, of a response with status 2xx: true when
  // the provider decoded it (else it is reported as the kept body).
  virtual bool on_body(std::string_view /*body*/, std::vector<Event>& /*out*/) { return false; }
};

namespace {

const json* field(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

// A string field: "" when absent or null; Malformed for another type.
std::string opt_str(const json& o, const char* key, std::string_view where) {
  const json* v = field(o, key);
  if (!v) return {};
  if (!v->is_string())
    throw Malformed{"`" + std::string(where) + "." + key + "` should be a string"};
  return v->get<std::string>();
}

int32_t need_index(const json& o, const char* key, std::string_view where) {
  const json* v = field(o, key);
  if (!v || !v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > INT32_MAX ||
      (v->is_number_unsigned() && v->get<uint64_t>() > INT32_MAX))
    throw Malformed{"`" + std::string(where) + "." + key + "` should be a non-negative integer"};
  return static_cast<int32_t>(v->get<int64_t>());
}

const json& need_object(const json& o, const char* key, std::string_view where) {
  const json* v = field(o, key);
  if (!v || !v->is_object())
    throw Malformed{"`" + std::string(where) + "." + key + "` should be an object"};
  return *v;
}

// Sets usage field f from o[key] when it is a non-negative integer.
void usage_field(Event& u, const json& o, const char* key, UsageField f) {
  const json* v = field(o, key);
  if (!v || !v->is_number_integer()) return;
  int64_t n = v->is_number_unsigned()
                  ? static_cast<int64_t>(std::min<uint64_t>(v->get<uint64_t>(), INT64_MAX))
                  : v->get<int64_t>();
  if (n < 0) return;
  u.usage[f] = n;
  u.mask |= 1u << f;
}

void push_usage(Event&& u, std::vector<Event>& out) {
  if (u.mask) out.push_back(std::move(u));
}

Event malformed(std::string message) {
  return make(Type::Error, -1, "malformed_event", std::move(message));
}

std::string event_label(std::string_view name) {
  return name.empty() ? std::string("message") : std::string(name);
}

// Parses an event's data. Invalid UTF-8 is replaced by U+FFFD and parsed again;
// on failure an error event is appended and false returned.
bool parse_data(std::string_view name, std::string_view data, json& j, std::vector<Event>& out) {
  // Each level of nesting costs the parser a value and a container: millions of
  // `[` would take gigabytes.
  if (!detail::json_depth_within(data, kMaxJsonDepth))
    throw LimitExceeded{"the `" + detail::sanitize_utf8(event_label(name)) +
                        "` event's JSON is nested deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels"};
  j = json::parse(data.begin(), data.end(), nullptr, false);
  if (!j.is_discarded()) return true;
  if (!detail::valid_utf8(data)) {
    std::string clean = detail::sanitize_utf8(data);
    j = json::parse(clean, nullptr, false);
    if (!j.is_discarded()) return true;
  }
  std::string where;
  try {
    json again = json::parse(data.begin(), data.end());
  } catch (const json::parse_error& e) {
    where = " (at byte " + std::to_string(e.byte) + ")";
  } catch (...) {
  }
  out.push_back(malformed("the `" + detail::sanitize_utf8(event_label(name)) +
                          "` event's data is not valid JSON" + where));
  return false;
}

// False, with an error event appended, when an event's parsed data is not a JSON object.
bool object_or_error(std::string_view name, const json& j, std::vector<Event>& out) {
  if (j.is_object()) return true;
  out.push_back(malformed("the `" + detail::sanitize_utf8(event_label(name)) +
                          "` event's data is not a JSON object"));
  return false;
}

// The error type and message of an error object ({"type","message"} or
// {"message","code"} or a plain string).
void error_fields(const json& err, std::string& type, std::string& message) {
  if (err.is_string()) {
    message = err.get<std::string>();
    return;
  }
  if (!err.is_object()) return;
  if (const json* t = field(err, "type"); t && t->is_string()) type = t->get<std::string>();
  if (type.empty()) {
    if (const json* c = field(err, "code"); c && c->is_string())
      type = c->get<std::string>();
    else if (c && c->is_number_integer())
      type = std::to_string(c->get<int64_t>());
  }
  if (const json* m = field(err, "message"); m && m->is_string()) message = m->get<std::string>();
}

// A provider whose events name their kind in a `type` field (anthropic, OpenAI
// Responses), or else by their SSE event name.
class TypedProvider : public Provider {
 protected:
  // Parses an event's data, which must be a JSON object, and passes it to handle()
  // with its type; bad data, or a field of the wrong type (Malformed) found by
  // handle(), becomes a malformed_event error.
  void decode_typed(std::string_view name, std::string_view data, std::vector<Event>& out) {
    json j;
    if (!parse_data(name, data, j, out) || !object_or_error(name, j, out)) return;
    std::string type = name.empty() ? std::string() : detail::sanitize_utf8(name);
    if (const json* ty = field(j, "type"); ty && ty->is_string()) type = ty->get<std::string>();
    try {
      handle(type, j, out);
    } catch (const Malformed& m) {
      out.push_back(malformed("malformed `" + type + "` event: " + m.what));
    }
  }

  virtual void handle(const std::string& type, const json& j, std::vector<Event>& out) = 0;
};

// ---- anthropic: Messages API streaming -------------------------------------

class Anthropic final : public TypedProvider {
 public:
  void on_event(std::string_view name, std::string_view data, std::vector<Event>& out) override {
    // Decoded straight into the event's string (the common case by far).
    Event& e = out.emplace_back();
    if (!spare->empty()) {
      e.a.swap(spare->back());
      spare->pop_back();
    }
    if (detail::fast_anthropic_delta(data, e.type, e.index, e.a)) {
      if (e.a.empty()) out.pop_back();
      return;
    }
    out.pop_back();
    decode_typed(name, data, out);
  }

  bool on_close(std::vector<Event>&) override { return stopped_; }

 private:
  void handle(const std::string& type, const json& j, std::vector<Event>& out) override {
    if (type == "content_block_delta") {
      int32_t index = need_index(j, "index", type);
      const json& d = need_object(j, "delta", type);
      std::string dt = opt_str(d, "type", "delta");
      if (dt == "text_delta") {
        emit(out, Type::Text, index, opt_str(d, "text", "delta"));
      } else if (dt == "thinking_delta") {
        emit(out, Type::Thinking, index, opt_str(d, "thinking", "delta"));
      } else if (dt == "signature_delta") {
        emit(out, Type::ThinkingSignature, index, opt_str(d, "signature", "delta"));
      } else if (dt == "input_json_delta") {
        emit(out, Type::ToolInputDelta, index, opt_str(d, "partial_json", "delta"));
      }
    } else if (type == "content_block_start") {
      int32_t index = need_index(j, "index", type);
      const json& b = need_object(j, "content_block", type);
      std::string bt = opt_str(b, "type", "content_block");
      if (bt == "text") {
        emit(out, Type::Text, index, opt_str(b, "text", "content_block"));
      } else if (bt == "thinking") {
        emit(out, Type::Thinking, index, opt_str(b, "thinking", "content_block"));
        emit(out, Type::ThinkingSignature, index, opt_str(b, "signature", "content_block"));
      } else if (bt == "redacted_thinking") {
        out.push_back(make(Type::RedactedThinking, index, opt_str(b, "data", "content_block")));
      } else if (bt == "tool_use") {
        std::string id = opt_str(b, "id", "content_block");
        std::string tool = opt_str(b, "name", "content_block");
        tools_[index] = true;
        out.push_back(make(Type::ToolUseStart, index, std::move(id), std::move(tool)));
        if (const json* in = field(b, "input"); in && !(in->is_object() && in->empty()))
          emit(out, Type::ToolInputDelta, index,
               in->dump(-1, ' ', false, json::error_handler_t::replace));
      }
    } else if (type == "content_block_stop") {
      int32_t index = need_index(j, "index", type);
      auto it = tools_.find(index);
      if (it != tools_.end() && it->second) {
        it->second = false;
        out.push_back(make(Type::ToolUseStop, index));
      }
    } else if (type == "message_start") {
      const json& m = need_object(j, "message", type);
      out.push_back(make(Type::MessageStart, -1, opt_str(m, "id", "message"),
                         opt_str(m, "model", "message")));
      if (const json* u = field(m, "usage")) usage(*u, out);
    } else if (type == "message_delta") {
      if (const json* d = field(j, "delta")) {
        std::string reason = opt_str(*d, "stop_reason", "delta");
        if (!reason.empty()) stop_reason_ = reason;
      }
      // The stop reason comes after the usage of the same event, so that a
      // consumer sees the final counts before it acts on the stop.
      if (const json* u = field(j, "usage")) usage(*u, out);
      if (!stop_reason_.empty()) {
        out.push_back(make(Type::Stop, -1, stop_reason_));
        stop_reason_.clear();
      }
    } else if (type == "message_stop") {
      stopped_ = true;
    } else if (type == "error") {
      std::string et, msg;
      if (const json* e = field(j, "error")) error_fields(*e, et, msg);
      out.push_back(make(Type::Error, -1, et.empty() ? "error" : et, msg));
    }
    // ping and unknown events are ignored.
  }

  static void emit(std::vector<Event>& out, Type t, int32_t index, std::string text) {
    if (!text.empty()) out.push_back(make(t, index, std::move(text)));
  }

  static void usage(const json& u, std::vector<Event>& out) {
    Event e = make(Type::Usage);
    usage_field(e, u, "input_tokens", kInputTokens);
    usage_field(e, u, "output_tokens", kOutputTokens);
    usage_field(e, u, "cache_read_input_tokens", kCacheReadTokens);
    usage_field(e, u, "cache_creation_input_tokens", kCacheWriteTokens);
    push_usage(std::move(e), out);
  }

  std::map<int32_t, bool> tools_;  // tool_use blocks, true while open
  std::string stop_reason_;
  bool stopped_ = false;
};

// ---- openai_chat: Chat Completions streaming -------------------------------

class OpenAIChat final : public Provider {
 public:
  void on_event(std::string_view name, std::string_view data, std::vector<Event>& out) override {
    std::string_view d = data;
    while (!d.empty() &&
           (d.front() == ' ' || d.front() == '\t' || d.front() == '\n' || d.front() == '\r'))
      d.remove_prefix(1);
    while (!d.empty() &&
           (d.back() == ' ' || d.back() == '\t' || d.back() == '\n' || d.back() == '\r'))
      d.remove_suffix(1);
    if (d == "[DONE]") {
      done_ = true;
      return;
    }
    json j;
    if (!parse_data(name, data, j, out)) return;
    if (!object_or_error(name, j, out)) return;
    try {
      handle(j, out);
    } catch (const Malformed& m) {
      out.push_back(malformed("malformed chat completion chunk: " + m.what));
    }
  }

  bool on_close(std::vector<Event>&) override { return done_ || finished_; }

 private:
  struct Call {
    int64_t provider_index;
    int32_t block;
    std::string id;
  };

  void handle(const json& j, std::vector<Event>& out) {
    if (const json* err = field(j, "error")) {
      std::string et, msg;
      error_fields(*err, et, msg);
      out.push_back(make(Type::Error, -1, et.empty() ? "error" : et, msg));
      return;
    }
    if (!started_) {
      std::string id = opt_str(j, "id", "chunk"), model = opt_str(j, "model", "chunk");
      if (!id.empty() || !model.empty()) {
        started_ = true;
        out.push_back(make(Type::MessageStart, -1, std::move(id), std::move(model)));
      }
    }
    const json* choices = field(j, "choices");
    if (choices && !choices->is_array()) throw Malformed{"`choices` should be an array"};
    if (choices && !choices->empty()) {
      const json* choice = &(*choices)[0];
      for (const auto& c : *choices) {
        const json* ci = field(c, "index");
        if (ci && ci->is_number_integer() && ci->get<int64_t>() == 0) {
          choice = &c;
          break;
        }
      }
      if (!choice->is_object()) throw Malformed{"`choices[0]` should be an object"};
      if (const json* delta = field(*choice, "delta")) {
        if (!delta->is_object()) throw Malformed{"`choices[0].delta` should be an object"};
        std::string reasoning = opt_str(*delta, "reasoning_content", "delta");
        if (reasoning.empty()) reasoning = opt_str(*delta, "reasoning", "delta");
        if (!reasoning.empty()) {
          if (thinking_block_ < 0) thinking_block_ = next_block_++;
          out.push_back(make(Type::Thinking, thinking_block_, std::move(reasoning)));
        }
        std::string content = opt_str(*delta, "content", "delta");
        if (!content.empty()) {
          if (text_block_ < 0) text_block_ = next_block_++;
          out.push_back(make(Type::Text, text_block_, std::move(content)));
        }
        if (const json* calls = field(*delta, "tool_calls")) {
          if (!calls->is_array()) throw Malformed{"`delta.tool_calls` should be an array"};
          int64_t pos = 0;
          for (const auto& tc : *calls) tool_call(tc, pos++, out);
        }
      }
      std::string reason = opt_str(*choice, "finish_reason", "choices[0]");
      if (!reason.empty()) {
        for (const Call& c : calls_) out.push_back(make(Type::ToolUseStop, c.block));
        calls_.clear();
        out.push_back(make(Type::Stop, -1, std::move(reason)));
        finished_ = true;
      }
    }
    if (const json* u = field(j, "usage")) {
      if (!u->is_object()) throw Malformed{"`usage` should be an object"};
      Event e = make(Type::Usage);
      usage_field(e, *u, "prompt_tokens", kInputTokens);
      usage_field(e, *u, "completion_tokens", kOutputTokens);
      if (const json* p = field(*u, "prompt_tokens_details"))
        usage_field(e, *p, "cached_tokens", kCacheReadTokens);
      if (const json* c = field(*u, "completion_tokens_details"))
        usage_field(e, *c, "reasoning_tokens", kThinkingTokens);
      push_usage(std::move(e), out);
    }
  }

  void tool_call(const json& tc, int64_t pos, std::vector<Event>& out) {
    if (!tc.is_object()) throw Malformed{"`delta.tool_calls[]` should be objects"};
    int64_t idx = pos;
    if (const json* i = field(tc, "index")) {
      if (!i->is_number_integer()) throw Malformed{"`tool_calls[].index` should be an integer"};
      idx = i->get<int64_t>();
    }
    std::string id = opt_str(tc, "id", "tool_calls[]");
    std::string name, args;
    if (const json* fn = field(tc, "function")) {
      if (!fn->is_object()) throw Malformed{"`tool_calls[].function` should be an object"};
      name = opt_str(*fn, "name", "function");
      args = opt_str(*fn, "arguments", "function");
    }
    Call* call = nullptr;
    for (auto& c : calls_)
      if (c.provider_index == idx) call = &c;
    if (call && !id.empty() && !call->id.empty() && id != call->id) {
      // A new call at an index already used: the earlier one is complete.
      out.push_back(make(Type::ToolUseStop, call->block));
      calls_.erase(calls_.begin() + (call - calls_.data()));
      call = nullptr;
    }
    if (!call) {
      calls_.push_back(Call{idx, next_block_++, id});
      call = &calls_.back();
      out.push_back(make(Type::ToolUseStart, call->block, std::move(id), std::move(name)));
    } else if (call->id.empty() && !id.empty()) {
      call->id = id;
    }
    if (!args.empty()) out.push_back(make(Type::ToolInputDelta, call->block, std::move(args)));
  }

  std::vector<Call> calls_;  // open calls, in order of their start
  int32_t next_block_ = 0;
  int32_t text_block_ = -1;
  int32_t thinking_block_ = -1;
  bool started_ = false;
  bool done_ = false;
  bool finished_ = false;
};

// ---- openai: Responses API streaming ---------------------------------------
// Output items are numbered by `output_index`; each becomes one block (reasoning
// -> thinking, its encrypted_content the signature; message -> text;
// function_call -> a tool use with its call_id). response.completed /
// response.incomplete end the stream.

class OpenAIResponses final : public TypedProvider {
 public:
  void on_event(std::string_view name, std::string_view data, std::vector<Event>& out) override {
    decode_typed(name, data, out);
  }

  bool on_close(std::vector<Event>&) override { return done_; }

 private:
  struct Item {
    int32_t block;
    std::string kind;  // "reasoning", "message", "function_call", other
    bool open = true;
  };

  Item& item(int32_t output_index, const std::string& kind) {
    auto it = items_.find(output_index);
    if (it == items_.end()) it = items_.emplace(output_index, Item{next_block_++, kind}).first;
    return it->second;
  }

  void handle(const std::string& type, const json& j, std::vector<Event>& out) override {
    if (type == "response.output_text.delta") {
      Item& it = item(need_index(j, "output_index", type), "message");
      emit(out, Type::Text, it.block, opt_str(j, "delta", type));
    } else if (type == "response.reasoning_summary_text.delta" ||
               type == "response.reasoning_text.delta") {
      Item& it = item(need_index(j, "output_index", type), "reasoning");
      emit(out, Type::Thinking, it.block, opt_str(j, "delta", type));
    } else if (type == "response.reasoning_summary_part.added") {
      Item& it = item(need_index(j, "output_index", type), "reasoning");
      // Summary parts of one reasoning item read as paragraphs.
      if (const json* si = field(j, "summary_index");
          si && si->is_number_integer() && si->get<int64_t>() > 0)
        out.push_back(make(Type::Thinking, it.block, "\n\n"));
    } else if (type == "response.function_call_arguments.delta") {
      Item& it = item(need_index(j, "output_index", type), "function_call");
      emit(out, Type::ToolInputDelta, it.block, opt_str(j, "delta", type));
    } else if (type == "response.output_item.added") {
      int32_t index = need_index(j, "output_index", type);
      const json& in = need_object(j, "item", type);
      std::string kind = opt_str(in, "type", "item");
      Item& it = item(index, kind);
      it.kind = kind;
      if (kind == "function_call") {
        std::string id = opt_str(in, "call_id", "item");
        if (id.empty()) id = opt_str(in, "id", "item");
        out.push_back(
            make(Type::ToolUseStart, it.block, std::move(id), opt_str(in, "name", "item")));
        emit(out, Type::ToolInputDelta, it.block, opt_str(in, "arguments", "item"));
        calls_ = true;
      }
    } else if (type == "response.output_item.done") {
      int32_t index = need_index(j, "output_index", type);
      const json& in = need_object(j, "item", type);
      std::string kind = opt_str(in, "type", "item");
      Item& it = item(index, kind);
      if (kind == "function_call" && it.open) {
        it.open = false;
        out.push_back(make(Type::ToolUseStop, it.block));
      } else if (kind == "reasoning") {
        emit(out, Type::ThinkingSignature, it.block, opt_str(in, "encrypted_content", "item"));
      }
    } else if (type == "response.created" || type == "response.in_progress") {
      if (started_) return;
      const json& r = need_object(j, "response", type);
      started_ = true;
      out.push_back(make(Type::MessageStart, -1, opt_str(r, "id", "response"),
                         opt_str(r, "model", "response")));
    } else if (type == "response.completed" || type == "response.incomplete") {
      const json& r = need_object(j, "response", type);
      if (const json* u = field(r, "usage")) usage(*u, out);
      std::string reason = calls_ ? "tool_calls" : "stop";
      if (type == "response.incomplete") {
        reason = "incomplete";
        if (const json* d = field(r, "incomplete_details")) {
          std::string why = opt_str(*d, "reason", "incomplete_details");
          if (why == "max_output_tokens")
            reason = "max_tokens";
          else if (why == "content_filter")
            reason = "refusal";
          else if (!why.empty())
            reason = why;
        }
      }
      close_calls(out);
      out.push_back(make(Type::Stop, -1, std::move(reason)));
      done_ = true;
    } else if (type == "response.failed") {
      const json& r = need_object(j, "response", type);
      std::string et, msg;
      if (const json* e = field(r, "error")) error_fields(*e, et, msg);
      out.push_back(make(Type::Error, -1, et.empty() ? "response_failed" : et, msg));
    } else if (type == "error") {
      std::string et, msg;
      if (const json* e = field(j, "error"))
        error_fields(*e, et, msg);
      else
        error_fields(j, et, msg);
      if (et == "error") et.clear();
      if (const json* c = field(j, "code"); c && c->is_string() && et.empty())
        et = c->get<std::string>();
      out.push_back(make(Type::Error, -1, et.empty() ? "error" : et, msg));
    }
    // Other events (content_part.*, *.done, refusal deltas...) carry nothing new.
  }

  void close_calls(std::vector<Event>& out) {
    for (auto& [index, it] : items_) {
      if (it.kind == "function_call" && it.open) {
        it.open = false;
        out.push_back(make(Type::ToolUseStop, it.block));
      }
    }
  }

  static void emit(std::vector<Event>& out, Type t, int32_t index, std::string text) {
    if (!text.empty()) out.push_back(make(t, index, std::move(text)));
  }

  static void usage(const json& u, std::vector<Event>& out) {
    if (!u.is_object()) throw Malformed{"`response.usage` should be an object"};
    Event e = make(Type::Usage);
    usage_field(e, u, "input_tokens", kInputTokens);
    usage_field(e, u, "output_tokens", kOutputTokens);
    if (const json* d = field(u, "input_tokens_details"))
      usage_field(e, *d, "cached_tokens", kCacheReadTokens);
    if (const json* d = field(u, "output_tokens_details"))
      usage_field(e, *d, "reasoning_tokens", kThinkingTokens);
    push_usage(std::move(e), out);
  }

  std::map<int32_t, Item> items_;
  int32_t next_block_ = 0;
  bool started_ = false;
  bool calls_ = false;
  bool done_ = false;
};

// ---- vertex: Gemini streamGenerateContent?alt=sse --------------------------
// Each event is a whole GenerateContentResponse. Consecutive parts of one sort
// share a block: thought text -> thinking, text -> text; a functionCall is a
// complete tool use at once. A thoughtSignature belongs to the part that carries
// it: it is written as the signature of the thinking block just before that
// part (an empty one when the part follows no thinking). A finishReason ends it.

class Vertex final : public Provider {
 public:
  void on_event(std::string_view name, std::string_view data, std::vector<Event>& out) override {
    json j;
    if (!parse_data(name, data, j, out)) return;
    if (j.is_array() && !j.empty()) j = j[0];
    if (!object_or_error(name, j, out)) return;
    try {
      handle(j, out);
    } catch (const Malformed& m) {
      out.push_back(malformed("malformed GenerateContentResponse: " + m.what));
    }
  }

  bool on_close(std::vector<Event>&) override { return finished_; }

 private:
  enum class Last { None, Thinking, Text, Call };

  void handle(const json& j, std::vector<Event>& out) {
    if (const json* err = field(j, "error")) {
      std::string et, msg;
      if (err->is_object()) {
        if (const json* st = field(*err, "status"); st && st->is_string())
          et = st->get<std::string>();
      }
      std::string t2;
      error_fields(*err, t2, msg);
      if (et.empty()) et = t2;
      out.push_back(make(Type::Error, -1, et.empty() ? "error" : et, msg));
      return;
    }
    if (!started_) {
      std::string id = opt_str(j, "responseId", "response"),
                  model = opt_str(j, "modelVersion", "response");
      if (!id.empty() || !model.empty()) {
        started_ = true;
        response_id_ = id;
        out.push_back(make(Type::MessageStart, -1, std::move(id), std::move(model)));
      }
    }
    std::string reason;
    if (const json* cands = field(j, "candidates")) {
      if (!cands->is_array()) throw Malformed{"`candidates` should be an array"};
      if (!cands->empty()) {
        const json& c = (*cands)[0];
        if (!c.is_object()) throw Malformed{"`candidates[0]` should be an object"};
        if (const json* content = field(c, "content")) {
          if (!content->is_object()) throw Malformed{"`candidates[0].content` should be an object"};
          if (const json* parts = field(*content, "parts")) {
            if (!parts->is_array()) throw Malformed{"`content.parts` should be an array"};
            for (const auto& p : *parts) part(p, out);
          }
        }
        reason = opt_str(c, "finishReason", "candidates[0]");
      }
    }
    if (const json* u = field(j, "usageMetadata")) {
      if (!u->is_object()) throw Malformed{"`usageMetadata` should be an object"};
      Event e = make(Type::Usage);
      usage_field(e, *u, "promptTokenCount", kInputTokens);
      usage_field(e, *u, "cachedContentTokenCount", kCacheReadTokens);
      usage_field(e, *u, "thoughtsTokenCount", kThinkingTokens);
      usage_field(e, *u, "candidatesTokenCount", kOutputTokens);
      // Thoughts are billed as output: output counts both.
      if ((e.mask & (1u << kThinkingTokens)) && (e.mask & (1u << kOutputTokens)))
        e.usage[kOutputTokens] += e.usage[kThinkingTokens];
      push_usage(std::move(e), out);
    }
    if (!reason.empty() && reason != "FINISH_REASON_UNSPECIFIED") {
      std::string r;
      if (reason == "STOP")
        r = calls_ > 0 ? "tool_calls" : "stop";
      else if (reason == "MAX_TOKENS")
        r = "max_tokens";
      else if (reason == "SAFETY" || reason == "RECITATION" || reason == "BLOCKLIST" ||
               reason == "PROHIBITED_CONTENT" || reason == "SPII" || reason == "IMAGE_SAFETY")
        r = "refusal";
      else {
        r = lower_ascii(reason);
      }
      out.push_back(make(Type::Stop, -1, std::move(r)));
      finished_ = true;
    }
  }

  void part(const json& p, std::vector<Event>& out) {
    if (!p.is_object()) throw Malformed{"`content.parts[]` should be objects"};
    std::string sig = opt_str(p, "thoughtSignature", "part");
    bool thought = false;
    if (const json* t = field(p, "thought")) {
      if (!t->is_boolean()) throw Malformed{"`part.thought` should be a boolean"};
      thought = t->get<bool>();
    }
    if (const json* fc = field(p, "functionCall")) {
      if (!fc->is_object()) throw Malformed{"`part.functionCall` should be an object"};
      signature(sig, out);
      int32_t block = next_block_++;
      std::string id = opt_str(*fc, "id", "functionCall");
      ++calls_;
      if (id.empty())
        id = "gemini_" + (response_id_.empty() ? std::string("call") : response_id_) + "_" +
             std::to_string(calls_);
      out.push_back(
          make(Type::ToolUseStart, block, std::move(id), opt_str(*fc, "name", "functionCall")));
      const json* args = field(*fc, "args");
      if (args && !(args->is_object() && args->empty()))
        out.push_back(make(Type::ToolInputDelta, block,
                           args->dump(-1, ' ', false, json::error_handler_t::replace)));
      out.push_back(make(Type::ToolUseStop, block));
      last_ = Last::Call;
      return;
    }
    std::string text = opt_str(p, "text", "part");
    if (thought) {
      if (last_ != Last::Thinking) {
        block_ = next_block_++;
        last_ = Last::Thinking;
      }
      if (!text.empty()) out.push_back(make(Type::Thinking, block_, std::move(text)));
      if (!sig.empty()) out.push_back(make(Type::ThinkingSignature, block_, std::move(sig)));
      return;
    }
    signature(sig, out);
    if (text.empty()) return;
    if (last_ != Last::Text) {
      block_ = next_block_++;
      last_ = Last::Text;
    }
    out.push_back(make(Type::Text, block_, std::move(text)));
  }

  // The signature of a text or functionCall part: on the thinking block just
  // before it, or on a new empty one.
  void signature(std::string& sig, std::vector<Event>& out) {
    if (sig.empty()) return;
    if (last_ != Last::Thinking) {
      block_ = next_block_++;
      last_ = Last::Thinking;
    }
    out.push_back(make(Type::ThinkingSignature, block_, std::move(sig)));
    last_ = Last::None;  // what follows opens its own block
  }

  static std::string lower_ascii(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }

  std::string response_id_;
  int32_t next_block_ = 0;
  int32_t block_ = -1;
  Last last_ = Last::None;
  int calls_ = 0;
  bool started_ = false;
  bool finished_ = false;
};

// ---- JSON-RPC 2.0 messages (the line decoder's and kind mcp's) -------------

// A short, valid UTF-8 quote of a bad message for its error.
std::string rpc_quote(std::string_view text) {
  constexpr size_t kQuoteCap = 120;
  size_t n = detail::utf8_boundary(text, kQuoteCap);
  std::string q = detail::sanitize_utf8(text.substr(0, n));
  for (char& c : q)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  if (n < text.size()) q += "...";
  return q;
}

bool rpc_valid_id(const json& id) {
  return id.is_string() || id.is_number_integer() || id.is_number_unsigned();
}

// Classifies one message (the values of jsonrpc::MessageKind: 1 request, 2
// notification, 3 result, 4 error); false when it is none.
bool rpc_classify(const json& m, int32_t& kind, std::string& method) {
  if (!m.is_object()) return false;
  auto v = m.find("jsonrpc");
  if (v == m.end() || !v->is_string() || v->get_ref<const std::string&>() != "2.0") return false;
  auto me = m.find("method");
  auto id = m.find("id");
  if (me != m.end()) {
    if (!me->is_string()) return false;
    method = me->get<std::string>();
    if (id == m.end()) {
      kind = 2;
      return true;
    }
    if (!rpc_valid_id(*id)) return false;
    kind = 1;
    return true;
  }
  if (id == m.end() || !(rpc_valid_id(*id) || id->is_null())) return false;
  auto err = m.find("error");
  if (err != m.end()) {
    if (!err->is_object()) return false;
    kind = 4;
    return true;
  }
  if (m.find("result") == m.end()) return false;
  if (id->is_null()) return false;
  kind = 3;
  return true;
}

// Takes every string value longer than min out of v (depth first, in the
// order of dump), leaving "" there: one Blob event each, its path the keys and
// indices in `path` (the walk's own, never text of the message).
void take_blobs(json& v, json& path, size_t min, std::vector<Event>& out) {
  if (v.is_string()) {
    auto& s = v.get_ref<std::string&>();
    if (s.size() <= min) return;
    Event e = make(Type::Blob);
    e.a = path.dump(-1, ' ', false, json::error_handler_t::replace);
    e.b = std::move(s);
    // The parser lets only valid UTF-8 through; kept as the header promises anyway.
    if (!detail::valid_utf8(e.b)) e.b = detail::sanitize_utf8(e.b);
    v = "";
    out.push_back(std::move(e));
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!it->is_structured() && !it->is_string()) continue;
      path.push_back(it.key());
      take_blobs(it.value(), path, min, out);
      path.erase(path.size() - 1);
    }
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      auto& m = v[i];
      if (!m.is_structured() && !m.is_string()) continue;
      path.push_back(i);
      take_blobs(m, path, min, out);
      path.erase(path.size() - 1);
    }
  }
}

}  // namespace

namespace detail {

void jsonrpc_text(std::string_view text, int max_depth, std::vector<Event>& out, size_t blob_min) {
  while (!text.empty() && (text.back() == '\r' || text.back() == '\n')) text.remove_suffix(1);
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return;  // blank
  if (!json_depth_within(text, static_cast<size_t>(max_depth))) {
    out.push_back(make(Type::Error, -1, "too_deep",
                       "a message nested deeper than " + std::to_string(max_depth) +
                           " levels was dropped: " + rpc_quote(text)));
    return;
  }
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) {
    out.push_back(make(Type::Error, -1, "invalid_json", "not JSON: " + rpc_quote(text)));
    return;
  }
  std::vector<Event> blobs;
  auto emit = [&](json& m) {
    int32_t kind = 0;
    std::string method;
    if (!rpc_classify(m, kind, method)) {
      out.push_back(
          make(Type::Error, -1, "not_jsonrpc", "not a JSON-RPC 2.0 message: " + rpc_quote(text)));
      return;
    }
    blobs.clear();
    json path = json::array();
    take_blobs(m, path, blob_min, blobs);
    Event e = make(Type::JsonRpc);
    e.status = kind;
    e.a = std::move(method);
    e.b = m.dump(-1, ' ', false, json::error_handler_t::replace);
    e.usage[0] = static_cast<int64_t>(blobs.size());
    out.push_back(std::move(e));
    for (auto& b : blobs) out.push_back(std::move(b));
  };
  if (j.is_array() && !j.empty()) {
    for (auto& m : j) emit(m);
  } else {
    emit(j);
  }
}

}  // namespace detail

namespace {

// ---- mcp: the response of MCP's Streamable HTTP transport ------------------

class Mcp final : public Provider {
 public:
  void on_event(std::string_view /*name*/, std::string_view data,
                std::vector<Event>& out) override {
    detail::jsonrpc_text(data, kMcpMaxDepth, out, blob_min);
  }
  bool on_close(std::vector<Event>& /*out*/) override { return true; }
  void on_id(std::string_view id, std::vector<Event>& out) override {
    Event e = make(Type::SseId);
    e.a = detail::valid_utf8(id) ? std::string(id) : detail::sanitize_utf8(id);
    out.push_back(std::move(e));
  }
  size_t body_limit() const override { return kMaxEventData; }
  bool on_body(std::string_view body, std::vector<Event>& out) override {
    detail::jsonrpc_text(body, kMcpMaxDepth, out, blob_min);
    return true;
  }

 private:
  static constexpr int kMcpMaxDepth = 64;
};

std::unique_ptr<Provider> make_provider(Kind kind) {
  switch (kind) {
    case Kind::Anthropic:
      return std::make_unique<Anthropic>();
    case Kind::OpenAIChat:
      return std::make_unique<OpenAIChat>();
    case Kind::OpenAIResponses:
      return std::make_unique<OpenAIResponses>();
    case Kind::Vertex:
      return std::make_unique<Vertex>();
    case Kind::Mcp:
      return std::make_unique<Mcp>();
  }
  throw Error(FLEMMA_E_INVALID, "unknown stream kind");
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------
// Decoder
// ---------------------------------------------------------------------------

Decoder::Decoder(Kind kind) : provider_(make_provider(kind)), body_limit_(provider_->body_limit()) {
  provider_->spare = &spare_;
}
Decoder::~Decoder() = default;

void Decoder::set_blob_min(size_t n) { provider_->blob_min = n; }

void Decoder::recycle(std::vector<Event>& events) {
  // Bounded: at most kSpare strings of at most kSpareBytes each are kept.
  constexpr size_t kSpare = 1024, kSpareBytes = 1024;
  for (auto& e : events) {
    if (spare_.size() >= kSpare) break;
    if (e.a.capacity() > 15 && e.a.capacity() <= kSpareBytes) spare_.push_back(std::move(e.a));
  }
  events.clear();
}

namespace {

// The first CR or LF in [p, e), or e. One pass, sixteen (or eight) bytes at a
// time: lines end at either byte, so a run of CR-only lines stays linear.
const char* find_eol(const char* p, const char* e) {
#if defined(__SSE2__)
  const __m128i lf = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
  while (e - p >= 16) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    int m = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, lf), _mm_cmpeq_epi8(v, cr)));
    if (m) return p + __builtin_ctz(static_cast<unsigned>(m));
    p += 16;
  }
#else
  constexpr uint64_t k01 = 0x0101010101010101ull, k80 = 0x8080808080808080ull;
  while (e - p >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    uint64_t a = w ^ (k01 * '\n'), b = w ^ (k01 * '\r');
    if ((((a - k01) & ~a) | ((b - k01) & ~b)) & k80) break;  // may stop early, never late
    p += 8;
  }
#endif
  while (p < e && *p != '\n' && *p != '\r') ++p;
  return p;
}

// Line splitting shared by the header and SSE phases: the length of the first
// line of `in` and its terminator's length in term (LF, CR or CRLF; a CR at the
// very end of `in` counts as a whole terminator), or npos when `in` holds no
// terminator.
size_t find_line(std::string_view in, size_t& term) {
  const char* p = in.data();
  const char* e = p + in.size();
  const char* c = find_eol(p, e);
  if (c == e) return std::string_view::npos;
  term = (*c == '\r' && c + 1 < e && c[1] == '\n') ? 2 : 1;
  return static_cast<size_t>(c - p);
}

}  // namespace

void Decoder::fail(std::string message, std::vector<Event>& out, const char* type) {
  if (failed_) return;
  failed_ = true;
  out.push_back(make(Type::Error, -1, type, std::move(message)));
  // What was assembled is dropped at once.
  std::string().swap(line_);
  std::string().swap(data_);
  data_in_view_ = false;
  has_data_ = false;
}

void Decoder::feed(std::string_view in, std::vector<Event>& out) {
  if (phase_ == Phase::Done) throw Error(FLEMMA_E_STATE, "stream: feed after finish");
  if (failed_) return;
  if (phase_ == Phase::Start) {
    static constexpr std::string_view kHttp = "HTTP/";
    size_t take = std::min(kHttp.size() - line_.size(), in.size());
    line_.append(in.data(), take);
    in.remove_prefix(take);
    if (line_.compare(0, line_.size(), kHttp, 0, line_.size()) != 0) {
      // No header block: the body alone, taken as SSE.
      phase_ = Phase::Sse;
      std::string pending;
      pending.swap(line_);
      sse_bytes(pending, out);
    } else if (line_.size() == kHttp.size()) {
      phase_ = Phase::Headers;
      in_block_ = true;
    } else {
      return;
    }
  }
  if (phase_ == Phase::Headers) header_bytes(in, out);
  if (phase_ == Phase::Raw && skip_lf_ && !in.empty()) {
    skip_lf_ = false;
    if (in.front() == '\n') in.remove_prefix(1);
  }
  if (in.empty()) return;
  if (phase_ == Phase::Sse)
    sse_bytes(in, out);
  else if (phase_ == Phase::Raw)
    raw_bytes(in);
}

void Decoder::header_bytes(std::string_view& in, std::vector<Event>& out) {
  while (phase_ == Phase::Headers && !in.empty()) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (in.front() == '\n') {
        in.remove_prefix(1);
        continue;
      }
    }
    size_t term = 0;
    size_t len = find_line(in, term);
    if (len == std::string_view::npos) {
      if (line_.size() + in.size() <= kMaxHeaderBlock)
        line_.append(in);
      else
        line_overflow_ = true;
      in = {};
      return;
    }
    if (line_.size() + len <= kMaxHeaderBlock)
      line_.append(in.data(), len);
    else
      line_overflow_ = true;
    if (term == 1 && in[len] == '\r' && len + 1 == in.size()) skip_lf_ = true;
    in.remove_prefix(len + term);
    std::string line;
    line.swap(line_);
    bool overflow = line_overflow_;
    line_overflow_ = false;
    if (!overflow) header_line(line, out);
    if (phase_ != Phase::Headers && !in.empty() && skip_lf_) {
      // The body starts right after a CR-terminated blank line.
      skip_lf_ = false;
      if (in.front() == '\n') in.remove_prefix(1);
    }
  }
}

void Decoder::header_line(std::string_view line, std::vector<Event>& out) {
  if (!in_block_) {
    // Between blocks: the next status line, or (if none comes) the body.
    if (line.empty()) return;
    if (line.substr(0, 5) == "HTTP/") {
      in_block_ = true;
    } else {
      phase_ = content_type_.find("text/event-stream") != std::string::npos || content_type_.empty()
                   ? Phase::Sse
                   : Phase::Raw;
      std::string again(line);
      again.push_back('\n');
      bom_checked_ = true;
      bool skip = skip_lf_;  // belongs to the line just ended, not to `again`
      skip_lf_ = false;
      if (phase_ == Phase::Sse)
        sse_bytes(again, out);
      else
        raw_bytes(again);
      skip_lf_ = skip;
      return;
    }
  }
  if (line.substr(0, 5) == "HTTP/" && headers_.empty() && status_ == 0) {
    // Status line: HTTP/<version> <code> [reason]
    size_t sp = line.find(' ');
    status_ = 0;
    if (sp != std::string_view::npos) {
      size_t i = sp + 1;
      int code = 0, digits = 0;
      while (i < line.size() && digits < 3 && line[i] >= '0' && line[i] <= '9') {
        code = code * 10 + (line[i++] - '0');
        ++digits;
      }
      if (digits == 3) status_ = code;
      std::string reason = lower(line.substr(i));
      if (status_ == 200 && reason.find("connection established") != std::string::npos)
        status_ = 100;
    }
    if (status_ == 0) status_ = -1;  // unreadable: reported as 0
    return;
  }
  if (line.empty()) {
    end_header_block(out);
    return;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return;
  std::string name = lower(trim(line.substr(0, colon)));
  std::string value(trim(line.substr(colon + 1)));
  if (!detail::valid_utf8(value)) value = detail::sanitize_utf8(value);
  if (!detail::valid_utf8(name)) name = detail::sanitize_utf8(name);
  if (name == "content-type") content_type_ = lower(value);
  if (headers_.size() + name.size() + value.size() + 3 <= kMaxHeaderBlock) {
    headers_ += name;
    headers_ += ": ";
    headers_ += value;
    headers_ += '\n';
  }
}

void Decoder::end_header_block(std::vector<Event>& out) {
  int status = status_ < 0 ? 0 : status_;
  if (status >= 100 && status < 200) {
    // An interim response (100 Continue) or a proxy's tunnel: the real one follows.
    status_ = 0;
    headers_.clear();
    content_type_.clear();
    in_block_ = false;
    return;
  }
  Event e = make(Type::Http);
  e.status = status;
  e.a = std::move(headers_);
  headers_.clear();
  out.push_back(std::move(e));
  bool sse = content_type_.find("text/event-stream") != std::string::npos ||
             (content_type_.empty() && status >= 200 && status < 300);
  phase_ = sse ? Phase::Sse : Phase::Raw;
  bom_checked_ = true;  // a BOM is only stripped from a stream without headers
}

void Decoder::sse_bytes(std::string_view in, std::vector<Event>& out) {
  if (!bom_checked_) {
    // A UTF-8 byte order mark at the start of the stream is dropped (it may come in pieces).
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    while (!in.empty() && bom_seen_ < 3 && in.front() == kBom[bom_seen_]) {
      in.remove_prefix(1);
      ++bom_seen_;
    }
    if (bom_seen_ == 3) {
      bom_checked_ = true;
    } else if (!in.empty()) {
      bom_checked_ = true;
      if (bom_seen_ > 0) {
        // Not a BOM after all: its bytes were data.
        std::string partial(kBom.substr(0, bom_seen_));
        bom_seen_ = 0;
        line_.append(partial);
      }
    } else {
      return;
    }
  }
  while (!in.empty()) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (in.front() == '\n') {
        in.remove_prefix(1);
        continue;
      }
    }
    size_t term = 0;
    size_t len = find_line(in, term);
    if (len == std::string_view::npos) {
      if (line_.size() + in.size() <= kMaxEventData)
        line_.append(in);
      else
        line_too_long(out);
      break;
    }
    if (term == 1 && in[len] == '\r' && len + 1 == in.size()) skip_lf_ = true;
    if (line_.empty()) {
      sse_line(in.substr(0, len), true, out);
    } else if (line_.size() + len > kMaxEventData) {
      line_too_long(out);
    } else {
      line_.append(in.data(), len);
      std::string line;
      line.swap(line_);
      sse_line(line, false, out);
    }
    if (failed_) return;
    in.remove_prefix(len + term);
  }
  keep_data();  // the view must not outlive the caller's buffer
}

void Decoder::sse_line(std::string_view line, bool stable, std::vector<Event>& out) {
  if (line.empty()) {
    dispatch(out);
    return;
  }
  if (line.front() == ':') return;  // a comment
  if (line.size() > kMaxEventData) {
    line_too_long(out);
    return;
  }
  size_t colon = line.find(':');
  std::string_view name = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (name == "data") {
    if (!has_data_ && stable) {
      // Usually the event's only data line, still in the caller's buffer: no copy.
      data_view_ = value;
      data_in_view_ = true;
      has_data_ = true;
      return;
    }
    keep_data();
    if (data_.size() + value.size() + 1 > kMaxEventData) {
      fail("an event's data is larger than " + std::to_string(kMaxEventData >> 20) +
               " MiB: the stream was stopped",
           out);
      return;
    }
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (name == "event") {
    event_name_.assign(value);
  } else if (name == "id" && value.find('\0') == std::string_view::npos &&
             value.size() <= kMaxEventId) {
    // Only a provider that resumes streams (mcp) hears of it; retry: and other
    // fields are ignored.
    event_id_.assign(value);
    has_id_ = true;
  }
}

void Decoder::keep_data() {
  if (data_in_view_) {
    data_.assign(data_view_);
    data_in_view_ = false;
  }
}

void Decoder::line_too_long(std::vector<Event>& out) {
  fail("a line of the stream is longer than " + std::to_string(kMaxEventData >> 20) +
           " MiB: the stream was stopped",
       out);
}

void Decoder::dispatch(std::vector<Event>& out) {
  std::string_view data = data_in_view_ ? data_view_ : std::string_view(data_);
  data_in_view_ = false;
  if (has_data_ && !data.empty()) {
    try {
      provider_->on_event(event_name_, data, out);
    } catch (const LimitExceeded& e) {
      fail(e.what + ": the stream was stopped", out);
      return;
    }
  }
  if (has_id_) provider_->on_id(event_id_, out);
  has_id_ = false;
  event_id_.clear();
  event_name_.clear();
  data_.clear();
  has_data_ = false;
}

void Decoder::raw_bytes(std::string_view in) {
  if (body_.size() < body_limit_ + 4) body_.append(in.substr(0, body_limit_ + 4 - body_.size()));
  if (body_.size() > body_limit_) body_truncated_ = true;
}

void Decoder::finish(std::vector<Event>& out) {
  if (phase_ == Phase::Done) throw Error(FLEMMA_E_STATE, "stream: finish called twice");
  if (phase_ == Phase::Start && !line_.empty()) {
    // Fewer bytes than "HTTP/": a (tiny) body.
    phase_ = Phase::Sse;
    std::string pending;
    pending.swap(line_);
    sse_bytes(pending, out);
  }
  bool complete = false;
  Event end = make(Type::End);
  if (failed_) {
    // Ended early (fail): incomplete, whatever came after.
  } else if (phase_ == Phase::Sse || phase_ == Phase::Start) {
    // An event without its closing blank line is incomplete: it is dropped.
    complete = provider_->on_close(out);
  } else if (phase_ == Phase::Raw && status_ >= 200 && status_ < 300 && body_limit_ != kMaxBody) {
    // A provider that decodes whole bodies (mcp): within its limit, or an error.
    if (body_truncated_) {
      out.push_back(make(Type::Error, -1, kLimitError,
                         "the response body is larger than " + std::to_string(body_limit_ >> 20) +
                             " MiB: it was dropped"));
    } else {
      complete = provider_->on_body(body_, out);
    }
  } else if (phase_ == Phase::Raw) {
    size_t keep = detail::utf8_boundary(body_, kMaxBody);
    std::string body = body_.substr(0, keep);
    if (!detail::valid_utf8(body)) body = detail::sanitize_utf8(body);
    if (!body_truncated_ && detail::json_depth_within(body, kMaxJsonDepth)) {
      json j = json::parse(body, nullptr, false);
      if (j.is_object()) {
        std::string et, msg;
        if (const json* err = field(j, "error")) error_fields(*err, et, msg);
        if (!msg.empty() || !et.empty())
          out.push_back(make(Type::Error, -1, et.empty() ? "error" : et, msg));
      }
    }
    end.mask = 1;
    end.a = std::move(body);
  }
  end.status = complete ? 1 : 0;
  out.push_back(std::move(end));
  phase_ = Phase::Done;
  line_.clear();
  data_.clear();
  body_.clear();
}

}  // namespace flemma::stream
