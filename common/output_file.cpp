#include "output_file.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "text_rules.hpp"

namespace ferrum_replay::common {
namespace {

constexpr size_t kPathSize = 4096 + 64;  // an expanded path plus a temporary's suffix

uint64_t monotonic_ms() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000u + static_cast<uint64_t>(now.tv_nsec) / 1000000u;
}

void sleep_ms(long ms) {
  timespec pause{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
  }
}

// Decimal digits only, at most 9 of them; the number, or -1.
long parse_small_number(const char *text) {
  if (!*text) return -1;
  long value = 0;
  for (int n = 0; *text; ++text, ++n) {
    if (*text < '0' || *text > '9' || n >= 9) return -1;
    value = value * 10 + (*text - '0');
  }
  return value;
}

// The descriptor a path names by itself (/dev/stdout, /proc/self/fd/3, ...), or -1.
int descriptor_of(const char *path) {
  if (strcmp(path, "/dev/stdin") == 0) return 0;
  if (strcmp(path, "/dev/stdout") == 0) return 1;
  if (strcmp(path, "/dev/stderr") == 0) return 2;
  char own[48];
  snprintf(own, sizeof own, "/proc/%d/fd/", static_cast<int>(getpid()));
  const char *const prefixes[] = {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/", own};
  for (const char *prefix : prefixes) {
    const size_t length = strlen(prefix);
    if (strncmp(path, prefix, length) == 0)
      return static_cast<int>(parse_small_number(path + length));
  }
  return -1;
}

bool is_stream_mode(mode_t mode) {
  return S_ISCHR(mode) || S_ISFIFO(mode) || S_ISSOCK(mode);
}

// 32-bit FNV-1a of the host name, which keeps another host's temporaries (a shared file
// system) apart from ours.
unsigned host_tag() {
  char host[256];
  host_name(host, sizeof host);
  unsigned hash = 2166136261u;
  for (const unsigned char *p = reinterpret_cast<const unsigned char *>(host); *p; ++p)
    hash = (hash ^ *p) * 16777619u;
  return hash;
}

const char *last_component(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

// "HOSTTAG.PID.N.tmp" -> the pid if `rest` has that form with our host tag, else -1.
long temp_owner(const char *rest, unsigned tag) {
  char expected[16];
  snprintf(expected, sizeof expected, "%08x.", tag);
  if (strncmp(rest, expected, 9) != 0) return -1;
  const char *p = rest + 9;
  long pid = 0;
  int digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 10; ++p, ++digits) pid = pid * 10 + (*p - '0');
  if (digits == 0 || *p != '.') return -1;
  ++p;
  digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 4; ++p) ++digits;
  if (digits == 0 || strcmp(p, ".tmp") != 0) return -1;
  return pid;
}

}  // namespace

int write_all(int fd, const void *data, size_t length) {
  const char *p = static_cast<const char *>(data);
  while (length > 0) {
    const ssize_t n = write(fd, p, length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    p += n;
    length -= static_cast<size_t>(n);
  }
  return 0;
}

// ---- streams ----

bool is_stream_target(const char *path) {
  if (!path || !*path) return false;
  if (descriptor_of(path) >= 0) return true;
  struct stat st {};
  return stat(path, &st) == 0 && is_stream_mode(st.st_mode);
}

int open_stream(const char *path, Stream *stream) {
  const int stall = stream->stall_ms;
  *stream = Stream{};
  stream->stall_ms = stall;
  const int fd = descriptor_of(path);
  if (fd >= 0) {
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY) return EBADF;
    struct stat st {};
    if (fstat(fd, &st) != 0) return errno;
    stream->fd = fd;
    stream->regular = S_ISREG(st.st_mode);
    stream->blocking = (flags & O_NONBLOCK) == 0;
    return 0;
  }
  // No O_CREAT, no O_TRUNC: opening cannot create or change a file; O_NONBLOCK: a FIFO without
  // a reader fails (ENXIO) instead of waiting for one.
  const int opened = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (opened < 0) return errno;
  struct stat st {};
  if (fstat(opened, &st) != 0 || !is_stream_mode(st.st_mode)) {  // replaced meanwhile
    close(opened);
    return EINVAL;
  }
  stream->fd = opened;
  stream->owned = true;
  stream->blocking = false;
  return 0;
}

int stream_write(Stream *stream, const void *data, size_t length) {
  if (stream->fd < 0) return EBADF;
  if (stream->regular) return write_all(stream->fd, data, length);
  // A reader that went away must not kill the host with SIGPIPE: blocked while writing, and a
  // SIGPIPE raised here is taken back before the mask is restored.
  sigset_t pipe_only, old_mask, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
  sigemptyset(&pending);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;

  const char *p = static_cast<const char *>(data);
  int error = 0;
  while (length > 0 && error == 0) {
    if (stream->blocking) {
      // A blocking write larger than the room left would wait for the reader: write at most
      // PIPE_BUF after poll said there is room.
      pollfd pfd{stream->fd, POLLOUT, 0};
      const int ready = poll(&pfd, 1, stream->stall_ms);
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        error = ETIMEDOUT;
        break;
      }
    }
    const size_t chunk = stream->blocking && length > 4096 ? 4096 : length;
    const ssize_t n = write(stream->fd, p, chunk);
    if (n > 0) {
      p += n;
      length -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{stream->fd, POLLOUT, 0};
      int ready;
      do ready = poll(&pfd, 1, stream->stall_ms);
      while (ready < 0 && errno == EINTR);
      if (ready == 0) error = ETIMEDOUT;
    } else {
      error = n < 0 ? errno : EIO;
    }
  }

  if (!was_pending) {
    sigemptyset(&pending);
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  return error;
}

void close_stream(Stream *stream) {
  if (stream->owned && stream->fd >= 0) close(stream->fd);
  stream->fd = -1;
  stream->owned = false;
}

// ---- files written aside ----

int create_temp_beside(const char *path, char *tmp, size_t tmp_size) {
  const unsigned tag = host_tag();
  const int pid = static_cast<int>(getpid());
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int n = snprintf(tmp, tmp_size, "%s.%08x.%d.%d.tmp", path, tag, pid, attempt);
    if (n < 0 || static_cast<size_t>(n) >= tmp_size) return -ENAMETOOLONG;
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
}

int remove_dead_temps(const char *path, const char *header) {
  char dir[kPathSize];
  if (!directory_of(path, dir, sizeof dir)) return 0;
  const char *base = last_component(path);
  const size_t base_length = strlen(base);
  if (base_length == 0) return 0;
  const int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return 0;
  DIR *listing = fdopendir(dir_fd);
  if (!listing) {
    close(dir_fd);
    return 0;
  }
  const unsigned tag = host_tag();
  const uid_t me = geteuid();
  const size_t header_length = header ? strlen(header) : 0;
  int removed = 0;
  while (const dirent *entry = readdir(listing)) {
    const char *name = entry->d_name;
    if (strncmp(name, base, base_length) != 0 || name[base_length] != '.') continue;
    const long pid = temp_owner(name + base_length + 1, tag);
    if (pid <= 0 || pid == static_cast<long>(getpid())) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or unknown
    const int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    bool ours = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == me && st.st_nlink == 1;
    if (ours && st.st_size > 0) {
      char head[64];
      const size_t want = header_length < sizeof head ? header_length : sizeof head;
      ours = want > 0 && pread(fd, head, want, 0) == static_cast<ssize_t>(want) &&
             memcmp(head, header, want) == 0;
    }
    close(fd);
    if (ours && unlinkat(dir_fd, name, 0) == 0) ++removed;
  }
  closedir(listing);
  return removed;
}

int rename_no_replace(const char *from, const char *to) {
  if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return errno;
  // A file system without RENAME_NOREPLACE: link() is just as exclusive.
  if (link(from, to) != 0) return errno;
  unlink(from);
  return 0;
}

int place_fresh(const char *tmp, const char *path, char *placed, size_t placed_size) {
  int error = rename_no_replace(tmp, path);
  if (error == 0) {
    snprintf(placed, placed_size, "%s", path);
    return 0;
  }
  for (unsigned long n = 1; n <= 99 && error == EEXIST; ++n) {
    char candidate[kPathSize];
    if (!fresh_name(path, n, candidate, sizeof candidate)) return ENAMETOOLONG;
    error = rename_no_replace(tmp, candidate);
    if (error == 0) snprintf(placed, placed_size, "%s", candidate);
  }
  return error;
}

bool directory_of(const char *path, char *out, size_t out_size) {
  const char *slash = strrchr(path, '/');
  if (!slash) return snprintf(out, out_size, ".") < static_cast<int>(out_size);
  const size_t length = slash == path ? 1 : static_cast<size_t>(slash - path);
  if (length + 1 > out_size) return false;
  memcpy(out, path, length);
  out[length] = '\0';
  return true;
}

// ---- the output lock ----

bool output_lock_name(const char *dir, char *out, size_t out_size) {
  struct stat st {};
  if (stat(dir, &st) != 0) return false;
  const int n = snprintf(out, out_size, "ferrum-replay-output-%llx-%llx",
                         static_cast<unsigned long long>(st.st_dev),
                         static_cast<unsigned long long>(st.st_ino));
  return n > 0 && static_cast<size_t>(n) < out_size;
}

int lock_output_dir(const char *dir, int timeout_ms) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  char name[sizeof address.sun_path - 1];
  if (!output_lock_name(dir, name, sizeof name)) return -1;
  const size_t name_length = strlen(name);
  memcpy(address.sun_path + 1, name, name_length);  // sun_path[0] == 0: the abstract namespace
  const socklen_t length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name_length);
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return -1;
  const uint64_t deadline = monotonic_ms() + static_cast<uint64_t>(timeout_ms > 0 ? timeout_ms : 0);
  for (;;) {
    if (bind(sock, reinterpret_cast<const sockaddr *>(&address), length) == 0) return sock;
    if (errno != EADDRINUSE || monotonic_ms() >= deadline) break;
    sleep_ms(10);
  }
  close(sock);
  return -1;
}

void unlock_output_dir(int lock) {
  if (lock >= 0) close(lock);
}

}  // namespace ferrum_replay::common
