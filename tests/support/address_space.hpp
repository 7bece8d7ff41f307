// A process without memory, for the tests of what the shim and the recorder do then
// (tests/recorder/unit/core_test.cpp, tests/shim/unit/gpu_engine_test.cpp,
// tests/reliability/fault_program.cpp): an address-space limit (RLIMIT_AS) at what the process
// has mapped, and the heap's last blocks taken.
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

// Whether an address-space limit can be tried here: not under a sanitizer, whose shadow memory
// needs more address space than any limit these tests set. Test cases that need one are marked
// `* doctest::skip(kNoAddressSpaceLimit)`, so that the report says they were skipped.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kNoAddressSpaceLimit = true;
#else
inline constexpr bool kNoAddressSpaceLimit = false;
#endif

// Limits this process's address space to what it has mapped now, plus `margin` bytes
// (RLIMIT_AS): from here on no mapping beyond that, and no allocation beyond the heap's free
// memory, can succeed.
inline bool limit_address_space_to_now(unsigned long margin = 0) {
  FILE *status = std::fopen("/proc/self/status", "r");
  if (!status) return false;
  char line[256];
  unsigned long vm_kb = 0;
  while (std::fgets(line, sizeof line, status))
    if (std::sscanf(line, "VmSize: %lu kB", &vm_kb) == 1) break;
  std::fclose(status);
  rlimit limit{};
  if (vm_kb == 0 || getrlimit(RLIMIT_AS, &limit) != 0) return false;
  limit.rlim_cur = vm_kb * 1024 + margin;
  return setrlimit(RLIMIT_AS, &limit) == 0;
}

// Lifts the address-space limit again (its hard limit was never lowered).
inline bool unlimit_address_space() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0) return false;
  limit.rlim_cur = limit.rlim_max;
  return setrlimit(RLIMIT_AS, &limit) == 0;
}

// Runs `body` in a child process (its address-space limit stays there) and returns its exit
// status: 0 when every check of `body` held, else the number of the first that failed.
template <typename Body>
int in_child(Body &&body) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) _exit(body());
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

// Under limit_address_space_to_now: takes every block the heap can still give, so that from
// here on every allocation fails, until give_back().
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
