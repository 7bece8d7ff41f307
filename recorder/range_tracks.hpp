// Which track of its thread each push/pop range is drawn on in the trace.
//
// NVTX keeps one push/pop stack per (thread, domain): push(app) push(io) pop(app) pop(io) is
// correct use, and Nsight Systems draws each domain on a row of its own. A Chrome trace track is
// one stack of slices instead: Perfetto drops a complete event that partly overlaps the one it
// starts inside (slice_drop_overlapping_complete_event), and the judges fail such a trace. So a
// thread's ranges share the thread's own track while they nest — the usual case, the shim's
// replay ranges inside the program's ranges of other domains, which a reader wants to see on
// one track — and a domain whose range would partly overlap a range still open on its track
// moves, from that range on, to a track of its own for the rest of the thread (the writer names
// it "THREAD · DOMAIN"). Decided in one pass over the thread's ranges in trace order, so the
// trace is still streamed; every track then holds ranges in start order that nest.
//
// One domain's own ranges nest (one NVTX stack), so a moved domain normally needs one track.
// Where they do not (a launch range the shim closed late, after a jump out of the launch), the
// domain looks for a fitting track among its own and else takes a new one, at most
// kMaxRangeTracks per thread; past that a range stays where it overlaps, and the judges say so.
#pragma once

#include <cstdint>
#include <vector>

namespace ferrum_replay::recorder {

inline constexpr uint32_t kMaxRangeTracks = 64;  // per thread, its own track included
// The trace's tid of moved tracks, numbered in the order they open: above every Linux thread id
// (at most 2^22, PID_MAX_LIMIT) and below the GPU tracks' (gpu_tracks.hpp, kGpuTrackTidBase).
inline constexpr uint32_t kMovedTrackTidBase = 0x20000000u;

class RangeTracks {
 public:
  struct Placement {
    uint32_t track;  // 0: the thread's own track; n > 0: its n-th moved track
    bool is_new;     // this range opens the track (the writer names it first)
  };
  // The next range of the thread in trace order (start ascending, enclosing ranges first), its
  // times in the units the trace writes (ns from the trace's origin).
  Placement place(uint32_t domain_id, uint64_t start, uint64_t end);

  uint32_t track_count() const { return static_cast<uint32_t>(tracks_.size()); }
  // The domain whose ranges track n > 0 holds.
  uint32_t domain_of(uint32_t track) const { return tracks_[track].domain_id; }

 private:
  struct Track {
    uint32_t domain_id = 0;           // moved tracks only
    std::vector<uint64_t> open_ends;  // ends of the ranges open at the last start, innermost last
    bool fits(uint64_t start, uint64_t end);  // pops what ended by `start`
  };
  // Track 0 is the thread's own; a moved domain's latest track is in moved_ (domain, track).
  std::vector<Track> tracks_ = std::vector<Track>(1);
  std::vector<std::pair<uint32_t, uint32_t>> moved_;
};

}  // namespace ferrum_replay::recorder
