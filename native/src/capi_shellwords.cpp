// C ABI of the shell-word parser: thin forwarders into flemma::shellwords.
#include <cstdint>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "shellwords.hpp"

struct flemma_shellwords {
  flemma::shellwords::Result result;
  struct Ref {
    const flemma::shellwords::Word* word;
    int32_t command;
  };
  std::vector<Ref> refs;
};

extern "C" {

// Caller owns the result: flemma_shellwords_free.
FLEMMA_API flemma_shellwords* flemma_shellwords_parse(const char* cmd, size_t len) {
  return flemma::guard_ptr([&]() -> flemma_shellwords* {
    if (!cmd && len > 0)
      throw flemma::Error(FLEMMA_E_INVALID,
                          "flemma_shellwords_parse: cmd is NULL but len is not 0");
    auto* out = new flemma_shellwords();
    try {
      out->result = flemma::shellwords::parse(std::string_view(cmd ? cmd : "", len));
      int32_t c = 0;
      for (const auto& command : out->result.commands) {
        for (const auto& w : command.words) out->refs.push_back({&w, c});
        c++;
      }
    } catch (...) {
      delete out;
      throw;
    }
    return out;
  });
}

FLEMMA_API void flemma_shellwords_free(flemma_shellwords* words) { delete words; }

// *reason is owned by the result.
FLEMMA_API int flemma_shellwords_ok(const flemma_shellwords* words, const char** reason) {
  if (!words) return 0;
  if (reason) *reason = words->result.reason.c_str();
  return words->result.ok ? 1 : 0;
}

FLEMMA_API size_t flemma_shellwords_count(const flemma_shellwords* words) {
  return words ? words->refs.size() : 0;
}

// *data is owned by the result.
FLEMMA_API int flemma_shellwords_word(const flemma_shellwords* words, size_t i, const char** data,
                                      size_t* len, int32_t* command, int32_t* dynamic) {
  return flemma::guard([&] {
    if (!words || i >= words->refs.size())
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_shellwords_word: no such word");
    const auto& ref = words->refs[i];
    if (data) *data = ref.word->value.data();
    if (len) *len = ref.word->value.size();
    if (command) *command = ref.command;
    if (dynamic) *dynamic = ref.word->dynamic ? 1 : 0;
    return FLEMMA_OK;
  });
}

}  // extern "C"
