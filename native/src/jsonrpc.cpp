// JSON-RPC 2.0 line decoder (see jsonrpc.hpp).
#include "jsonrpc.hpp"

#include <nlohmann/json.hpp>

#include "guard.hpp"

namespace flemma::jsonrpc {

namespace {

using json = nlohmann::json;

stream::Event error_event(const char* type, std::string message) {
  stream::Event e;
  e.type = stream::Type::Error;
  e.a = type;
  e.b = std::move(message);
  return e;
}

// A short, valid UTF-8 quote of a bad line for its error message.
std::string quote(std::string_view text) {
  size_t n = stream::detail::utf8_boundary(text, kQuoteCap);
  std::string q = stream::detail::sanitize_utf8(text.substr(0, n));
  for (char& c : q)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  if (n < text.size()) q += "...";
  return q;
}

bool valid_id(const json& id) {
  return id.is_string() || id.is_number_integer() || id.is_number_unsigned();
}

// Classifies one message; false when it is none.
bool classify(const json& m, int32_t& kind, std::string& method) {
  if (!m.is_object()) return false;
  auto v = m.find("jsonrpc");
  if (v == m.end() || !v->is_string() || v->get_ref<const std::string&>() != "2.0") return false;
  auto me = m.find("method");
  auto id = m.find("id");
  if (me != m.end()) {
    if (!me->is_string()) return false;
    method = me->get<std::string>();
    if (id == m.end()) {
      kind = kNotification;
      return true;
    }
    if (!valid_id(*id)) return false;
    kind = kRequest;
    return true;
  }
  if (id == m.end() || !(valid_id(*id) || id->is_null())) return false;
  auto err = m.find("error");
  if (err != m.end()) {
    if (!err->is_object()) return false;
    kind = kError;
    return true;
  }
  if (m.find("result") == m.end()) return false;
  if (id->is_null()) return false;
  kind = kResult;
  return true;
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

Decoder::Decoder(size_t max_line, int max_depth)
    : max_line_(max_line ? max_line : kDefaultMaxLine),
      max_depth_(max_depth > 0 ? max_depth : kDefaultMaxDepth) {}

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
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  size_t first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return;  // a blank line
  if (json_depth(text, max_depth_) > max_depth_) {
    out.push_back(error_event("too_deep", "a message nested deeper than " +
                                              std::to_string(max_depth_) +
                                              " levels was dropped: " + quote(text)));
    return;
  }
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) {
    out.push_back(error_event("invalid_json", "not JSON: " + quote(text)));
    return;
  }
  auto emit = [&](const json& m) {
    int32_t kind = 0;
    std::string method;
    if (!classify(m, kind, method)) {
      out.push_back(error_event("not_jsonrpc", "not a JSON-RPC 2.0 message: " + quote(text)));
      return;
    }
    stream::Event e;
    e.type = stream::Type::JsonRpc;
    e.status = kind;
    e.a = std::move(method);
    e.b = m.dump(-1, ' ', false, json::error_handler_t::replace);
    out.push_back(std::move(e));
  };
  if (j.is_array() && !j.empty()) {
    for (const auto& m : j) emit(m);
  } else {
    emit(j);
  }
}

}  // namespace flemma::jsonrpc
