// The incremental document: see idoc.hpp for the model.
#include "idoc.hpp"

#include <algorithm>
#include <cstring>
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

Incremental::IdKeys Incremental::id_keys(const Segment& s) {
  IdKeys keys;
  for (const auto& it : s.doc.items)
    if (it.kind == FLEMMA_DOC_TOOL_USE || it.kind == FLEMMA_DOC_TOOL_RESULT)
      keys.emplace_back(it.kind, std::string(str_of(s, it.key)));
  return keys;
}

void Incremental::index_id(const Segment& s, int kind, const std::string& key, bool add) {
  auto found = ids_.find(key);
  if (found == ids_.end()) {
    if (!add) return;
    found = ids_.emplace(key, IdRefs{}).first;
  }
  IdRefs& r = found->second;
  auto& v = kind == FLEMMA_DOC_TOOL_USE ? r.uses : r.results;
  if (add) {
    v.push_back(&s);
  } else {
    auto at = std::find(v.begin(), v.end(), &s);
    if (at != v.end()) v.erase(at);
  }
  if (r.uses.empty() && r.results.empty()) {
    ids_.erase(found);
    id_problems_.erase(key);
  } else if (r.uses.size() > 1 || r.results.size() > 1 || (r.uses.empty() && !r.results.empty())) {
    id_problems_.insert(key);
  } else {
    id_problems_.erase(key);
  }
}

void Incremental::index_ids(const Segment& s, bool add) {
  for (const auto& [kind, key] : id_keys(s)) index_id(s, kind, key, add);
}

void Incremental::unindex_ids(const Segment& s, const IdKeys& keys) {
  for (const auto& [kind, key] : keys) index_id(s, kind, key, false);
}

namespace {

// Where split() is in the parse it cuts: the first item, diagnostic, unclosed
// fence and checkpoint not given to a segment yet.
struct SplitCursor {
  size_t items = 0, diags = 0, unclosed = 0, checkpoints = 0;
};

// The lines of a region's text (the byte offset of each of its lines) that
// start a segment: 0 and each role marker that starts a message of d.
std::vector<int32_t> segment_bounds(const std::string& text, const std::vector<size_t>& offs,
                                    const Document& d) {
  const auto n = static_cast<int32_t>(offs.size());
  std::vector<int32_t> bounds{0};
  for (const auto& it : d.items) {
    int32_t idx = it.first_line - 1;
    if (it.kind != FLEMMA_DOC_MESSAGE || idx <= 0 || idx >= n) continue;
    size_t end = idx + 1 < n ? offs[static_cast<size_t>(idx) + 1] - 1 : text.size();
    if (role_of_line(
            sv(text).substr(offs[static_cast<size_t>(idx)], end - offs[static_cast<size_t>(idx)])))
      bounds.push_back(idx);
  }
  return bounds;
}

// Notes an unclosed fence of a segment in its min_open.
void note_unclosed(Segment& seg, const Unclosed& u) {
  int c = ch_index(u.ch);
  if (seg.min_open[c] == 0 || u.len < seg.min_open[c]) seg.min_open[c] = u.len;
}

// The checkpoints of d on the lines (s, e) of the region, made relative to the
// segment seg that starts at line s, byte base, and holds what the parse
// emitted from `from` on.
void take_checkpoints(Segment& seg, const Document& d, int32_t s, int32_t e, size_t base,
                      const SplitCursor& from, SplitCursor& at) {
  const auto ii0 = static_cast<int32_t>(from.items), di0 = static_cast<int32_t>(from.diags),
             ui0 = static_cast<int32_t>(from.unclosed);
  for (; at.checkpoints < d.checkpoints.size() && d.checkpoints[at.checkpoints].line < e;
       ++at.checkpoints) {
    Checkpoint c = d.checkpoints[at.checkpoints];
    if (c.line <= s) continue;
    const auto b32 = static_cast<int32_t>(base);
    c.line -= s;
    c.byte -= b32;
    c.items -= ii0;
    c.diags -= di0;
    c.unclosed -= ui0;
    if (c.msg_item >= 0) c.msg_item -= ii0;
    if (c.msg_last >= 0) c.msg_last -= s;
    if (c.run_first >= 0) {
      c.run_first -= s;
      c.run_last -= s;
      c.run_start -= b32;
      c.run_end -= b32;
    }
    // Every count is of what this segment emitted before the line; a
    // checkpoint that says otherwise is dropped (the edit then re-parses).
    if (c.items < 0 || c.diags < 0 || c.unclosed < 0 || c.msg_last < -1 || c.run_first < -1 ||
        c.items > static_cast<int32_t>(seg.doc.items.size()))
      continue;
    seg.doc.checkpoints.push_back(c);
  }
}

// What a segment knows of its own text: a "\r" in it, its arena's size, its
// longest closing fences.
void note_text(Segment& seg) {
  seg.has_cr = seg.text.find('\r') != std::string::npos;
  seg.arena_base = seg.doc.arena.size();
  std::vector<sv> lines;
  split_lines(seg.text, lines);
  for (sv l : lines) {
    char ch;
    int32_t len;
    if (closing_fence(l, ch, len)) {
      int c = ch_index(ch);
      seg.max_close[c] = std::max(seg.max_close[c], len);
    }
  }
}

// Fills in segment seg of a split: the lines [s, e) of the region, what the
// parse d emitted for them (from cursor `at` on, which moves past it) made
// relative to the segment; the last segment also takes the diagnostics after
// the region.
void fill_segment(Segment& seg, const std::string& text, const std::vector<size_t>& offs,
                  const Document& d, int32_t s, int32_t e, bool last_seg, SplitCursor& at) {
  const auto n = static_cast<int32_t>(offs.size());
  const SplitCursor from = at;
  const size_t base = offs[static_cast<size_t>(s)];
  const size_t endb = e < n ? offs[static_cast<size_t>(e)] - 1 : text.size();
  seg.nlines = e - s;
  seg.text = text.substr(base, endb - base);
  auto rebase = [&](flemma_doc_str x) -> flemma_doc_str {
    if (x.len == 0) return {0, 0};
    if (x.off >= 0) {
      if (static_cast<size_t>(x.off) < base ||
          static_cast<size_t>(x.off) + static_cast<size_t>(x.len) > endb)
        throw Error(FLEMMA_E_INTERNAL, "incremental document: a range crosses a segment boundary");
      return {static_cast<int32_t>(static_cast<size_t>(x.off) - base), x.len};
    }
    sv a = sv(d.arena).substr(static_cast<size_t>(-x.off - 1), static_cast<size_t>(x.len));
    auto o = static_cast<int32_t>(seg.doc.arena.size());
    seg.doc.arena.append(a);
    return {-o - 1, x.len};
  };
  for (; at.items < d.items.size() && d.items[at.items].first_line - 1 < e; ++at.items) {
    flemma_doc_item it = d.items[at.items];
    if (it.first_line - 1 < s || it.last_line > e)
      throw Error(FLEMMA_E_INTERNAL, "incremental document: an item crosses a segment boundary");
    it.first_line -= s;
    it.last_line -= s;
    if (it.fence_line > 0) it.fence_line -= s;
    it.key = rebase(it.key);
    it.label = rebase(it.label);
    it.body = rebase(it.body);
    it.note = rebase(it.note);
    seg.doc.items.push_back(it);
  }
  // A marker has no diagnostics of its own: one on the line after a
  // segment (an empty block ending it) belongs to that segment; the last
  // one also takes those on the line after the region.
  for (; at.diags < d.diags.size() && (last_seg || d.diags[at.diags].line - 1 <= e); ++at.diags) {
    flemma_doc_diag g = d.diags[at.diags];
    g.line -= s;
    g.message = rebase(g.message);
    seg.doc.diags.push_back(g);
  }
  for (; at.unclosed < d.unclosed.size() && d.unclosed[at.unclosed].line < e; ++at.unclosed) {
    Unclosed u = d.unclosed[at.unclosed];
    u.line -= s;
    note_unclosed(seg, u);
    seg.doc.unclosed.push_back(u);
  }
  take_checkpoints(seg, d, s, e, base, from, at);
  note_text(seg);
}

}  // namespace

// Cuts the parse of a region (its text, the byte offset of each of its lines)
// into segments at the markers that start a message.
std::vector<std::unique_ptr<Segment>> Incremental::split(const std::string& text,
                                                         const std::vector<size_t>& offs,
                                                         Document&& d) {
  const auto n = static_cast<int32_t>(offs.size());
  const std::vector<int32_t> bounds = segment_bounds(text, offs, d);
  std::vector<std::unique_ptr<Segment>> out;
  out.reserve(bounds.size());
  SplitCursor at;
  for (size_t k = 0; k < bounds.size(); ++k) {
    const int32_t e = k + 1 < bounds.size() ? bounds[k + 1] : n;
    auto seg = std::make_unique<Segment>();
    seg->id = next_id_++;
    seg->version = version_ + 1;
    fill_segment(*seg, text, offs, d, bounds[k], e, k + 1 == bounds.size(), at);
    out.push_back(std::move(seg));
  }
  return out;
}

namespace {

// Rewrites the arena of d with only the strings its items and diagnostics use.
void compact_arena(Document& d) {
  std::string arena;
  auto keep = [&](flemma_doc_str& r) {
    if (r.len == 0 || r.off >= 0) return;
    auto o = static_cast<int32_t>(arena.size());
    arena.append(d.arena, static_cast<size_t>(-r.off - 1), static_cast<size_t>(r.len));
    r.off = -o - 1;
  };
  for (auto& it : d.items) {
    keep(it.key);
    keep(it.label);
    keep(it.body);
    keep(it.note);
  }
  for (auto& g : d.diags) keep(g.message);
  d.arena = std::move(arena);
}

// What the new lines of an edit bring in.
struct NewLines {
  int32_t close[2] = {0, 0};  // the longest closing fence of ` and ~ among them (0: none)
  bool cr = false;            // some line ends in "\r"
  bool marker_in = false;     // a role marker among them: the segment may be cut there
  size_t bytes = 0;           // their size, each with its "\n"
};

NewLines scan_new_lines(const std::vector<sv>& lines) {
  NewLines nl;
  for (sv x : lines) {
    if (!x.empty() && x[0] == '@' && role_of_line(x)) nl.marker_in = true;
    char ch;
    int32_t len;
    if (closing_fence(x, ch, len)) nl.close[ch_index(ch)] = std::max(nl.close[ch_index(ch)], len);
    if (!x.empty() && x.back() == '\r') nl.cr = true;
    nl.bytes += x.size() + 1;
  }
  return nl;
}

// The byte where line x of text starts, counting from line from_line at byte
// `from` (text.size() + 1, one past the end, for a line past the last one).
size_t line_start(const std::string& text, int32_t from_line, size_t from, int32_t x) {
  while (from_line < x) {
    const void* nl =
        from < text.size() ? std::memchr(text.data() + from, '\n', text.size() - from) : nullptr;
    from =
        nl ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1 : text.size() + 1;
    ++from_line;
  }
  return from;
}

// A string range of a segment's old parse (arena old_arena) in its new one
// (arena `arena`): a range of the text moved by db bytes, an arena string copied.
flemma_doc_str keep_str(flemma_doc_str x, int32_t db, const std::string& old_arena,
                        std::string& arena) {
  if (x.len == 0) return {0, 0};
  if (x.off >= 0) return {x.off + db, x.len};
  auto o = static_cast<int32_t>(arena.size());
  arena.append(old_arena, static_cast<size_t>(-x.off - 1), static_cast<size_t>(x.len));
  return {-o - 1, x.len};
}

}  // namespace

// One edit inside one segment (edit_within), from its plan to its commit.
struct Incremental::WithinEdit {
  explicit WithinEdit(const std::vector<sv>& new_lines) : lines(new_lines) {}
  // The edit: lines [f, l) of segment a (relative to it; it starts at line s0
  // and has n lines) replaced by the m lines `lines`.
  const std::vector<sv>& lines;
  size_t a = 0;
  Segment* s = nullptr;
  int32_t s0 = 0, f = 0, l = 0, n = 0, m = 0;
  NewLines added;
  size_t ci = 0;  // the checkpoint the parse resumes at (at: a copy of it)
  Checkpoint at;
  // text + "\n" had the old lines [f, l) at bytes [A, B); the edit changes the
  // lines by dl and the bytes by db.
  size_t A = 0, B = 0;
  int32_t dl = 0, db = 0;
  std::string removed;  // the old lines while the new ones are in the text
  IdKeys old_keys;
  // The new parse of the segment.
  Document nd;
  Resumed r;
  bool has_cr = false;
  bool compacted = false;
  int32_t cut = -1;  // the line of a marker that ends the segment now, or -1
  size_t cut_byte = 0, cut_item = 0;
  std::vector<std::unique_ptr<Segment>> fresh;  // the segments from the cut on
};

// The first segment before a with a fence left open that one of the closing
// fences `close` (the longest of ` and ~ an edit brings in) closes; a if none.
size_t Incremental::first_closed_above(size_t a, const int32_t (&close)[2]) const {
  for (size_t j = 0; j < a; ++j) {
    const Segment& o = *segs_[j];
    for (int c = 0; c < 2; ++c)
      if (o.min_open[c] > 0 && close[c] >= o.min_open[c]) return j;
  }
  return a;
}

// True when a closing fence in a segment after a closes one of the fences
// `unclosed` leaves open (which then runs across the markers to it).
bool Incremental::closed_below(size_t a, const std::vector<Unclosed>& unclosed) const {
  for (const Unclosed& u : unclosed) {
    const int c = ch_index(u.ch);
    for (size_t j = a + 1; j < segs_.size(); ++j)
      if (segs_[j]->max_close[c] >= u.len) return true;
  }
  return false;
}

// The edit inside segment a alone, resumed at a checkpoint above it (see
// idoc.hpp). Returns false, having changed nothing, when it cannot be done so.
bool Incremental::edit_within(int32_t first, int32_t last, const std::vector<sv>& lines) {
  WithinEdit w(lines);
  if (!within_plan(first, last, w)) return false;
  w.old_keys = id_keys(*w.s);
  within_splice(w);
  try {
    if (!within_reparse(w)) {
      within_unsplice(w);
      return false;
    }
  } catch (...) {
    within_unsplice(w);
    throw;
  }
  within_commit(w, first, last);
  return true;
}

// Whether the edit can be parsed again within its segment, and the plan: the
// segment, the edit's lines in it, the checkpoint to resume at, the bytes the
// edit replaces. Changes nothing.
bool Incremental::within_plan(int32_t first, int32_t last, WithinEdit& w) const {
  if (segs_.empty()) return false;
  w.a = segment_at(std::max(first - 1, 0));
  w.s = segs_[w.a].get();
  const Segment& s = *w.s;
  w.s0 = starts_[w.a];
  w.f = first - w.s0;
  w.l = last - w.s0;
  w.n = s.nlines;
  w.m = static_cast<int32_t>(w.lines.size());
  // The segment's marker line stays; the edit ends inside the segment.
  if (w.f < 1 || w.l > w.n || s.doc.checkpoints.empty()) return false;
  w.added = scan_new_lines(w.lines);
  if (s.text.size() + w.added.bytes >= kMaxInput) return false;
  // A closing fence brought in may close a fence left open in a segment above.
  if (open_fences_ > 0 && (w.added.close[0] > 0 || w.added.close[1] > 0) &&
      first_closed_above(w.a, w.added.close) < w.a)
    return false;
  const auto& cps = s.doc.checkpoints;
  auto cit = std::upper_bound(cps.begin(), cps.end(), w.f - 1,
                              [](int32_t v, const Checkpoint& c) { return v < c.line; });
  if (cit == cps.begin()) return false;
  w.ci = static_cast<size_t>(cit - cps.begin()) - 1;
  w.at = cps[w.ci];
  // A fence left open above the checkpoint (an unclosed frontmatter) may be closed by the edit.
  if (w.at.unclosed > 0) return false;
  w.A = line_start(s.text, w.at.line, static_cast<size_t>(w.at.byte), w.f);
  w.B = line_start(s.text, w.f, w.A, w.l);
  w.dl = w.m - (w.l - w.f);
  w.db =
      static_cast<int32_t>(static_cast<int64_t>(w.added.bytes) - static_cast<int64_t>(w.B - w.A));
  return true;
}

// Puts the new lines in the segment's text in place of the old ones, which
// are kept for within_unsplice. The new lines are copied into place (no copy
// of them first: a 10 MB line cost a few ms of new memory).
void Incremental::within_splice(WithinEdit& w) {
  std::string& text = w.s->text;
  const size_t A = w.A, B = w.B, added_bytes = w.added.bytes;
  // Room to grow: a segment that just took a long line (a 10 MB tool input) would
  // otherwise be copied whole again by the next few bytes appended to it.
  const size_t grown = text.size() + 1 + added_bytes - std::min(B - A, text.size() + 1);
  if (grown > text.capacity()) text.reserve(grown + grown / 4 + 4096);
  text.push_back('\n');
  try {
    w.removed = text.substr(A, B - A);
    text.replace(A, B - A, added_bytes, '\n');
  } catch (...) {
    text.pop_back();
    throw;
  }
  char* o = text.data() + A;
  for (sv x : w.lines) {
    if (!x.empty()) std::memcpy(o, x.data(), x.size());
    o += x.size();
    *o++ = '\n';
  }
  text.pop_back();
}

// Puts the old lines back (the edit is not applied after all).
void Incremental::within_unsplice(WithinEdit& w) {
  std::string& text = w.s->text;
  text.push_back('\n');
  text.replace(w.A, w.added.bytes, w.removed);
  text.pop_back();
}

// Parses the segment again from the checkpoint: to where the old parse holds
// again (its tail kept, shifted) or to its end, cut at a marker the edit
// brings in. False when that cannot be done within the segment.
bool Incremental::within_reparse(WithinEdit& w) {
  within_resume(w);
  bool ok = within_find_cut(w);
  if (ok && w.cut >= 0) ok = within_cut(w);
  if (ok && w.r.stopped) ok = within_keep_tail(w);
  // A fence the edit leaves open that a closing fence in a segment below closes: whole segments.
  if (ok && closed_below(w.a, w.nd.unclosed)) ok = false;
  if (!ok) return false;
  within_finish(w);
  return true;
}

// The parse from the checkpoint on, with what the old parse emitted before it;
// stopping at the first old checkpoint after the edit with the same state.
void Incremental::within_resume(WithinEdit& w) const {
  const Document& od = w.s->doc;
  const auto& cps = od.checkpoints;
  Document prefix;
  prefix.items.assign(od.items.begin(), od.items.begin() + w.at.items);
  prefix.diags.assign(od.diags.begin(), od.diags.begin() + w.at.diags);
  prefix.unclosed.assign(od.unclosed.begin(), od.unclosed.begin() + w.at.unclosed);
  prefix.arena = od.arena;
  ResumeFrom rf;
  rf.at = w.at;
  rf.has_cr = w.s->has_cr || w.added.cr;
  rf.cp_every = cp_every_;
  auto sit = std::lower_bound(cps.begin(), cps.end(), w.l,
                              [](const Checkpoint& c, int32_t v) { return c.line < v; });
  if (!rf.has_cr && !w.added.marker_in && sit != cps.end()) {
    rf.stop = &cps;
    rf.stop_first = static_cast<size_t>(sit - cps.begin());
    rf.stop_min_line = w.f + w.m;
    rf.line_delta = w.dl;
  }
  w.has_cr = rf.has_cr;
  w.nd = resume_region(w.s->text, std::move(prefix), rf, w.r);
}

// A marker the edit brings in (or frees from a fence) starts a message: the
// segment ends there (w.cut) and what follows becomes new segments. False when
// that cannot be done here (the parse stopped before the end, or the marker is
// on the segment's first line).
bool Incremental::within_find_cut(WithinEdit& w) {
  const std::string& text = w.s->text;
  const auto& items = w.nd.items;
  for (size_t k = static_cast<size_t>(w.at.items); k < items.size() && w.cut < 0; ++k) {
    if (items[k].kind != FLEMMA_DOC_MESSAGE) continue;
    const int32_t ml = items[k].first_line - 1;
    const size_t mb = line_start(text, w.at.line, static_cast<size_t>(w.at.byte), ml);
    const size_t me = std::min(text.find('\n', mb), text.size());
    if (!role_of_line(sv(text).substr(mb, me - mb))) continue;  // an implicit @You: message
    if (w.r.stopped || ml < 1) return false;
    w.cut = ml;
    w.cut_byte = mb;
    w.cut_item = k;
  }
  return true;
}

// Cuts the segment at w.cut: the text from there is parsed as new segments
// (w.fresh) and the new parse keeps what comes before. False when a fence left
// open in a new segment is closed further down.
bool Incremental::within_cut(WithinEdit& w) {
  const std::string tail_text = w.s->text.substr(w.cut_byte);
  std::vector<size_t> offs{0};
  for (size_t p = tail_text.find('\n'); p != std::string::npos; p = tail_text.find('\n', p + 1))
    offs.push_back(p + 1);
  w.fresh = split(tail_text, offs, parse_region(tail_text, cp_every_));
  Document& nd = w.nd;
  const int32_t cut = w.cut;
  nd.items.resize(w.cut_item);
  size_t keep_diags = 0;
  while (keep_diags < nd.diags.size() && nd.diags[keep_diags].line - 1 <= cut) ++keep_diags;
  nd.diags.resize(keep_diags);
  size_t keep_unclosed = 0;
  while (keep_unclosed < nd.unclosed.size() && nd.unclosed[keep_unclosed].line < cut)
    ++keep_unclosed;
  nd.unclosed.resize(keep_unclosed);
  size_t keep_cps = 0;
  while (keep_cps < nd.checkpoints.size() && nd.checkpoints[keep_cps].line < cut) ++keep_cps;
  nd.checkpoints.resize(keep_cps);
  // A fence left open in a new segment that a closing fence further down closes.
  for (const auto& fs : w.fresh)
    if (closed_below(w.a, fs->doc.unclosed)) return false;
  return true;
}

// The old parse holds from where the new one stopped: its items, diagnostics,
// unclosed fences and checkpoints from there on are kept, shifted by the edit.
// False when the text run open there cannot be joined.
bool Incremental::within_keep_tail(WithinEdit& w) {
  const Document& od = w.s->doc;
  const Checkpoint& oc = od.checkpoints[w.r.old_cp];
  Document& nd = w.nd;
  auto ti = static_cast<size_t>(oc.items);
  if (w.r.state.run_first >= 0 && !within_keep_run(w, ti)) return false;
  within_keep_items(w, ti);
  for (size_t k = static_cast<size_t>(oc.diags); k < od.diags.size(); ++k) {
    flemma_doc_diag g = od.diags[k];
    g.line += w.dl;
    g.message = keep_str(g.message, w.db, od.arena, nd.arena);
    nd.diags.push_back(g);
  }
  for (size_t k = static_cast<size_t>(oc.unclosed); k < od.unclosed.size(); ++k) {
    Unclosed u = od.unclosed[k];
    u.line += w.dl;
    nd.unclosed.push_back(u);
  }
  within_keep_checkpoints(w);
  return true;
}

// The text run open where the parse stopped (item ti of the old parse, then
// ti moves past it): its start from the new parse, its end from the old one.
bool Incremental::within_keep_run(WithinEdit& w, size_t& ti) {
  const Document& od = w.s->doc;
  const Checkpoint& oc = od.checkpoints[w.r.old_cp];
  const Checkpoint& ns = w.r.state;
  if (ti >= od.items.size() || od.items[ti].kind != FLEMMA_DOC_TEXT || od.items[ti].body.off < 0 ||
      od.items[ti].body.len == 0)
    return false;
  flemma_doc_item it = od.items[ti++];
  // Its last line is in the old tail, or it ended before the stop.
  const bool grew = it.last_line - 1 >= oc.line;
  const int32_t end = grew ? it.body.off + it.body.len + w.db : ns.run_end;
  it.first_line = ns.run_first + 1;
  it.last_line = grew ? it.last_line + w.dl : ns.run_last + 1;
  it.body = {ns.run_start, end - ns.run_start};
  w.nd.items.push_back(it);
  return true;
}

// The old parse's items from ti on, shifted; and the last line of the message
// open at the stop.
void Incremental::within_keep_items(WithinEdit& w, size_t ti) {
  const Document& od = w.s->doc;
  const Checkpoint& oc = od.checkpoints[w.r.old_cp];
  const Checkpoint& ns = w.r.state;
  Document& nd = w.nd;
  const int32_t dl = w.dl, db = w.db;
  for (; ti < od.items.size(); ++ti) {
    flemma_doc_item it = od.items[ti];
    it.first_line += dl;
    it.last_line += dl;
    if (it.fence_line > 0) it.fence_line += dl;
    it.key = keep_str(it.key, db, od.arena, nd.arena);
    it.label = keep_str(it.label, db, od.arena, nd.arena);
    it.body = keep_str(it.body, db, od.arena, nd.arena);
    it.note = keep_str(it.note, db, od.arena, nd.arena);
    nd.items.push_back(it);
  }
  if (ns.msg_item >= 0 && oc.msg_item >= 0) {
    auto& msg = nd.items[static_cast<size_t>(ns.msg_item)];
    const int32_t old_last = od.items[static_cast<size_t>(oc.msg_item)].last_line;
    msg.last_line =
        old_last - 1 >= oc.line ? old_last + dl : std::max(msg.first_line, ns.msg_last + 1);
  }
}

// The old parse's checkpoints from the stop on, shifted: by the edit's lines
// and bytes, and by what the new parse emitted before the stop.
void Incremental::within_keep_checkpoints(WithinEdit& w) {
  const auto& cps = w.s->doc.checkpoints;
  const Checkpoint& oc = cps[w.r.old_cp];
  const Checkpoint& ns = w.r.state;
  const int32_t dl = w.dl, db = w.db;
  for (size_t k = w.r.old_cp; k < cps.size(); ++k) {
    Checkpoint c = cps[k];
    const bool same_msg = c.msg_item == oc.msg_item;
    c.line += dl;
    c.byte += db;
    c.items += ns.items - oc.items;
    c.diags += ns.diags - oc.diags;
    c.unclosed += ns.unclosed - oc.unclosed;
    if (same_msg) {
      c.msg_item = ns.msg_item;
      c.msg_last = c.msg_last >= oc.line ? c.msg_last + dl : ns.msg_last;
    } else {
      if (c.msg_item >= 0) c.msg_item += ns.items - oc.items;
      if (c.msg_last >= 0) c.msg_last += dl;
    }
    if (c.run_first >= 0) {
      if (c.run_first < oc.line) {
        c.run_first = ns.run_first;
        c.run_start = ns.run_start;
      } else {
        c.run_first += dl;
        c.run_start += db;
      }
      if (c.run_last < oc.line) {
        c.run_last = ns.run_last;
        c.run_end = ns.run_end;
      } else {
        c.run_last += dl;
        c.run_end += db;
      }
    }
    w.nd.checkpoints.push_back(c);
  }
}

// The new parse made whole: the checkpoints above the resume point before the
// new ones, every empty range {0, 0}, the arena compacted when it has grown.
void Incremental::within_finish(WithinEdit& w) {
  const auto& cps = w.s->doc.checkpoints;
  Document& nd = w.nd;
  std::vector<Checkpoint> all(cps.begin(), cps.begin() + static_cast<std::ptrdiff_t>(w.ci));
  all.insert(all.end(), nd.checkpoints.begin(), nd.checkpoints.end());
  nd.checkpoints = std::move(all);
  for (auto& it : nd.items) {
    if (it.key.len == 0) it.key = {0, 0};
    if (it.label.len == 0) it.label = {0, 0};
    if (it.body.len == 0) it.body = {0, 0};
    if (it.note.len == 0) it.note = {0, 0};
  }
  if (nd.arena.size() > 2 * w.s->arena_base + 65536) {
    compact_arena(nd);
    w.compacted = true;
  }
}

// Applies the new parse: the segment takes it (cut at a marker the edit
// brought in, the new segments after it), the index, the lines and the log
// follow.
void Incremental::within_commit(WithinEdit& w, int32_t first, int32_t last) {
  const int32_t n = w.n, dl = w.dl, cut = w.cut;
  stats_.last_parsed_lines = (w.r.stopped ? w.r.state.line : n + dl) - w.at.line;
  if (cut >= 0) stats_.last_parsed_lines += n + dl - cut;
  within_commit_segment(w);
  for (size_t k = w.a + 1; k < segs_.size(); ++k) starts_[k] += dl;
  const size_t added = w.fresh.size();
  if (added > 0) {
    std::vector<int32_t> fresh_starts;
    int32_t at_line = w.s0 + cut;
    for (const auto& fs : w.fresh) {
      fresh_starts.push_back(at_line);
      at_line += fs->nlines;
      index_ids(*fs, true);
      open_fences_ += fs->doc.unclosed.size();
    }
    segs_.insert(segs_.begin() + static_cast<std::ptrdiff_t>(w.a) + 1,
                 std::make_move_iterator(w.fresh.begin()), std::make_move_iterator(w.fresh.end()));
    starts_.insert(starts_.begin() + static_cast<std::ptrdiff_t>(w.a) + 1, fresh_starts.begin(),
                   fresh_starts.end());
    for (size_t k = w.a + 1; k < segs_.size(); ++k) segs_[k]->index = k;
  }
  nlines_ += dl;
  ++version_;
  ++stats_.within;
  const int32_t end_line = w.s0 + (cut >= 0 || !w.r.stopped ? n + dl : w.r.state.line);
  log_change({version_, w.a, 1, 1 + added, w.s0 + w.at.line, end_line, first, last, w.m});
}

// The edited segment takes its new parse (and its text ends at the cut).
void Incremental::within_commit_segment(WithinEdit& w) {
  Segment& s = *w.s;
  unindex_ids(s, w.old_keys);
  open_fences_ -= s.doc.unclosed.size();
  s.doc = std::move(w.nd);
  if (w.compacted) s.arena_base = s.doc.arena.size();
  s.nlines = w.cut >= 0 ? w.cut : w.n + w.dl;
  if (w.cut >= 0) s.text.resize(w.cut_byte - 1);
  s.has_cr = w.has_cr;
  s.id = next_id_++;
  s.version = version_ + 1;
  for (int c = 0; c < 2; ++c) s.max_close[c] = std::max(s.max_close[c], w.added.close[c]);
  s.min_open[0] = s.min_open[1] = 0;
  for (const Unclosed& u : s.doc.unclosed) note_unclosed(s, u);
  open_fences_ += s.doc.unclosed.size();
  index_ids(s, true);
}

void Incremental::log_change(const Change& c) {
  log_.push_back(c);
  if (log_.size() > 2048) log_.erase(log_.begin(), log_.begin() + 1024);
}

// The lines an edit of whole segments parses again: segments [a, b) (from line
// r0 on) with the edit applied, as one text.
struct Incremental::Region {
  size_t a = 0, b = 0;
  int32_t r0 = 0;
  std::vector<sv> lines;     // its lines, the edit applied
  std::string text;          // those joined with "\n"
  std::vector<size_t> offs;  // the byte where each line starts
  Document doc;              // the parse of text
};

void Incremental::edit(int32_t first, int32_t last, const std::vector<sv>& lines) {
  if (first < 0 || last < first || last > nlines_)
    throw Error(FLEMMA_E_INVALID, "flemma_idoc_edit: lines " + std::to_string(first) + ".." +
                                      std::to_string(last) + " are not within the document's " +
                                      std::to_string(nlines_) + " lines");
  if (lines.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() - nlines_))
    throw Error(FLEMMA_E_INVALID, "flemma_idoc_edit: too many lines");
  if (edit_within(first, last, lines)) return;
  ++stats_.whole;
  Region g;
  region_bounds(first, last, lines, g);
  region_parse(first, last, lines, g);
  region_commit(first, last, lines, g);
}

// The segments an edit of whole segments starts with: from the one holding the
// line above the edit to the next marker below it; from a segment above that
// leaves a fence open when a closing fence brought in closes it.
void Incremental::region_bounds(int32_t first, int32_t last, const std::vector<sv>& lines,
                                Region& g) const {
  if (!segs_.empty()) {
    g.a = segment_at(std::max(first - 1, 0));
    g.b =
        static_cast<size_t>(std::lower_bound(starts_.begin() + static_cast<std::ptrdiff_t>(g.a) + 1,
                                             starts_.end(), last) -
                            starts_.begin());
  }
  // A closing fence brought in closes any fence left open above it.
  if (open_fences_ > 0 && g.a > 0) {
    int32_t close[2] = {0, 0};
    for (sv l : lines) {
      char ch;
      int32_t len;
      if (closing_fence(l, ch, len)) close[ch_index(ch)] = std::max(close[ch_index(ch)], len);
    }
    if (close[0] > 0 || close[1] > 0) g.a = first_closed_above(g.a, close);
  }
  g.r0 = segs_.empty() ? 0 : starts_[g.a];
}

// Parses the region with the edit applied, growing it down while a fence it
// leaves open is closed by a segment below (it then runs across the markers
// to there).
void Incremental::region_parse(int32_t first, int32_t last, const std::vector<sv>& lines,
                               Region& g) const {
  const size_t nseg = segs_.size();
  std::vector<sv> old_lines;
  for (;;) {
    old_lines.clear();
    for (size_t k = g.a; k < g.b; ++k) split_lines(segs_[k]->text, old_lines);
    g.lines.clear();
    g.lines.insert(g.lines.end(), old_lines.begin(), old_lines.begin() + (first - g.r0));
    g.lines.insert(g.lines.end(), lines.begin(), lines.end());
    g.lines.insert(g.lines.end(), old_lines.begin() + (last - g.r0), old_lines.end());
    size_t bytes = g.lines.empty() ? 0 : g.lines.size() - 1;
    for (sv l : g.lines) bytes += l.size();
    if (bytes >= kMaxInput)
      throw Error(FLEMMA_E_INVALID, "the edited message is 1 GiB or more: split the conversation");
    g.text.clear();
    g.text.reserve(bytes);
    g.offs.resize(g.lines.size());
    for (size_t i = 0; i < g.lines.size(); ++i) {
      g.offs[i] = g.text.size();
      g.text.append(g.lines[i]);
      if (i + 1 < g.lines.size()) g.text.push_back('\n');
    }
    g.doc = g.lines.empty() ? Document{} : parse_region(g.text, cp_every_);
    size_t grow = nseg;
    for (const Unclosed& u : g.doc.unclosed) {
      int c = ch_index(u.ch);
      for (size_t k = g.b; k < grow; ++k) {
        if (segs_[k]->max_close[c] >= u.len) {
          grow = k;
          break;
        }
      }
    }
    if (grow == nseg) break;
    g.b = grow + 1;
  }
}

// Replaces segments [a, b) with the region's new segments.
void Incremental::region_commit(int32_t first, int32_t last, const std::vector<sv>& lines,
                                Region& g) {
  const size_t nseg = segs_.size(), a = g.a, b = g.b;
  const int32_t r0 = g.r0;
  auto fresh = g.lines.empty() ? std::vector<std::unique_ptr<Segment>>{}
                               : split(g.text, g.offs, std::move(g.doc));
  const int32_t r1_old = b < nseg ? starts_[b] : nlines_;
  const int32_t delta = static_cast<int32_t>(g.lines.size()) - (r1_old - r0);

  // Commit.
  segs_.reserve(nseg - (b - a) + fresh.size());
  starts_.reserve(nseg - (b - a) + fresh.size());
  for (size_t k = a; k < b; ++k) {
    index_ids(*segs_[k], false);
    open_fences_ -= segs_[k]->doc.unclosed.size();
  }
  segs_.erase(segs_.begin() + static_cast<std::ptrdiff_t>(a),
              segs_.begin() + static_cast<std::ptrdiff_t>(b));
  starts_.erase(starts_.begin() + static_cast<std::ptrdiff_t>(a),
                starts_.begin() + static_cast<std::ptrdiff_t>(b));
  std::vector<int32_t> fresh_starts;
  fresh_starts.reserve(fresh.size());
  int32_t at = r0;
  for (const auto& s : fresh) {
    fresh_starts.push_back(at);
    at += s->nlines;
    index_ids(*s, true);
    open_fences_ += s->doc.unclosed.size();
  }
  const size_t added = fresh.size();
  stats_.last_parsed_lines = static_cast<int64_t>(g.lines.size());
  segs_.insert(segs_.begin() + static_cast<std::ptrdiff_t>(a),
               std::make_move_iterator(fresh.begin()), std::make_move_iterator(fresh.end()));
  starts_.insert(starts_.begin() + static_cast<std::ptrdiff_t>(a), fresh_starts.begin(),
                 fresh_starts.end());
  for (size_t k = a; k < segs_.size(); ++k) {
    segs_[k]->index = k;
    if (k >= a + added) starts_[k] += delta;
  }
  nlines_ += static_cast<int32_t>(lines.size()) - (last - first);
  ++version_;
  log_change({version_, a, b - a, added, r0, r0 + static_cast<int32_t>(g.lines.size()), first, last,
              static_cast<int32_t>(lines.size())});
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

bool Incremental::reparsed(uint64_t since, int32_t& line, int32_t& end) const {
  std::vector<LineRange> ranges;
  const bool exact = touched(since, 1, ranges);
  line = end = nlines_;
  if (!ranges.empty()) {
    line = ranges.front().first;
    end = ranges.front().end;
  }
  return exact;
}

bool Incremental::touched(uint64_t since, size_t cap, std::vector<LineRange>& out) const {
  out.clear();
  if (since >= version_) return true;
  if (log_.empty() || log_.front().version > since + 1) {
    out.push_back({0, nlines_});
    return false;
  }
  cap = std::max<size_t>(cap, 1);
  for (const Change& c : log_) {
    if (c.version <= since) continue;
    // The ranges so far, in the lines after this edit: a bound inside the
    // replaced lines moves to the edge of the new ones (the range grows).
    const int32_t dl = c.count - (c.last - c.first);
    for (LineRange& r : out) {
      if (r.first >= c.last)
        r.first += dl;
      else if (r.first > c.first)
        r.first = c.first;
      if (r.end >= c.last)
        r.end += dl;
      else if (r.end > c.first)
        r.end = c.first + c.count;
    }
    out.push_back({std::min(c.line, c.first), std::max(c.end, c.first + c.count)});
    std::sort(out.begin(), out.end(),
              [](const LineRange& x, const LineRange& y) { return x.first < y.first; });
    size_t k = 0;
    for (size_t i = 1; i < out.size(); ++i) {
      if (out[i].first <= out[k].end) {
        out[k].end = std::max(out[k].end, out[i].end);
      } else {
        out[++k] = out[i];
      }
    }
    out.resize(k + 1);
    // Too many: the two closest neighbours become one range (with the lines
    // between them) until they fit.
    while (out.size() > cap) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < out.size(); ++i) {
        if (out[i + 1].first - out[i].end < out[best + 1].first - out[best].end) best = i;
      }
      out[best].end = out[best + 1].end;
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
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
  for (size_t k = 0; k < segs_.size(); ++k) {
    const Segment& s = *segs_[k];
    const int32_t base = starts_[k];
    for (const auto& g : s.doc.diags)
      diags_.push_back({g.line + base, g.severity, keep(str_of(s, g.message))});
  }
  // The ids the index says give a diagnostic: all their uses and results, in the
  // document's order, checked as parse checks all of them (the other ids give none).
  if (!id_problems_.empty()) {
    std::vector<IdLine> uses, results;
    std::vector<const Segment*> segs;
    auto collect = [&](const std::string& key, const std::vector<const Segment*>& from, int kind,
                       std::vector<IdLine>& out) {
      segs.assign(from.begin(), from.end());
      std::sort(segs.begin(), segs.end());
      segs.erase(std::unique(segs.begin(), segs.end()), segs.end());
      for (const Segment* s : segs) {
        const int32_t base = starts_[s->index];
        for (const auto& it : s->doc.items)
          if (it.kind == kind && str_of(*s, it.key) == key)
            out.push_back({str_of(*s, it.key), it.first_line + base});
      }
    };
    for (const auto& key : id_problems_) {
      const IdRefs& r = ids_.at(key);
      collect(key, r.uses, FLEMMA_DOC_TOOL_USE, uses);
      collect(key, r.results, FLEMMA_DOC_TOOL_RESULT, results);
    }
    auto by_line = [](const IdLine& x, const IdLine& y) { return x.line < y.line; };
    std::sort(uses.begin(), uses.end(), by_line);
    std::sort(results.begin(), results.end(), by_line);
    check_ids(uses, results, [&](int32_t line, int sev, const std::string& msg) {
      diags_.push_back({line, sev, keep(msg)});
    });
  }
  std::stable_sort(
      diags_.begin(), diags_.end(),
      [](const flemma_doc_diag& x, const flemma_doc_diag& y) { return x.line < y.line; });
  diags_version_ = version_;
  return diags_;
}

bool Incremental::find_tool_use(sv id, size_t& seg, size_t& item) const {
  auto found = ids_.find(std::string(id));
  if (found == ids_.end() || found->second.uses.empty()) return false;
  const Segment* best = nullptr;
  for (const Segment* s : found->second.uses)
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
  if (total != nlines_)
    return "segment lines add up to " + std::to_string(total) + ", not " + std::to_string(nlines_);
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
        return where + ": lines " + std::to_string(it.first_line + base) + "-" +
               std::to_string(it.last_line + base) + " instead of " + std::to_string(f.first_line) +
               "-" + std::to_string(f.last_line);
      if ((it.fence_line > 0 ? it.fence_line + base : 0) != f.fence_line)
        return where + ": fence_line differs";
      if (str_of(s, it.key) != (f.key.len ? full.str(all, f.key) : sv()) ||
          str_of(s, it.label) != (f.label.len ? full.str(all, f.label) : sv()) ||
          str_of(s, it.body) != (f.body.len ? full.str(all, f.body) : sv()) ||
          str_of(s, it.note) != (f.note.len ? full.str(all, f.note) : sv()))
        return where + ": strings differ";
    }
  }
  if (i != full.items.size())
    return "the full parse has " + std::to_string(full.items.size() - i) + " more items";
  // Each checkpoint holds the state a parse of its segment has at that line.
  for (size_t k = 0; k < segs_.size(); ++k) {
    const Segment& s = *segs_[k];
    if (s.doc.checkpoints.empty()) continue;
    Document fresh = parse_region(s.text, 1);
    size_t q = 0;
    int32_t prev = 0;
    for (const Checkpoint& c : s.doc.checkpoints) {
      std::string where =
          "segment " + std::to_string(k) + " checkpoint at line " + std::to_string(c.line);
      if (c.line <= prev) return where + ": out of order";
      prev = c.line;
      while (q < fresh.checkpoints.size() && fresh.checkpoints[q].line < c.line) ++q;
      if (q == fresh.checkpoints.size() || fresh.checkpoints[q].line != c.line)
        return where + ": not a line of the main loop";
      const Checkpoint& x = fresh.checkpoints[q];
      if (c.byte != x.byte || c.items != x.items || c.diags != x.diags ||
          c.unclosed != x.unclosed || c.msg_item != x.msg_item || c.role != x.role ||
          c.msg_last != x.msg_last || c.run_first != x.run_first ||
          (c.run_first >= 0 &&
           (c.run_last != x.run_last || c.run_start != x.run_start || c.run_end != x.run_end)))
        return where + ": state differs (byte " + std::to_string(c.byte) + "/" +
               std::to_string(x.byte) + ", items " + std::to_string(c.items) + "/" +
               std::to_string(x.items) + ", diags " + std::to_string(c.diags) + "/" +
               std::to_string(x.diags) + ", msg_last " + std::to_string(c.msg_last) + "/" +
               std::to_string(x.msg_last) + ", run " + std::to_string(c.run_first) + "-" +
               std::to_string(c.run_last) + "/" + std::to_string(x.run_first) + "-" +
               std::to_string(x.run_last) + ")";
    }
  }
  const auto& d = diagnostics();
  if (d.size() != full.diags.size()) {
    std::string out = std::to_string(d.size()) + " diagnostics instead of " +
                      std::to_string(full.diags.size()) + ":";
    for (const auto& g : d)
      out += "\n  mine " + std::to_string(g.line) + " " +
             std::string(sv(diag_arena_)
                             .substr(static_cast<size_t>(-g.message.off - 1),
                                     static_cast<size_t>(g.message.len)));
    for (const auto& g : full.diags)
      out += "\n  full " + std::to_string(g.line) + " " + std::string(full.str(all, g.message));
    return out;
  }
  for (size_t j = 0; j < d.size(); ++j) {
    sv mine = sv(diag_arena_)
                  .substr(static_cast<size_t>(-d[j].message.off - 1),
                          static_cast<size_t>(d[j].message.len));
    if (d[j].line != full.diags[j].line || d[j].severity != full.diags[j].severity ||
        mine != full.str(all, full.diags[j].message))
      return "diagnostic " + std::to_string(j) + " differs: line " + std::to_string(d[j].line) +
             " " + std::string(mine) + " / line " + std::to_string(full.diags[j].line) + " " +
             std::string(full.str(all, full.diags[j].message));
  }
  return "";
}

}  // namespace flemma::document
