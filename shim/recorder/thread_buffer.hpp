// Per-thread storage of ranges. The owning thread is the only writer, so recording a range takes
// no lock; the exit writer (possibly on another thread, possibly while this thread is still
// pushing) reads concurrently:
//   - completed events live in a linked list of fixed-size chunks that never move; each chunk's
//     count is published with a release store after the event is written, and read with acquire;
//   - the number of open frames is mirrored in an atomic for the open-at-exit count;
//   - names are copied into an append-only arena owned by the thread, so an event's name pointer
//     stays valid even after the thread exits (buffers are kept until the process ends).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "event.hpp"

namespace ferrum_replay::recorder {

// An open range on a (thread, domain) stack. A rejected frame records nothing but keeps its
// place so that the caller's matching pop is swallowed instead of closing someone else's range.
struct Frame {
  uint64_t start_ns;
  RangeAttrs attrs;
  uint32_t depth;
  bool rejected;
};

class ThreadBuffer {
 public:
  ThreadBuffer(uint32_t tid, std::string initial_name);
  ~ThreadBuffer();
  ThreadBuffer(const ThreadBuffer &) = delete;
  ThreadBuffer &operator=(const ThreadBuffer &) = delete;

  uint32_t tid() const { return tid_; }
  const std::string &initial_name() const { return initial_name_; }

  // ---- owning thread only ----
  std::vector<Frame> &stack(uint32_t domain_id);
  // nullptr if this thread never pushed in that domain.
  std::vector<Frame> *find_stack(uint32_t domain_id);
  // Open frames over all domains of this thread (rejected ones included).
  uint32_t open_frames() const { return open_; }
  void opened() { open_published_.store(++open_, std::memory_order_relaxed); }
  void closed() { open_published_.store(--open_, std::memory_order_relaxed); }
  // A stable, NUL-terminated copy of `text`; equal texts share one copy.
  const char *intern(std::string_view text);
  void append(const Event &event);

  // ---- any thread ----
  uint32_t published_open_frames() const { return open_published_.load(std::memory_order_relaxed); }
  template <class F>
  void for_each_event(F &&f) const {
    for (const Chunk *c = head_; c; c = c->next.load(std::memory_order_acquire)) {
      const uint32_t n = c->count.load(std::memory_order_acquire);
      for (uint32_t i = 0; i < n; ++i) f(c->events[i]);
    }
  }

  // ---- in a fork() child, where the calling thread is the only one left ----
  // Drops the parent's completed events (they belong to the parent's trace) and adopts the
  // child's thread id. Open frames stay: the child may legitimately pop them.
  void restart_after_fork(uint32_t tid);

 private:
  struct Chunk {
    static constexpr uint32_t kCapacity = 1024;
    Event events[kCapacity];
    std::atomic<uint32_t> count{0};
    std::atomic<Chunk *> next{nullptr};
  };
  struct Block {
    char *data;
    size_t used, size;
  };

  void free_chunks();

  uint32_t tid_;
  std::string initial_name_;
  Chunk *head_;
  Chunk *tail_;
  std::vector<std::vector<Frame>> stacks_;  // by domain id
  uint32_t open_ = 0;
  std::atomic<uint32_t> open_published_{0};
  std::vector<Block> blocks_;
  std::unordered_set<std::string_view> interned_;
};

}  // namespace ferrum_replay::recorder
