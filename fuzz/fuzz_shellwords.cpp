// libFuzzer target for the shell-word parser of per-command approval rules
// (native/src/shellwords.cpp). Invariants checked: no crash or sanitizer report, a
// parse ends in bounded time (libFuzzer's -timeout), parsing is deterministic (the
// same input twice gives the same result), a refused line has a reason and no
// commands, and every word lies in the input: its span is inside it and its value is
// a subsequence of its span (quote and backslash removal only take bytes away).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "shellwords.hpp"

namespace sw = flemma::shellwords;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view src(reinterpret_cast<const char*>(data), size);
  sw::Result a = sw::parse(src);
  sw::Result b = sw::parse(src);
  if (a.ok != b.ok || a.reason != b.reason || a.commands.size() != b.commands.size()) std::abort();
  if (!a.ok && (a.reason.empty() || !a.commands.empty())) std::abort();
  for (size_t c = 0; c < a.commands.size(); c++) {
    const auto& wa = a.commands[c].words;
    const auto& wb = b.commands[c].words;
    if (wa.empty() || wa.size() != wb.size()) std::abort();
    for (size_t i = 0; i < wa.size(); i++) {
      const sw::Word& w = wa[i];
      if (w.value != wb[i].value || w.dynamic != wb[i].dynamic || w.start != wb[i].start)
        std::abort();
      if (w.start > w.end || w.end > src.size()) std::abort();
      std::string_view span = src.substr(w.start, w.end - w.start);
      size_t k = 0;
      for (char ch : w.value) {
        while (k < span.size() && span[k] != ch) k++;
        if (k >= span.size()) std::abort();
        k++;
      }
    }
  }
  return 0;
}
