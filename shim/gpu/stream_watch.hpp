// Whether another thread's launch met a timed replay on its stream (F79).
//
// A timed replay is three enqueues on its stream: its start event, the launch, its end event.
// CUDA lets several threads use one stream, and the driver may take another thread's launch
// between two of them: the stream then runs `start A, start B, graph A, graph B, end A, end B`,
// and A's time holds B's replay (and B's A's). The three cannot be made one enqueue without a
// lock held across the real launch, which may block on a full launch queue. What the shim can
// know is whether another graph launch through it used the same stream while this one was
// between its first and last enqueue — its "window". Such a replay is not timed ("stream
// shared"); every launch on a watched stream opens a window, timed or not (sampled out, pool
// exhausted), since its graph lands on the stream all the same.
//
// Each stream (its handle; the legacy default stream by its context) has a slot of a fixed
// table: the first free one of kStreamProbes from its hash, claimed for its key for good. The
// per-thread default stream needs none: no other thread can enqueue on it. A slot belongs first to
// the one thread that launches there: the owner's windows take no locked instruction (a load of the
// owner, and a counter only the owner writes, odd while its window is open). The first launch of
// another thread turns the slot shared for good: from then on each window counts itself in and out
// of the slot's word (two locked instructions) and also reads the former owner's counter, in case
// that thread's window was open as the slot changed hands.
//
// Why that is enough: the driver gives two threads' calls on one stream an order, so it
// synchronises them. If B enqueues inside A's window, whatever B wrote before its first enqueue
// (the slot turned shared, its count) is visible to A after A's last enqueue; if A's window
// opened or closed inside B's, B sees A's counter or count changed.
//
// What it does not see: work enqueued on the stream other than through a graph launch the shim
// intercepts (kernels, copies, a launch made inside another intercepted call), and the implicit
// waits between the legacy stream and the context's blocking streams (the per-thread default
// stream is one). What it may see too much of: a window left open by a jump out of a launch
// until its thread's next graph call closes it (docs/gpu-time.md); and where every slot a
// stream may take is another's (over 4,096 streams seen, handles are not given back), two
// streams watched as one.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include <atomic>

namespace ferrum_replay::shim::gpu {

inline constexpr uint32_t kStreamSlotBits = 12;  // 4,096 slots, 64 bytes each, mapped on demand
inline constexpr uint32_t kStreamProbes = 8;     // slots a stream may take, from its hash on
inline constexpr uintptr_t kSharedSlot = 1;      // StreamSlot::owner once two threads used it

struct alignas(64) StreamSlot {
  std::atomic<uintptr_t> key{0};           // 0: free; the stream's key (stream_key) for good
  std::atomic<uintptr_t> owner{0};         // 0: unused; a thread's tag; kSharedSlot
  std::atomic<uint64_t> owner_windows{0};  // written by the owner only: odd while one is open
  std::atomic<uint64_t> shared{0};         // once shared: windows opened << 32 | windows open now
};

// This thread's open window: one at most (a launch inside a launch is not intercepted). The
// owner's is one word (a store to open, a load and a store to close), written before the slot's
// counter when a window opens and after it when it closes, so that a jump out of the launch at any
// point leaves give_back_abandoned a window to close (a shared one can still be left counted by a
// signal landing between the slot's count and this word: a few instructions).
struct StreamWindow {
  static constexpr uintptr_t kAsOwner = 1;  // opened by the slot's owner
  static constexpr uintptr_t kMet = 2;      // another window was open when this one opened
  uintptr_t open = 0;                       // the slot's address | the bits above; 0: none open
  uint64_t seen = 0;    // shared: the former owner's counter, as read when it opened
  uint64_t shared = 0;  // shared: the slot's word before this window counted itself in
};

extern constinit std::atomic<StreamSlot *> g_stream_slots;
extern constinit __attribute__((tls_model("initial-exec"))) thread_local StreamWindow t_window;

// Maps the table (once per process; off the launch path). False without it (no memory): no
// window is opened, and replays are timed as if each stream had one thread.
bool prepare_stream_slots();
// After fork, in the child (its only thread): every slot and this thread's window forgotten.
void reset_stream_slots_in_child();

// The slot key of the stream a launch enqueues on; 0 for the per-thread default stream (NULL
// given to a _ptsz launch, or CU_STREAM_PER_THREAD), which is watched by nobody. `context` is
// needed only for the legacy default stream (NULL, CU_STREAM_LEGACY).
inline bool own_default_stream(CUstream stream, bool per_thread) {
  return (per_thread && stream == nullptr) || stream == CU_STREAM_PER_THREAD;
}
inline bool legacy_default_stream(CUstream stream, bool per_thread) {
  return (!per_thread && stream == nullptr) || stream == CU_STREAM_LEGACY;
}
inline uintptr_t stream_key(CUstream stream, bool per_thread, CUcontext context) {
  const uintptr_t handle = reinterpret_cast<uintptr_t>(stream);
  // Above CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2): a stream the program made.
  if (__builtin_expect(handle > 2, 1)) return handle;
  if (own_default_stream(stream, per_thread)) return 0;
  // A context's address + 1 is odd: never a stream handle (both are aligned objects).
  return reinterpret_cast<uintptr_t>(context) + 1;
}

void open_window_shared(StreamWindow &window, StreamSlot &slot, uintptr_t owner);
bool close_window_shared(StreamWindow &window, StreamSlot &slot, bool met);
// The slot of `key` beyond its first probe (claimed there if free).
StreamSlot &find_slot(StreamSlot *table, uintptr_t key, uint32_t home);

// The thread pointer (%fs base, TPIDR_EL0): one instruction, unique among the live threads.
inline uintptr_t this_thread_tag() {
  return reinterpret_cast<uintptr_t>(__builtin_thread_pointer());
}

// Before the launch's first enqueue on the stream of `key` (0: nothing to watch).
inline void open_window(uintptr_t key) {
  StreamSlot *table = g_stream_slots.load(std::memory_order_acquire);
  if (!table || key == 0) return;
  const uint32_t home =
      static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - kStreamSlotBits));
  StreamSlot *slot = &table[home];
  if (__builtin_expect(slot->key.load(std::memory_order_acquire) != key, 0))
    slot = &find_slot(table, key, home);
  const uintptr_t owner = slot->owner.load(std::memory_order_relaxed);
  if (__builtin_expect(owner == this_thread_tag(), 1)) {
    const uint64_t before = slot->owner_windows.load(std::memory_order_relaxed);
    // Odd before: a window of this thread's never closed (none is left so: safe all the same).
    t_window.open = reinterpret_cast<uintptr_t>(slot) | StreamWindow::kAsOwner |
                    ((before & 1) ? StreamWindow::kMet : 0);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // recorded before the counter moves
    // Relaxed: the driver's own synchronisation of the stream's enqueues orders it (above).
    slot->owner_windows.store((before + 1) | 1, std::memory_order_relaxed);
    return;
  }
  open_window_shared(t_window, *slot, owner);
}

// After the launch's last enqueue (or where it ends otherwise). True when no other launch met
// this one on its stream, or nothing was watched; false: its time may hold another's work.
inline bool close_window() {
  const uintptr_t open = t_window.open;
  if (!open) return true;
  StreamSlot *slot = reinterpret_cast<StreamSlot *>(open & ~uintptr_t{63});
  const bool met = open & StreamWindow::kMet;
  if (__builtin_expect(open & StreamWindow::kAsOwner, 1)) {
    // Only the owner writes its counter: even again (twice, after a jump: still even).
    const uint64_t now = slot->owner_windows.load(std::memory_order_relaxed);
    slot->owner_windows.store((now | 1) + 1, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_window.open = 0;
    // Another thread that enqueued inside this window turned the slot shared before it did.
    return !met && slot->owner.load(std::memory_order_relaxed) == this_thread_tag();
  }
  t_window.open = 0;
  return close_window_shared(t_window, *slot, met);
}

// True while this thread has a window open (a launch not timed still closes it).
inline bool window_open() {
  return t_window.open != 0;
}

}  // namespace ferrum_replay::shim::gpu
