// JSON-RPC 2.0 line decoder (see jsonrpc.hpp).
#include "jsonrpc.hpp"

#include "guard.hpp"

namespace flemma::jsonrpc {

namespace {

stream::Event error_event(const char* type, std::string message) {
  stream::Event e;
  e.type = stream::Type::Error;
  e.a = type;
  e.b = std::move(message);
  return e;
}

}  // namespace

int json_depth(std::string_view text, int limit) {
  int depth = 0, max = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max) {
        max = depth;
        if (max > limit) return limit + 1;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return max;
}

Decoder::Decoder(size_t max_line, int max_depth, size_t blob_min)
    : max_line_(max_line ? max_line : kDefaultMaxLine),
      max_depth_(max_depth > 0 ? max_depth : kDefaultMaxDepth),
      blob_min_(blob_min) {}

void Decoder::overflow_error(std::vector<stream::Event>& out) {
  out.push_back(error_event("line_too_long", "a line of " + std::to_string(overflow_bytes_) +
                                                 " bytes or more, over the limit of " +
                                                 std::to_string(max_line_) +
                                                 " bytes, was dropped"));
  overflow_ = false;
  overflow_bytes_ = 0;
}

void Decoder::feed(std::string_view in, std::vector<stream::Event>& out) {
  if (done_) throw Error(FLEMMA_E_STATE, "jsonrpc: the decoder was already finished");
  while (!in.empty()) {
    size_t nl = in.find('\n');
    std::string_view piece = nl == std::string_view::npos ? in : in.substr(0, nl);
    if (overflow_) {
      overflow_bytes_ += piece.size();
    } else if (line_.size() + piece.size() > max_line_) {
      overflow_ = true;
      overflow_bytes_ = line_.size() + piece.size();
      std::string().swap(line_);  // give the memory back
    } else if (nl != std::string_view::npos && line_.empty()) {
      line(piece, out);  // a whole line in the caller's buffer: no copy
      in.remove_prefix(nl + 1);
      continue;
    } else {
      line_.append(piece);
    }
    if (nl == std::string_view::npos) break;
    in.remove_prefix(nl + 1);
    if (overflow_) {
      overflow_error(out);
    } else {
      line(line_, out);
      line_.clear();
      if (line_.capacity() > (1u << 20)) std::string().swap(line_);
    }
  }
}

void Decoder::finish(std::vector<stream::Event>& out) {
  if (done_) throw Error(FLEMMA_E_STATE, "jsonrpc: the decoder was already finished");
  done_ = true;
  bool complete = true;
  if (overflow_) {
    overflow_error(out);
    complete = false;
  } else if (!line_.empty()) {
    line(line_, out);
    line_.clear();
  }
  stream::Event end;
  end.type = stream::Type::End;
  end.status = complete ? 1 : 0;
  out.push_back(std::move(end));
}

void Decoder::line(std::string_view text, std::vector<stream::Event>& out) {
  stream::detail::jsonrpc_text(text, max_depth_, out, blob_min_);
}

}  // namespace flemma::jsonrpc
