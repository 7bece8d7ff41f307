// Pages of range names kept on disk that the exit report reads go back to their files as it
// moves on.
//
// Beyond FERRUM_RECORD_MEMORY a thread's copied names go to spill blocks (NameBlock,
// thread_buffer.hpp: unnamed files mapped shared), whose pages go back to their file once a block
// is full. The exit report reads names again — the summary table to group the ranges, the trace
// to write them — and each page it read stayed mapped: 96 MB resident at exit for 8,000,000
// distinct names, growing with the run (review NT-7). A pass notes each name whose bytes it is
// about to read (read()). The blocks it touched stay mapped up to kMaxTouchedBytes of them; past
// that, the one touched least recently goes back to its file. So a report holds at most that
// much of them (or one name's block, where a name is larger), and names read over and over from a
// few blocks — a loop's names picked out of order — stay mapped: handing every block back at once
// whenever a fifth was touched made such an exit 2.5 times as long, a page fault per name (review
// RV-1).
//
// Only the blocks listed are ever handed back (SpillFile::name_blocks): mapped shared, so their
// data stays in the file and a later read faults it in again. They stay mapped as long as the
// recorder lives, which a report does not outlive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "spill_file.hpp"

namespace ferrum_replay::recorder {

class NamePages {
 public:
  // `blocks` sorted by address (SpillFile::name_blocks); may be empty (nothing is then done).
  explicit NamePages(const std::vector<NameSpan> &blocks) : blocks_(blocks) {}
  ~NamePages() { release(); }
  NamePages(const NamePages &) = delete;
  NamePages &operator=(const NamePages &) = delete;

  // `name`'s bytes are about to be read. Names come in runs from one block (or from memory):
  // the common case is two comparisons.
  void read(const char *name) {
    const auto at = reinterpret_cast<uintptr_t>(name);
    if (at >= near_begin_ && at < near_end_) return;
    locate(at);
  }
  // Hands every block still touched back to its file.
  void release();

  // Bytes of the blocks touched and not handed back yet, and how many times a block was handed
  // back (tests).
  size_t touched_bytes() const { return touched_bytes_; }
  size_t handed_back() const { return handed_back_; }

  static constexpr size_t kMaxTouchedBytes = size_t{8} << 20;

 private:
  // Finds `name`'s block (or the gap between blocks it lies in) and makes it the near range; a
  // block becomes the one touched last, and those touched least recently go back while the
  // touched ones exceed kMaxTouchedBytes.
  void locate(uintptr_t at);
  void hand_back(size_t index);

  const std::vector<NameSpan> &blocks_;
  std::vector<size_t> touched_;  // indices into blocks_, the one touched least recently first
  std::vector<bool> is_touched_;
  size_t touched_bytes_ = 0;
  size_t handed_back_ = 0;
  // The block, or gap between blocks, the last name lay in: a name within it needs no search.
  uintptr_t near_begin_ = 0;
  uintptr_t near_end_ = 0;
};

}  // namespace ferrum_replay::recorder
