// Escaping of model text in a .chat document: see escape.hpp.
#include "escape.hpp"

#include <cstring>

namespace flemma::escape {

namespace {

constexpr std::string_view kFixed[] = {
    "@You:",     "@Assistant:", "@System:", "**Tool Use:**", "**Tool Result:**",
    "<thinking", "</thinking"};
constexpr int kFixedCount = sizeof(kFixed) / sizeof(kFixed[0]);
constexpr std::string_view kFlemma = "flemma:";

// The blanks the parser trims (document.cpp is_blank_char).
bool blank(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

Shape::Verdict Shape::step(unsigned char c) {
  if (verdict_ != kMaybe) return verdict_;
  for (int i = 0; i < kFixedCount; ++i) {
    const uint32_t bit = 1u << i;
    if (!(alive_ & bit)) continue;
    const std::string_view p = kFixed[i];
    if (pos_ < p.size() && static_cast<unsigned char>(p[pos_]) == c) {
      if (pos_ + 1 == p.size()) return verdict_ = kYes;
    } else {
      alive_ &= ~bit;
    }
  }
  switch (fstate_) {
    case 0:  // up to 3 spaces
      if (c == ' ' && fcount_ < 3) {
        ++fcount_;
      } else if (c == '`' || c == '~') {
        fch_ = static_cast<char>(c);
        fcount_ = 1;
        fstate_ = 1;
      } else {
        fstate_ = 4;
      }
      break;
    case 1:  // the run of fence characters
      if (c == static_cast<unsigned char>(fch_)) {
        if (fcount_ < 3) ++fcount_;
      } else if (fcount_ < 3) {
        fstate_ = 4;
      } else if (blank(c)) {
        fstate_ = 2;
      } else if (c == static_cast<unsigned char>(kFlemma[0])) {
        fstate_ = 3;
        fcount_ = 1;
      } else {
        fstate_ = 4;
      }
      break;
    case 2:  // blanks before the info string
      if (blank(c)) break;
      if (c == static_cast<unsigned char>(kFlemma[0])) {
        fstate_ = 3;
        fcount_ = 1;
      } else {
        fstate_ = 4;
      }
      break;
    case 3:  // "flemma:"
      if (static_cast<unsigned char>(kFlemma[fcount_]) == c) {
        if (++fcount_ == kFlemma.size()) return verdict_ = kYes;
      } else {
        fstate_ = 4;
      }
      break;
    default:
      break;
  }
  ++pos_;
  if (alive_ == 0 && fstate_ == 4) verdict_ = kNo;
  return verdict_;
}

bool structural(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == '\\') ++i;
  Shape s;
  for (; i < line.size(); ++i)
    if (s.step(static_cast<unsigned char>(line[i])) != Shape::kMaybe) break;
  return s.verdict() == Shape::kYes;
}

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  Escaper e;
  e.feed(text, true, out);
  return out;
}

std::string unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t start = 0;
  while (start <= text.size()) {
    const void* nl =
        start < text.size() ? std::memchr(text.data() + start, '\n', text.size() - start) : nullptr;
    const size_t end =
        nl ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) : text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line[0] == '\\' && structural(line)) line.remove_prefix(1);
    out.append(line);
    if (!nl) break;
    out.push_back('\n');
    start = end + 1;
  }
  return out;
}

void Escaper::emit(std::string_view s, std::string& out) {
  out.append(s);
  size_t i = 0;
  while (i < s.size()) {
    if (lstate_ == 3) {
      const void* nl = std::memchr(s.data() + i, '\n', s.size() - i);
      const size_t e = nl ? static_cast<size_t>(static_cast<const char*>(nl) - s.data()) : s.size();
      if (e > i) lempty_ = false;
      i = e;
      if (!nl) return;
    }
    const auto c = static_cast<unsigned char>(s[i++]);
    if (c == '\n') {
      end_line();
      continue;
    }
    lempty_ = false;
    switch (lstate_) {
      case 0:
        if (c == ' ' && lindent_ < 3) {
          ++lindent_;
        } else if (c == '`' || c == '~') {
          lch_ = static_cast<char>(c);
          lrun_ = 1;
          lstate_ = 1;
        } else {
          lstate_ = 3;
        }
        break;
      case 1:
        if (c == static_cast<unsigned char>(lch_)) {
          ++lrun_;
          break;
        }
        if (lrun_ < 3) {
          lstate_ = 3;
          break;
        }
        lstate_ = 2;
        [[fallthrough]];
      case 2:
        if (!blank(c)) linfo_blank_ = false;
        if (c == '`') linfo_tick_ = true;
        break;
      default:
        break;
    }
  }
}

// A line of the output ended: a fence on it opens or closes a block, as the
// parser pairs them (document.cpp fence_of and closer_after).
void Escaper::end_line() {
  if ((lstate_ == 1 || lstate_ == 2) && lrun_ >= 3) {
    const bool closer = linfo_blank_;
    const bool opener = lch_ == '~' || !linfo_tick_;
    if (open_ch_ == 0) {
      if (opener) {
        open_ch_ = lch_;
        open_len_ = lrun_;
      }
    } else if (closer && lch_ == open_ch_ && lrun_ >= open_len_) {
      open_ch_ = 0;
      open_len_ = 0;
    }
  }
  lstate_ = 0;
  lindent_ = 0;
  lch_ = 0;
  lrun_ = 0;
  linfo_blank_ = true;
  linfo_tick_ = false;
  lempty_ = true;
}

void Escaper::feed(std::string_view data, bool final, std::string& out) {
  auto decided = [&](bool yes) {
    if (backslashes_ + (yes ? 1 : 0) > 0)
      emit(std::string(backslashes_ + (yes ? 1 : 0), '\\'), out);
    emit(held_, out);
    held_.clear();
    backslashes_ = 0;
    shape_.reset();
    deciding_ = false;
  };
  size_t i = 0;
  while (i < data.size()) {
    if (deciding_) {
      const auto c = static_cast<unsigned char>(data[i]);
      if (c == '\n') {
        decided(shape_.verdict() == Shape::kYes);
        continue;  // the newline is written below
      }
      ++i;
      if (c == '\\' && held_.empty()) {
        ++backslashes_;
        continue;
      }
      held_.push_back(static_cast<char>(c));
      if (shape_.step(c) != Shape::kMaybe) decided(shape_.verdict() == Shape::kYes);
      continue;
    }
    const void* nl = std::memchr(data.data() + i, '\n', data.size() - i);
    const size_t e =
        nl ? static_cast<size_t>(static_cast<const char*>(nl) - data.data()) + 1 : data.size();
    emit(data.substr(i, e - i), out);
    i = e;
    if (nl) deciding_ = true;
  }
  if (final) {
    if (deciding_ && (backslashes_ > 0 || !held_.empty())) decided(false);
    if (!lempty_) end_line();
    deciding_ = true;
  }
}

}  // namespace flemma::escape
