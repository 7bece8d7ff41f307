#include "gpu/gpu_engine.hpp"

#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <new>

#include "gpu/stream_watch.hpp"
#include "range/graph_record.hpp"
#include "support/log.hpp"
#include "zeroed_memory.hpp"

namespace ferrum_replay::shim::gpu {

constinit Config g_config;

void configure(bool on, uint32_t every) {
  g_config.every = every ? every : 1;
  g_config.on.store(on, std::memory_order_release);
}

constinit std::atomic<Engine *> g_engine{nullptr};

uint64_t next_engine_generation() {
  static constinit std::atomic<uint64_t> made{0};
  return made.fetch_add(1, std::memory_order_relaxed) + 1;
}

Engine &make_engine() {
  // Constructed in static storage on first use (no load-time constructor, no allocation).
  alignas(Engine) static constinit unsigned char storage[sizeof(Engine)] = {};
  static constinit std::atomic<int> state{0};
  int expected = 0;
  if (state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    g_engine.store(new (storage) Engine(), std::memory_order_release);
    state.store(2, std::memory_order_release);
  } else {
    while (state.load(std::memory_order_acquire) != 2) sched_yield();
  }
  return *g_engine.load(std::memory_order_acquire);
}

// ---- statistics ----

unsigned Histogram::bucket_of(uint64_t ns) {
  if (ns < 8) return static_cast<unsigned>(ns);
  const unsigned exponent = 63u - static_cast<unsigned>(__builtin_clzll(ns));  // >= 3
  if (exponent >= kMaxExponent) return kBuckets - 1;
  const unsigned sub = static_cast<unsigned>(ns >> (exponent - kSubBits)) & 7u;
  return 8 + (exponent - kSubBits) * 8 + sub;
}

uint64_t Histogram::midpoint(unsigned bucket) {
  if (bucket < 8) return bucket;
  const unsigned exponent = (bucket - 8) / 8 + kSubBits;
  const uint64_t sub = (bucket - 8) % 8;
  const uint64_t width = uint64_t{1} << (exponent - kSubBits);
  return ((8 + sub) << (exponent - kSubBits)) + width / 2;
}

uint64_t Histogram::percentile(double fraction, uint64_t total) const {
  if (total == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(fraction * static_cast<double>(total));
  if (static_cast<double>(rank) < fraction * static_cast<double>(total)) ++rank;  // ceil
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (unsigned b = 0; b < kBuckets; ++b) {
    seen += counts[b];
    if (seen >= rank) return midpoint(b);
  }
  return midpoint(kBuckets - 1);
}

void GraphStats::add(uint64_t ns) {
  if (count == 0 || ns < min_ns) min_ns = ns;
  if (ns > max_ns) max_ns = ns;
  ++count;
  total_ns += ns;
  histogram.add(ns);
}

void GraphStats::merge(const GraphStats &other) {
  if (other.count == 0) return;
  if (count == 0 || other.min_ns < min_ns) min_ns = other.min_ns;
  if (other.max_ns > max_ns) max_ns = other.max_ns;
  count += other.count;
  total_ns += other.total_ns;
  for (unsigned b = 0; b < Histogram::kBuckets; ++b)
    histogram.counts[b] += other.histogram.counts[b];
}

uint64_t GraphStats::percentile(double fraction) const {
  uint64_t value = histogram.percentile(fraction, count);
  if (value < min_ns) value = min_ns;
  if (value > max_ns) value = max_ns;
  return value;
}

// ---- pools ----

namespace {
// A pair's life: kFree -> kClaimed (a launch's CAS; only that thread then touches it) ->
// kRecorded (both events recorded; the reaper reads it) -> kFree. release_pool waits for
// claimed pairs, then marks every pair kDead, which no launch can claim, until the pool is made
// again.
enum PairState : uint32_t { kFree = 0, kClaimed = 1, kRecorded = 2, kDead = 3 };
enum PoolState : uint32_t { kUnused = 0, kReady = 1, kFailed = 2, kDropping = 3 };

// How long drop waits for launches that hold a claimed pair (between their two records: the
// real launch call) before it gives the pool up without destroying its events.
constexpr int kDropWaitRounds = 20000;  // ~1 s with the pauses below

// Each thread's claim cursor (Engine::begin). Initial-exec: a %fs-relative access, no call.
constinit __attribute__((tls_model("initial-exec"))) thread_local uint32_t t_claim_cursor = 0;

// The pair this thread claimed and has not ended yet (Engine::give_back_abandoned). Written by
// this thread only; a jump out of the launch leaves it set.
constinit __attribute__((tls_model("initial-exec"))) thread_local Pair *t_held_pair = nullptr;
// This thread's launch whose context had no pool, between begin() and end() (Ticket::unpooled):
// counted by give_back_abandoned when a jump skips end().
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_unpooled = false;
// The context this thread's driver last said is not green (green_current): a context that never
// gets a pool (past kMaxContexts) asked on every launch — a driver call each (review Y). A green
// context at its address later is known without asking: only cuCtxFromGreenCtx makes one
// current, and every answer of it is noted (note_green).
constinit __attribute__((tls_model("initial-exec"))) thread_local CUcontext t_not_green = nullptr;
constinit __attribute__((tls_model("initial-exec"))) thread_local uint64_t t_not_green_of = 0;

// This thread's id (gettid), once it launched on its per-thread default stream; 0 before. The
// fork child's thread asks again (Engine::reset_in_child): its id is not its parent's.
constinit __attribute__((tls_model("initial-exec"))) thread_local uint32_t t_thread_id = 0;

// A thread's first cursor: far from other threads' (its TLS block's address and a count of
// the threads seeded so far, mixed), never 0. The count, because the C library reuses an
// ended thread's stack and TLS block for the next one: with the address alone, short-lived
// threads all probed the same pairs, still taken by their predecessors' replays — 80 % of a
// churn of one-launch threads went untimed ("pool exhausted"). Once per thread.
std::atomic<uint32_t> g_threads_seeded{0};
// This thread's ordinal (from the same count, from 1) and its count of claimed pairs: a pair's
// launcher and order (UnfinishedRuns). Set with the cursor, before the thread's first claim.
constinit __attribute__((tls_model("initial-exec"))) thread_local uint32_t t_launcher = 0;
constinit __attribute__((tls_model("initial-exec"))) thread_local uint64_t t_claims = 0;
uint32_t seed_cursor() {
  const uint64_t nth = g_threads_seeded.fetch_add(1, std::memory_order_relaxed);
  t_launcher = static_cast<uint32_t>(nth) + 1;
  const uint64_t mixed =
      (reinterpret_cast<uintptr_t>(&t_claim_cursor) ^ (nth << 32)) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint32_t>(mixed >> 32) | 1u;
}

// The pair no longer needs its name (it goes back to the pool, or dies): its owner may reuse the
// text once no pair holds it. Release: the reaper's copy of the text (read_pair_locked) comes
// before the owner's reuse, which reads the count with acquire.
void let_name_go(Pair &pair) {
  if (std::atomic<uint32_t> *holds = pair.name_holds) {
    pair.name_holds = nullptr;
    holds->fetch_sub(1, std::memory_order_release);
  }
}

void short_pause() {
  timespec pause{0, 50 * 1000};
  nanosleep(&pause, nullptr);
}

// The calling thread's stream-capture mode, relaxed for the scope and restored after. The
// engine's own calls on a program thread (at instantiation, around a context's end: event and
// stream creation, event queries) are "unsafe" in CUDA's sense: in the default (global) mode
// they would invalidate a capture in progress on any thread of the program — PyTorch captures
// in that mode. The relaxed mode is never checked by a capture. (The reaper sets it once.)
class RelaxedCapture {
 public:
  // Not `needed`: the work below makes no CUDA call, and neither does this (a thread unwinding
  // out of the driver's teardown must not call it again).
  explicit RelaxedCapture(const EventApi &api, bool needed = true)
      : exchange_(needed ? api.exchange_capture_mode : nullptr) {
    if (exchange_ && exchange_(&mode_) != CUDA_SUCCESS) exchange_ = nullptr;
  }
  ~RelaxedCapture() {
    if (exchange_) exchange_(&mode_);  // gives back the mode the thread had
  }
  RelaxedCapture(const RelaxedCapture &) = delete;
  RelaxedCapture &operator=(const RelaxedCapture &) = delete;

 private:
  CUresult (*exchange_)(CUstreamCaptureMode *);
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

// Claims `candidate` for this thread if it is free: a plain load first, so that a busy pair
// costs no locked instruction.
inline Pair *try_claim(Pair &candidate) {
  if (candidate.state.load(std::memory_order_relaxed) != kFree) return nullptr;
  uint32_t expected = kFree;
  return candidate.state.compare_exchange_strong(expected, kClaimed, std::memory_order_seq_cst)
             ? &candidate
             : nullptr;
}

}  // namespace

struct Pool {
  std::atomic<uint32_t> state{kUnused};
  std::atomic<CUcontext> context{nullptr};
  int device = -1;
  CUstream own_stream = nullptr;
  CUevent reference = nullptr, trial = nullptr;
  uint64_t reference_ns = 0, bracket_error_ns = 0;
  // The clock is aligned (reference, reference_ns) before any replay is read. A pool made at a
  // graph's instantiation is aligned later, by the reaper: replays may be recorded before the
  // reference (their offsets are then negative), never read before it. Under the mutex.
  bool aligned = false;
  // When the clock was last aligned, or tried to be (CLOCK_MONOTONIC): a pass aligns it again
  // kReanchorNs later (Engine::reanchor_if_due). Under the mutex.
  uint64_t anchored_ns = 0;
  Pair pairs[kPairsPerContext];
};

Engine::~Engine() = default;

Pool *Engine::pool_of(CUcontext context, bool *known) const {
  for (uint32_t i = 0; i < kMaxContexts; ++i)
    if (keys_[i].load(std::memory_order_acquire) == context) {
      *known = true;
      return pools_[i].load(std::memory_order_acquire);
    }
  return nullptr;
}

void Engine::request_pool(CUcontext context, bool *requested, bool *full) {
  bool known = false;
  if (pool_of(context, &known) || known) return;
  for (uint32_t i = 0; i < kMaxContexts; ++i) {
    CUcontext expected = nullptr;
    if (keys_[i].load(std::memory_order_relaxed) != nullptr) continue;
    if (keys_[i].compare_exchange_strong(expected, context, std::memory_order_acq_rel)) {
      pools_used_.store(true, std::memory_order_release);
      *requested = true;
      return;
    }
    if (expected == context) return;  // another thread asked for it just now
  }
  *full = true;
}

void Engine::begin(Ticket &ticket, CUstream stream, bool per_thread, const char *name,
                   std::atomic<uint32_t> *name_holds, uint32_t category, uint64_t replay,
                   const std::atomic<uint32_t> *graph_live) {
  if (g_config.every > 1 && (replay - 1) % g_config.every != 0) {
    count(Untimed::sampled_out);
    watch_sampled_out(stream, per_thread);
    return;
  }
  const CUcontext context = current_context();
  if (!context) {
    // A launch from a static destructor or a late atexit handler comes after the exit's last
    // pass: said as such, not as a missing context (it had one).
    count(stopped_.load(std::memory_order_relaxed) ? Untimed::after_exit : Untimed::no_context);
    return;
  }
  // From here the replay's graph goes on the stream, timed or not: others must know (F79).
  open_window(stream_key(stream, per_thread, context));
  bool known = false;
  Pool *pool = pool_of(context, &known);
  if (!pool) {
    if (known)
      count(Untimed::pool_not_ready);
    else if (any_green() && known_green(context))  // never given a pool
      count(Untimed::green_context);
    else {
      ticket.unpooled = context;  // asked for, and counted, in end()
      t_unpooled = true;
    }
    return;
  }
  // A look without a locked instruction first: a pool being made or dropped, or remade for
  // another context, times nothing.
  if (pool->state.load(std::memory_order_acquire) != kReady ||
      pool->context.load(std::memory_order_relaxed) != context) {
    count(Untimed::pool_not_ready);
    return;
  }
  auto is_capturing = per_thread ? api_.is_capturing_ptsz : api_.is_capturing;
  auto record = per_thread ? api_.event_record_ptsz : api_.event_record;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!is_capturing || !record || is_capturing(stream, &capture) != CUDA_SUCCESS ||
      capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    // A captured launch runs nothing now: no window (one whose query failed keeps its own).
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE) close_window();
    count(Untimed::capturing);
    return;
  }
  // The claim: the launch path's one locked instruction on a stream one thread uses (a shared
  // one adds two: stream_watch.hpp). This thread's own cursor (no shared counter to bump),
  // seeded apart from other threads'; busy pairs are skipped by a plain load.
  uint32_t cursor = t_claim_cursor;
  if (cursor == 0) cursor = seed_cursor();
  Pair *pair = nullptr;
  for (uint32_t probe = 0; probe < kClaimProbes && !pair; ++probe)
    pair = try_claim(pool->pairs[cursor++ % kPairsPerContext]);
  // Every neighbour taken: each thread claims pairs one after another, so this cursor has most
  // likely run into another thread's block still in flight, with most of the pool free. Moving
  // on 4 at a time failed every launch until past the block: 3-6 % of 6 threads' replays went
  // untimed with 600 of 1,024 pairs in use. Pairs sampled across the pool instead, the cursor
  // moved to the free one found. Only when the neighbours are taken: a few more loads then.
  for (uint32_t sample = 1; sample <= kClaimSamples && !pair; ++sample) {
    const uint32_t at = cursor + sample * kClaimStride;
    if ((pair = try_claim(pool->pairs[at % kPairsPerContext]))) cursor = at + 1;
  }
  t_claim_cursor = cursor;
  if (!pair) {
    count(Untimed::pool_exhausted);
    return;
  }
  // Dekker with release_pool: the claim above, then the pool's state here; release_pool
  // changes the state, then waits for every claimed pair. Either it sees this claim and waits
  // for the pair, or this thread sees the pool going and lets the pair go untouched.
  if (pool->state.load(std::memory_order_seq_cst) != kReady ||
      pool->context.load(std::memory_order_relaxed) != context) {
    pair->state.store(kFree, std::memory_order_release);
    count(Untimed::pool_not_ready);
    return;
  }
  if (record(pair->start, stream) != CUDA_SUCCESS) {
    pair->state.store(kFree, std::memory_order_release);
    count(Untimed::event_error);
    return;
  }
  // The stream as the user knows it (ferrum_replay.h): NULL given to a _ptsz launch is the
  // per-thread default stream (CU_STREAM_PER_THREAD, 2), and CU_STREAM_LEGACY (1) is the
  // legacy default stream (0) — one stream, one GPU track, however the handle was spelled.
  uint64_t seen = reinterpret_cast<uint64_t>(stream);
  if (seen == reinterpret_cast<uint64_t>(CU_STREAM_LEGACY))
    seen = 0;
  else if (seen == 0 && per_thread)
    seen = reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD);
  pair->stream = seen;
  pair->context = context;
  pair->thread = 0;
  if (seen == reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD)) {
    if (__builtin_expect(t_thread_id == 0, 0)) t_thread_id = static_cast<uint32_t>(gettid());
    pair->thread = t_thread_id;
  }
  pair->name = name;
  // Held from here until the pair goes back (let_name_go). A label retired between the
  // launch's read of it and this line is its quarantine's to cover, as for the CPU range.
  if (name_holds) name_holds->fetch_add(1, std::memory_order_relaxed);
  pair->name_holds = name_holds;
  pair->category = category;
  pair->graph_live = graph_live;
  pair->replay = replay;
  pair->launcher = t_launcher;
  pair->order = ++t_claims;
  // Only the claiming thread writes a claimed pair: a plain increment, read by claims().
  pair->claims.store(pair->claims.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  ticket.pool = pool;
  ticket.pair = pair;
  ticket.per_thread = per_thread;
  ticket.stream = stream;
  t_held_pair = pair;
}

bool Engine::end(Ticket &ticket, bool launched, bool left) {
  const Untimed not_launched = left ? Untimed::abandoned : Untimed::launch_failed;
  Pool *pool = ticket.pool;
  if (!pool) {  // not timed; its window, if one is open, closes all the same
    close_window();
    const CUcontext unpooled = ticket.unpooled;
    if (!unpooled) return false;
    ticket.unpooled = nullptr;
    t_unpooled = false;
    if (!launched) {  // the context may be gone (destroyed under this thread): nothing asked
      count(not_launched);
      return false;
    }
    if (stopped_.load(std::memory_order_relaxed)) {  // the exit's last pass is over: no reaper
      count(Untimed::after_exit);
      return false;
    }
    if (green_current(unpooled)) {  // no pool: never pushed on the reaper's thread
      count(Untimed::green_context);
      return false;
    }
    bool requested = false, full = false;
    request_pool(unpooled, &requested, &full);
    count(full ? Untimed::contexts_full : Untimed::pool_not_ready);
    return requested;
  }
  ticket.pool = nullptr;
  // Given back meanwhile (give_back_abandoned: a graph call judged this one abandoned): the
  // pair may be another launch's now, and this replay is counted already.
  if (__builtin_expect(t_held_pair != ticket.pair, 0)) return false;
  t_held_pair = nullptr;
  Pair &pair = *ticket.pair;
  // The pair is claimed by this thread: release_pool waits for it before it destroys any
  // event, so both events are alive here. A pool on its way out gets its pair back unused.
  Untimed why = Untimed::count_;  // timed
  if (pool->state.load(std::memory_order_acquire) != kReady) {
    why = Untimed::context_dropped;
  } else if (!launched) {
    why = not_launched;
  } else {
    auto record = ticket.per_thread ? api_.event_record_ptsz : api_.event_record;
    if (record(pair.end, ticket.stream) != CUDA_SUCCESS) why = Untimed::event_error;
  }
  // After the last enqueue: did another thread's launch use the stream meanwhile? (F79)
  if (!close_window() && why == Untimed::count_) why = Untimed::stream_shared;
  if (__builtin_expect(why == Untimed::count_, 1)) {
    pair.state.store(kRecorded, std::memory_order_release);
    return false;
  }
  let_name_go(pair);
  pair.state.store(kFree, std::memory_order_release);
  count(why);
  return false;
}

void Engine::watch_sampled_out(CUstream stream, bool per_thread) {
  if (own_default_stream(stream, per_thread)) return;
  const bool legacy = legacy_default_stream(stream, per_thread);
  const CUcontext context = legacy ? current_context() : nullptr;  // the legacy stream's key
  if (legacy && !context) return;
  open_window(stream_key(stream, per_thread, context));
}

CUcontext Engine::current_context() {
  CUcontext context = nullptr;
  if (stopped_.load(std::memory_order_relaxed) || !api_.ctx_get_current ||
      api_.ctx_get_current(&context) != CUDA_SUCCESS)
    return nullptr;
  return context;
}

// Up to kAlignTries times: records the trial event on the pool's own idle stream and brackets its
// completion between two CLOCK_MONOTONIC reads. Each try tighter than the ones before makes its
// event the reference, the bracket's midpoint reference_ns and half its width
// bracket_error_ns, all three at once: a later try that fails leaves a reference that holds
// together. A try whose event has not completed after `spin_ns` (a busy device) is given up,
// and with `stop_when_slow` so are the tries after it. False when no try completed, or a call
// failed.
bool Engine::align(Pool &pool, uint64_t spin_ns, bool stop_when_slow) {
  pool.anchored_ns = api_.now_ns();
  uint64_t best = UINT64_MAX;
  for (int attempt = 0; attempt < kAlignTries; ++attempt) {
    const uint64_t before = api_.now_ns();
    if (api_.event_record(pool.trial, pool.own_stream) != CUDA_SUCCESS) return false;
    CUresult done = CUDA_ERROR_NOT_READY;
    uint64_t after = before;
    for (unsigned spin = 0;; ++spin) {
      done = api_.event_query(pool.trial);
      after = api_.now_ns();
      if (done != CUDA_ERROR_NOT_READY) break;
      if (after - before > spin_ns) break;  // a busy device: try again
      if (spin > 1000) sched_yield();
    }
    if (done == CUDA_ERROR_NOT_READY) {
      if (stop_when_slow) break;
      continue;
    }
    if (done != CUDA_SUCCESS) return false;
    if (after - before < best) {
      best = after - before;
      CUevent swap = pool.reference;
      pool.reference = pool.trial;
      pool.trial = swap;
      pool.reference_ns = before + (after - before) / 2;
      pool.bracket_error_ns = (best + 1) / 2;
    }
  }
  return best != UINT64_MAX;
}

// Under the mutex, on a pass (the reaper's; a flush's or the exit's without one), before a
// replay of the pool is read: aligns its clock again once the last alignment is kReanchorNs old.
// Never on the launch path, nor from a context's end on a program thread (harvest_locked): a
// replay read there against an older reference is placed less exactly, and says so
// (read_pair_locked's error). A device too busy to complete the trial event at once keeps the
// reference it had, until the next period.
// False when the pool's context turned out to have ended (the pool is forgotten).
bool Engine::reanchor_if_due(uint32_t slot, Pool &pool) {
  if (api_.now_ns() - pool.anchored_ns < kReanchorNs) return true;
  pool.anchored_ns = api_.now_ns();  // a failed try waits a period too, not one pass
  const CUcontext context = pool.context.load(std::memory_order_relaxed);
  if (!push_pool_context(slot, context))  // read on with the old reference, unless forgotten
    return keys_[slot].load(std::memory_order_acquire) == context;
  align(pool, kReanchorSpinNs, true);
  CUcontext popped = nullptr;
  api_.ctx_pop(&popped);
  return true;
}

bool Engine::push_pool_context(uint32_t slot, CUcontext context) {
  const CUresult pushed = api_.ctx_push(context);
  if (pushed == CUDA_SUCCESS) return true;
  if (context_ended(pushed, context)) forget_ended(slot, context);
  return false;
}

bool Engine::context_ended(CUresult answer, CUcontext context) {
  if (answer == CUDA_ERROR_CONTEXT_IS_DESTROYED) return true;
  if (answer != CUDA_ERROR_INVALID_CONTEXT || !context || !api_.ctx_api_version) return false;
  unsigned version = 0;
  const CUresult asked = api_.ctx_api_version(context, &version);
  return asked == CUDA_ERROR_CONTEXT_IS_DESTROYED || asked == CUDA_ERROR_INVALID_CONTEXT;
}

void Engine::note_green(CUcontext context) {
  if (!context || known_green(context)) return;
  for (auto &green : greens_) {
    CUcontext expected = nullptr;
    if (green.load(std::memory_order_relaxed) == nullptr &&
        green.compare_exchange_strong(expected, context, std::memory_order_acq_rel)) {
      greens_used_.store(true, std::memory_order_release);
      return;
    }
    if (expected == context) return;  // another thread noted it just now
  }
  if (!greens_full_said_.exchange(true, std::memory_order_relaxed))
    log_line(LogLevel::info,
             "GPU timing: more than %u green contexts at once; the others are known as green only "
             "where the driver says so (cuStreamGetCtx_v2, CUDA 12.5+)",
             kMaxGreenContexts);
}

void Engine::forget_green(CUcontext context) {
  if (!context) return;
  for (auto &green : greens_) {
    CUcontext expected = context;
    green.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
  }
}

bool Engine::known_green(CUcontext context) const {
  for (const auto &green : greens_)
    if (green.load(std::memory_order_acquire) == context) return true;
  return false;
}

bool Engine::green_current(CUcontext context) {
  if (any_green() && known_green(context)) return true;
  if (context == t_not_green && t_not_green_of == generation_) return false;
  CUcontext regular = nullptr;
  CUgreenCtx green = nullptr;
  // The NULL stream: the calling thread's current context, which is `context` (cuda.h).
  if (stopped() || !api_.stream_get_ctx_v2) return false;
  const CUresult asked = api_.stream_get_ctx_v2(nullptr, &regular, &green);
  if (asked == CUDA_SUCCESS && !green) {
    t_not_green = context;
    t_not_green_of = generation_;
  }
  if (asked != CUDA_SUCCESS || !green) return false;
  note_green(context);  // later launches in it find it without a driver call
  return true;
}

void Engine::forget_ended(uint32_t slot, CUcontext context) {
  if (!context || keys_[slot].load(std::memory_order_acquire) != context) return;
  log_line(LogLevel::info,
           "GPU timing: the driver says a context ended that the shim did not see end; its "
           "event pool is forgotten");
  release_pool(slot, false);
  rows_of_ended_context_locked(context);
}

void Engine::create_pool(uint32_t slot, bool align_now) {
  CUcontext context = keys_[slot].load(std::memory_order_acquire);
  Pool *pool = pools_[slot].load(std::memory_order_acquire);
  if (!pool) {
    // Never unmapped: a launch may read it. (Checked before constructing: a placement new on a
    // null pointer constructs at address 0, it does not return null.)
    void *memory = common::map_zeroed(sizeof(Pool));
    if (!memory) return;
    pool = new (memory) Pool();
    pools_[slot].store(pool, std::memory_order_release);
  }
  for (Pair &pair : pool->pairs) {
    pair.state.store(kFree, std::memory_order_relaxed);  // not claimable: the pool is not ready
    pair.start = pair.end = nullptr;
  }
  pool->context.store(context, std::memory_order_relaxed);
  pool->own_stream = nullptr;
  pool->reference = pool->trial = nullptr;
  pool->device = -1;
  const EventApi &a = api_;
  if (!a.event_create || !a.event_record || !a.event_query || !a.elapsed || !a.event_destroy ||
      !a.is_capturing || !a.ctx_push || !a.ctx_pop || !a.stream_create || !a.stream_destroy ||
      !a.now_ns) {
    if (!warned_api_) {
      warned_api_ = true;
      log_line(LogLevel::error,
               "GPU timing: the driver has no event API (cuEventCreate, cuEventRecord, "
               "cuEventQuery, cuEventElapsedTime, cuStreamIsCapturing...); replays are not "
               "timed");
    }
    pool->state.store(kFailed, std::memory_order_seq_cst);
    return;
  }
  if (!push_pool_context(slot, context)) {
    // Forgotten (its context ended unseen: the slot is free again), or failed for good.
    if (keys_[slot].load(std::memory_order_acquire) == context)
      pool->state.store(kFailed, std::memory_order_seq_cst);
    return;
  }
  CUdevice device = -1;
  if (a.ctx_get_device && a.ctx_get_device(&device) == CUDA_SUCCESS) pool->device = device;
  bool ok = a.stream_create(&pool->own_stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
  CUresult failed = CUDA_SUCCESS;
  if (ok && (failed = a.event_create(&pool->reference, CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
    ok = false;
  if (ok && (failed = a.event_create(&pool->trial, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) ok = false;
  for (uint32_t i = 0; ok && i < kPairsPerContext; ++i) {
    Pair &pair = pool->pairs[i];
    if ((failed = a.event_create(&pair.start, CU_EVENT_DEFAULT)) != CUDA_SUCCESS ||
        (failed = a.event_create(&pair.end, CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
      ok = false;
  }
  if (!ok && failed != CUDA_SUCCESS)
    log_line(LogLevel::error,
             "GPU timing: cuEventCreate failed (error %d) on device %d; replays in that context "
             "are not timed",
             static_cast<int>(failed), pool->device);
  pool->aligned = false;
  if (ok && align_now && !(pool->aligned = align(*pool, kAlignSpinNs, false))) {
    log_line(LogLevel::error,
             "GPU timing: could not align the GPU clock of device %d to CLOCK_MONOTONIC; replays "
             "in that context are not timed",
             pool->device);
    ok = false;
  }
  if (!ok) release_pool(slot, true);  // destroys what was made, in the live context
  CUcontext popped = nullptr;
  a.ctx_pop(&popped);
  if (!ok) {
    mark_failed(slot, pool, context);
    return;
  }
  pool->state.store(kReady, std::memory_order_seq_cst);
  if (pool->aligned)
    log_line(
        LogLevel::info, "GPU timing: %u event pairs for device %d, clock aligned within %llu ns",
        kPairsPerContext, pool->device, static_cast<unsigned long long>(pool->bracket_error_ns));
  else
    log_line(LogLevel::info, "GPU timing: %u event pairs for device %d", kPairsPerContext,
             pool->device);
}

// Under the mutex, after release_pool: `context` stays known with a failed pool, so neither a
// launch nor the reaper asks for it again until the context is dropped. The pool goes back
// into its slot even if release_pool gave it up (a launch still held a pair): a failed pool is
// never made ready again, and a fresh one mapped at every pass would grow without bound.
void Engine::mark_failed(uint32_t slot, Pool *pool, CUcontext context) {
  pool->state.store(kFailed, std::memory_order_seq_cst);
  pools_[slot].store(pool, std::memory_order_release);
  keys_[slot].store(context, std::memory_order_release);
}

// Under the mutex, off the launch path: aligns a ready pool's clock if it is not yet. False
// when it cannot be (the pool is then released: its replays count as not timed).
bool Engine::ensure_aligned(uint32_t slot) {
  Pool *pool = pools_[slot].load(std::memory_order_acquire);
  if (!pool || pool->state.load(std::memory_order_acquire) != kReady) return false;
  if (pool->aligned) return true;
  const CUcontext context = pool->context.load(std::memory_order_relaxed);
  if (!push_pool_context(slot, context)) return false;
  pool->aligned = align(*pool, kAlignSpinNs, false);
  if (!pool->aligned) {
    log_line(LogLevel::error,
             "GPU timing: could not align the GPU clock of device %d to CLOCK_MONOTONIC; replays "
             "in that context are not timed",
             pool->device);
    release_pool(slot, true);
    mark_failed(slot, pool, context);
  } else {
    log_line(LogLevel::info, "GPU timing: device %d's clock aligned within %llu ns", pool->device,
             static_cast<unsigned long long>(pool->bracket_error_ns));
  }
  CUcontext popped = nullptr;
  api_.ctx_pop(&popped);
  return pool->aligned;
}

// Under the mutex. Waits (bounded) for launches holding a claimed pair of this pool (between
// their begin() and end(): the real launch call), counts its in-flight replays, destroys its events
// when `destroy_events` (the context is alive) and frees the slot.
void Engine::release_pool(uint32_t slot, bool destroy_events) {
  Pool *pool = pools_[slot].load(std::memory_order_acquire);
  if (!pool) {
    keys_[slot].store(nullptr, std::memory_order_release);
    return;
  }
  const uint32_t was = pool->state.exchange(kDropping, std::memory_order_seq_cst);
  // Each pair, once no launch holds it, becomes kDead: unclaimable from then on. A launch that
  // holds one for longer than the bound (stuck in the real launch call) leaves it claimed.
  int round = 0;
  bool quiet = true;
  uint64_t in_flight = 0;
  for (Pair &pair : pool->pairs) {
    uint32_t seen = pair.state.load(std::memory_order_seq_cst);
    for (;;) {
      if (seen == kClaimed) {
        if (round >= kDropWaitRounds) break;
        if (++round > 64) short_pause();
        seen = pair.state.load(std::memory_order_seq_cst);
        continue;
      }
      if (pair.state.compare_exchange_weak(seen, kDead, std::memory_order_seq_cst)) break;
    }
    if (seen == kClaimed) {
      quiet = false;
      continue;
    }
    if (seen == kRecorded) let_name_go(pair);  // dead now: its replay is never read
    if (was == kReady && seen == kRecorded) ++in_flight;
  }
  for (Pair &pair : pool->pairs) {
    if (destroy_events && quiet && api_.event_destroy) {
      if (pair.start) api_.event_destroy(pair.start);
      if (pair.end) api_.event_destroy(pair.end);
    }
    if (quiet) pair.start = pair.end = nullptr;
  }
  if (in_flight) count(Untimed::context_dropped, in_flight);
  if (destroy_events && quiet) {
    if (pool->reference && api_.event_destroy) api_.event_destroy(pool->reference);
    if (pool->trial && api_.event_destroy) api_.event_destroy(pool->trial);
    if (pool->own_stream && api_.stream_destroy) api_.stream_destroy(pool->own_stream);
  }
  pool->reference = pool->trial = nullptr;
  pool->own_stream = nullptr;
  if (!quiet) {
    // A launch still holds a pair: never reuse this pool (it stays kDropping), never destroy
    // events that launch may still record.
    pools_[slot].store(nullptr, std::memory_order_release);
  } else {
    pool->state.store(kUnused, std::memory_order_seq_cst);
  }
  pool->context.store(nullptr, std::memory_order_relaxed);
  keys_[slot].store(nullptr, std::memory_order_release);
}

void Engine::drop_context_locked(CUcontext context, bool destroy_events) {
  RelaxedCapture relaxed(api_, destroy_events);
  for (uint32_t i = 0; i < kMaxContexts; ++i)
    if (context && keys_[i].load(std::memory_order_acquire) == context) {
      if (destroy_events) harvest_locked(i, kHarvestBoundNs, LastRound::every_pair);
      if (keys_[i].load(std::memory_order_acquire) != context) continue;  // forgotten meanwhile
      release_pool(i, destroy_events && !stopped_.load(std::memory_order_relaxed));
    }
}

void Engine::note_primary(int device, CUcontext context) {
  if (device >= 0 && device < kMaxDevices && context)
    primary_[device].store(context, std::memory_order_release);
}

// Whether the pool in `slot` (keyed `key`, made as `pool`, possibly not yet) goes with `device`'s
// primary context.
bool Engine::ends_with_primary(uint32_t slot, int device) const {
  const CUcontext key = keys_[slot].load(std::memory_order_acquire);
  const CUcontext primary = device >= 0 && device < kMaxDevices
                                ? primary_[device].load(std::memory_order_acquire)
                                : nullptr;
  if (primary) return key == primary;
  // The primary context is not known: every pool of the device, and requests not served yet
  // (their device is unknown until the pool is made); the next launch in a live context asks
  // again.
  const Pool *pool = pools_[slot].load(std::memory_order_acquire);
  return !pool || pool->state.load(std::memory_order_acquire) == kUnused || pool->device == device;
}

void Engine::drop_device_locked(int device, bool destroy_events) {
  RelaxedCapture relaxed(api_, destroy_events);
  for (uint32_t i = 0; i < kMaxContexts; ++i) {
    if (!keys_[i].load(std::memory_order_acquire) || !ends_with_primary(i, device)) continue;
    if (destroy_events) harvest_locked(i, kHarvestBoundNs, LastRound::every_pair);
    if (!keys_[i].load(std::memory_order_acquire)) continue;  // forgotten meanwhile
    release_pool(i, destroy_events && !stopped_.load(std::memory_order_relaxed));
  }
}

void Engine::harvest_device_locked(int device) {
  RelaxedCapture relaxed(api_);
  for (uint32_t i = 0; i < kMaxContexts; ++i) {
    if (!keys_[i].load(std::memory_order_acquire) || !ends_with_primary(i, device)) continue;
    // One round, each run's oldest unfinished replay asked about: the release is seldom the
    // last (a program may retain and release at a high rate), and asking about every replay in
    // flight made it one driver call per replay, on the program's thread (F139).
    if (pools_[i].load(std::memory_order_acquire)) harvest_locked(i, 0, LastRound::runs);
  }
}

int Engine::device_of_locked(CUcontext context) {
  if (!context) return -1;
  for (uint32_t i = 0; i < kMaxContexts; ++i) {
    const Pool *pool = pools_[i].load(std::memory_order_acquire);
    if (keys_[i].load(std::memory_order_acquire) == context && pool && pool->device >= 0)
      return pool->device;
  }
  if (stopped_.load(std::memory_order_relaxed) || !api_.ctx_push || !api_.ctx_pop ||
      !api_.ctx_get_device || api_.ctx_push(context) != CUDA_SUCCESS)
    return -1;
  CUdevice device = -1;
  if (api_.ctx_get_device(&device) != CUDA_SUCCESS) device = -1;
  CUcontext popped = nullptr;
  api_.ctx_pop(&popped);
  return device;
}

uint64_t Engine::pool_devices_locked() const {
  uint64_t devices = 0;
  for (uint32_t i = 0; i < kMaxContexts; ++i) {
    const Pool *pool = pools_[i].load(std::memory_order_acquire);
    if (keys_[i].load(std::memory_order_acquire) && pool && pool->device >= 0 &&
        pool->device < kMaxDevices)
      devices |= uint64_t{1} << pool->device;
  }
  for (int device = 0; device < kMaxDevices; ++device)
    if (primary_[device].load(std::memory_order_acquire)) devices |= uint64_t{1} << device;
  return devices;
}

void Engine::drop_context(CUcontext context) {
  lock();
  drop_context_locked(context, true);
  unlock();
}

void Engine::drop_device(int device) {
  lock();
  drop_device_locked(device, true);
  unlock();
}

void Engine::forget_device(int device) {
  lock();
  drop_device_locked(device, false);
  unlock();
}

GraphStats *Engine::stats_slot(const Pair &pair) {
  // Without the memory for the rows (an address-space limit), every graph shares `other_`,
  // which needs none: mapping it here, once per replay that found no rows, lost the replay's
  // time and the mapping.
  if (!stats_)
    stats_ = static_cast<GraphStats *>(common::map_zeroed(sizeof(GraphStats) * kMaxTimedGraphs));
  const uint32_t ordinal = pair.category;
  if (ordinal == 0 || !stats_) return &other_;
  uint32_t index = (ordinal * 2654435761u) % kMaxTimedGraphs;
  GraphStats *taken = nullptr;
  for (uint32_t probe = 0; probe < kMaxTimedGraphs; ++probe) {
    GraphStats &entry = stats_[index];
    if (entry.ordinal == ordinal) {
      // A replay in another context than the row's first (a driver that allows it): the row
      // no longer goes with either context's end — nor went with the first's, if the graph
      // still lives (review WW-1).
      if (entry.context != pair.context) {
        entry.context = nullptr;
        if (entry.dead && graph_lives(pair)) entry.dead = false;
      }
      return &entry;
    }
    if (entry.ordinal == 0) {
      taken = &entry;
      break;
    }
    index = (index + 1) % kMaxTimedGraphs;
  }
  if (!taken) {
    // Every row taken: a graph no longer live gives its row to this one — unless this graph is
    // no longer live either (a replay read after its destroy). More live timed graphs than
    // rows share `other_`. The count of retirements first: this graph retired after its
    // liveness was read moves it, and the next look sees this row (review WW-2).
    const uint64_t retired = g_graphs_retired.load(std::memory_order_acquire);
    taken = graph_lives(pair) ? find_dead_row(ordinal, retired) : nullptr;
    if (!taken) return &other_;
    other_.merge(*taken);
  }
  *taken = GraphStats();
  taken->ordinal = ordinal;
  taken->live = pair.graph_live;
  taken->context = pair.context;
  return taken;
}

bool Engine::graph_lives(const Pair &pair) {
  return !pair.graph_live || pair.graph_live->load(std::memory_order_relaxed) == pair.category;
}

GraphStats *Engine::find_dead_row(uint32_t ordinal, uint64_t retired) {
  // Each row's graph is asked (a load of its word in the registry: a cache miss each) only when
  // a graph stopped living since the last time, not at every replay of a graph beyond the rows.
  if (retired != retired_seen_) {
    retired_seen_ = retired;
    for (uint32_t i = 0; i < kMaxTimedGraphs; ++i) {
      GraphStats &row = stats_[i];
      // A dead row's word is never read again: its record may be reused meanwhile.
      if (!row.dead && row.live && row.live->load(std::memory_order_relaxed) != row.ordinal)
        row.dead = true;
    }
  }
  // The first on the probe path, so that lookups still find every row (no slot on the way was
  // ever empty).
  uint32_t index = (ordinal * 2654435761u) % kMaxTimedGraphs;
  for (uint32_t probe = 0; probe < kMaxTimedGraphs; ++probe) {
    if (stats_[index].dead) return &stats_[index];
    index = (index + 1) % kMaxTimedGraphs;
  }
  return nullptr;
}

void Engine::rows_of_ended_context_locked(CUcontext context) {
  if (!stats_ || !context) return;
  for (uint32_t i = 0; i < kMaxTimedGraphs; ++i)
    if (stats_[i].ordinal && stats_[i].context == context) stats_[i].dead = true;
}

void Engine::rows_of_ended_primary_locked(int device) {
  if (device >= 0 && device < kMaxDevices)
    rows_of_ended_context_locked(primary_[device].load(std::memory_order_acquire));
}

const GraphStats *Engine::stats_for(uint32_t ordinal) const {
  if (!stats_ || ordinal == 0) return nullptr;
  uint32_t index = (ordinal * 2654435761u) % kMaxTimedGraphs;
  for (uint32_t probe = 0; probe < kMaxTimedGraphs; ++probe) {
    const GraphStats &entry = stats_[index];
    if (entry.ordinal == ordinal) return &entry;
    if (entry.ordinal == 0) return nullptr;
    index = (index + 1) % kMaxTimedGraphs;
  }
  return nullptr;
}

bool Engine::prepare_current_context(long lock_ms) {
  const CUcontext context = current_context();
  if (!context || green_current(context)) return false;
  bool requested = false, full = false;
  request_pool(context, &requested, &full);
  // Bounded: the reaper holds the mutex across its driver calls, and one let go inside a call
  // that does not return (gpu_timing.cpp stop_reaper_locked) holds it all that time — the
  // program's instantiation waited for it, for ever. The pool is requested: a reaper's pass
  // makes it, and this thread registers at its first timed launch.
  if (!common::lock_ours_within(&mutex_, lock_ms)) return false;
  bool known = false;
  for (uint32_t slot = 0; slot < kMaxContexts; ++slot) {
    if (keys_[slot].load(std::memory_order_acquire) != context) continue;
    known = true;
    Pool *pool = pools_[slot].load(std::memory_order_acquire);
    // While a context is being ended the request stays for the reaper's next pass.
    if (ending_ == 0 && (!pool || pool->state.load(std::memory_order_acquire) == kUnused)) {
      RelaxedCapture relaxed(api_);
      create_pool(slot, false);
    }
    break;
  }
  unlock();
  return known;
}

// Under the mutex: a recorded pair whose end event has completed becomes one replay in `into`
// (and its pair goes back to the pool); one that failed is counted and freed.
Engine::ReadResult Engine::read_pair_locked(Pool &pool_ref, Pair &pair,
                                            ferrum_replay_gpu_replay *into, char *name_copy) {
  Pool *pool = &pool_ref;
  const CUresult done = api_.event_query(pair.end);
  if (done == CUDA_ERROR_NOT_READY) return ReadResult::not_ready;
  if (done != CUDA_SUCCESS && done != CUDA_ERROR_NOT_READY &&
      context_ended(done, pool->context.load(std::memory_order_relaxed)))
    return ReadResult::context_gone;  // the caller forgets the pool
  float since_reference = 0, duration = 0;
  if (done != CUDA_SUCCESS ||
      api_.elapsed(&since_reference, pool->reference, pair.start) != CUDA_SUCCESS ||
      api_.elapsed(&duration, pair.start, pair.end) != CUDA_SUCCESS || duration < 0) {
    let_name_go(pair);
    pair.state.store(kFree, std::memory_order_release);
    count(Untimed::event_error);
    return ReadResult::failed;
  }
  // The start from the reference, the length from the pair itself: each a float of
  // milliseconds, exact to 2^-24 of itself (the reference kept recent: reanchor_if_due).
  const double offset = static_cast<double>(since_reference) * 1e6;
  const double magnitude = offset < 0 ? -offset : offset;
  int64_t start = static_cast<int64_t>(pool->reference_ns) +
                  static_cast<int64_t>(offset < 0 ? offset - 0.5 : offset + 0.5);
  if (start < 0) start = 0;
  const double length_ns = static_cast<double>(duration) * 1e6;
  const uint64_t length = static_cast<uint64_t>(length_ns + 0.5);
  // Where the replay's ends lie on CLOCK_MONOTONIC: half the bracket, both floats' rounding,
  // the resolution.
  const uint64_t error = pool->bracket_error_ns +
                         static_cast<uint64_t>((magnitude + length_ns) / 16777216.0) + 1 +
                         kEventResolutionNs;
  ferrum_replay_gpu_replay &out = *into;
  out.size = sizeof out;
  out.device = pool->device;
  out.stream = pair.stream;
  out.context = reinterpret_cast<uint64_t>(pair.context);
  out.thread = pair.thread;
  out.name = pair.name;
  if (name_copy) {
    // While the pair still holds the name (let go below): the registry keeps the label until
    // then, not until the batch is delivered.
    const size_t length = strnlen(out.name, kReplayNameBytes - 1);
    memcpy(name_copy, out.name, length);
    name_copy[length] = '\0';
    out.name = name_copy;
  }
  out.category = pair.category;
  out.replay = pair.replay;
  out.start_ns = static_cast<uint64_t>(start);
  out.end_ns = static_cast<uint64_t>(start) + length;
  out.align_error_ns = error;
  if (error > align_error_max_.load(std::memory_order_relaxed))
    align_error_max_.store(error, std::memory_order_relaxed);
  stats_slot(pair)->add(length);
  let_name_go(pair);  // after the copy above
  pair.state.store(kFree, std::memory_order_release);
  timed_.fetch_add(1, std::memory_order_relaxed);
  return ReadResult::read;
}

// Under the mutex, before a context goes: reads the pool's finished replays into pending_ (the
// next pass delivers them: the reaper's, a flush's or the exit's), polling for those still running
// up to `bound_ns`: the program is ending the context, which waits for its work anyway, and a
// replay that ran before it deserves its time. What is still running then is counted by
// release_pool.
void Engine::harvest_locked(uint32_t slot, uint64_t bound_ns, LastRound last) {
  Pool *pool = pools_[slot].load(std::memory_order_acquire);
  if (!pool || pool->state.load(std::memory_order_acquire) != kReady || stopped_.load()) return;
  if (!ensure_aligned(slot)) return;
  const uint64_t deadline = api_.now_ns ? api_.now_ns() + bound_ns : 0;
  // The events' context, current on this thread while they are read (the caller's may differ).
  if (!api_.ctx_push || !push_pool_context(slot, pool->context.load(std::memory_order_relaxed)))
    return;
  struct PopOnReturn {
    const EventApi &api;
    ~PopOnReturn() {
      CUcontext popped = nullptr;
      if (api.ctx_pop) api.ctx_pop(&popped);
    }
  } pop_on_return{api_};
  // Bounded by the clock and, whatever the clock says, by the number of 50 us pauses.
  constexpr uint64_t kPauseNs = 50 * 1000;
  // Each round asks about each run's oldest unfinished replay only (UnfinishedRuns). With
  // LastRound::every_pair, once the time is up, one more asks about every pair skipped: where
  // stream order broke unseen, a finished replay skipped behind another would be counted as
  // still running.
  bool every_pair = false;
  for (uint64_t round = 0;; ++round) {
    bool running = false, skipped = false;
    UnfinishedRuns unfinished(!every_pair);
    for (Pair &pair : pool->pairs) {
      if (pair.state.load(std::memory_order_acquire) != kRecorded) continue;
      const uint32_t held = pending_count_.load(std::memory_order_relaxed);
      if (held == kPending) return;
      if (unfinished.behind(pair)) {  // running: an older replay of its run is
        skipped = true;
        continue;
      }
      const ReadResult read = read_pair_locked(*pool, pair, &pending_[held], pending_names_[held]);
      if (read == ReadResult::context_gone) {
        forget_ended(slot, pool->context.load(std::memory_order_relaxed));
        return;
      }
      // Raised after read_pair_locked counted it timed: totals() reads this first, and never
      // finds more held than timed.
      if (read == ReadResult::read) pending_count_.store(held + 1, std::memory_order_release);
      if (read == ReadResult::not_ready) {
        running = true;
        unfinished.unfinished(pair);
      }
    }
    if (!running) return;
    if (!api_.now_ns || api_.now_ns() >= deadline || round * kPauseNs >= bound_ns) {
      if (every_pair || !skipped || last != LastRound::every_pair) return;
      every_pair = true;  // at once: the time is up
      continue;
    }
    const timespec pause{0, static_cast<long>(kPauseNs)};
    nanosleep(&pause, nullptr);
  }
}

void Engine::give_back_abandoned() {
  if (window_open()) close_window();  // the stream's window the jump left open
  if (t_unpooled) {  // a launch in a context without a pool, left before end() counted it
    t_unpooled = false;
    count(Untimed::abandoned);
  }
  Pair *pair = t_held_pair;
  if (!pair) return;
  t_held_pair = nullptr;
  // Claimed by this thread: nobody else moves it out of kClaimed (release_pool waits for it,
  // then gives the pool up without touching it), and a pool's memory is never unmapped.
  let_name_go(*pair);
  pair->state.store(kFree, std::memory_order_release);
  count(Untimed::abandoned);
}

size_t Engine::reap_pass(ferrum_replay_gpu_replay *batch, size_t capacity, bool *more,
                         const std::atomic<uint64_t> *end_through, uint64_t self,
                         char (*names)[kReplayNameBytes]) {
  *more = false;
  size_t filled = 0;
  lock();
  if (stopped_.load(std::memory_order_relaxed)) {
    unlock();
    return 0;
  }
  // Replays read while their context was going away come first. Their names move with them: the
  // next context's end may fill pending_ again while this batch is delivered.
  for (uint32_t held = pending_count_.load(std::memory_order_relaxed);
       held > 0 && filled < capacity;) {
    batch[filled] = pending_[--held];
    if (names) {
      memcpy(names[filled], pending_names_[held], kReplayNameBytes);
      batch[filled].name = names[filled];
    }
    ++filled;
    pending_count_.store(held, std::memory_order_release);
  }
  if (ending_ > 0) {  // a context is being ended right now: no CUDA call until it is over
    *more = pending_count_.load(std::memory_order_relaxed) > 0;
    unlock();
    return filled;
  }
  for (uint32_t slot = 0; slot < kMaxContexts; ++slot) {
    if (!keys_[slot].load(std::memory_order_acquire)) continue;
    Pool *pool = pools_[slot].load(std::memory_order_acquire);
    if (!pool || pool->state.load(std::memory_order_acquire) == kUnused) create_pool(slot, true);
  }
  if (!mid_pass_)
    full_pass_ = full_pass_asked_.exchange(false, std::memory_order_acq_rel) ||
                 ++passes_ % kFullPassEvery == 0;
  for (uint32_t slot = 0; slot < kMaxContexts; ++slot) {
    Pool *pool = pools_[slot].load(std::memory_order_acquire);
    if (!pool || pool->state.load(std::memory_order_acquire) != kReady) continue;
    if (!ensure_aligned(slot)) continue;
    UnfinishedRuns unfinished(!full_pass_);
    bool anchored = false;  // reanchor_if_due asked this pass
    for (Pair &pair : pool->pairs) {
      if (pair.state.load(std::memory_order_acquire) != kRecorded) continue;
      if (end_through && end_through->load(std::memory_order_acquire) >= self) break;
      if (stopped_.load(std::memory_order_acquire)) break;  // stopped without the mutex: stop()
      if (filled == capacity) {
        *more = true;
        break;
      }
      if (!anchored) {  // only a pool with replays to read: an idle one costs the GPU nothing
        if (!reanchor_if_due(slot, *pool)) break;  // its context ended unseen: forgotten
        anchored = true;
      }
      if (unfinished.behind(pair)) continue;  // not finished either: no driver call
      const ReadResult read =
          read_pair_locked(*pool, pair, &batch[filled], names ? names[filled] : nullptr);
      if (read == ReadResult::context_gone) {
        forget_ended(slot, pool->context.load(std::memory_order_relaxed));
        break;
      }
      if (read == ReadResult::not_ready) unfinished.unfinished(pair);
      if (read == ReadResult::read) ++filled;
    }
  }
  // Replays read at a context's end that did not fit: the caller's next call delivers them (a
  // flush's and the exit's pass ask again only while `more`: the rest of a full batch was lost).
  if (pending_count_.load(std::memory_order_relaxed) > 0) *more = true;
  mid_pass_ = *more;
  unlock();
  return filled;
}

bool Engine::lock_at_exit() {
  if (mutex_abandoned_.load(std::memory_order_acquire)) return false;
  if (common::lock_ours_within(&mutex_, kExitLockMs)) return true;
  mutex_abandoned_.store(true, std::memory_order_release);
  return false;
}

void Engine::stop() {
  // Under the mutex, a pass in progress ends before the runtime's teardown; without it (the
  // reaper stuck inside a driver call), the reaper makes no further call should its call return
  // (reap_pass looks at stopped_ before each).
  const bool locked = lock_at_exit();
  mark_stopped();
  if (locked) unlock();
}

void Engine::reset_in_child() {
  // Only this thread exists: whoever held the mutex at the fork (the reaper, mid-pass) is gone.
  pthread_mutex_init(&mutex_, nullptr);
  pending_count_.store(0, std::memory_order_relaxed);  // the parent's replays
  t_thread_id = 0;                                     // the forking thread's, in the parent
  ending_ = 0;        // the calls in progress were the parent's threads'
  mid_pass_ = false;  // the parent's reaper's
  reset_stream_slots_in_child();
  for (auto &primary : primary_) primary.store(nullptr, std::memory_order_relaxed);
  for (auto &green : greens_) green.store(nullptr, std::memory_order_relaxed);
  greens_used_.store(false, std::memory_order_relaxed);
  for (uint32_t i = 0; i < kMaxContexts; ++i) {
    keys_[i].store(nullptr, std::memory_order_relaxed);
    if (Pool *pool = pools_[i].load(std::memory_order_relaxed)) {
      pool->state.store(kUnused, std::memory_order_relaxed);
      pool->context.store(nullptr, std::memory_order_relaxed);
      for (Pair &pair : pool->pairs) {
        let_name_go(pair);  // the parent's replays: the child's copy of their labels is free
        pair.state.store(kFree, std::memory_order_relaxed);
      }
    }
  }
  pools_used_.store(false, std::memory_order_relaxed);
  stopped_.store(false, std::memory_order_relaxed);
  timed_.store(0, std::memory_order_relaxed);
  for (auto &counter : untimed_) counter.store(0, std::memory_order_relaxed);
  align_error_max_.store(0, std::memory_order_relaxed);
  mutex_abandoned_.store(false, std::memory_order_relaxed);
  if (stats_) memset(static_cast<void *>(stats_), 0, sizeof(GraphStats) * kMaxTimedGraphs);
  other_ = GraphStats();
}

uint64_t Engine::claims() const {
  uint64_t sum = 0;
  for (uint32_t slot = 0; slot < kMaxContexts; ++slot)
    if (const Pool *pool = pools_[slot].load(std::memory_order_acquire))
      for (const Pair &pair : pool->pairs) sum += pair.claims.load(std::memory_order_relaxed);
  return sum;
}

Totals Engine::totals() const {
  Totals totals;
  // Read before `timed_`, which counted each of them first (harvest_locked): never more than it.
  const uint64_t undelivered = pending_count_.load(std::memory_order_acquire);
  for (uint32_t slot = 0; slot < kMaxContexts; ++slot) {
    const Pool *pool = pools_[slot].load(std::memory_order_acquire);
    if (!pool || pool->state.load(std::memory_order_acquire) != kReady) continue;
    for (const Pair &pair : pool->pairs)
      if (pair.state.load(std::memory_order_acquire) != kFree) ++totals.in_flight;
  }
  totals.align_error_ns = align_error_max_.load(std::memory_order_relaxed);
  totals.timed = timed_.load(std::memory_order_acquire) - undelivered;
  totals.in_flight += undelivered;
  for (unsigned i = 0; i < static_cast<unsigned>(Untimed::count_); ++i) {
    totals.untimed[i] = untimed_[i].load(std::memory_order_relaxed);
    totals.not_timed += totals.untimed[i];
  }
  return totals;
}

}  // namespace ferrum_replay::shim::gpu
