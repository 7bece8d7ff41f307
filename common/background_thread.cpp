#include "background_thread.hpp"

#include <signal.h>

namespace ferrum_replay::common {

int start_background_thread(void *(*main)(void *), size_t stack_bytes, const char *name,
                            pthread_t *thread) {
  // The new thread inherits the creating thread's mask: block everything around the creation.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, stack_bytes);
  // Into the caller's variable directly: set, as pthread_create sets it, before this returns.
  pthread_t started;
  pthread_t *id = thread ? thread : &started;
  const int failed = pthread_create(id, &attributes, main, nullptr);
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (failed) return failed;
  pthread_setname_np(*id, name);
  return 0;
}

}  // namespace ferrum_replay::common
