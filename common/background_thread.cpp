#include "background_thread.hpp"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ferrum_replay::common {

namespace {

// What the new thread needs from its creator; malloc'ed (the shim has no C++ runtime), freed by
// the new thread once copied.
struct Start {
  const BackgroundThread *thread;
  sigset_t creator_mask;
};

void *named_start(void *argument) {
  auto *start = static_cast<Start *>(argument);
  const BackgroundThread *thread = start->thread;
  const sigset_t creator_mask = start->creator_mask;
  free(start);
  prctl(PR_SET_NAME, thread->name, 0, 0, 0);
  return thread->main(const_cast<sigset_t *>(&creator_mask));
}

// Whether /proc/self/task/TID/cwd resolves: 1 yes, 0 no such thread (ENOENT), -1 cannot tell.
int thread_cwd_resolves(long tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%ld/cwd", tid);
  char target[1];  // only whether it resolves matters; readlink truncates silently
  if (readlink(path, target, sizeof target) >= 0) return 1;
  return errno == ENOENT ? 0 : -1;
}

}  // namespace

int start_background_thread(const BackgroundThread &thread, size_t stack_bytes, pthread_t *id) {
  auto *start = static_cast<Start *>(malloc(sizeof(Start)));
  if (!start) return ENOMEM;
  start->thread = &thread;
  // The new thread inherits the creating thread's mask: block everything around the creation.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &start->creator_mask);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, stack_bytes);
  pthread_t started;
  const sigset_t creator_mask = start->creator_mask;
  const int failed = pthread_create(id ? id : &started, &attributes, named_start, start);
  pthread_attr_destroy(&attributes);
  if (failed) free(start);  // else the new thread owns it (and may have freed it already)
  pthread_sigmask(SIG_SETMASK, &creator_mask, nullptr);
  return failed;
}

bool only_live_thread() {
  struct stat task {};
  // 2 + threads: this one and the main thread, ended or not.
  if (stat("/proc/self/task", &task) != 0 || task.st_nlink != 4) return false;
  // This thread's entry resolves: the rule can be trusted here (a /proc without it says no).
  if (thread_cwd_resolves(syscall(SYS_gettid)) != 1) return false;
  return thread_cwd_resolves(getpid()) == 0;
}

void end_as_last_thread(const sigset_t *creator_mask) {
  if (creator_mask) pthread_sigmask(SIG_SETMASK, creator_mask, nullptr);
}

}  // namespace ferrum_replay::common
