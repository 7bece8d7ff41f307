#include "range_tracks.hpp"

namespace ferrum_replay::recorder {

bool RangeTracks::Track::fits(uint64_t start, uint64_t end) {
  // The readers' rule (a range that ends where the next starts has ended: back to back, not
  // overlapping), so that what the writer places the judges accept.
  while (!open_ends.empty() && open_ends.back() <= start) open_ends.pop_back();
  return open_ends.empty() || end <= open_ends.back();
}

RangeTracks::Placement RangeTracks::place(uint32_t domain_id, uint64_t start, uint64_t end) {
  uint32_t current = 0;
  for (const auto &[domain, track] : moved_)
    if (domain == domain_id) current = track;
  Placement placement{current, false};
  if (!tracks_[current].fits(start, end)) {
    // The domain's other tracks first (its own ranges that did not nest), then a new one.
    uint32_t found = UINT32_MAX;
    for (uint32_t t = 1; t < tracks_.size() && found == UINT32_MAX; ++t)
      if (t != current && tracks_[t].domain_id == domain_id && tracks_[t].fits(start, end))
        found = t;
    if (found == UINT32_MAX && tracks_.size() < kMaxRangeTracks) {
      found = static_cast<uint32_t>(tracks_.size());
      tracks_.push_back(Track{domain_id, {}});
      placement.is_new = true;
    }
    if (found != UINT32_MAX) {
      placement.track = found;
      bool known = false;
      for (auto &[domain, track] : moved_)
        if (domain == domain_id) track = found, known = true;
      if (!known) moved_.emplace_back(domain_id, found);
    }
  }
  tracks_[placement.track].open_ends.push_back(end);
  return placement;
}

}  // namespace ferrum_replay::recorder
