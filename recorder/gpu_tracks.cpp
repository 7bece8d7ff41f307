#include "gpu_tracks.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <new>

#include "fork_window.hpp"
#include "held_here.hpp"
#include "snapshot.hpp"

namespace ferrum_replay::recorder {

GpuTracks::~GpuTracks() {
  for (const Track &t : tracks_) delete t.buffer;
  for (ThreadBuffer *b : orphans_) delete b;
}

ThreadBuffer *GpuTracks::track_for(const ferrum_replay_gpu_replay &r) {
  const int32_t device = r.device;
  uint64_t stream = r.stream;
  // The legacy (0) and per-thread (2) default streams are one per context, and 2 one per thread
  // too: replays of two such streams run at once, and on one track they would overlap (viewers
  // drop overlapping blocks). A shim that does not say which (an older struct) gets one track.
  const bool by_owner = (stream == 0 || stream == 2) &&
                        r.size >= offsetof(ferrum_replay_gpu_replay, thread) + sizeof r.thread;
  uint64_t context = by_owner ? r.context : 0;
  uint32_t thread = by_owner && stream == 2 ? r.thread : 0;
  // Contexts are numbered as first seen (1, 2...); past kMaxContextTracks, later ones share.
  size_t number = 1;
  if (by_owner) {
    const auto known = std::find(contexts_.begin(), contexts_.end(), context);
    if (known != contexts_.end()) {
      number = static_cast<size_t>(known - contexts_.begin()) + 1;
    } else if (contexts_.size() < kMaxContextTracks) {
      contexts_.push_back(context);
      number = contexts_.size();
    } else {
      context = kLaterContexts;
      number = SIZE_MAX;
      if (thread) thread = kLaterThreads;
    }
  }
  const auto find = [&]() -> ThreadBuffer * {
    // Few streams per process: a linear search, most recent first (consecutive replays mostly
    // share a stream).
    for (size_t i = tracks_.size(); i-- > 0;) {
      const Track &t = tracks_[i];
      if (t.device == device && t.stream == stream && t.context == context && t.thread == thread)
        return t.buffer;
    }
    return nullptr;
  };
  if (ThreadBuffer *found = find()) return found;
  if (thread && per_thread_tracks_ >= kMaxPerThreadTracks) {
    thread = kLaterThreads;
    if (ThreadBuffer *found = find()) return found;
  }
  if (tracks_.size() >= kMaxGpuTracks) {
    // Past the budget: the device's one track of later streams (beyond kMaxGpuTracks by at most
    // one per device). Its blocks may overlap (viewers draw them as they can); each is counted.
    stream = kLaterStreams;
    context = 0;
    thread = 0;
    number = 1;
    if (ThreadBuffer *found = find()) return found;
  }
  const uint32_t tid = kGpuTrackTidBase + static_cast<uint32_t>(tracks_.size());
  auto *buffer =
      new ThreadBuffer(tid, gpu_track_name(device, stream, number, thread), spill_, budget_);
  tracks_.push_back(Track{device, stream, context, thread, buffer});
  if (thread && thread != kLaterThreads) ++per_thread_tracks_;
  return buffer;
}

void GpuTracks::add(const ferrum_replay_gpu_replay *replays, size_t count) noexcept {
  if (!replays) return;
  // A flush asked by a fork handler (or a signal handler) inside our fork window, where this
  // thread holds mu_ for the fork (fork_window.hpp): waiting would never end (review T). The
  // replays are not stored, and counted with those no memory could hold.
  if (cannot_wait_for_our_locks()) {
    refused_.fetch_add(count, std::memory_order_relaxed);
    return;
  }
  const common::HeldHere lock(mu_);  // held_here.hpp: a flush's sink, and the exit report
  // The replays are `size` bytes apart, which is less than our sizeof when the shim's struct is
  // older than ours (ferrum_replay.h): each is copied into a full one, the fields it lacks 0.
  // The fields up to `end_ns` are the ones needed.
  const size_t stride = count ? replays[0].size : 0;
  if (stride < offsetof(ferrum_replay_gpu_replay, end_ns) + sizeof replays[0].end_ns) return;
  const char *bytes = reinterpret_cast<const char *>(replays);
  size_t i = 0;
  try {
    for (; i < count; ++i) {
      ferrum_replay_gpu_replay r{};
      memcpy(&r, bytes + i * stride, stride < sizeof r ? stride : sizeof r);
      ThreadBuffer *track = track_for(r);
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
  snap->memory_drops += memory_drops_ + refused_.load(std::memory_order_relaxed);
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
  contexts_.clear();
  per_thread_tracks_ = 0;
  dropped_ = 0;
  memory_drops_ = 0;
  // The parent's too: a child's trace counted them as its own drops and failed `check` (QQ-3).
  refused_.store(0, std::memory_order_relaxed);
  mu_.unlock();
}

std::string gpu_track_name(int32_t device, uint64_t stream, size_t context_number,
                           uint32_t thread) {
  char buf[128];
  const std::string gpu = device >= 0 ? "GPU " + std::to_string(device) : std::string("GPU ?");
  char owner[64] = "";
  if (context_number == SIZE_MAX)  // every later context's, whichever thread
    std::snprintf(owner, sizeof owner, " of contexts beyond the first %zu", kMaxContextTracks);
  else if (thread == kLaterThreads)
    std::snprintf(owner, sizeof owner, " of threads beyond the first %zu", kMaxPerThreadTracks);
  else if (thread)
    std::snprintf(owner, sizeof owner, " of thread %" PRIu32, thread);
  const size_t used = std::strlen(owner);
  if (context_number > 1 && context_number != SIZE_MAX)
    std::snprintf(owner + used, sizeof owner - used, ", context %zu", context_number);
  if (stream == kLaterStreams)
    std::snprintf(buf, sizeof buf, "%s \xC2\xB7 streams beyond the first %zu", gpu.c_str(),
                  kMaxGpuTracks);
  else if (stream == 0)
    std::snprintf(buf, sizeof buf, "%s \xC2\xB7 stream 0 (legacy default%s)", gpu.c_str(), owner);
  else if (stream == 2)
    std::snprintf(buf, sizeof buf, "%s \xC2\xB7 stream 0x2 (per-thread default%s)", gpu.c_str(),
                  owner);
  else
    std::snprintf(buf, sizeof buf, "%s \xC2\xB7 stream 0x%" PRIx64, gpu.c_str(), stream);
  return buf;
}

}  // namespace ferrum_replay::recorder
