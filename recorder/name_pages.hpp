// Pages of range names kept on disk that the exit report reads go back to their files as it
// moves on.
//
// Beyond FERRUM_RECORD_MEMORY a thread's copied names go to spill blocks (NameBlock,
// thread_buffer.hpp: unnamed files mapped shared), whose pages go back to their file once a block
// is full. The exit report reads every event's name again — the summary table to group the
// ranges, the trace to write them — and each page it read stayed mapped: 96 MB resident at exit
// for 8,000,000 distinct names, growing with the run (review NT-7). A pass over the events notes
// each name it is about to read (read()); the blocks it touched go back to their files
// kMaxTouched at a time, so what the report holds of them stays within that many blocks (1 MiB
// each at most, or one name's size where a name is larger).
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

  // `name` is about to be read. Names come in runs from one block (or from memory): the common
  // case is two comparisons.
  void read(const char *name) {
    const auto at = reinterpret_cast<uintptr_t>(name);
    if (at >= near_begin_ && at < near_end_) return;
    locate(at);
  }
  // Hands every block touched since the last call back to its file.
  void release();

  // Blocks touched and not yet handed back (tests).
  size_t touched() const { return touched_.size(); }

  static constexpr size_t kMaxTouched = 4;

 private:
  // Finds `name`'s block (or the gap between blocks it lies in), notes the block as touched and
  // makes it the near range; hands the touched blocks back first when kMaxTouched are.
  void locate(uintptr_t at);

  const std::vector<NameSpan> &blocks_;
  std::vector<size_t> touched_;  // indices into blocks_
  std::vector<bool> is_touched_;
  // The block, or gap between blocks, the last name lay in: a name within it needs no search.
  uintptr_t near_begin_ = 0;
  uintptr_t near_end_ = 0;
};

}  // namespace ferrum_replay::recorder
