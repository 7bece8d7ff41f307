#include "background_thread.hpp"

#include <signal.h>
#include <sys/prctl.h>

namespace ferrum_replay::common {

namespace {

void *named_start(void *argument) {
  const auto *thread = static_cast<const BackgroundThread *>(argument);
  prctl(PR_SET_NAME, thread->name, 0, 0, 0);
  return thread->main(thread->argument);
}

}  // namespace

int start_background_thread(const BackgroundThread &thread, size_t stack_bytes, pthread_t *id) {
  // The new thread inherits the creating thread's mask: block everything around the creation.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, stack_bytes);
  pthread_t started;
  const int failed = pthread_create(id ? id : &started, &attributes, named_start,
                                    const_cast<BackgroundThread *>(&thread));
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return failed;
}

}  // namespace ferrum_replay::common
