#include "chunk_stock.hpp"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/mman.h>

#include <atomic>

#include "background_thread.hpp"

namespace ferrum_replay::recorder {

namespace {

enum State : int { kNotStarted, kStarting, kRunning, kUnavailable };

std::atomic<void *> g_stock[kStockChunks];
std::atomic<size_t> g_bytes{0};  // the one mapping size the stock holds, fixed at first use
std::atomic<int> g_state{kNotStarted};
sem_t g_wake;  // posted when a mapping was taken (or wanted): the thread refills

void *map_populated(size_t bytes) {
  void *memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

void *refill_main(void *) {
  const size_t bytes = g_bytes.load(std::memory_order_acquire);
  for (;;) {
    for (std::atomic<void *> &slot : g_stock) {
      if (slot.load(std::memory_order_relaxed)) continue;
      void *memory = map_populated(bytes);
      if (!memory) break;  // no memory now: try again when woken
      slot.store(memory, std::memory_order_release);
    }
    while (sem_wait(&g_wake) != 0 && errno == EINTR) {
    }
  }
  return nullptr;
}

// In a fork() child the thread does not exist: nothing refills the stock (and nothing is posted
// to a semaphore a thread of the parent may have been using at the fork).
void after_fork_in_child() {
  g_state.store(kUnavailable, std::memory_order_relaxed);
}

void start() {
  int expected = kNotStarted;
  if (!g_state.compare_exchange_strong(expected, kStarting, std::memory_order_acq_rel)) return;
  sem_init(&g_wake, 0, 0);
  if (common::start_background_thread(refill_main, 64 * 1024, "ferrum-rec-mem") != 0) {
    g_state.store(kUnavailable, std::memory_order_release);  // callers map their own
    return;
  }
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
  g_state.store(kRunning, std::memory_order_release);
}

void wake() {
  if (g_state.load(std::memory_order_acquire) == kRunning) sem_post(&g_wake);
}

}  // namespace

void *take_populated(size_t bytes) {
  size_t fixed = 0;
  if (!g_bytes.compare_exchange_strong(fixed, bytes, std::memory_order_acq_rel) && fixed != bytes)
    return nullptr;
  if (g_state.load(std::memory_order_acquire) == kNotStarted) start();
  for (std::atomic<void *> &slot : g_stock) {
    if (!slot.load(std::memory_order_relaxed)) continue;  // a plain look before the exchange
    if (void *memory = slot.exchange(nullptr, std::memory_order_acquire)) {
      wake();
      return memory;
    }
  }
  wake();
  return nullptr;
}

bool chunk_stock_running() {
  return g_state.load(std::memory_order_acquire) == kRunning;
}

}  // namespace ferrum_replay::recorder
