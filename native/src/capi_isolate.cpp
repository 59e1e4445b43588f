// C entry points of the isolated Lua interpreter (see isolate.hpp).
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "isolate.hpp"

struct flemma_isolate {
  std::unique_ptr<flemma::isolate::Isolate> iso;
  std::string result;
};

extern "C" {

FLEMMA_API int flemma_isolate_new(const char* modules_json, size_t len, const char* main,
                                  size_t memory, flemma_isolate** out) {
  return flemma::guard([&] {
    if (!out || !main || (!modules_json && len > 0))
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_isolate_new: NULL argument");
    *out = nullptr;
    // The same modules come every time: parse their JSON once.
    static std::mutex mutex;
    static std::string last_json;
    static std::vector<std::pair<std::string, std::string>> last_modules;
    std::vector<std::pair<std::string, std::string>> modules;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (last_json.size() == len && std::memcmp(last_json.data(), modules_json, len) == 0)
        modules = last_modules;
    }
    if (modules.empty()) {
      auto mods = nlohmann::json::parse(modules_json, modules_json + len, nullptr, false);
      if (mods.is_discarded() || !mods.is_object()) {
        throw flemma::Error(FLEMMA_E_INVALID,
                            "flemma_isolate_new: modules should be a JSON object of name: source");
      }
      for (auto it = mods.begin(); it != mods.end(); ++it) {
        if (!it.value().is_string())
          throw flemma::Error(FLEMMA_E_INVALID,
                              "flemma_isolate_new: module " + it.key() + " is not a string");
        modules.emplace_back(it.key(), it.value().get<std::string>());
      }
      std::lock_guard<std::mutex> lock(mutex);
      last_json.assign(modules_json, len);
      last_modules = modules;
    }
    flemma::isolate::Limits limits;
    if (memory > 0 && memory < limits.memory) limits.memory = memory;
    auto handle = std::make_unique<flemma_isolate>();
    handle->iso = std::make_unique<flemma::isolate::Isolate>(modules, main, limits);
    *out = handle.release();
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_isolate_call(flemma_isolate* iso, const char* fn, const char* args_json,
                                   size_t len, double cpu_ms, double wall_ms, const char** out,
                                   size_t* out_len) {
  return flemma::guard([&] {
    if (!iso || !fn || !out || !out_len || (!args_json && len > 0)) {
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_isolate_call: NULL argument");
    }
    iso->result =
        iso->iso->call(fn, std::string_view(args_json ? args_json : "", len), cpu_ms, wall_ms);
    *out = iso->result.c_str();
    *out_len = iso->result.size();
    return FLEMMA_OK;
  });
}

FLEMMA_API double flemma_isolate_cpu_ms(const flemma_isolate* iso) {
  return iso ? iso->iso->cpu_ms() : 0;
}

FLEMMA_API int64_t flemma_isolate_peak(const flemma_isolate* iso) {
  return iso ? static_cast<int64_t>(iso->iso->arena().peak()) : 0;
}

FLEMMA_API void flemma_isolate_free(flemma_isolate* iso) { delete iso; }

}  // extern "C"
