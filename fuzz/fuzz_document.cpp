// libFuzzer target for the .chat parser: any input must parse without a
// crash, a sanitizer report or an inconsistent model (`make fuzz`).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "document.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  flemma::document::Document doc = flemma::document::parse(text);
  int32_t prev_first = 0;
  for (const auto& it : doc.items) {
    // Lines are 1-based, ranges are ordered and items come in document order.
    if (it.first_line < 1 || it.last_line < it.first_line || it.first_line < prev_first)
      std::abort();
    prev_first = it.first_line;
    for (flemma_doc_str s : {it.key, it.label, it.body, it.note}) {
      if (s.len < 0) std::abort();
      std::string_view v = doc.str(text, s);  // throws std::out_of_range on a bad offset
      if (v.size() != static_cast<size_t>(s.len)) std::abort();
    }
  }
  for (const auto& d : doc.diags) {
    if (d.line < 1 || d.severity < 1 || d.severity > 3 || doc.str(text, d.message).empty())
      std::abort();
  }
  return 0;
}
