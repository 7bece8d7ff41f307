// A process without memory, for the tests of what the shim and the recorder do then
// (tests/recorder/unit/core_test.cpp, tests/shim/unit/gpu_engine_test.cpp,
// tests/reliability/fault_program.cpp): an address-space limit (RLIMIT_AS) at what the process
// has mapped, and the heap's last blocks taken.
#pragma once

#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
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
// A child that has not ended after 60 s is killed and counts as 2000: a stuck child fails its
// own case, with doctest's report, instead of hanging the whole program until meson's timeout
// kills it without a word (review HANG: a child deadlocked in fork(), its parent in waitpid).
inline constexpr int kChildStuck = 2000;

// waitpid(child, status, 0) for at most `ms` milliseconds (CLOCK_MONOTONIC), then SIGKILL and
// reap: false when the child had to be killed (or could not be waited for). Async-signal-safe
// (a handler's fork waits with it too).
inline bool wait_for_child(pid_t child, int *status, long ms = 60000) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const long long deadline = now.tv_sec * 1000LL + now.tv_nsec / 1000000 + ms;
  for (;;) {
    const pid_t got = waitpid(child, status, WNOHANG);
    if (got == child) return true;
    if (got < 0 && errno != EINTR) return false;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec * 1000LL + now.tv_nsec / 1000000 >= deadline) break;
    const timespec pause{0, 2000000};
    nanosleep(&pause, nullptr);
  }
  kill(child, SIGKILL);
  while (waitpid(child, status, 0) < 0 && errno == EINTR) {
  }
  return false;
}

template <typename Body>
int in_child(Body &&body) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) _exit(body());
  int status = 0;
  if (child < 0) return -1;
  if (!wait_for_child(child, &status)) return kChildStuck;
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
