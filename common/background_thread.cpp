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

// Whether the pids controller at BASE + PATH (PATH: `length` bytes from the cgroup file) leaves
// room for one more task and `spare` (false: `why` says which limit).
bool pids_to_spare(const char *base, const char *path, size_t length, unsigned spare, char *why,
                   size_t why_size) {
  char file[1024], value[64], current[64];
  if (snprintf(file, sizeof file, "%s%.*s/pids.max", base, static_cast<int>(length), path) >=
          static_cast<int>(sizeof file) ||
      !read_small(OwnDescriptor(open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK), file), value,
                  sizeof value) ||
      strncmp(value, "max", 3) == 0)
    return true;
  snprintf(file, sizeof file, "%s%.*s/pids.current", base, static_cast<int>(length), path);
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
  // The cgroup's pids controller: v2 (one line "0::/PATH": /sys/fs/cgroup/PATH) or v1
  // ("N:pids:/PATH", or pids among others: /sys/fs/cgroup/pids/PATH; review II-6).
  if (!read_small(open_process_file("cgroup", O_RDONLY), text, sizeof text)) return true;
  for (const char *line = text; *line;) {
    const size_t length = strcspn(line, "\n");
    const char *first = static_cast<const char *>(memchr(line, ':', length));
    const char *second =
        first ? static_cast<const char *>(memchr(first + 1, ':', length - (first + 1 - line)))
              : nullptr;
    if (second) {
      const char *controllers = first + 1;
      const size_t controllers_length = static_cast<size_t>(second - controllers);
      const char *base = nullptr;
      if (controllers_length == 0 && line[0] == '0')
        base = "/sys/fs/cgroup";  // v2
      else
        for (const char *c = controllers; c < second;) {  // v1: "pids" among its controllers
          const char *comma = static_cast<const char *>(memchr(c, ',', second - c));
          const char *stop = comma ? comma : second;
          if (stop - c == 4 && memcmp(c, "pids", 4) == 0) base = "/sys/fs/cgroup/pids";
          c = stop + 1;
        }
      if (base &&
          !pids_to_spare(base, second + 1, length - (second + 1 - line), spare, why, why_size))
        return false;
    }
    line += length + (line[length] == '\n' ? 1 : 0);
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
