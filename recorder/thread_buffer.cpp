#include "thread_buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "errno_kept.hpp"
#include "own_process.hpp"
#include "snapshot.hpp"
#include "utf8.hpp"
#include "zeroed_memory.hpp"

namespace ferrum_replay::recorder {

namespace {
// Names are usually short and few (one per distinct range name and thread); 16 KiB holds
// hundreds. Beyond FERRUM_RECORD_MEMORY they go to spill blocks, a file and a mapping each: a
// thread's first is 64 KiB (its disk space is allocated: were it 1 MiB, 32 threads that name a
// few ranges each would take 32 MiB of $TMPDIR, of memory on a tmpfs), each next one twice the
// last, up to 1 MiB.
constexpr size_t kArenaBlock = 16 * 1024;
constexpr size_t kFirstMappedNameBlock = 64 * 1024;
constexpr size_t kMaxMappedNameBlock = size_t{1} << 20;
// Distinct names the table of one thread remembers before it starts afresh: about 256 KiB of
// table at most, against unbounded growth for a program whose every message is new.
constexpr size_t kMaxInterned = 4096;

size_t page_rounded(size_t bytes) {
  const long page = sysconf(_SC_PAGESIZE);
  const size_t unit = page > 0 ? static_cast<size_t>(page) : 4096;
  return (bytes + unit - 1) / unit * unit;
}
}  // namespace

void release_name_block(const NameBlock &block) {
  if (block.mapped)
    ::munmap(block.data, block.size);
  else
    delete[] block.data;
}

ThreadBuffer::ThreadBuffer(uint32_t tid, std::string initial_name, SpillFile *spill,
                           MemoryBudget *budget, const std::atomic<uint32_t> *shim_domain,
                           MemoryBudget *stack_room)
    : tid_(tid),
      initial_name_(std::move(initial_name)),
      head_(new_chunk(false)),
      tail_(head_),
      spill_(spill),
      budget_(budget),
      shim_domain_(shim_domain),
      stack_room_(stack_room) {
  if (!head_) throw std::bad_alloc();
}

ThreadBuffer::~ThreadBuffer() {
  free_chunks();
  if (scratch_) common::unmap_zeroed(scratch_, sizeof(Event) * Chunk::kSlots);
  for (const NameBlock &b : blocks_) release_name_block(b);
}

ThreadBuffer::Chunk *ThreadBuffer::new_chunk(bool populate) {
  const common::ErrnoKept errno_kept;  // a push that finds no memory drops its event, not errno
  // MAP_POPULATE: the chunk's pages are faulted in by this one call, not one page fault every
  // 64 events on the recording path (measured: page faults were a fifth of a range's cost).
  void *memory = common::map_zeroed(sizeof(Chunk), populate);
  if (!memory) return nullptr;
  return new (memory) Chunk;
}

void ThreadBuffer::delete_chunk(Chunk *chunk) {
  chunk->~Chunk();
  common::unmap_zeroed(chunk, sizeof(Chunk));
}

void ThreadBuffer::free_chunks() {
  for (Chunk *c = head_; c;) {
    Chunk *next = c->next.load(std::memory_order_relaxed);
    delete_chunk(c);
    c = next;
  }
  head_ = tail_ = nullptr;
}

FrameStack *ThreadBuffer::add_stack(uint32_t domain_id) {
  const common::ErrnoKept errno_kept;  // a failed allocation sets ENOMEM
  const Moving moving(*this);          // the table's FrameStacks move
  try {
    if (domain_id < kDirectStacks) {
      stacks_.resize(domain_id + 1);
      return &stacks_[domain_id];
    }
    auto stack = std::make_unique<FrameStack>();
    FrameStack *const added = stack.get();
    const auto at =
        std::lower_bound(far_stacks_.begin(), far_stacks_.end(), domain_id,
                         [](const auto &entry, uint32_t id) { return entry.first < id; });
    far_stacks_.emplace(at, domain_id, std::move(stack));
    return added;
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}

FrameStack *ThreadBuffer::find_far(uint32_t domain_id) const {
  const auto at = std::lower_bound(far_stacks_.begin(), far_stacks_.end(), domain_id,
                                   [](const auto &entry, uint32_t id) { return entry.first < id; });
  return at != far_stacks_.end() && at->first == domain_id ? at->second.get() : nullptr;
}

namespace {
// The part of a stack's room that is taken from the room all stacks share.
size_t beyond_own_room(size_t capacity) {
  return capacity > kOwnStackCapacity ? capacity - kOwnStackCapacity : 0;
}
}  // namespace

ThreadBuffer::Growth ThreadBuffer::grow(std::vector<Frame> &frames, size_t capacity) {
  const size_t before = frames.capacity();
  if (capacity <= before) return Growth::grown;
  // Taken before the allocation, given back if it fails: two threads growing at once cannot
  // both pass the bound.
  uint64_t shared = stack_room_ ? beyond_own_room(capacity) - beyond_own_room(before) : 0;
  if (shared != 0 && !stack_room_->take(shared)) {
    // The shared room is full: a stack short of its own room still gets all of that.
    if (before >= kOwnStackCapacity) return Growth::beyond_shared_room;
    capacity = kOwnStackCapacity;
    shared = 0;
  }
  const common::ErrnoKept errno_kept;  // a failed allocation sets ENOMEM
  try {
    frames.reserve(capacity);  // exactly `capacity` (a larger one would be room not counted)
  } catch (const std::bad_alloc &) {
    if (shared != 0) stack_room_->give_back(shared);
    return Growth::no_memory;
  }
  return Growth::grown;
}

void ThreadBuffer::shrink(std::vector<Frame> &frames) noexcept {
  const size_t before = frames.capacity();
  // Room for kSignalReserve more, as make_room keeps, and a quarter more frames, as it grows; its
  // own room at least.
  const size_t target =
      std::max(kOwnStackCapacity, frames.size() + frames.size() / 4 + kSignalReserve + 1);
  if (target >= before) return;
  const Moving moving(*this);          // the frames move: see moving()
  const common::ErrnoKept errno_kept;  // a failed allocation sets ENOMEM
  try {
    std::vector<Frame> smaller;
    smaller.reserve(target);
    smaller.assign(frames.begin(), frames.end());
    frames.swap(smaller);
  } catch (const std::bad_alloc &) {
    return;
  }
  if (stack_room_) stack_room_->give_back(beyond_own_room(before) - beyond_own_room(target));
}

uint64_t ThreadBuffer::shared_room_held() const {
  uint64_t held = 0;
  for (const FrameStack &stack : stacks_) held += beyond_own_room(stack.frames.capacity());
  for (const auto &far : far_stacks_) held += beyond_own_room(far.second->frames.capacity());
  return held;
}

const char *ThreadBuffer::intern(std::string_view text) {
  text = bounded_name(text);  // utf8.hpp: the one bound on a kept name
  if (text.empty()) return "";
  // A signal handler's range that interrupted this thread inside intern(): the table may be
  // half-rehashed. Its name is not copied (the range keeps a fixed one) rather than corrupt it.
  if (interning_) return "(name lost: recorded in a signal handler)";
  interning_ = true;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  const char *copy;
  try {
    copy = intern_unguarded(text);  // errno kept there, for a name not seen before
  } catch (const std::bad_alloc &) {
    // A block or the table could not grow; a block already added stays, unused or partly used.
    copy = kNameLostToMemory;
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  interning_ = false;
  return copy;
}

char *ThreadBuffer::keep(size_t bytes) {
  if (interning_) return nullptr;
  interning_ = true;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  char *kept = nullptr;
  try {
    const common::ErrnoKept errno_kept;
    constexpr size_t kAlign = 8;
    NameBlock &b = name_block(bytes + kAlign - 1);
    const size_t start =
        (reinterpret_cast<uintptr_t>(b.data + b.used) + kAlign - 1) / kAlign * kAlign -
        reinterpret_cast<uintptr_t>(b.data);
    kept = b.data + start;
    b.used = start + bytes;
  } catch (const std::bad_alloc &) {
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  interning_ = false;
  return kept;
}

const char *ThreadBuffer::intern_unguarded(std::string_view text) {
  if (auto it = interned_.find(text); it != interned_.end()) return it->data();
  // A new name: blocks and the table may be allocated, a spill block made (ENOMEM, O_TMPFILE's
  // failure), here and not on every push.
  const common::ErrnoKept errno_kept;
  const size_t need = text.size() + 1;
  NameBlock &b = name_block(need);
  char *copy = b.data + b.used;
  std::memcpy(copy, text.data(), text.size());
  copy[text.size()] = '\0';
  b.used += need;
  if (interned_.size() >= kMaxInterned) interned_.clear();
  interned_.insert(std::string_view(copy, text.size()));
  return copy;
}

NameBlock &ThreadBuffer::name_block(size_t need) {
  if (!blocks_.empty()) {
    NameBlock &last = blocks_.back();
    // A spill block of an earlier generation is its parent's too (fork): never appended to; nor
    // in a child made without fork handlers (own_process.hpp), whose blocks are all its
    // parent's (asked only for a new name beyond the budget: getpid() is a system call).
    const bool ours = !last.mapped || (spill_ && last.generation == spill_->generation() &&
                                       common::state_is_this_process());
    if (ours && last.size - last.used >= need) return last;
  }
  blocks_.reserve(blocks_.size() + 1);  // may throw: before anything is made
  NameBlock block{nullptr, 0, 0, false, 0};
  // Without a budget (a GPU track, whose names are the shim's graph names) names stay in memory.
  if (spill_ && budget_ && !budget_->take(need > kArenaBlock ? need : kArenaBlock)) {
    // Beyond the budget: a block of the spill's.
    size_t size = kFirstMappedNameBlock;
    for (const NameBlock &earlier : blocks_)
      if (earlier.mapped && size < kMaxMappedNameBlock) size *= 2;
    size = page_rounded(need > size ? need : size);
    if (char *data = spill_->map_name_block(size))  // leaves errno as it was
      block = NameBlock{data, 0, size, true, spill_->generation()};
    else
      throw std::bad_alloc();  // the budget is a bound: the name is lost, the range kept
  }
  if (!block.data) {  // within the budget, or no spill block could be made
    const size_t size = need > kArenaBlock ? need : kArenaBlock;
    block = NameBlock{new char[size], 0, size, false, 0};
  }
  if (!blocks_.empty() && blocks_.back().mapped) {
    // The full spill block goes back to its file: its names are read again only at exit (and
    // by the table above, which then faults a page back in). Data-safe for a shared mapping.
    ::madvise(blocks_.back().data, blocks_.back().size, MADV_DONTNEED);
  }
  blocks_.push_back(block);
  return blocks_.back();
}

bool ThreadBuffer::make_room() {
  // Once per full chunk, inside the program's push or pop: the spill's segments, their pages
  // handed back (madvise), a new chunk must leave its errno as it was (errno_kept.hpp).
  const common::ErrnoKept errno_kept;
  // The full tail is kept in memory (a new chunk linked after it) if the budget has room for
  // it as the exit report will hold it: its events unpacked (thread_buffer.hpp).
  if (spill_ && !(budget_ && budget_->take(uint64_t{writer_.events()} * sizeof(Event)))) {
    if (spill_tail()) return true;
    // Beyond FERRUM_RECORD_MEMORY with nowhere to spill (a read-only /tmp, a full disk): the
    // budget is a bound — a long run must not grow without end — so the event is dropped and
    // counted (memory_drops), and the exit says why (SpillFile::failure). Without a budget
    // (tests: spill every chunk) memory is all there is.
    if (budget_) return false;
  }
  Chunk *fresh = new_chunk(true);
  if (!fresh) return false;
  tail_->next.store(fresh, std::memory_order_release);
  tail_ = fresh;
  return true;
}

bool ThreadBuffer::spill_tail() {
  if (spill_->failed()) return false;  // not worth a copy and a sort
  try {
    // Sort a copy and write it without the lock: readers may go on reading the chunk, which
    // only this thread ever changes. Sorted runs let the exit writer merge, not sort.
    if (!scratch_) {  // at least one slot per event (see scratch_: no malloc here)
      void *memory = common::map_zeroed(sizeof(Event) * Chunk::kSlots);
      if (!memory) return false;
      scratch_ = static_cast<Event *>(memory);
      std::uninitialized_default_construct_n(scratch_, Chunk::kSlots);
    }
    Chunk &chunk = *tail_;
    Event *out = scratch_;
    const uint32_t n = unpack(chunk, chunk.count.load(std::memory_order_relaxed),
                              [&out](const Event &e) { *out++ = e; });
    sort_events(scratch_, scratch_ + n);
    SpillRun run;
    if (!spill_->append(scratch_, n, &run)) return false;
    // The run and the emptied chunk become visible together.
    mu_.lock();
    holder_.store(tid_, std::memory_order_relaxed);
    bool listed = false;
    try {
      runs_.push_back(run);
      listed = true;
    } catch (const std::bad_alloc &) {
      // The run stays in the spill file, unlisted; the chunk is kept as it is.
    }
    if (listed) {
      chunk.count.store(0, std::memory_order_relaxed);  // readers hold mu_: none looks
    }
    holder_.store(0, std::memory_order_relaxed);
    mu_.unlock();
    return listed;
  } catch (const std::bad_alloc &) {  // the sorted copy, or the spill file's segment
    return false;
  }
}

void ThreadBuffer::collect(std::vector<Event> *in_memory, std::vector<SpillRun> *spilled,
                           bool release_full_chunks) {
  if (!mu_.try_lock()) {
    // Held by this very thread: exit() from a signal handler that interrupted the few
    // instructions above. Waiting would never end; this thread's ranges are given up instead.
    if (holder_.load(std::memory_order_relaxed) == static_cast<uint32_t>(::gettid())) return;
    mu_.lock();
  }
  std::lock_guard lock(mu_, std::adopt_lock);
  collect_locked(in_memory, spilled, release_full_chunks);
}

void ThreadBuffer::collect_locked(std::vector<Event> *in_memory, std::vector<SpillRun> *spilled,
                                  bool release_full_chunks) {
  if (spilled) *spilled = runs_;
  if (release_full_chunks) {  // reserved once: the copy grows as the chunks go
    size_t total = 0;
    for (const Chunk *c = head_; c; c = c->next.load(std::memory_order_acquire))
      total += count_events(*c, c->count.load(std::memory_order_acquire));
    // The last chunk may gain events before it is read: room for a full chunk of them.
    in_memory->reserve(in_memory->size() + total + Chunk::kRepeatedEvents);
  }
  for (Chunk *c = head_; c;) {
    const uint32_t n = c->count.load(std::memory_order_acquire);
    unpack(*c, n, [in_memory](const Event &e) { in_memory->push_back(e); });
    Chunk *next = c->next.load(std::memory_order_acquire);
    // A chunk with a successor is full and never written again; the last may still be filling.
    if (release_full_chunks && next && c == head_) {
      head_ = next;
      delete_chunk(c);
    }
    c = next;
  }
}

void ThreadBuffer::keep_first_chunk_only() {
  Chunk *keep = head_;
  for (Chunk *c = keep->next.load(std::memory_order_relaxed); c;) {
    Chunk *next = c->next.load(std::memory_order_relaxed);
    delete_chunk(c);
    c = next;
  }
  keep->next.store(nullptr, std::memory_order_relaxed);
  keep->count.store(0, std::memory_order_relaxed);
  head_ = tail_ = keep;
}

bool ThreadBuffer::give_up(std::vector<Event> *events, std::vector<SpillRun> *runs,
                           uint64_t *reentrant_drops, uint64_t *shim_reentrant_drops,
                           uint64_t *memory_drops) {
  // Held only if the owner ended inside the few locked instructions of spill_tail (a signal
  // handler's pthread_exit): never waited for; the buffer is then simply kept.
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  collect_locked(events, runs, false);  // may throw: nothing changed yet
  events->shrink_to_fit();
  keep_first_chunk_only();
  runs_.clear();
  // The ended thread's stacks beyond their own room are freed, not kept for the next thread:
  // that room goes back to the room all stacks share (an idle buffer that kept a leak's room kept
  // it from the threads that came later: review MM-1). Their own room stays, for the next thread.
  const uint64_t held = shared_room_held();
  for (FrameStack &stack : stacks_) {
    if (stack.frames.capacity() > kOwnStackCapacity)
      std::vector<Frame>().swap(stack.frames);
    else
      stack.frames.clear();
    stack.unframed = 0;
    stack.dropped = 0;
  }
  far_stacks_.clear();  // the next thread's domains are its own
  if (stack_room_) stack_room_->give_back(held);
  *reentrant_drops += reentrant_drops_.exchange(0, std::memory_order_relaxed);
  *shim_reentrant_drops += shim_reentrant_drops_.exchange(0, std::memory_order_relaxed);
  *memory_drops += memory_drops_.exchange(0, std::memory_order_relaxed);
  open_ = 0;
  open_published_.store(0, std::memory_order_relaxed);
  shim_open_ = 0;
  shim_open_published_.store(0, std::memory_order_relaxed);
  writing_ = interning_ = false;
  active_ = drops_before_retry_ = stackless_ = 0;
  return true;
}

void ThreadBuffer::hand_names_to(std::vector<NameBlock> *keep) {
  if (keep->capacity() - keep->size() < blocks_.size())  // growing geometrically
    keep->reserve(2 * keep->capacity() + blocks_.size());
  for (const NameBlock &b : blocks_) keep->push_back(b);
  blocks_.clear();
  interned_.clear();
}

void ThreadBuffer::adopt(uint32_t tid, std::string_view name) {
  initial_name_.assign(name);
  tid_ = tid;
}

void ThreadBuffer::restart_after_fork(uint32_t tid) {
  // Only this thread exists in the child, so nobody can be reading the chunks being replaced.
  // A reader in the parent may have held mu_ at the fork: the child's copy starts afresh.
  new (&mu_) std::mutex;
  keep_first_chunk_only();
  runs_.clear();  // they are in the parent's segments, and belong to the parent's trace
  memory_drops_.store(0, std::memory_order_relaxed);  // so are the events it dropped
  reentrant_drops_.store(0, std::memory_order_relaxed);
  shim_reentrant_drops_.store(0, std::memory_order_relaxed);
  // The parent's memory ran out, not necessarily the child's: it tries again at its first full
  // chunk (it dropped 1,599 of 20,000 ranges with room to spare, review QQ-4).
  drops_before_retry_ = 0;
  tid_ = tid;
}

}  // namespace ferrum_replay::recorder
