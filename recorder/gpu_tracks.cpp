#include "gpu_tracks.hpp"

#include <cinttypes>
#include <cstdio>
#include <new>

#include "held_here.hpp"
#include "snapshot.hpp"

namespace ferrum_replay::recorder {

GpuTracks::~GpuTracks() {
  for (const Track &t : tracks_) delete t.buffer;
  for (ThreadBuffer *b : orphans_) delete b;
}

ThreadBuffer *GpuTracks::track_for(int32_t device, uint64_t stream) {
  // Few streams per process: a linear search, most recent first (consecutive replays mostly
  // share a stream).
  for (size_t i = tracks_.size(); i-- > 0;)
    if (tracks_[i].device == device && tracks_[i].stream == stream) return tracks_[i].buffer;
  if (tracks_.size() >= kMaxGpuTracks) return nullptr;
  const uint32_t tid = kGpuTrackTidBase + static_cast<uint32_t>(tracks_.size());
  auto *buffer = new ThreadBuffer(tid, gpu_track_name(device, stream), spill_, budget_);
  tracks_.push_back(Track{device, stream, buffer});
  return buffer;
}

void GpuTracks::add(const ferrum_replay_gpu_replay *replays, size_t count) noexcept {
  if (!replays) return;
  const common::HeldHere lock(mu_);  // held_here.hpp: a flush's sink, and the exit report
  size_t i = 0;
  try {
    for (; i < count; ++i) {
      const ferrum_replay_gpu_replay &r = replays[i];
      // A shim built against a shorter struct: the fields up to `end_ns` are the ones needed.
      if (r.size < offsetof(ferrum_replay_gpu_replay, end_ns) + sizeof r.end_ns) continue;
      ThreadBuffer *track = track_for(r.device, r.stream);
      if (!track) {
        ++dropped_;
        continue;
      }
      Event e{};
      e.start = r.start_ns;
      e.end = r.end_ns >= r.start_ns ? r.end_ns : r.start_ns;
      e.attrs.name = track->intern(r.name ? std::string_view(r.name) : std::string_view());
      e.attrs.category = r.category;
      e.attrs.payload = Payload(uint64_t{r.replay});
      track->append(e);
    }
  } catch (...) {
    // Out of memory (a new stream's track): this replay and the rest of the batch are not
    // stored, and counted as such (Snapshot::memory_drops).
    memory_drops_ += count - i;
  }
}

void GpuTracks::sink(const ferrum_replay_gpu_replay *replays, size_t count, void *context) {
  if (context) static_cast<GpuTracks *>(context)->add(replays, count);
}

uint64_t GpuTracks::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

void GpuTracks::collect(Snapshot *snap) const {
  const common::HeldHere lock(mu_);
  for (const Track &t : tracks_) {
    ThreadSnapshot ts;
    ts.tid = t.buffer->tid();
    ts.name = t.buffer->initial_name();
    ts.ns_times = true;
    ts.device = t.device;
    ts.stream = t.stream;
    t.buffer->collect(&ts.events, &ts.runs);
    sort_events(ts.events);
    if (!ts.runs.empty()) snap->spill = spill_;
    snap->gpu_tracks.push_back(std::move(ts));
    snap->memory_drops += t.buffer->memory_drops();  // replays no chunk could hold
  }
  snap->gpu.dropped = dropped_;
  snap->memory_drops += memory_drops_;
}

bool GpuTracks::before_fork() {
  if (!common::lock_for_fork(mu_)) return false;  // held_here.hpp
  if (common::inside_our_lock()) return true;     // in a signal handler: the child keeps its copy
  try {
    orphans_.reserve(orphans_.size() + tracks_.size());
  } catch (const std::bad_alloc &) {
  }
  return true;
}

void GpuTracks::after_fork_in_child() {
  for (const Track &t : tracks_)
    if (orphans_.size() < orphans_.capacity()) orphans_.push_back(t.buffer);
  tracks_.clear();
  dropped_ = 0;
  memory_drops_ = 0;
  mu_.unlock();
}

std::string gpu_track_name(int32_t device, uint64_t stream) {
  char buf[96];
  const std::string gpu = device >= 0 ? "GPU " + std::to_string(device) : std::string("GPU ?");
  if (stream == 0)
    std::snprintf(buf, sizeof buf, "%s \xC2\xB7 stream 0 (legacy default)", gpu.c_str());
  else if (stream == 2)
    std::snprintf(buf, sizeof buf, "%s \xC2\xB7 stream 0x2 (per-thread default)", gpu.c_str());
  else
    std::snprintf(buf, sizeof buf, "%s \xC2\xB7 stream 0x%" PRIx64, gpu.c_str(), stream);
  return buf;
}

}  // namespace ferrum_replay::recorder
