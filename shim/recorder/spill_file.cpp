#include "spill_file.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace ferrum_replay::recorder {

namespace {

std::string spill_directory() {
  const char *dir = std::getenv("TMPDIR");
  return dir && *dir == '/' ? dir : "/tmp";
}

bool write_all_at(int fd, const char *data, size_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace

SpillFile::~SpillFile() {
  const int fd = fd_.load(std::memory_order_relaxed);
  if (fd >= 0) ::close(fd);
}

int SpillFile::open_fd() {
  int fd = fd_.load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  std::lock_guard lock(open_mu_);
  fd = fd_.load(std::memory_order_relaxed);
  if (fd >= 0 || failed_.load(std::memory_order_relaxed)) return fd;
  const std::string dir = spill_directory();
  // Unnamed where the kernel and file system allow it; otherwise a private name, unlinked as
  // soon as it exists. Mode 0600 either way: the events are nobody else's business.
  fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::string name = dir + "/ferrum-replay-spill.XXXXXX";
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) {
    failed_.store(true, std::memory_order_relaxed);
    return -1;
  }
  fd_.store(fd, std::memory_order_release);
  return fd;
}

bool SpillFile::reserve(uint64_t count, SpillRun *run) {
  if (count > UINT32_MAX || failed_.load(std::memory_order_relaxed) || open_fd() < 0) return false;
  run->offset = end_.fetch_add(count * sizeof(Event), std::memory_order_relaxed);
  run->count = static_cast<uint32_t>(count);
  return true;
}

bool SpillFile::write(const SpillRun &run, uint32_t first, const Event *events, uint32_t n) {
  const int fd = fd_.load(std::memory_order_acquire);
  if (fd < 0 || first > run.count || n > run.count - first) return false;
  if (!write_all_at(fd, reinterpret_cast<const char *>(events), size_t{n} * sizeof(Event),
                    run.offset + uint64_t{first} * sizeof(Event))) {
    // The space reserved for this run stays a hole; later runs are not attempted.
    failed_.store(true, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool SpillFile::append(const Event *events, uint32_t count, SpillRun *run) {
  SpillRun reserved;
  if (!reserve(count, &reserved) || !write(reserved, 0, events, count)) return false;
  *run = reserved;
  return true;
}

bool SpillFile::read(const SpillRun &run, uint32_t first, uint32_t count, Event *out) const {
  const int fd = fd_.load(std::memory_order_acquire);
  if (fd < 0 || first > run.count || count > run.count - first) return false;
  char *p = reinterpret_cast<char *>(out);
  size_t left = size_t{count} * sizeof(Event);
  uint64_t offset = run.offset + uint64_t{first} * sizeof(Event);
  while (left > 0) {
    const ssize_t n = ::pread(fd, p, left, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

void SpillFile::lock_for_fork() {
  open_mu_.lock();
}

void SpillFile::unlock_after_fork() {
  open_mu_.unlock();
}

void SpillFile::forget_after_fork() {
  const int fd = fd_.exchange(-1, std::memory_order_relaxed);
  if (fd >= 0) ::close(fd);
  failed_.store(false, std::memory_order_relaxed);
  end_.store(0, std::memory_order_relaxed);
}

const Event *RunReader::peek() {
  if (pos_ < len_) return &batch_[pos_];
  if (next_ >= run_.count) return nullptr;
  const uint32_t n = run_.count - next_ < kBatch ? run_.count - next_ : kBatch;
  if (!file_->read(run_, next_, n, batch_)) {
    next_ = run_.count;  // unreadable: treat the rest of the run as gone, never loop
    len_ = pos_ = 0;
    return nullptr;
  }
  next_ += n;
  len_ = n;
  pos_ = 0;
  return &batch_[0];
}

}  // namespace ferrum_replay::recorder
