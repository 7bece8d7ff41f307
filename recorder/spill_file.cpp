#include "spill_file.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "errno_kept.hpp"
#include "fork_window.hpp"
#include "held_here.hpp"
#include "no_cancel.hpp"
#include "own_descriptor.hpp"
#include "own_process.hpp"
#include "startup_env.hpp"
#include "write_signals.hpp"

namespace ferrum_replay::recorder {

namespace {

constexpr uint64_t kFirstSegment = uint64_t{1} << 20;  // 1 MiB
constexpr unsigned kDoublings = 7;                     // 1, 2, ... 64 MiB
constexpr uint64_t kLargeSegment = kFirstSegment << (kDoublings - 1);
constexpr uint64_t kDoublingBytes = (kFirstSegment << kDoublings) - kFirstSegment;  // 127 MiB
// Written pages go back to the file a window at a time, not after every run: each release is a
// system call and a TLB flush, and with one per 64 KiB run the spill cost 26-97 ns per event
// here, against 15-17 ns with 1 MiB windows (tests/recorder/unit/spill_test.cpp bounds what stays
// resident). Windows are aligned to the logical address space, and every segment starts and ends
// on a multiple of 1 MiB, so a window never straddles two segments.
constexpr uint64_t kReleaseWindow = kFirstSegment;
// The kernel's fault-around block (fault_around_bytes, 64 KiB): what a reader's fault may map
// (SpillFile::release). It is aligned in the process's address space, so segments are mapped at
// such an address, and blocks of the file are blocks of memory.
constexpr uint64_t kRunBlock = 64 * 1024;
// How far from the faulting page a fault may map pages: a page-cache folio (ext4's, tmpfs's) can
// be up to PMD size, 2 MiB on x86-64 (and on arm64 with 4 KiB pages), and a fault may map the
// whole folio it falls in, pages its reader had released already included. Released no further
// than the 64 KiB blocks around a run, a 20,000,000-mark run on Linux 6.18 and ext4 had a third
// of each 64 MiB segment's middle resident again as the exit report read it (RssFile 130 MB
// against 4: review NT-7).
constexpr uint64_t kFaultReach = uint64_t{2} << 20;

// `fd` mapped shared at an address aligned to kRunBlock: room for it reserved first (one block
// more, no access), the file mapped over the aligned part, the rest given back. Only our own
// reservation is ever mapped over or unmapped. A MAP_FIXED that fails may already have taken
// the old mapping away (some kernels unmap first), and another thread may have mapped something
// there since: that part is left alone (address space, at worst our PROT_NONE reservation), and
// the file is mapped wherever mmap puts it.
void *map_aligned(int fd, uint64_t size) {
  void *area = ::mmap(nullptr, size + kRunBlock, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (area == MAP_FAILED) return ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const uintptr_t start = reinterpret_cast<uintptr_t>(area);
  const uintptr_t aligned = (start + kRunBlock - 1) & ~(kRunBlock - 1);
  const uintptr_t tail = aligned + size, end = start + size + kRunBlock;
  if (aligned > start) ::munmap(area, aligned - start);
  if (end > tail) ::munmap(reinterpret_cast<void *>(tail), end - tail);
  void *mapping = ::mmap(reinterpret_cast<void *>(aligned), size, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_FIXED, fd, 0);
  if (mapping == MAP_FAILED)
    return ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return mapping;
}

uint64_t segment_size(unsigned index) {
  return index < kDoublings ? kFirstSegment << index : kLargeSegment;
}

size_t page_size() {
  static const size_t size = [] {
    const long n = sysconf(_SC_PAGESIZE);
    return n > 0 ? static_cast<size_t>(n) : size_t{4096};
  }();
  return size;
}

// An unnamed file of `size` bytes, mapped shared, its descriptor already closed; nullptr if it
// cannot be made, and `*error` says why (the program's errno is left as it was). The descriptor
// is checked to still be the file this function created before each use (own_descriptor.hpp):
// should another thread of the program close it and open a file of its own under the same number
// meanwhile, that file is left alone.
char *map_unnamed_file(const std::string &dir, uint64_t size, int *error) {
  // Called while the program records (a push may fill a chunk): errno stays the program's, also
  // after the O_TMPFILE attempt failed and the fallback succeeded; and open and close, the
  // cancellation points here, must not act on the program's request (no_cancel.hpp).
  const common::ErrnoKept errno_kept;
  const common::NoCancel no_cancel;
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::string name = dir + "/ferrum-replay-spill.XXXXXX";
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) {
    *error = errno;
    return nullptr;
  }
  *error = EBADF;                  // the descriptor was not (or no longer) the file made here
  common::OwnDescriptor file(fd);  // proved before each use, closed only if still ours
  struct stat created {};
  void *mapping = MAP_FAILED;
  if (file && ::fstat(fd, &created) == 0 && S_ISREG(created.st_mode) && created.st_nlink == 0 &&
      created.st_size == 0 && file.ours()) {
    // Real blocks, not a sparse file: a store through the mapping must never meet a full disk
    // (SIGBUS). posix_fallocate falls back to writing where fallocate is not supported; beyond
    // the host's file size limit it is EFBIG, and the SIGXFSZ that comes with it is taken back.
    // And only where the file system keeps room for the program after it (SpillFile::
    // leaves_room): refused, it is a file that could not be made, for want of space.
    bool allocated = false;
    const int no_room = SpillFile::room_on(fd, size, SpillFile::Room::spill);
    if (no_room) *error = no_room;
    if (!no_room && file.ours()) {
      const common::WriteSignalsHeld held;
      const int failed = ::posix_fallocate(fd, 0, static_cast<off_t>(size));  // not in errno
      allocated = failed == 0;
      if (!allocated) *error = failed;
    }
    if (allocated && file.ours()) {
      mapping = map_aligned(fd, size);
      if (mapping == MAP_FAILED) *error = errno;
    }
    if (mapping != MAP_FAILED && !file.ours()) {  // (then not ours to close either)
      ::munmap(mapping, size);
      mapping = MAP_FAILED;
    }
  }
  file.close();
  if (mapping == MAP_FAILED) return nullptr;
  *error = 0;
  return static_cast<char *>(mapping);
}

}  // namespace

void SpillFile::segment_of(uint64_t offset, unsigned *index, uint64_t *base, uint64_t *size) {
  if (offset < kDoublingBytes) {
    // Segment k starts at (2^k - 1) MiB.
    const uint64_t mib = offset / kFirstSegment + 1;
    unsigned k = 0;
    while ((uint64_t{2} << k) <= mib) ++k;
    *index = k;
    *base = ((uint64_t{1} << k) - 1) * kFirstSegment;
    *size = kFirstSegment << k;
    return;
  }
  const uint64_t beyond = (offset - kDoublingBytes) / kLargeSegment;
  *index = beyond >= kMaxSegments ? kMaxSegments : kDoublings + static_cast<unsigned>(beyond);
  *base = kDoublingBytes + beyond * kLargeSegment;
  *size = kLargeSegment;
}

bool SpillFile::leaves_room(uint64_t bytes, uint64_t available, uint64_t total, Room kind) {
  // A file system that reports no size (ramfs, some FUSE daemons) keeps no spill, and takes the
  // trace as it did before there was a margin: nothing can be told of its room (review TD-1).
  if (total == 0) return kind == Room::trace;
  const uint64_t fraction = total / 100 * kMinFreeFraction;
  const uint64_t larger = fraction > kMinFreeBytes ? fraction : kMinFreeBytes;
  const uint64_t smaller = fraction > kMinFreeBytes ? kMinFreeBytes : fraction;
  const uint64_t margin = kind == Room::spill ? larger : smaller;
  return available >= bytes && available - bytes >= margin;
}

int SpillFile::room_on(int fd, uint64_t bytes, Room kind) {
  const auto bytes_of = [](uint64_t blocks, uint64_t unit) {
    uint64_t product = 0;
    return __builtin_mul_overflow(blocks, unit, &product) ? UINT64_MAX : product;
  };
  struct statvfs fs {};
  if (::fstatvfs(fd, &fs) != 0) return kind == Room::trace ? 0 : errno;  // the trace: as above
  return leaves_room(bytes, bytes_of(fs.f_bavail, fs.f_frsize), bytes_of(fs.f_blocks, fs.f_frsize),
                     kind)
             ? 0
             : ENOSPC;
}

SpillFile::~SpillFile() {
  for (NameBlockNode *n = name_blocks_.load(std::memory_order_relaxed); n;) {
    NameBlockNode *next = n->next;
    delete n;
    n = next;
  }
  for (unsigned i = 0; i < kMaxSegments; ++i) {
    char *p = segments_[i].load(std::memory_order_relaxed);
    if (!p) continue;
    ::munmap(p, segment_size(i));
  }
}

unsigned SpillFile::segments() const {
  unsigned n = 0;
  for (const auto &s : segments_) n += s.load(std::memory_order_relaxed) != nullptr;
  return n;
}

void SpillFile::fail(int error) {
  int none = 0;
  failure_.compare_exchange_strong(none, error ? error : EIO, std::memory_order_relaxed);
  failed_.store(true, std::memory_order_relaxed);
}

std::string SpillFile::directory() const {
  if (directory_for_tests_) return directory_for_tests_;
  const char *tmpdir = common::startup_env("TMPDIR");
  return tmpdir && *tmpdir == '/' ? tmpdir : "/tmp";
}

char *SpillFile::map_name_block(uint64_t bytes) {
  if (failed_.load(std::memory_order_relaxed)) return nullptr;
  int error = 0;
  char *p = map_unnamed_file(directory(), bytes, &error);
  // As for a segment: what failed once (no space, no directory) is not tried at every block.
  if (!p) {
    fail(error);
    return nullptr;
  }
  // Listed for the exit report (name_blocks). Without a node the block still works: only the
  // report's reading of it is not handed back.
  const common::ErrnoKept errno_kept;
  if (auto *node = new (std::nothrow) NameBlockNode{{p, bytes}, nullptr}) {
    node->next = name_blocks_.load(std::memory_order_relaxed);
    while (!name_blocks_.compare_exchange_weak(node->next, node, std::memory_order_release,
                                               std::memory_order_relaxed)) {
    }
  }
  return p;
}

std::vector<NameSpan> SpillFile::name_blocks() const {
  std::vector<NameSpan> out;
  for (const NameBlockNode *n = name_blocks_.load(std::memory_order_acquire); n; n = n->next)
    out.push_back(n->span);
  std::sort(out.begin(), out.end(),
            [](const NameSpan &a, const NameSpan &b) { return a.data < b.data; });
  return out;
}

char *SpillFile::create_segment(unsigned index, uint64_t size) {
  // A push's spill from a fork handler (or a signal handler inside fork()) while this thread
  // holds create_mu_ for the fork (fork_window.hpp): waiting would never end. No segment: the
  // run is not written (write: not a failure of the file), its events dropped and counted.
  // (Not inside_our_lock(): the threads' and the GPU tracks' locks are held here by design.)
  if (t_holding_for_fork) return nullptr;
  const common::HeldHere lock(create_mu_);  // held_here.hpp: a push, or the exit report
  if (char *p = segments_[index].load(std::memory_order_relaxed)) return p;
  if (failed_.load(std::memory_order_relaxed)) return nullptr;
  int error = 0;
  char *p = map_unnamed_file(directory(), size, &error);
  if (!p) {
    fail(error);
    return nullptr;
  }
  segments_[index].store(p, std::memory_order_release);
  return p;
}

char *SpillFile::segment(unsigned index, bool create) {
  if (index >= kMaxSegments) return nullptr;
  if (char *p = segments_[index].load(std::memory_order_acquire)) return p;
  if (!create) return nullptr;
  return create_segment(index, segment_size(index));
}

template <class F>
bool SpillFile::for_each_piece(uint64_t offset, uint64_t bytes, bool create, F &&f) const {
  while (bytes > 0) {
    unsigned index;
    uint64_t base, size;
    segment_of(offset, &index, &base, &size);
    char *p = const_cast<SpillFile *>(this)->segment(index, create);
    if (!p) return false;
    const uint64_t within = offset - base;
    const uint64_t n = bytes < size - within ? bytes : size - within;
    f(p + within, n);
    offset += n;
    bytes -= n;
  }
  return true;
}

bool SpillFile::reserve(uint64_t count, SpillRun *run) {
  if (count > UINT32_MAX || failed_.load(std::memory_order_relaxed)) return false;
  // A child made without fork handlers (own_process.hpp) still has its parent's segments, shared
  // with the parent, and its parent's count of bytes reserved: its runs would overwrite the
  // parent's. Once per chunk, not per range.
  if (!common::state_is_this_process()) return false;
  run->offset = end_.fetch_add(count * sizeof(Event), std::memory_order_relaxed);
  run->count = static_cast<uint32_t>(count);
  return true;
}

bool SpillFile::write(const SpillRun &run, uint32_t first, const Event *events, uint32_t n) {
  if (first > run.count || n > run.count - first) return false;
  const char *from = reinterpret_cast<const char *>(events);
  const uint64_t offset = run.offset + uint64_t{first} * sizeof(Event);
  const uint64_t bytes = uint64_t{n} * sizeof(Event);
  if (!for_each_piece(offset, bytes, true, [&](char *to, uint64_t piece) {
        std::memcpy(to, from, piece);
        from += piece;
      })) {
    // The space reserved for this run stays a hole; later runs are not attempted. (The segment
    // could not be made: create_segment kept why.) Unless it was only not made here, where
    // this thread may not wait for it: later runs can still be written.
    if (!t_holding_for_fork) fail(EIO);
    return false;
  }
  written_.fetch_add(bytes, std::memory_order_relaxed);
  count_filled(offset, bytes);
  return true;
}

void SpillFile::count_filled(uint64_t offset, uint64_t bytes) {
  // The write that completes a window (its bytes counted in, by whichever thread wrote them)
  // hands the whole window back: released earlier, pages another thread was still copying into
  // would be faulted in again and stay resident.
  const uint64_t end = offset + bytes;
  for (uint64_t at = offset; at < end;) {
    const uint64_t window = at / kReleaseWindow;
    const uint64_t window_end = (window + 1) * kReleaseWindow;
    const uint64_t piece = (end < window_end ? end : window_end) - at;
    std::atomic<uint64_t> &filled = window_bytes_[window % kWindowCounters];
    if (filled.fetch_add(piece, std::memory_order_acq_rel) + piece == kReleaseWindow) {
      filled.store(0, std::memory_order_relaxed);
      release_range(window_end - kReleaseWindow, kReleaseWindow);
    }
    at += piece;
  }
}

bool SpillFile::append(const Event *events, uint32_t count, SpillRun *run) {
  SpillRun reserved;
  if (!reserve(count, &reserved) || !write(reserved, 0, events, count)) return false;
  if (count) {
    reserved.first = OrderKey::of(events[0]);
    reserved.last = OrderKey::of(events[count - 1]);
    reserved.keyed = true;
  }
  for (uint32_t i = 0; i < count; ++i) {
    reserved.uses_global_domain |= events[i].domain_id == 0;
    reserved.ranges += events[i].is_range();
  }
  *run = reserved;
  return true;
}

bool SpillFile::read(const SpillRun &run, uint32_t first, uint32_t count, Event *out) const {
  if (first > run.count || count > run.count - first) return false;
  char *to = reinterpret_cast<char *>(out);
  return for_each_piece(run.offset + uint64_t{first} * sizeof(Event),
                        uint64_t{count} * sizeof(Event), false, [&](char *from, uint64_t piece) {
                          std::memcpy(to, from, piece);
                          to += piece;
                        });
}

void SpillFile::release(const SpillRun &run, uint32_t first, uint32_t count) const {
  if (first > run.count || count > run.count - first) return;
  // The pages read through go back (not the one being read: a fault there maps it again), and
  // with them those a fault of this reader may have mapped again behind it: up to kFaultReach
  // back (a folio), neighbours' pages and pages released before included — data-safe in a
  // shared mapping (they go back to the file, and fault in again with their contents if read).
  // The run's last release reaches as far ahead too: its last faults may have mapped the start
  // of the next run, whose reader may have finished already. Blocks its neighbours' readers
  // mapped go back with theirs.
  const uint64_t page = page_size();
  const uint64_t begin = run.offset + uint64_t{first} * sizeof(Event);
  const uint64_t end = begin + uint64_t{count} * sizeof(Event);
  const uint64_t from = (begin > kFaultReach ? begin - kFaultReach : 0) / page * page;
  const uint64_t to =
      first + count == run.count ? (end + kFaultReach + page - 1) / page * page : end / page * page;
  if (to > from) release_range(from, to - from);
}

void SpillFile::release_range(uint64_t offset, uint64_t bytes) const {
  // Whole pages, rounded outwards where a range does not start or end on one (release() and the
  // windows pass whole pages already). A neighbour's bytes on the same page are safe: the mapping
  // is shared, so the page goes back to the file, not away, and faults in again with its
  // contents if anyone reads or writes it.
  const uintptr_t page = page_size();
  for_each_piece(offset, bytes, false, [&](char *from, uint64_t piece) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(from) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(from) + piece + page - 1) & ~(page - 1);
    if (end > begin) ::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_DONTNEED);
  });
}

bool SpillFile::lock_for_fork() {
  return common::lock_for_fork(create_mu_);
}

void SpillFile::unlock_after_fork() {
  create_mu_.unlock();
}

void SpillFile::forget_after_fork() {
  for (unsigned i = 0; i < kMaxSegments; ++i) {
    char *p = segments_[i].exchange(nullptr, std::memory_order_relaxed);
    if (!p) continue;
    ::munmap(p, segment_size(i));
  }
  generation_.fetch_add(1, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  failure_.store(0, std::memory_order_relaxed);
  end_.store(0, std::memory_order_relaxed);
  written_.store(0, std::memory_order_relaxed);
  for (auto &filled : window_bytes_) filled.store(0, std::memory_order_relaxed);
}

const Event *RunReader::peek() {
  if (pos_ < len_) return &batch_[pos_];
  if (next_ - released_ >= kReleaseEvery) {
    file_->release(run_, released_, next_ - released_);
    released_ = next_;
  }
  if (next_ >= run_.count) {
    if (released_ < next_) {
      file_->release(run_, released_, next_ - released_);
      released_ = next_;
    }
    return nullptr;
  }
  const uint32_t n = run_.count - next_ < kBatch ? run_.count - next_ : kBatch;
  if (!file_->read(run_, next_, n, batch_)) {
    next_ = run_.count;  // unreadable: treat the rest of the run as gone, never loop
    released_ = next_;
    len_ = pos_ = 0;
    return nullptr;
  }
  next_ += n;
  len_ = n;
  pos_ = 0;
  return &batch_[0];
}

}  // namespace ferrum_replay::recorder
