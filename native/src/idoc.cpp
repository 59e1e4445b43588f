// The incremental document: see idoc.hpp for the model.
#include "idoc.hpp"

#include <algorithm>
#include <limits>

#include "guard.hpp"

namespace flemma::document {

namespace {

using sv = std::string_view;

int ch_index(char c) { return c == '`' ? 0 : 1; }

// Appends the lines of a segment's text (joined with "\n") to out.
void split_lines(sv text, std::vector<sv>& out) {
  size_t start = 0;
  for (;;) {
    size_t nl = text.find('\n', start);
    if (nl == sv::npos) {
      out.push_back(text.substr(start));
      return;
    }
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
}

sv str_of(const Segment& s, flemma_doc_str r) {
  if (r.len == 0) return {};
  return s.doc.str(s.text, r);
}

}  // namespace

size_t Incremental::segment_at(int32_t line) const {
  if (segs_.empty()) return 0;
  auto it = std::upper_bound(starts_.begin(), starts_.end(), line);
  if (it == starts_.begin()) return 0;
  return static_cast<size_t>(it - starts_.begin() - 1);
}

void Incremental::index_uses(const Segment& s, bool add) {
  for (const auto& it : s.doc.items) {
    if (it.kind != FLEMMA_DOC_TOOL_USE) continue;
    std::string key(str_of(s, it.key));
    if (add) {
      uses_[key].push_back(&s);
    } else {
      auto found = uses_.find(key);
      if (found == uses_.end()) continue;
      auto& v = found->second;
      auto at = std::find(v.begin(), v.end(), &s);
      if (at != v.end()) v.erase(at);
      if (v.empty()) uses_.erase(found);
    }
  }
}

// Cuts the parse of a region (its text, the byte offset of each of its lines)
// into segments at the markers that start a message.
std::vector<std::unique_ptr<Segment>> Incremental::split(const std::string& text, const std::vector<size_t>& offs,
                                                         Document&& d) {
  const auto n = static_cast<int32_t>(offs.size());
  std::vector<int32_t> bounds{0};
  for (const auto& it : d.items) {
    int32_t idx = it.first_line - 1;
    if (it.kind != FLEMMA_DOC_MESSAGE || idx <= 0 || idx >= n) continue;
    size_t end = idx + 1 < n ? offs[static_cast<size_t>(idx) + 1] - 1 : text.size();
    if (role_of_line(sv(text).substr(offs[static_cast<size_t>(idx)], end - offs[static_cast<size_t>(idx)])))
      bounds.push_back(idx);
  }
  std::vector<std::unique_ptr<Segment>> out;
  out.reserve(bounds.size());
  size_t ii = 0, di = 0, ui = 0;
  for (size_t k = 0; k < bounds.size(); ++k) {
    const int32_t s = bounds[k];
    const int32_t e = k + 1 < bounds.size() ? bounds[k + 1] : n;
    const size_t base = offs[static_cast<size_t>(s)];
    const size_t endb = e < n ? offs[static_cast<size_t>(e)] - 1 : text.size();
    auto seg = std::make_unique<Segment>();
    seg->id = next_id_++;
    seg->version = version_ + 1;
    seg->nlines = e - s;
    seg->text = text.substr(base, endb - base);
    auto rebase = [&](flemma_doc_str x) -> flemma_doc_str {
      if (x.len == 0) return {0, 0};
      if (x.off >= 0) {
        if (static_cast<size_t>(x.off) < base || static_cast<size_t>(x.off) + static_cast<size_t>(x.len) > endb)
          throw Error(FLEMMA_E_INTERNAL, "incremental document: a range crosses a segment boundary");
        return {static_cast<int32_t>(static_cast<size_t>(x.off) - base), x.len};
      }
      sv a = sv(d.arena).substr(static_cast<size_t>(-x.off - 1), static_cast<size_t>(x.len));
      auto o = static_cast<int32_t>(seg->doc.arena.size());
      seg->doc.arena.append(a);
      return {-o - 1, x.len};
    };
    for (; ii < d.items.size() && d.items[ii].first_line - 1 < e; ++ii) {
      flemma_doc_item it = d.items[ii];
      if (it.first_line - 1 < s || it.last_line > e)
        throw Error(FLEMMA_E_INTERNAL, "incremental document: an item crosses a segment boundary");
      it.first_line -= s;
      it.last_line -= s;
      if (it.fence_line > 0) it.fence_line -= s;
      it.key = rebase(it.key);
      it.label = rebase(it.label);
      it.body = rebase(it.body);
      it.note = rebase(it.note);
      seg->doc.items.push_back(it);
    }
    // A marker has no diagnostics of its own: one on the line after a
    // segment (an empty block ending it) belongs to that segment; the last
    // one also takes those on the line after the region.
    const bool last_seg = k + 1 == bounds.size();
    for (; di < d.diags.size() && (last_seg || d.diags[di].line - 1 <= e); ++di) {
      flemma_doc_diag g = d.diags[di];
      g.line -= s;
      g.message = rebase(g.message);
      seg->doc.diags.push_back(g);
    }
    for (; ui < d.unclosed.size() && d.unclosed[ui].line < e; ++ui) {
      Unclosed u = d.unclosed[ui];
      u.line -= s;
      int c = ch_index(u.ch);
      if (seg->min_open[c] == 0 || u.len < seg->min_open[c]) seg->min_open[c] = u.len;
      seg->doc.unclosed.push_back(u);
    }
    std::vector<sv> lines;
    split_lines(seg->text, lines);
    for (sv l : lines) {
      char ch;
      int32_t len;
      if (closing_fence(l, ch, len)) {
        int c = ch_index(ch);
        seg->max_close[c] = std::max(seg->max_close[c], len);
      }
    }
    out.push_back(std::move(seg));
  }
  return out;
}

void Incremental::edit(int32_t first, int32_t last, const std::vector<sv>& lines) {
  if (first < 0 || last < first || last > nlines_)
    throw Error(FLEMMA_E_INVALID, "flemma_idoc_edit: lines " + std::to_string(first) + ".." + std::to_string(last) +
                                      " are not within the document's " + std::to_string(nlines_) + " lines");
  if (lines.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() - nlines_))
    throw Error(FLEMMA_E_INVALID, "flemma_idoc_edit: too many lines");
  const size_t nseg = segs_.size();
  size_t a = 0, b = 0;
  if (nseg > 0) {
    a = segment_at(std::max(first - 1, 0));
    b = static_cast<size_t>(std::lower_bound(starts_.begin() + static_cast<std::ptrdiff_t>(a) + 1, starts_.end(), last) -
                            starts_.begin());
  }
  // A closing fence brought in closes any fence left open above it.
  if (open_fences_ > 0 && a > 0) {
    int32_t close[2] = {0, 0};
    for (sv l : lines) {
      char ch;
      int32_t len;
      if (closing_fence(l, ch, len)) close[ch_index(ch)] = std::max(close[ch_index(ch)], len);
    }
    if (close[0] > 0 || close[1] > 0) {
      for (size_t j = 0; j < a; ++j) {
        const Segment& s = *segs_[j];
        bool hit = false;
        for (int c = 0; c < 2; ++c) hit = hit || (s.min_open[c] > 0 && close[c] >= s.min_open[c]);
        if (hit) {
          a = j;
          break;
        }
      }
    }
  }
  const int32_t r0 = nseg > 0 ? starts_[a] : 0;
  std::vector<sv> old_lines, reg;
  std::string text;
  std::vector<size_t> offs;
  Document d;
  for (;;) {
    old_lines.clear();
    for (size_t k = a; k < b; ++k) split_lines(segs_[k]->text, old_lines);
    reg.clear();
    reg.insert(reg.end(), old_lines.begin(), old_lines.begin() + (first - r0));
    reg.insert(reg.end(), lines.begin(), lines.end());
    reg.insert(reg.end(), old_lines.begin() + (last - r0), old_lines.end());
    size_t bytes = reg.empty() ? 0 : reg.size() - 1;
    for (sv l : reg) bytes += l.size();
    if (bytes >= kMaxInput)
      throw Error(FLEMMA_E_INVALID, "the edited message is 1 GiB or more: split the conversation");
    text.clear();
    text.reserve(bytes);
    offs.resize(reg.size());
    for (size_t i = 0; i < reg.size(); ++i) {
      offs[i] = text.size();
      text.append(reg[i]);
      if (i + 1 < reg.size()) text.push_back('\n');
    }
    d = reg.empty() ? Document{} : parse_region(text);
    // A fence left open that a closing fence below the region closes runs
    // across the markers to it: take the segments up to that fence too.
    size_t grow = nseg;
    for (const Unclosed& u : d.unclosed) {
      int c = ch_index(u.ch);
      for (size_t k = b; k < grow; ++k) {
        if (segs_[k]->max_close[c] >= u.len) {
          grow = k;
          break;
        }
      }
    }
    if (grow == nseg) break;
    b = grow + 1;
  }
  auto fresh = reg.empty() ? std::vector<std::unique_ptr<Segment>>{} : split(text, offs, std::move(d));
  const int32_t r1_old = b < nseg ? starts_[b] : nlines_;
  const int32_t delta = static_cast<int32_t>(reg.size()) - (r1_old - r0);

  // Commit.
  segs_.reserve(nseg - (b - a) + fresh.size());
  starts_.reserve(nseg - (b - a) + fresh.size());
  for (size_t k = a; k < b; ++k) {
    index_uses(*segs_[k], false);
    open_fences_ -= segs_[k]->doc.unclosed.size();
  }
  segs_.erase(segs_.begin() + static_cast<std::ptrdiff_t>(a), segs_.begin() + static_cast<std::ptrdiff_t>(b));
  starts_.erase(starts_.begin() + static_cast<std::ptrdiff_t>(a), starts_.begin() + static_cast<std::ptrdiff_t>(b));
  std::vector<int32_t> fresh_starts;
  fresh_starts.reserve(fresh.size());
  int32_t at = r0;
  for (const auto& s : fresh) {
    fresh_starts.push_back(at);
    at += s->nlines;
    index_uses(*s, true);
    open_fences_ += s->doc.unclosed.size();
  }
  const size_t added = fresh.size();
  segs_.insert(segs_.begin() + static_cast<std::ptrdiff_t>(a), std::make_move_iterator(fresh.begin()),
               std::make_move_iterator(fresh.end()));
  starts_.insert(starts_.begin() + static_cast<std::ptrdiff_t>(a), fresh_starts.begin(), fresh_starts.end());
  for (size_t k = a; k < segs_.size(); ++k) {
    segs_[k]->index = k;
    if (k >= a + added) starts_[k] += delta;
  }
  nlines_ += static_cast<int32_t>(lines.size()) - (last - first);
  ++version_;
  log_.push_back({version_, a, b - a, added});
  if (log_.size() > 2048) log_.erase(log_.begin(), log_.begin() + 1024);
}

bool Incremental::changes(uint64_t since, size_t& lo, size_t& hi) const {
  lo = hi = 0;
  if (since >= version_) return true;
  if (log_.empty() || log_.front().version > since + 1) {
    hi = segs_.size();
    return false;
  }
  bool empty = true;
  for (const Change& c : log_) {
    if (c.version <= since) continue;
    size_t bo = c.at + c.removed, bn = c.at + c.added;
    if (empty) {
      lo = c.at;
      hi = bn;
      empty = false;
      continue;
    }
    if (hi >= bo) {
      hi = hi - c.removed + c.added;
    } else if (hi > c.at) {
      hi = bn;
    }
    hi = std::max(hi, bn);
    lo = std::min(lo, c.at);
  }
  return true;
}

const std::vector<flemma_doc_diag>& Incremental::diagnostics() {
  if (diags_version_ == version_) return diags_;
  diags_.clear();
  diag_arena_.clear();
  auto keep = [&](sv msg) -> flemma_doc_str {
    auto o = static_cast<int32_t>(diag_arena_.size());
    diag_arena_.append(msg);
    return {-o - 1, static_cast<int32_t>(msg.size())};
  };
  std::vector<IdLine> uses, results;
  for (size_t k = 0; k < segs_.size(); ++k) {
    const Segment& s = *segs_[k];
    const int32_t base = starts_[k];
    for (const auto& g : s.doc.diags) diags_.push_back({g.line + base, g.severity, keep(str_of(s, g.message))});
    for (const auto& it : s.doc.items) {
      if (it.kind == FLEMMA_DOC_TOOL_USE) uses.push_back({str_of(s, it.key), it.first_line + base});
      if (it.kind == FLEMMA_DOC_TOOL_RESULT) results.push_back({str_of(s, it.key), it.first_line + base});
    }
  }
  check_ids(uses, results, [&](int32_t line, int sev, std::string msg) { diags_.push_back({line, sev, keep(msg)}); });
  std::stable_sort(diags_.begin(), diags_.end(),
                   [](const flemma_doc_diag& x, const flemma_doc_diag& y) { return x.line < y.line; });
  diags_version_ = version_;
  return diags_;
}

bool Incremental::find_tool_use(sv id, size_t& seg, size_t& item) const {
  auto found = uses_.find(std::string(id));
  if (found == uses_.end() || found->second.empty()) return false;
  const Segment* best = nullptr;
  for (const Segment* s : found->second)
    if (!best || s->index > best->index) best = s;
  for (size_t i = best->doc.items.size(); i-- > 0;) {
    const auto& it = best->doc.items[i];
    if (it.kind == FLEMMA_DOC_TOOL_USE && str_of(*best, it.key) == id) {
      seg = best->index;
      item = i;
      return true;
    }
  }
  return false;
}

std::string Incremental::text() const {
  std::string out;
  for (size_t k = 0; k < segs_.size(); ++k) {
    if (k > 0) out.push_back('\n');
    out += segs_[k]->text;
  }
  return out;
}

std::string Incremental::check() {
  std::string all = text();
  Document full = parse(all);
  int32_t total = 0;
  for (const auto& s : segs_) total += s->nlines;
  if (total != nlines_) return "segment lines add up to " + std::to_string(total) + ", not " + std::to_string(nlines_);
  for (size_t k = 0; k < segs_.size(); ++k) {
    int32_t expect = k == 0 ? 0 : starts_[k - 1] + segs_[k - 1]->nlines;
    if (starts_[k] != expect) return "segment " + std::to_string(k) + " starts at the wrong line";
    if (segs_[k]->index != k) return "segment " + std::to_string(k) + " has a stale index";
  }
  size_t i = 0;
  for (size_t k = 0; k < segs_.size(); ++k) {
    const Segment& s = *segs_[k];
    const int32_t base = starts_[k];
    for (const auto& it : s.doc.items) {
      std::string where = "item " + std::to_string(i);
      if (i >= full.items.size()) return where + ": not in the full parse";
      const auto& f = full.items[i++];
      if (it.kind != f.kind || it.role != f.role || it.status != f.status || it.flags != f.flags)
        return where + ": kind/role/status/flags differ";
      if (it.first_line + base != f.first_line || it.last_line + base != f.last_line)
        return where + ": lines " + std::to_string(it.first_line + base) + "-" + std::to_string(it.last_line + base) +
               " instead of " + std::to_string(f.first_line) + "-" + std::to_string(f.last_line);
      if ((it.fence_line > 0 ? it.fence_line + base : 0) != f.fence_line) return where + ": fence_line differs";
      if (str_of(s, it.key) != (f.key.len ? full.str(all, f.key) : sv()) ||
          str_of(s, it.label) != (f.label.len ? full.str(all, f.label) : sv()) ||
          str_of(s, it.body) != (f.body.len ? full.str(all, f.body) : sv()) ||
          str_of(s, it.note) != (f.note.len ? full.str(all, f.note) : sv()))
        return where + ": strings differ";
    }
  }
  if (i != full.items.size()) return "the full parse has " + std::to_string(full.items.size() - i) + " more items";
  const auto& d = diagnostics();
  if (d.size() != full.diags.size()) {
    std::string out = std::to_string(d.size()) + " diagnostics instead of " + std::to_string(full.diags.size()) + ":";
    for (const auto& g : d)
      out += "\n  mine " + std::to_string(g.line) + " " +
             std::string(sv(diag_arena_).substr(static_cast<size_t>(-g.message.off - 1), static_cast<size_t>(g.message.len)));
    for (const auto& g : full.diags) out += "\n  full " + std::to_string(g.line) + " " + std::string(full.str(all, g.message));
    return out;
  }
  for (size_t j = 0; j < d.size(); ++j) {
    sv mine = sv(diag_arena_).substr(static_cast<size_t>(-d[j].message.off - 1), static_cast<size_t>(d[j].message.len));
    if (d[j].line != full.diags[j].line || d[j].severity != full.diags[j].severity ||
        mine != full.str(all, full.diags[j].message))
      return "diagnostic " + std::to_string(j) + " differs: line " + std::to_string(d[j].line) + " " + std::string(mine) +
             " / line " + std::to_string(full.diags[j].line) + " " + std::string(full.str(all, full.diags[j].message));
  }
  return "";
}

}  // namespace flemma::document
