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

size_t room_above(uintptr_t lowest, uintptr_t here) {
  return here > lowest ? here - lowest : 0;
}

struct Delegated {
  void (*work)(void *);
  void *argument;
};

// One exit report at a time per library; the thread reads its work from here.
Delegated g_delegated{};

void *run_delegated(void *) {
  g_delegated.work(g_delegated.argument);
  return nullptr;
}

}  // namespace

size_t stack_room() {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  stack_t alternate{};
  if (sigaltstack(nullptr, &alternate) == 0 && (alternate.ss_flags & SS_ONSTACK))
    return room_above(reinterpret_cast<uintptr_t>(alternate.ss_sp), here);
  if (syscall(SYS_gettid) == getpid()) {
    // The main thread grows its stack up to RLIMIT_STACK below its top, where the kernel put
    // the program's file name (AT_EXECFN), above the arguments and the environment. (Not
    // glibc's __libc_stack_end: a data symbol is looked up at every start, CUDA or not.)
    rlimit limit{};
    const auto top = static_cast<uintptr_t>(getauxval(AT_EXECFN));
    if (getrlimit(RLIMIT_STACK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || !top)
      return SIZE_MAX;
    const size_t used = top > here ? top - here : 0;
    return limit.rlim_cur > used ? static_cast<size_t>(limit.rlim_cur) - used : 0;
  }
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) != 0) return SIZE_MAX;
  void *lowest = nullptr;
  size_t size = 0;
  const bool known = pthread_attr_getstack(&attributes, &lowest, &size) == 0 && lowest;
  pthread_attr_destroy(&attributes);
  return known ? room_above(reinterpret_cast<uintptr_t>(lowest), here) : SIZE_MAX;
}

bool run_with_stack_room(void (*work)(void *), void *argument, size_t bytes) {
  if (stack_room() >= bytes) {
    work(argument);
    return true;
  }
  g_delegated = Delegated{work, argument};
  static constexpr BackgroundThread kThread{run_delegated, "ferrum-exit"};
  pthread_t thread;
  if (start_background_thread(kThread, bytes, &thread) != 0) return false;
  pthread_join(thread, nullptr);
  return true;
}

}  // namespace ferrum_replay::common
