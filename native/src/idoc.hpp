// The incremental .chat document: the parse of a buffer kept up to date from
// line edits (as Neovim's on_lines reports them), re-parsing only what an edit
// can change.
//
// The document is cut into segments at the role markers that start a message
// (segment 0 also holds what comes before the first of them: frontmatter, an
// implicit @You: message, blank lines). A segment is parsed as a whole and
// knows nothing of its neighbours, which holds because the scan state at a
// message marker is always the same (top level, a new message). An edit
// re-parses the segments it touches, from the segment holding the line above
// the edit (a marker edited away joins its lines to the message above) to the
// next marker below it, then grows the region while the scan state at its end
// differs from the old scan's:
//   - a fence the new text leaves open, which a closing fence further down
//     now closes, swallows the markers up to that closing fence;
//   - a closing fence the edit brings in closes a fence that was open above
//     (an unclosed fence runs only to the next marker, a closed one across
//     markers), so the region starts at that fence's segment.
// Nothing else reaches across a marker, so beyond the region every segment
// is unchanged and keeps its items (with its lines shifted).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "document.hpp"

namespace flemma::document {

struct Segment {
  uint64_t id = 0;       // unique in its document, never reused
  uint64_t version = 0;  // the edit that parsed it
  int32_t nlines = 0;    // at least 1
  size_t index = 0;      // current position among the segments
  std::string text;      // its lines joined with "\n"
  // Items and diagnostics with lines relative to the segment (1 = its first
  // line); ranges index `text` (off >= 0) or doc.arena (off < 0); an empty
  // range is {0, 0}.
  Document doc;
  // The longest closing fence of ` and ~ in it (0: none); after an edit inside
  // the segment it may be larger than that (never smaller).
  int32_t max_close[2] = {0, 0};
  int32_t min_open[2] = {0, 0};  // the shortest fence of ` and ~ it leaves open (0: none)
  bool has_cr = false;           // some line may end in "\r"
  size_t arena_base = 0;         // arena size when last compacted
};

// Checkpoints are recorded in a segment (doc.checkpoints, lines relative to
// it) after its marker and then every kCheckpointEvery lines of the main
// loop. An edit inside one segment that brings in no role marker resumes the
// parse at the last checkpoint above the edit and stops at the first old
// checkpoint below it whose state is the same again; the old items from there
// on are kept, shifted. Anything else (markers, fences reaching other
// segments) re-parses whole segments as described above.
inline constexpr int32_t kCheckpointEvery = 16;

class Incremental {
 public:
  Incremental() = default;
  Incremental(const Incremental&) = delete;
  Incremental& operator=(const Incremental&) = delete;

  // Replaces lines [first, last) (0-based) with `lines` (without their "\n").
  // Throws flemma::Error on bad arguments; on any exception nothing changed.
  void edit(int32_t first, int32_t last, const std::vector<std::string_view>& lines);

  int32_t line_count() const { return nlines_; }
  // The number of edits applied (0 for a new document).
  uint64_t version() const { return version_; }

  size_t segment_count() const { return segs_.size(); }
  const Segment& segment(size_t i) const { return *segs_[i]; }
  // The 0-based first line of segment i.
  int32_t segment_start(size_t i) const { return starts_[i]; }
  // The segment holding 0-based line `line` (clamped to the document).
  size_t segment_at(int32_t line) const;

  // The segments that may differ from those of version `since`: [lo, hi) in
  // the current list; the ones before lo are the same, the ones from hi on
  // are the last ones of that version, shifted by the change in line count.
  // Returns false when `since` is too old to tell (then lo = 0, hi = count).
  bool changes(uint64_t since, size_t& lo, size_t& hi) const;

  // The 0-based lines [line, end) whose parse may differ from that of version
  // `since`: the lines above and below read the same (the same items, the
  // ones below shifted) in both versions; line = end = line_count() when
  // nothing changed. Edits are parsed again from a checkpoint or a segment
  // start a few lines above the first changed line, to where the scan state
  // matches the old one again (or the end of the message). Returns false when
  // `since` is too old to tell (then the whole document).
  bool reparsed(uint64_t since, int32_t& line, int32_t& end) const;

  // The same lines as disjoint ranges of 0-based lines [first, end), in order:
  // one per place edited since version `since` (what each edit replaced and
  // parsed again, moved by the edits after it), at most `cap` of them (the
  // closest ones merged, with the lines between). Edits far apart give ranges
  // far apart, not one range over everything between them. Nothing when
  // nothing changed; returns false when `since` is too old to tell (then one
  // range, the whole document).
  struct LineRange {
    int32_t first, end;
  };
  bool touched(uint64_t since, size_t cap, std::vector<LineRange>& out) const;

  // Every diagnostic of the document as parse would report it (absolute
  // lines, messages in diag_arena()); valid until the next edit.
  const std::vector<flemma_doc_diag>& diagnostics();
  const std::string& diag_arena() const { return diag_arena_; }

  // The last tool use with this id: its segment and item index.
  bool find_tool_use(std::string_view id, size_t& seg, size_t& item) const;

  // Checkpoints every this many lines (kCheckpointEvery by default; tests use
  // small values to resume often). Applies to segments parsed from now on.
  void set_checkpoint_every(int32_t n) { cp_every_ = n > 0 ? n : 1; }

  // How the edits were applied (for tests and benchmarks): edits resumed
  // inside one segment, edits that re-parsed whole segments, and the lines
  // the last edit parsed (from its resume point to where it stopped).
  struct Stats {
    uint64_t within = 0;
    uint64_t whole = 0;
    int64_t last_parsed_lines = 0;
  };
  const Stats& stats() const { return stats_; }

  // The whole text, lines joined with "\n" (for tests and the fuzzer).
  std::string text() const;

  // Compares the document with a fresh parse of text(): "" when every item
  // and diagnostic is the same, else the first difference (for tests and the
  // fuzzer).
  std::string check();

 private:
  struct Change {
    uint64_t version;
    size_t at, removed, added;
    int32_t line, end;           // the lines parsed again [line, end) (0-based, after this edit)
    int32_t first, last, count;  // the edit: lines [first, last) replaced by count lines
  };

  std::vector<std::unique_ptr<Segment>> segs_;
  std::vector<int32_t> starts_;
  int32_t nlines_ = 0;
  uint64_t version_ = 0;
  uint64_t next_id_ = 1;
  size_t open_fences_ = 0;  // unclosed fences over all segments
  std::vector<Change> log_;
  // Tool use and result ids -> the segments holding them, once per item; and the ids
  // that give a diagnostic (used twice, two results, a result without a use), so
  // that diagnostics() reads only those instead of every item of the document.
  struct IdRefs {
    std::vector<const Segment*> uses, results;
  };
  std::unordered_map<std::string, IdRefs> ids_;
  std::unordered_set<std::string> id_problems_;
  std::vector<flemma_doc_diag> diags_;
  std::string diag_arena_;
  uint64_t diags_version_ = UINT64_MAX;
  Stats stats_;
  int32_t cp_every_ = kCheckpointEvery;

  std::vector<std::unique_ptr<Segment>> split(const std::string& text,
                                              const std::vector<size_t>& line_offs, Document&& doc);
  bool edit_within(int32_t first, int32_t last, const std::vector<std::string_view>& lines);
  // The steps of edit_within (idoc.cpp), on the edit's plan and new parse.
  struct WithinEdit;
  bool within_plan(int32_t first, int32_t last, WithinEdit& w) const;
  static void within_splice(WithinEdit& w);
  static void within_unsplice(WithinEdit& w);
  bool within_reparse(WithinEdit& w);
  void within_resume(WithinEdit& w) const;
  static bool within_find_cut(WithinEdit& w);
  bool within_cut(WithinEdit& w);
  static bool within_keep_tail(WithinEdit& w);
  static bool within_keep_run(WithinEdit& w, size_t& ti);
  static void within_keep_items(WithinEdit& w, size_t ti);
  static void within_keep_checkpoints(WithinEdit& w);
  static void within_finish(WithinEdit& w);
  void within_commit(WithinEdit& w, int32_t first, int32_t last);
  void within_commit_segment(WithinEdit& w);
  // The steps of an edit that parses whole segments again (edit, when
  // edit_within cannot).
  struct Region;
  void region_bounds(int32_t first, int32_t last, const std::vector<std::string_view>& lines,
                     Region& g) const;
  void region_parse(int32_t first, int32_t last, const std::vector<std::string_view>& lines,
                    Region& g) const;
  void region_commit(int32_t first, int32_t last, const std::vector<std::string_view>& lines,
                     Region& g);
  size_t first_closed_above(size_t a, const int32_t (&close)[2]) const;
  bool closed_below(size_t a, const std::vector<Unclosed>& unclosed) const;
  void log_change(const Change& c);
  using IdKeys = std::vector<std::pair<int, std::string>>;  // item kind, id
  static IdKeys id_keys(const Segment& s);
  void index_id(const Segment& s, int kind, const std::string& key, bool add);
  void index_ids(const Segment& s, bool add);
  void unindex_ids(const Segment& s, const IdKeys& keys);
};

}  // namespace flemma::document
