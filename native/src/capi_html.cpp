// C ABI of the HTML converter: a thin forwarder into flemma::html.
#include <cstdlib>
#include <cstring>
#include <string>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "html.hpp"

extern "C" {

// The caller owns *out: flemma_html_free.
FLEMMA_API int flemma_html_convert(const char* html, size_t len, int format, char** out,
                                   size_t* out_len) {
  return flemma::guard([&] {
    if (!out || !out_len)
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_html_convert: out and out_len are required");
    *out = nullptr;
    *out_len = 0;
    if (!html && len > 0)
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_html_convert: html is NULL but len is not 0");
    if (format != FLEMMA_HTML_MARKDOWN && format != FLEMMA_HTML_TEXT)
      throw flemma::Error(FLEMMA_E_INVALID,
                          "flemma_html_convert: format is 0 (markdown) or 1 (text)");
    std::string text = flemma::html::to_markdown(
        std::string_view(html ? html : "", len),
        format == FLEMMA_HTML_TEXT ? flemma::html::Format::Text : flemma::html::Format::Markdown);
    char* buf = new char[text.size() + 1];
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    *out = buf;
    *out_len = text.size();
    return FLEMMA_OK;
  });
}

FLEMMA_API void flemma_html_free(char* text) { delete[] text; }

}  // extern "C"
