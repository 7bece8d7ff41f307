#include "name_pages.hpp"

#include <sys/mman.h>

#include <algorithm>

namespace ferrum_replay::recorder {

void NamePages::locate(uintptr_t at) {
  const auto begin_of = [](const NameSpan &block) {
    return reinterpret_cast<uintptr_t>(block.data);
  };
  // The first block that starts after `at`; the one before it holds `at` if any does.
  const auto after =
      std::upper_bound(blocks_.begin(), blocks_.end(), at,
                       [&](uintptr_t p, const NameSpan &block) { return p < begin_of(block); });
  if (after != blocks_.begin() && at < begin_of(*(after - 1)) + (after - 1)->size) {
    const NameSpan &block = *(after - 1);
    const size_t index = static_cast<size_t>(after - 1 - blocks_.begin());
    if (is_touched_.empty()) is_touched_.resize(blocks_.size());
    if (is_touched_[index]) {  // the one touched last now: moved to the back
      touched_.erase(std::find(touched_.begin(), touched_.end(), index));
    } else {
      while (!touched_.empty() && touched_bytes_ + block.size > kMaxTouchedBytes) {
        hand_back(touched_.front());
        touched_.erase(touched_.begin());
      }
      is_touched_[index] = true;
      touched_bytes_ += block.size;
    }
    touched_.push_back(index);
    near_begin_ = begin_of(block);
    near_end_ = begin_of(block) + block.size;
    return;
  }
  // In memory, between blocks: the gap is remembered, so that names in memory (a thread within
  // the budget, the GPU tracks') cost no search either.
  near_begin_ = after == blocks_.begin() ? 0 : begin_of(*(after - 1)) + (after - 1)->size;
  near_end_ = after == blocks_.end() ? UINTPTR_MAX : begin_of(*after);
}

void NamePages::hand_back(size_t index) {
  const NameSpan &block = blocks_[index];
  ::madvise(const_cast<char *>(block.data), block.size, MADV_DONTNEED);
  is_touched_[index] = false;
  touched_bytes_ -= block.size;
  ++handed_back_;
  // The near range may be this block: a name there is noted again.
  if (reinterpret_cast<uintptr_t>(block.data) == near_begin_) near_begin_ = near_end_ = 0;
}

void NamePages::release() {
  for (const size_t index : touched_) hand_back(index);
  touched_.clear();
}

}  // namespace ferrum_replay::recorder
