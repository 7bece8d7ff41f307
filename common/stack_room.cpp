#include "stack_room.hpp"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "background_thread.hpp"

namespace ferrum_replay::common {

namespace {

constexpr size_t kUnknown = SIZE_MAX;

// Room between `lowest` and the frame at `here`, when `here` lies on that stack (within `size`
// above `lowest`): else the frame runs on a stack of the program's own making (a fiber, a
// coroutine, an alternate stack the kernel disarmed for the handler) whose bounds are not
// known here.
size_t room_on(uintptr_t lowest, size_t size, uintptr_t here) {
  return here >= lowest && here - lowest <= size ? here - lowest : kUnknown;
}

// The main thread grows its stack up to RLIMIT_STACK below its top, where the kernel put the
// program's file name (AT_EXECFN), above the arguments and the environment. (Not glibc's
// __libc_stack_end: a data symbol is looked up at every start, CUDA or not.) Without a limit
// it may grow as far as memory lets it; a frame more than 1 GiB below the top is taken for a
// stack of another kind.
size_t main_thread_room(uintptr_t here) {
  rlimit limit{};
  const auto top = static_cast<uintptr_t>(getauxval(AT_EXECFN));
  if (!top || getrlimit(RLIMIT_STACK, &limit) != 0) return kUnknown;
  constexpr size_t kUnlimitedReach = size_t{1} << 30;
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur > kUnlimitedReach)
    return here <= top && top - here <= kUnlimitedReach ? kUnlimitedReach : kUnknown;
  const size_t size = static_cast<size_t>(limit.rlim_cur);
  if (here > top || top - here > size) return kUnknown;
  return size - (top - here);
}

struct Delegated {
  void (*work)(void *);
  void *argument;
};

void *run_delegated(void *delegated) {
  const auto *d = static_cast<const Delegated *>(delegated);
  d->work(d->argument);
  return nullptr;
}

}  // namespace

size_t stack_room() {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  stack_t alternate{};
  if (sigaltstack(nullptr, &alternate) == 0 && (alternate.ss_flags & SS_ONSTACK))
    return room_on(reinterpret_cast<uintptr_t>(alternate.ss_sp), alternate.ss_size, here);
  // (A fork child of another thread is its process's main thread by number, on that thread's
  // stack: not within the main stack's bounds, so unknown.)
  if (syscall(SYS_gettid) == getpid()) return main_thread_room(here);
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) != 0) return kUnknown;
  void *lowest = nullptr;
  size_t size = 0;
  const bool known = pthread_attr_getstack(&attributes, &lowest, &size) == 0 && lowest;
  pthread_attr_destroy(&attributes);
  return known ? room_on(reinterpret_cast<uintptr_t>(lowest), size, here) : kUnknown;
}

bool run_with_stack_room(void (*work)(void *), void *argument, size_t bytes) {
  const size_t room = stack_room();
  if (room != kUnknown && room >= bytes) {
    work(argument);
    return true;
  }
  // On a thread of ours (this frame outlives it: joined below).
  Delegated delegated{work, argument};
  const BackgroundThread thread{run_delegated, "ferrum-exit", &delegated};
  pthread_t id;
  if (start_background_thread(thread, bytes, &id) == 0) {
    pthread_join(id, nullptr);
    return true;
  }
  // No thread (seccomp, RLIMIT_NPROC, a full pids cgroup): in place after all where it likely
  // fits — unknown bounds, as before there was a choice, or room for what the reports were
  // measured to need.
  if (room == kUnknown || room >= kStackInPlace) {
    work(argument);
    return true;
  }
  return false;
}

}  // namespace ferrum_replay::common
