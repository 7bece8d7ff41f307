// HeapHoard: a program that has used up its memory, for the tests of what the shim and the
// recorder do then (tests/recorder/unit/core_test.cpp, tests/reliability/fault_program.cpp).
// Under an address-space limit at what the process has mapped (RLIMIT_AS), takes every block
// the heap can still give, so that from here on every allocation fails, until give_back().
#pragma once

#include <cstddef>
#include <cstdlib>

class HeapHoard {
 public:
  HeapHoard() {
    // Every size, largest first (a thread's cache keeps freed blocks of each size apart), and
    // again until a whole pass gets nothing (a request that fails is retried in another arena).
    // Chained through the blocks themselves: keeping them takes no memory.
    for (bool got = true; got;) {
      got = false;
      for (size_t size = 4096; size >= 8; size = size > 1024 ? 1024 : size - 8)
        while (void *block = std::malloc(size)) {
          *static_cast<void **>(block) = head_;
          head_ = block;
          got = true;
        }
    }
  }
  ~HeapHoard() { give_back(); }
  HeapHoard(const HeapHoard &) = delete;
  HeapHoard &operator=(const HeapHoard &) = delete;

  bool took_any() const { return head_ != nullptr; }
  void give_back() {
    while (head_) {
      void *next = *static_cast<void **>(head_);
      std::free(head_);
      head_ = next;
    }
  }

 private:
  void *head_ = nullptr;
};
