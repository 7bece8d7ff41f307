#include "gpu/stream_watch.hpp"

#include "zeroed_memory.hpp"

namespace ferrum_replay::shim::gpu {

constinit std::atomic<StreamSlot *> g_stream_slots{nullptr};
constinit __attribute__((tls_model("initial-exec"))) thread_local StreamWindow t_window;

namespace {
constexpr size_t kTableBytes = sizeof(StreamSlot) << kStreamSlotBits;
constexpr uint64_t kOneWindow = 1;                  // the low half: windows open now
constexpr uint64_t kOneOpened = uint64_t{1} << 32;  // the high half: windows opened, mod 2^32
}  // namespace

bool prepare_stream_slots() {
  if (g_stream_slots.load(std::memory_order_acquire)) return true;
  // Untouched pages cost nothing: a program with a few streams touches a few of them.
  void *memory = common::map_zeroed(kTableBytes);
  if (!memory) return false;
  StreamSlot *expected = nullptr;
  if (!g_stream_slots.compare_exchange_strong(expected, static_cast<StreamSlot *>(memory),
                                              std::memory_order_acq_rel))
    common::unmap_zeroed(memory, kTableBytes);  // another thread's first launch mapped it just now
  return true;
}

void reset_stream_slots_in_child() {
  t_window = StreamWindow();
  // The parent's threads' windows and owners mean nothing here: the pages go back to zero.
  if (StreamSlot *table = g_stream_slots.load(std::memory_order_relaxed))
    madvise(table, kTableBytes, MADV_DONTNEED);
}

StreamSlot &find_slot(StreamSlot *table, uintptr_t key, uint32_t home) {
  constexpr uint32_t kMask = (1u << kStreamSlotBits) - 1;
  for (uint32_t probe = 0; probe < kStreamProbes; ++probe) {
    StreamSlot &slot = table[(home + probe) & kMask];
    uintptr_t seen = slot.key.load(std::memory_order_acquire);
    if (seen == 0 && slot.key.compare_exchange_strong(seen, key, std::memory_order_acq_rel))
      return slot;
    if (seen == key) return slot;  // its own, or another thread claimed it for this key first
  }
  // Every slot it may take is another stream's: watched together with the first, as one stream
  // (what meets there is not timed; nothing wrong is delivered).
  return table[home];
}

void open_window_shared(StreamWindow &window, StreamSlot &slot, uintptr_t owner) {
  const uintptr_t me = this_thread_tag();
  if (owner == 0) {  // the slot's first launch: this thread owns it, unless another was quicker
    if (slot.owner.compare_exchange_strong(owner, me, std::memory_order_acq_rel)) {
      const uint64_t before = slot.owner_windows.load(std::memory_order_relaxed);
      window.open = reinterpret_cast<uintptr_t>(&slot) | StreamWindow::kAsOwner |
                    ((before & 1) ? StreamWindow::kMet : 0);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      slot.owner_windows.store((before + 1) | 1, std::memory_order_relaxed);
      return;
    }  // else `owner` is now the quicker thread's tag, or kSharedSlot
  }
  // Another thread's slot: shared from now on. A failed exchange means another thread turned it
  // shared first (owners change only from 0, and to kSharedSlot).
  if (owner != kSharedSlot)
    slot.owner.compare_exchange_strong(owner, kSharedSlot, std::memory_order_acq_rel);
  window.shared = slot.shared.fetch_add(kOneOpened + kOneWindow, std::memory_order_acq_rel);
  // The former owner's window may be open still (it opened it before the slot changed hands).
  window.seen = slot.owner_windows.load(std::memory_order_acquire);
  const bool met = (window.shared & 0xffffffffu) != 0 || (window.seen & 1);
  window.open = reinterpret_cast<uintptr_t>(&slot) | (met ? StreamWindow::kMet : 0);
}

bool close_window_shared(StreamWindow &window, StreamSlot &slot, bool met) {
  const uint64_t after = slot.shared.fetch_sub(kOneWindow, std::memory_order_acq_rel);
  const uint64_t seen = slot.owner_windows.load(std::memory_order_acquire);
  // Alone: none open when it opened, none opened since (the count of opened windows moved by
  // this one only), and the former owner's counter where it was.
  const uint32_t opened_then = static_cast<uint32_t>(window.shared >> 32);
  const uint32_t opened_now = static_cast<uint32_t>(after >> 32);
  return !met && opened_now == opened_then + 1u && seen == window.seen;
}

}  // namespace ferrum_replay::shim::gpu
