#include "background_thread.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "own_descriptor.hpp"
#include "proc_self.hpp"

namespace ferrum_replay::common {

namespace {

void *named_start(void *argument) {
  const auto *thread = static_cast<const BackgroundThread *>(argument);
  prctl(PR_SET_NAME, thread->name, 0, 0, 0);
  return thread->main(thread->argument);
}

// The start of a small file (at most size - 1 bytes, NUL-terminated), or false.
bool read_small(OwnDescriptor file, char *out, size_t size) {
  if (!file || !file.ours()) return false;
  const ssize_t got = ::pread(file.get(), out, size - 1, 0);
  if (got <= 0) return false;
  out[got] = '\0';
  return true;
}

// The number after `key` in `text` ("Threads:\t12"), or -1.
long number_after(const char *text, const char *key) {
  const char *at = strstr(text, key);
  if (!at) return -1;
  char *end = nullptr;
  const long value = strtol(at + strlen(key), &end, 10);
  return end == at + strlen(key) ? -1 : value;
}

}  // namespace

bool tasks_to_spare(unsigned spare, char *why, size_t why_size) {
  char text[2048];
  // RLIMIT_NPROC counts every task of the real user; this process's threads are a lower bound
  // of that (the others are not told). Root is not held to it.
  rlimit limit{};
  if (geteuid() != 0 && getrlimit(RLIMIT_NPROC, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      read_small(open_process_file("status", O_RDONLY), text, sizeof text)) {
    const long threads = number_after(text, "\nThreads:");
    if (threads > 0 && static_cast<unsigned long long>(threads) + 1 + spare > limit.rlim_cur) {
      snprintf(why, why_size,
               "the process runs %ld threads of the %llu its user may have "
               "(RLIMIT_NPROC)",
               threads, static_cast<unsigned long long>(limit.rlim_cur));
      return false;
    }
  }
  // The cgroup (v2: one line "0::/PATH") and its pids controller's limit and count.
  if (!read_small(open_process_file("cgroup", O_RDONLY), text, sizeof text)) return true;
  const char *line = strstr(text, "0::/");
  if (!line || (line != text && line[-1] != '\n')) return true;
  const char *path = line + 3;
  const size_t length = strcspn(path, "\n");
  char file[1024], value[64], current[64];
  if (snprintf(file, sizeof file, "/sys/fs/cgroup%.*s/pids.max", static_cast<int>(length), path) >=
          static_cast<int>(sizeof file) ||
      !read_small(OwnDescriptor(open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK), file), value,
                  sizeof value) ||
      strncmp(value, "max", 3) == 0)
    return true;
  snprintf(file, sizeof file, "/sys/fs/cgroup%.*s/pids.current", static_cast<int>(length), path);
  if (!read_small(OwnDescriptor(open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK), file), current,
                  sizeof current))
    return true;
  const long long most = strtoll(value, nullptr, 10), used = strtoll(current, nullptr, 10);
  if (most > 0 && used >= 0 && used + 1 + static_cast<long long>(spare) > most) {
    snprintf(why, why_size, "its cgroup runs %lld tasks of the %lld it may have (pids.max)", used,
             most);
    return false;
  }
  return true;
}

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
