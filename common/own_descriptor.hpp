// A descriptor we opened, and the proof, before each use, that it still is the file we opened.
//
// The descriptor table is the program's. A thread of it may close a number it believes stale
// (`closefrom(3)` in a daemon, a log re-opener's `close(3)`) while we hold that number, and its
// next `open` then gets the number: from then on every use of ours acts on the program's file —
// a write lands in it (the recorder's exit report wrote 26 MB of trace JSON into a program's
// log), a read moves its offset, and our `close` closes it under the program. So every
// descriptor the shim and the recorder open is held through an OwnDescriptor: it remembers the
// file it opened (device and inode, from `fstat` right after the open), proves it before each
// use (`ours`, one `fstat`), and a number that is no longer that file is given up: not used, not
// closed (it is the program's now; ours was closed by the program). One rule for the shim, the
// recorder and common/. A file we name ourselves (a temporary, a marker, /proc and /sys files,
// an output under our directory lock) is also proved at the open against its path; the user's
// files that may be replaced while we read them (the names file, a library) are not.
//
// What is left: the instant between the proof and the use (one system call). A descriptor held
// for long — a trace written for a second at exit — is moved first to a high number
// (`move_high`), which no `open` of the program takes while lower numbers are free: a
// `close(3)` then never touches it, and a `closefrom` that does makes the next proof fail
// before the program could open a file at that number.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>

namespace ferrum_replay::common {

class OwnDescriptor {
 public:
  OwnDescriptor() = default;
  // Adopts FD, just opened by us (negative: none), and takes its file at once. With PATH (what
  // was opened, relative to DIRFD; FOLLOW: as the open followed a final symbolic link, or not),
  // the file must also be the one at that path: the program may have closed our number and
  // opened its own file there between our open and this `fstat` (under a slow sanitizer, often),
  // and adopting that file made the trace its. Not the same file: nothing is adopted, nothing
  // closed (the number is the program's; ours, if it was, the program closed). Without PATH
  // (an unnamed file) that instant is not covered.
  explicit OwnDescriptor(int fd, const char *path = nullptr, bool follow = false,
                         int dirfd = AT_FDCWD)
      : fd_(fd) {
    const int saved = errno;
    struct stat st {
    }, named{};
    if (fd_ >= 0 && ::fstat(fd_, &st) == 0 &&
        (!path || (::fstatat(dirfd, path, &named, follow ? 0 : AT_SYMLINK_NOFOLLOW) == 0 &&
                   named.st_dev == st.st_dev && named.st_ino == st.st_ino))) {
      dev_ = st.st_dev;
      ino_ = st.st_ino;
      mode_ = st.st_mode;
      errno = saved;
    } else {
      errno = fd_ < 0 ? saved : EBADF;  // the open's error; or EBADF: not the file opened
      fd_ = -1;                         // (not ours to close either)
    }
  }
  ~OwnDescriptor() { close(); }
  OwnDescriptor(const OwnDescriptor &) = delete;
  OwnDescriptor &operator=(const OwnDescriptor &) = delete;
  OwnDescriptor(OwnDescriptor &&other) noexcept { take(other); }
  OwnDescriptor &operator=(OwnDescriptor &&other) noexcept {
    if (this != &other) {
      close();
      take(other);
    }
    return *this;
  }

  // The number, for one system call right after ours() said true.
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  mode_t mode() const { return mode_; }  // the file's type and mode when adopted

  // Whether the number still is the file adopted. False once the program has closed it: the
  // number is then given up for good (no later use, no close).
  bool ours() {
    if (fd_ < 0) return false;
    const int saved = errno;
    struct stat st {};
    const bool same = ::fstat(fd_, &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_;
    errno = saved;
    if (!same) fd_ = -1;
    return same;
  }

  // Closes it when it is still ours: 0, or the error of close(2); EBADF when it no longer was
  // (nothing closed) or there was none.
  int close() {
    if (!ours()) return EBADF;
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

  // Hands the number over without closing it (to a DIR, say): the caller proves it from then on.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

  // Moves it to a number at or above half the soft limit of open files (at most 512), where the
  // program's own opens do not reach while lower numbers are free. Kept where it is when no such
  // number is free, or the limit is too low to leave room below it.
  void move_high() {
    rlimit limit{};
    if (fd_ < 0 || ::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur < 64) return;
    const rlim_t half = limit.rlim_cur / 2;
    const int floor = static_cast<int>(half < 512 ? half : 512);
    if (fd_ >= floor || !ours()) return;
    const int saved = errno;
    const int high = ::fcntl(fd_, F_DUPFD_CLOEXEC, floor);
    if (high >= 0) {
      const int low = fd_;
      fd_ = high;
      if (ours()) {
        OwnDescriptor old;  // the low number: closed only if still the same file
        old.fd_ = low;
        old.dev_ = dev_;
        old.ino_ = ino_;
      } else {
        ::close(high);  // a copy made here of what the low number had become: the program's
      }
    }
    errno = saved;
  }

  // Writes all of DATA, proving the number before each write(2): 0, or an errno value (EBADF when
  // the program took the number meanwhile; nothing more is written then).
  int write_all(const void *data, size_t length);

 private:
  void take(OwnDescriptor &other) {
    fd_ = other.fd_;
    dev_ = other.dev_;
    ino_ = other.ino_;
    mode_ = other.mode_;
    other.fd_ = -1;
  }

  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  mode_t mode_ = 0;
};

}  // namespace ferrum_replay::common
