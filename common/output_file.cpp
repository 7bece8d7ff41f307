#include "output_file.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "error_text.hpp"
#include "monotonic_clock.hpp"
#include "own_descriptor.hpp"
#include "proc_self.hpp"
#include "text_rules.hpp"
#include "write_signals.hpp"

namespace ferrum_replay::common {
namespace {

constexpr size_t kPathSize = 4096 + 64;  // an expanded path plus a temporary's suffix

// To an absolute deadline: a relative sleep restarted with what remains after each signal never
// ends while the program's interval timer fires faster than the kernel's rounding and slack (a
// 20 kHz SIGALRM: the exit hung for ever waiting 10 ms for an output lock; review DD-4).
void sleep_ms(long ms) {
  timespec until{};
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec += 1;
    until.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
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

namespace {

// write(2) until all of DATA is written, STILL_OURS asked before each call.
template <typename Proof>
int write_whole(int fd, const void *data, size_t length, Proof still_ours) {
  // A file past the host's size limit (ulimit -f) is EFBIG, not SIGXFSZ (write_signals.hpp).
  const WriteSignalsHeld held;
  const char *p = static_cast<const char *>(data);
  while (length > 0) {
    if (!still_ours()) return EBADF;
    const ssize_t n = write(fd, p, length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    p += n;
    length -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

int write_all(int fd, const void *data, size_t length) {
  return write_whole(fd, data, length, [] { return true; });
}

int OwnDescriptor::write_all(const void *data, size_t length) {
  return write_whole(fd_, data, length, [this] { return ours(); });
}

// ---- streams ----

bool is_stream_target(const char *path) {
  if (!path || !*path) return false;
  if (descriptor_of(path) >= 0) return true;
  struct stat st {};
  return lstat(path, &st) == 0 && is_stream_mode(st.st_mode);
}

namespace {

// Descriptors 1 and 2 as first seen (note_standard_streams), and those an output setting
// names (note_output_stream). State: 0 not noted, 1 closed then, 2 noted (dev, ino). `fd` and
// the file are written once, before `state` is published.
struct NotedStream {
  std::atomic<int> state{0};
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
};
NotedStream g_noted[3];  // by descriptor; [0] unused
std::atomic<bool> g_streams_noted{false};
// A process's outputs are a few settings (a trace, a summary): a few descriptors.
constexpr int kNotedOutputs = 16;
NotedStream g_noted_outputs[kNotedOutputs];
std::atomic<int> g_noted_output_slots{0};

// A standard stream the process was started with never has FD_CLOEXEC (it came through exec);
// descriptor 1 or 2 with it is a file the program opened itself after closing that stream
// (os.open, open(..., O_CLOEXEC) take the lowest free number).
bool opened_by_the_program(int fd) {
  const int flags = fcntl(fd, F_GETFD);
  return flags < 0 || (flags & FD_CLOEXEC) != 0;
}

// Notes what descriptor `fd` names now into `noted`: closed (or opened by the program itself,
// FD_CLOEXEC), or its file.
void note_descriptor(int fd, NotedStream &noted) {
  struct stat st {};
  noted.fd = fd;
  if (opened_by_the_program(fd) || fstat(fd, &st) != 0) {
    noted.state.store(1, std::memory_order_release);
    return;
  }
  noted.dev = st.st_dev;
  noted.ino = st.st_ino;
  noted.state.store(2, std::memory_order_release);
}

NotedStream *noted_output(int fd) {
  const int used = std::min(g_noted_output_slots.load(std::memory_order_acquire), kNotedOutputs);
  for (int i = 0; i < used; ++i)
    if (g_noted_outputs[i].state.load(std::memory_order_acquire) != 0 &&
        g_noted_outputs[i].fd == fd)
      return &g_noted_outputs[i];
  return nullptr;
}

// 0 when `fd` may be written as the stream it named when noted, else the error (open_stream).
// Descriptor 3 and above is the program's own business (its database, its socket) unless an
// output setting named it when we started: one not noted is not proven ours to write.
int check_noted(int fd, const struct stat &now) {
  const NotedStream *noted = fd == 1 || fd == 2 ? &g_noted[fd] : noted_output(fd);
  if (!noted) return fd > 2 ? kStreamReplaced : 0;
  if (opened_by_the_program(fd)) return kStreamReplaced;
  const int state = noted->state.load(std::memory_order_acquire);
  if (state == 1) return EBADF;
  if (state == 2 && (now.st_dev != noted->dev || now.st_ino != noted->ino)) return kStreamReplaced;
  return 0;
}

}  // namespace

void note_standard_streams() {
  if (g_streams_noted.exchange(true, std::memory_order_acq_rel)) return;
  for (int fd = 1; fd <= 2; ++fd) note_descriptor(fd, g_noted[fd]);
}

void note_output_stream(const char *path) {
  const int fd = path ? descriptor_of(path) : -1;
  if (fd <= 2) return;  // 1 and 2: note_standard_streams; 0 is never written (open_stream)
  // Noted again (a setting read again, as a test does): as it is now.
  if (NotedStream *noted = noted_output(fd)) return note_descriptor(fd, *noted);
  const int slot = g_noted_output_slots.fetch_add(1, std::memory_order_acq_rel);
  if (slot < kNotedOutputs) note_descriptor(fd, g_noted_outputs[slot]);
}

namespace {

// What waiting for each stream file's reader has cost so far, across every stream of this
// library to it (each warning or log line is a stream of its own): the time waited and the
// bytes written. A file may be waited for `stall_ms` plus what kMinStreamRate allows for what it
// took, in all. Per stream, a reader that takes a page now and then held the exit for minutes,
// and a full stderr pipe nobody reads cost 2 s per line (F101); now 2 s once, after which a
// stuck file gets only the room there is. A healthy reader (a compressor, a slow link) keeps
// its allowance ahead of the waits. The table keeps kWatchedFiles files: a ninth takes the
// slots in turn, its counts starting afresh (so does a file evicted that comes back).
struct FileWaits {
  std::atomic<uint64_t> file{0};  // file_identity; 0: free
  std::atomic<uint64_t> waited_ms{0};
  std::atomic<uint64_t> written{0};
};
constexpr unsigned kWatchedFiles = 8;
FileWaits g_file_waits[kWatchedFiles];
std::atomic<unsigned> g_next_evicted{0};

uint64_t file_identity(const struct stat &st) {
  const uint64_t identity =
      (static_cast<uint64_t>(st.st_dev) * 0x9E3779B97F4A7C15ull) ^ static_cast<uint64_t>(st.st_ino);
  return identity ? identity : 1;  // 0 marks a free slot
}

FileWaits *waits_of(uint64_t file) {
  if (!file) return nullptr;
  for (auto &slot : g_file_waits)
    if (slot.file.load(std::memory_order_relaxed) == file) return &slot;
  for (auto &slot : g_file_waits) {
    uint64_t expected = 0;
    if (slot.file.compare_exchange_strong(expected, file, std::memory_order_relaxed) ||
        expected == file)
      return &slot;
  }
  // (Two threads evicting at once may share a slot, or account a moment to the other file:
  // a bound a little off, never a wait without one.)
  FileWaits &slot =
      g_file_waits[g_next_evicted.fetch_add(1, std::memory_order_relaxed) % kWatchedFiles];
  slot.waited_ms.store(0, std::memory_order_relaxed);
  slot.written.store(0, std::memory_order_relaxed);
  slot.file.store(file, std::memory_order_relaxed);
  return &slot;
}

int open_stream_here(const char *path, Stream *stream);

}  // namespace

int open_stream(const char *path, Stream *stream) {
  const int error = open_stream_here(path, stream);
  if (error == 0) stream->waits = waits_of(stream->file);
  return error;
}

namespace {

int open_stream_here(const char *path, Stream *stream) {
  const int stall = stream->stall_ms;
  *stream = Stream{};
  stream->stall_ms = stall;
  const int fd = descriptor_of(path);
  // Descriptor 0 is the program's input, never an output of ours: even when writable (a
  // terminal, a socket from inetd), and above all when the program closed it and a file of
  // its own took the number (a database opened read-write).
  if (fd == 0) return EBADF;
  if (fd >= 0) {
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY) return EBADF;
    struct stat st {};
    if (fstat(fd, &st) != 0) return errno;
    if (const int error = check_noted(fd, st)) return error;
    stream->file = file_identity(st);
    stream->regular = S_ISREG(st.st_mode);
    stream->socket = S_ISSOCK(st.st_mode);
    if (stream->regular || stream->socket || (flags & O_NONBLOCK) != 0) {
      // Writing cannot wait on a reader: a file, a socket with MSG_DONTWAIT, or a description
      // the host made non-blocking itself. Its offset and flags stay the host's.
      stream->fd = fd;
      return 0;
    }
    // A blocking terminal, pipe or device: even a small write can wait forever (a terminal
    // nobody reads, one stopped with ^S). Its description is the host's and its flags are not
    // ours to change: a description of our own, opened non-blocking.
    // Through the calling thread's /proc entry: a program whose main thread has ended
    // (pthread_exit) writes its summary from another thread, and /proc/self/fd is gone then.
    char own[32];
    snprintf(own, sizeof own, "fd/%d", fd);
    OwnDescriptor opened = open_process_file(own, O_WRONLY | O_NONBLOCK | O_NOCTTY);
    if (!opened && errno == ENXIO) return ENXIO;  // a pipe or FIFO nobody reads any more
    if (opened) {
      struct stat again {};
      if (fstat(opened.get(), &again) == 0 && again.st_dev == st.st_dev &&
          again.st_ino == st.st_ino && !S_ISREG(again.st_mode)) {
        opened.move_high();  // held while the report is written: out of the program's reach
        stream->fd = opened.release();
        stream->owned = true;
        return 0;
      }
      // (closed as it goes, if still ours) not the host's file (another /proc): the host's
      // descriptor, below
    }
    // Not reopenable (a pipe of another user: EACCES; no /proc after chroot: ENOENT; no
    // descriptor left: EMFILE): the host's descriptor, each write with RWF_NOWAIT, which
    // changes no flag of its description. Whether the kernel can do that for this file is
    // known at the first write (stream_write: kStreamNotReopenable, nothing written).
    stream->fd = fd;
    stream->nowait = true;
    return 0;
  }
  // No O_CREAT, no O_TRUNC: opening cannot create or change a file; O_NONBLOCK: a FIFO without
  // a reader fails (ENXIO) instead of waiting for one; O_NOFOLLOW: a link is never followed.
  OwnDescriptor opened(open(path, O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC), path);
  if (!opened) return errno;
  struct stat st {};
  if (fstat(opened.get(), &st) != 0 || !is_stream_mode(st.st_mode))  // replaced meanwhile
    return EINVAL;
  stream->fd = opened.release();
  stream->owned = true;
  stream->socket = S_ISSOCK(st.st_mode);
  stream->file = file_identity(st);
  return 0;
}

}  // namespace

namespace {

// pwritev2(fd, {data, length}, 1, -1, RWF_NOWAIT) as the raw system call: a write at the
// description's own position that returns EAGAIN instead of waiting for room (Linux 4.14 for
// the flag; pipes since 5.x, FMODE_NOWAIT), with no flag of the description changed. Not
// glibc's pwritev2: that is a cancellation point (common/no_cancel.hpp) and would add a symbol
// version (GLIBC_2.26) for the loader to look up in every process.
ssize_t write_nowait(int fd, const void *data, size_t length) {
#ifndef RWF_NOWAIT
  constexpr int RWF_NOWAIT = 0x00000008;
#endif
  iovec one{const_cast<void *>(data), length};
  const long offset = -1;  // the file's position; pos_l and pos_h both -1 on 32-bit ABIs too
  return static_cast<ssize_t>(syscall(SYS_pwritev2, fd, &one, 1, offset, offset, RWF_NOWAIT));
}

}  // namespace

namespace {

// Whether the stream's descriptor still is the file it was opened on (own_descriptor.hpp's rule,
// for a Stream): one of ours the program closed, or the program's own that it replaced since,
// is written no more — and one of ours is then not ours to close.
bool still_stream(Stream *stream) {
  if (stream->fd < 0) return false;
  const int saved = errno;
  struct stat st {};
  const bool same = fstat(stream->fd, &st) == 0 && file_identity(st) == stream->file;
  errno = saved;
  if (!same && stream->owned) {
    stream->fd = -1;
    stream->owned = false;
  }
  return same;
}

}  // namespace

int stream_write(Stream *stream, const void *data, size_t length) {
  if (stream->fd < 0) return EBADF;
  if (stream->regular)
    return still_stream(stream) ? write_all(stream->fd, data, length) : kStreamReplaced;
  // A reader that went away must not kill the host with SIGPIPE (write_signals.hpp).
  const WriteSignalsHeld held;

  // Every write is non-blocking (open_stream); the bounds are on time without progress and on
  // the file's whole wait (FileWaits, which open_stream gives every stream it opens).
  FileWaits unaccounted;
  FileWaits &file = stream->waits ? *static_cast<FileWaits *>(stream->waits) : unaccounted;
  const char *p = static_cast<const char *>(data);
  int error = 0;
  const uint64_t stall = static_cast<uint64_t>(stream->stall_ms > 0 ? stream->stall_ms : 0);
  uint64_t deadline = monotonic_ms() + stall;
  bool ready_but_full = false;  // poll said writable, yet the write found no room
  while (length > 0 && error == 0) {
    if (!still_stream(stream)) return kStreamReplaced;  // the program's now: not one byte more
    const ssize_t n = stream->socket   ? send(stream->fd, p, length, MSG_DONTWAIT | MSG_NOSIGNAL)
                      : stream->nowait ? write_nowait(stream->fd, p, length)
                                       : write(stream->fd, p, length);
    if (n > 0) {
      p += n;
      length -= static_cast<size_t>(n);
      file.written.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      deadline = monotonic_ms() + stall;
      ready_but_full = false;
      stream->nowait_known = true;
    } else if (n < 0 && stream->nowait && !stream->nowait_known &&
               (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS)) {
      // The kernel cannot write this file without waiting (a terminal, an old kernel): what a
      // descriptor that cannot be reopened got before, nothing written — the first write has
      // written nothing, and none comes after it.
      error = kStreamNotReopenable;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const uint64_t now = monotonic_ms();
      const uint64_t allowed =
          stall + file.written.load(std::memory_order_relaxed) / kMinStreamRate;
      const uint64_t spent = file.waited_ms.load(std::memory_order_relaxed);
      const uint64_t until = std::min(deadline, now + (allowed > spent ? allowed - spent : 0));
      if (now >= until) {
        error = ETIMEDOUT;
        break;
      }
      if (ready_but_full) sleep_ms(1);  // a terminal may say writable and still have no room
      pollfd pfd{stream->fd, POLLOUT, 0};
      const int ready = poll(&pfd, 1, static_cast<int>(until - now));
      file.waited_ms.fetch_add(monotonic_ms() - now, std::memory_order_relaxed);
      if (ready == 0) error = ETIMEDOUT;  // no room within the bound: room made later is too late
      ready_but_full = ready > 0;
    } else {
      error = n < 0 ? errno : EIO;
    }
  }
  return error;
}

const char *stream_error_note(int error) {
  switch (error) {
    case ENXIO:
      return " (no process is reading it)";
    case ETIMEDOUT:
      return " (its reader made no room for 2 s, or too slowly: under 64 KiB/s)";
    case kStreamNotReopenable:
      return " (a blocking descriptor of the program that cannot be reopened non-blocking; "
             "nothing written)";
    case kStreamReplaced:
      return " (the descriptor no longer names the stream the program was started with; nothing "
             "written)";
    default:
      return "";
  }
}

void close_stream(Stream *stream) {
  if (stream->owned && still_stream(stream)) close(stream->fd);
  stream->fd = -1;
  stream->owned = false;
}

// ---- files written aside ----

namespace {

// "HOSTTAG.PID.N.tmp" at its longest, with the '.' before it.
constexpr size_t kTempSuffixMax = sizeof ".ffffffff.4294967295.15.tmp" - 1;
constexpr size_t kHashPart = 9;  // "~" + 8 hex digits

unsigned fnv1a(const char *text, size_t length) {
  unsigned hash = 2166136261u;
  for (size_t i = 0; i < length; ++i)
    hash = (hash ^ static_cast<unsigned char>(text[i])) * 16777619u;
  return hash;
}

// The longest name the file system of directory `dir` accepts.
size_t directory_name_limit(const char *dir) {
  const long limit = pathconf(dir, _PC_NAME_MAX);
  return limit > 0 && limit <= NAME_MAX ? static_cast<size_t>(limit) : NAME_MAX;
}

// The stem of `path`'s temporaries: `path` itself, or with its last component shortened so
// that stem + kTempSuffixMax fits `limit`, the name limit of its directory. The one rule for
// making and recognising them.
bool temp_stem_within(const char *path, size_t limit, char *out, size_t out_size) {
  const char *base = last_component(path);
  const size_t dir_length = static_cast<size_t>(base - path);
  const size_t base_length = strlen(base);
  if (base_length + kTempSuffixMax <= limit)
    return snprintf(out, out_size, "%s", path) < static_cast<int>(out_size);
  if (dir_length >= out_size || limit < kTempSuffixMax + kHashPart + 1) return false;
  memcpy(out, path, dir_length);
  return shortened_component(base, base_length, limit - kTempSuffixMax, out + dir_length,
                             out_size - dir_length);
}

bool temp_stem(const char *path, char *out, size_t out_size) {
  return temp_stem_within(path, name_limit(path), out, out_size);
}

}  // namespace

size_t name_limit(const char *path) {
  char dir[kPathSize];
  return directory_of(path, dir, sizeof dir) ? directory_name_limit(dir) : NAME_MAX;
}

bool shortened_component(const char *component, size_t length, size_t room, char *out,
                         size_t out_size) {
  if (length <= room) {
    if (length + 1 > out_size) return false;
    memcpy(out, component, length);
    out[length] = '\0';
    return true;
  }
  if (room < kHashPart + 1 || room + 1 > out_size) return false;
  size_t keep = room - kHashPart;
  // Never half a UTF-8 character: back off over continuation bytes.
  while (keep > 0 && (static_cast<unsigned char>(component[keep]) & 0xC0) == 0x80) --keep;
  memcpy(out, component, keep);
  snprintf(out + keep, out_size - keep, "~%08x", fnv1a(component, length));
  return true;
}

bool fresh_name_within(const char *path, const char *token, char *out, size_t out_size) {
  const char *base = last_component(path);
  const size_t limit = name_limit(path);
  const size_t token_length = strlen(token);
  if (strlen(base) + 1 + token_length <= limit) return fresh_name(path, token, out, out_size);
  // Too long: NAME is shortened, the token and the extension kept (the extension too when
  // there is no room left for NAME beside it).
  const size_t dir_length = static_cast<size_t>(base - path);
  const size_t split = fresh_name_split(path);
  const char *rest = path + split;  // ".EXT" or ""
  size_t name_length = split - dir_length;
  if (1 + token_length + strlen(rest) + kHashPart + 1 > limit) {
    rest = "";
    name_length = strlen(base);
  }
  const size_t after = 1 + token_length + strlen(rest);
  if (after + kHashPart + 1 > limit || dir_length >= out_size) return false;
  char name[NAME_MAX + 1];
  if (!shortened_component(base, name_length, limit - after, name, sizeof name)) return false;
  // shortened_component hashes only NAME; the whole component must tell names apart.
  if (name_length <= limit - after) return false;  // cannot happen: it did not fit
  const size_t kept = strlen(name) - 8;
  snprintf(name + kept, sizeof name - kept, "%08x", fnv1a(base, strlen(base)));
  const int n =
      snprintf(out, out_size, "%.*s%s.%s%s", static_cast<int>(dir_length), path, name, token, rest);
  return n > 0 && static_cast<size_t>(n) < out_size;
}

bool fresh_name_within(const char *path, unsigned long token, char *out, size_t out_size) {
  char digits[24];
  snprintf(digits, sizeof digits, "%lu", token);
  return fresh_name_within(path, digits, out, out_size);
}

namespace {
char g_temp_in_progress[kPathSize];  // written before g_temp_set is raised
pid_t g_temp_owner = 0;              // the process writing it (a fork child inherits the rest)
std::atomic<bool> g_temp_set{false};
}  // namespace

void temp_finished() {
  g_temp_set.store(false, std::memory_order_release);
}

bool remove_temp_in_progress() {
  // A child forked while its parent wrote (and that exits meanwhile) has a copy of this state:
  // the temporary is the parent's, still being written.
  if (!g_temp_set.load(std::memory_order_acquire) || g_temp_owner != getpid()) return false;
  return g_temp_set.exchange(false, std::memory_order_acq_rel) && unlink(g_temp_in_progress) == 0;
}

int create_temp_beside(const char *path, char *tmp, size_t tmp_size) {
  const unsigned tag = host_tag();
  const int pid = static_cast<int>(getpid());
  char stem[kPathSize];
  if (!temp_stem(path, stem, sizeof stem)) return -ENAMETOOLONG;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int n = snprintf(tmp, tmp_size, "%s.%08x.%d.%d.tmp", stem, tag, pid, attempt);
    if (n < 0 || static_cast<size_t>(n) >= tmp_size) return -ENAMETOOLONG;
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      if (static_cast<size_t>(n) < sizeof g_temp_in_progress) {
        memcpy(g_temp_in_progress, tmp, static_cast<size_t>(n) + 1);
        g_temp_owner = static_cast<pid_t>(pid);
        g_temp_set.store(true, std::memory_order_release);
      }
      return fd;
    }
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
}

namespace {

// The one form of a marker's suffix, after its stem (out[0..stem_length)).
bool marker_suffix(char *out, size_t stem_length, int pid, unsigned sibling, size_t out_size) {
  if (stem_length >= out_size) return false;
  const int n =
      sibling == 0
          ? snprintf(out + stem_length, out_size - stem_length, ".%d.running", pid)
          : snprintf(out + stem_length, out_size - stem_length, ".%d.%u.running", pid, sibling);
  return n > 0 && static_cast<size_t>(n) < out_size - stem_length;
}

}  // namespace

bool running_marker_name(const char *path, int pid, unsigned sibling, char *out, size_t out_size,
                         size_t *stem_length) {
  static_assert(
      sizeof ".-2147483648.9999.running" - 1 <= kTempSuffixMax && kMaxMarkerSibling <= 9999,
      "the marker's suffix fits where a temporary's does");
  if (sibling > kMaxMarkerSibling) return false;
  // Called on a launching thread (the shim's first launch), whose stack may be small: no path
  // buffer of its own — `out` holds the directory while its name limit is asked, then the stem.
  if (!directory_of(path, out, out_size) ||
      !temp_stem_within(path, directory_name_limit(out), out, out_size))
    return false;
  const size_t stem = strlen(out);
  if (stem_length) *stem_length = stem;
  return marker_suffix(out, stem, pid, sibling, out_size);
}

bool running_marker_sibling(char *marker, size_t marker_size, size_t stem_length, int pid,
                            unsigned sibling) {
  // Only the suffix is written again: the directory's name limit is not asked once per
  // sibling (10,000 leftover markers cost a first launch 35 ms of statfs calls).
  if (sibling > kMaxMarkerSibling || stem_length > strnlen(marker, marker_size)) return false;
  return marker_suffix(marker, stem_length, pid, sibling, marker_size);
}

namespace {

// "STEM.HOSTTAG.PID.N.tmp" with our host tag: the length of STEM and the pid, else -1.
long temp_owner_at_end(const char *name, unsigned tag, size_t *stem_length) {
  const size_t length = strlen(name);
  char expected[16];
  snprintf(expected, sizeof expected, ".%08x.", tag);
  // The shortest such tail: ".xxxxxxxx.P.N.tmp", 17 bytes; the pid at most 10 digits, N 4.
  for (size_t tail = 17; tail <= 30 && tail < length; ++tail) {
    const char *at = name + length - tail;
    if (strncmp(at, expected, 10) != 0) continue;
    const long pid = temp_owner(at + 1, tag);
    if (pid <= 0) return -1;
    *stem_length = length - tail;
    return pid;
  }
  return -1;
}

}  // namespace

int remove_dead_temps(const char *path, const char *header, PathOfPid path_of_pid, void *context) {
  char dir[kPathSize], stem[kPathSize];
  if (!directory_of(path, dir, sizeof dir) || !temp_stem(path, stem, sizeof stem)) return 0;
  const char *base = last_component(stem);
  const size_t base_length = strlen(base);
  if (base_length == 0) return 0;
  OwnDescriptor dir_own(open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), dir, /*follow=*/true);
  if (!dir_own) return 0;
  const int dir_fd = dir_own.get();
  DIR *listing = fdopendir(dir_fd);  // reads through dir_fd: proved before each entry
  if (!listing) return 0;
  const unsigned tag = host_tag();
  const uid_t me = geteuid();
  const size_t header_length = header ? strlen(header) : 0;
  int removed = 0;
  char other[kPathSize], other_dir[kPathSize], other_stem[kPathSize];
  while (dir_own.ours()) {
    const dirent *entry = readdir(listing);
    if (!entry) break;
    const char *name = entry->d_name;
    long pid = -1;
    if (strncmp(name, base, base_length) == 0 && name[base_length] == '.') {
      pid = temp_owner(name + base_length + 1, tag);
    } else if (path_of_pid) {
      // Another process's name (a %p pattern): the one the pattern gives the pid in the
      // temporary's name, in this directory, must be exactly what precedes the tail.
      size_t stem_length = 0;
      pid = temp_owner_at_end(name, tag, &stem_length);
      if (pid > 0 &&
          !(path_of_pid(pid, other, sizeof other, context) &&
            directory_of(other, other_dir, sizeof other_dir) && strcmp(other_dir, dir) == 0 &&
            temp_stem(other, other_stem, sizeof other_stem) &&
            strlen(last_component(other_stem)) == stem_length &&
            strncmp(last_component(other_stem), name, stem_length) == 0))
        pid = -1;
    }
    if (pid <= 0 || pid == static_cast<long>(getpid())) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or unknown
    OwnDescriptor temp(openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), name,
                       /*follow=*/false, dir_fd);
    if (!temp) continue;
    struct stat st {};
    bool ours =
        fstat(temp.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == me && st.st_nlink == 1;
    if (ours && st.st_size > 0) {
      char head[64];
      const size_t want = header_length < sizeof head ? header_length : sizeof head;
      ours = want > 0 && temp.ours() &&
             pread(temp.get(), head, want, 0) == static_cast<ssize_t>(want) &&
             memcmp(head, header, want) == 0;
    }
    temp.close();
    if (ours && dir_own.ours() && unlinkat(dir_fd, name, 0) == 0) ++removed;
  }
  // closedir closes dir_fd: only while it is still ours (else the DIR is left, a few KiB).
  if (dir_own.ours()) {
    dir_own.release();
    closedir(listing);
  }
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
    if (!fresh_name_within(path, n, candidate, sizeof candidate)) return ENAMETOOLONG;
    error = rename_no_replace(tmp, candidate);
    if (error == 0) snprintf(placed, placed_size, "%s", candidate);
  }
  return error;
}

namespace {

uint64_t mtime_ns(const struct stat &st) {
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000u +
         static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

}  // namespace

int place_output(const char *tmp, const char *path, const PlaceRequest &request, char *placed,
                 size_t placed_size, PlaceResult *result) {
  *result = PlaceResult{};
  // A pattern without %p gives every process of a job the same name (a forked child, the ranks
  // of a launcher). The last process to exit must not erase the others' outputs: a file written
  // since this run started belongs to a sibling, and this process writes beside it. File time
  // stamps lag by up to a kernel tick (<= 10 ms), hence the margin; the start time is rounded
  // down, which only errs towards keeping a file. Decided under the output lock, and the
  // temporary takes its name before the lock is released, so processes that exit at the same
  // moment decide one after the other.
  constexpr uint64_t kMarginNs = 10'000'000;
  for (int round = 0; round < 8; ++round) {
    struct stat st {};
    if (lstat(path, &st) != 0) {
      if (errno != ENOENT) return errno;
      const int err = rename_no_replace(tmp, path);
      if (err == 0) snprintf(placed, placed_size, "%s", path);
      if (err != EEXIST) return err;
      continue;  // it appeared meanwhile: decide again
    }
    if (S_ISDIR(st.st_mode)) return EISDIR;  // a mistake in the setting, not a file to avoid
    const bool sibling =
        request.run_start_ns != 0 && mtime_ns(st) + kMarginNs >= request.run_start_ns;
    if (sibling || !request.locked) {
      result->sibling = sibling;
      char own[kPathSize];
      if (!fresh_name_within(path, static_cast<unsigned long>(getpid()), own, sizeof own))
        return ENAMETOOLONG;
      return place_fresh(tmp, own, placed, placed_size);
    }
    const bool regular_mine = S_ISREG(st.st_mode) && st.st_uid == geteuid();
    if (S_ISREG(st.st_mode) && ((request.force && regular_mine) ||
                                (request.ours && request.ours(path, request.context)))) {
      // rename() replaces the directory entry itself; the lock keeps siblings out meanwhile.
      if (rename(tmp, path) != 0) return errno;
      snprintf(placed, placed_size, "%s", path);
      return 0;
    }
    result->diverted = true;
    result->foreign_regular = regular_mine;
    return place_fresh(tmp, path, placed, placed_size);
  }
  return EEXIST;
}

bool is_own_file_starting_with(const char *path, const char *const *headers) {
  OwnDescriptor file(open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), path);
  if (!file) return false;
  bool ours = false;
  struct stat st {};
  if (fstat(file.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
    char head[128];
    const ssize_t got = file.ours() ? pread(file.get(), head, sizeof head, 0) : -1;
    for (const char *const *h = headers; got > 0 && *h && !ours; ++h) {
      const size_t want = strlen(*h);
      ours = want > 0 && want <= static_cast<size_t>(got) && memcmp(head, *h, want) == 0;
    }
  }
  return ours;
}

namespace {
// /proc/self/stat's starttime: clock ticks after boot. False where it cannot be read.
bool process_start_ticks(unsigned long long *ticks) {
  OwnDescriptor stat_file(open("/proc/self/stat", O_RDONLY | O_CLOEXEC), "/proc/self/stat",
                          /*follow=*/true);
  char buf[1024] = {};
  const ssize_t n = stat_file.ours() ? pread(stat_file.get(), buf, sizeof buf - 1, 0) : -1;
  stat_file.close();
  if (n <= 0) return false;
  buf[n] = '\0';
  // Fields after the command name, which may itself hold spaces and parentheses.
  const char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return false;
  p += 2;  // field 3 (state); starttime is field 22
  for (int field = 3; field < 22 && *p; ++field) {
    p = strchr(p, ' ');
    if (!p) return false;
    ++p;
  }
  if (*p < '0' || *p > '9') return false;
  *ticks = strtoull(p, nullptr, 10);
  return true;
}
}  // namespace

uint64_t process_start_realtime_ns() {
  unsigned long long ticks = 0;
  if (!process_start_ticks(&ticks)) return 0;
  const long hz = sysconf(_SC_CLK_TCK);
  timespec boot{}, real{};
  if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0 ||
      clock_gettime(CLOCK_REALTIME, &real) != 0)
    return 0;
  const auto ns = [](const timespec &t) {
    return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
  };
  const uint64_t since_boot = static_cast<uint64_t>(ticks) * (1000000000u / hz);
  const uint64_t uptime = ns(boot);
  return uptime >= since_boot ? ns(real) - (uptime - since_boot) : 0;
}

uint64_t run_start_realtime_ns(const char *session_file, uint64_t also_ns) {
  uint64_t start = 0;
  const auto earliest = [&start](uint64_t t) {
    if (t != 0 && (start == 0 || t < start)) start = t;
  };
  earliest(process_start_realtime_ns());
  earliest(also_ns);
  struct stat session {};
  if (session_file && *session_file && stat(session_file, &session) == 0)
    earliest(static_cast<uint64_t>(session.st_mtim.tv_sec) * 1000000000u +
             static_cast<uint64_t>(session.st_mtim.tv_nsec));
  return start;
}

bool session_token(const char *session_file, char *out, size_t size) {
  if (!session_file || !*session_file || size == 0) return false;
  const char *slash = strrchr(session_file, '/');
  const char *name = slash ? slash + 1 : session_file;
  if (!*name || strlen(name) > 64) return false;
  for (const char *c = name; *c; ++c)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
          *c == '.' || *c == '_' || *c == '-'))
      return false;
  struct stat stamp {};
  if (stat(session_file, &stamp) != 0) return false;
  const int written =
      snprintf(out, size, "%s@%llu", name,
               static_cast<unsigned long long>(stamp.st_mtim.tv_sec) * 1000000000ull +
                   static_cast<unsigned long long>(stamp.st_mtim.tv_nsec));
  return written > 0 && static_cast<size_t>(written) < size;
}

bool process_start_key(char *out, size_t size) {
  unsigned long long ticks = 0;
  if (size == 0 || !process_start_ticks(&ticks)) return false;
  // The boot's id: starttime counts from boot, so two boots' processes may share it.
  char boot[64] = {};
  OwnDescriptor boot_file(open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC),
                          "/proc/sys/kernel/random/boot_id", /*follow=*/true);
  const ssize_t n = boot_file.ours() ? pread(boot_file.get(), boot, sizeof boot - 1, 0) : -1;
  boot_file.close();
  size_t length = n > 0 ? static_cast<size_t>(n) : 0;
  while (length > 0 && (boot[length - 1] == '\n' || boot[length - 1] == ' ')) --length;
  for (size_t i = 0; i < length; ++i) {  // a hex id with dashes; anything else is not used
    const char c = boot[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-'))
      length = 0;
  }
  if (length == 0) boot[length++] = '0';
  boot[length] = '\0';
  // The PID namespace's inode: sandboxed workers (bwrap, nsjail, `unshare --pid`) are each pid 1
  // of a namespace of their own, and those started in one clock tick share the start time.
  char ns[64] = {};
  const ssize_t ns_length = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  unsigned long long ns_inode = 0;
  if (ns_length > 0) {
    ns[ns_length] = '\0';
    const char *digits = strchr(ns, '[');
    if (digits) ns_inode = strtoull(digits + 1, nullptr, 10);
  }
  const int written = snprintf(out, size, "%s+%llu+%llu", boot, ns_inode, ticks);
  return written > 0 && static_cast<size_t>(written) < size;
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

namespace {
constexpr char kLockNamePrefix[] = "ferrum-replay-output-";
}  // namespace

bool output_lock_name(const char *dir, char *out, size_t out_size) {
  struct stat st {};
  if (stat(dir, &st) != 0) return false;
  const int n = snprintf(out, out_size, "%s%llx-%llx", kLockNamePrefix,
                         static_cast<unsigned long long>(st.st_dev),
                         static_cast<unsigned long long>(st.st_ino));
  return n > 0 && static_cast<size_t>(n) < out_size;
}

int lock_output_dir(const char *dir, int timeout_ms) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  char name[sizeof address.sun_path - 1];
  errno = 0;
  if (!output_lock_name(dir, name, sizeof name)) return errno ? -errno : -ENAMETOOLONG;
  const size_t name_length = strlen(name);
  memcpy(address.sun_path + 1, name, name_length);  // sun_path[0] == 0: the abstract namespace
  const socklen_t length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name_length);
  const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return errno ? -errno : -EIO;
  const uint64_t deadline = monotonic_ms() + static_cast<uint64_t>(timeout_ms > 0 ? timeout_ms : 0);
  int error = 0;
  for (;;) {
    if (bind(sock, reinterpret_cast<const sockaddr *>(&address), length) == 0) return sock;
    error = errno ? errno : EIO;
    if (error != EADDRINUSE || monotonic_ms() >= deadline) break;
    sleep_ms(10);
  }
  close(sock);
  return -error;
}

void unlock_output_dir(int lock) {
  if (lock < 0) return;
  // Closed only while the number still is a lock socket (own_descriptor.hpp: the program may have
  // closed ours and opened a file of its own at the number since).
  sockaddr_un bound{};
  socklen_t length = sizeof bound;
  const size_t at = offsetof(sockaddr_un, sun_path);
  const int saved = errno;
  if (getsockname(lock, reinterpret_cast<sockaddr *>(&bound), &length) == 0 &&
      bound.sun_family == AF_UNIX && length > at + sizeof kLockNamePrefix - 1 &&
      bound.sun_path[0] == '\0' &&
      memcmp(bound.sun_path + 1, kLockNamePrefix, sizeof kLockNamePrefix - 1) == 0)
    close(lock);
  errno = saved;
}

void describe_lock_failure(int lock, int timeout_ms, char *out, size_t out_size) {
  if (out_size == 0) return;
  if (lock == -EADDRINUSE) {
    char wait[32];
    if (timeout_ms % 1000 == 0)
      snprintf(wait, sizeof wait, "%d s", timeout_ms / 1000);
    else
      snprintf(wait, sizeof wait, "%d ms", timeout_ms);
    snprintf(out, out_size,
             "the output lock of its directory was held by another process for %s (a ferrum-replay "
             "one writing there, or any process of any user that took its name)",
             wait);
  } else
    snprintf(out, out_size, "the output lock of its directory cannot be taken here: %s",
             error_text(lock < 0 ? -lock : EIO));
}

}  // namespace ferrum_replay::common
