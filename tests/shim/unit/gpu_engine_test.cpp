// GPU timing's engine (shim/gpu/gpu_engine.hpp) against a fake driver: pools, sampling,
// capture, exhaustion, alignment, reaping, context drops, statistics, and the settings that
// turn it on.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../support/address_space.hpp"
#include "gpu/gpu_engine.hpp"
#include "gpu/gpu_timing.hpp"
#include "range/graph_record.hpp"
#include "support/settings.hpp"

namespace gpu = ferrum_replay::shim::gpu;

namespace {

// A driver with one GPU clock per stream: an event recorded on a stream completes at the
// stream's clock (advanced by `step_ns` per record) once `now` has passed it.
struct FakeDriver {
  int get_ctx_v2_calls = 0;             // cuStreamGetCtx_v2: is the current context green?
  uint64_t now = 1000000000;            // CLOCK_MONOTONIC, ns
  uint64_t gpu_offset = 12345;          // GPU time = CPU time - offset
  uint64_t launch_ns = 50000;           // what a graph takes between its two records
  std::map<CUevent, uint64_t> done_at;  // GPU time the event completes; absent: never recorded
  std::set<CUevent> live;
  std::set<CUcontext> dead;
  CUcontext current = reinterpret_cast<CUcontext>(0x100);
  uintptr_t next_handle = 0x1000;
  bool capturing = false, capture_query_fails = false, no_events = false;
  int create_fail_after = -1;  // cuEventCreate fails after this many successes
  int creates = 0, records = 0, records_ptsz = 0, pushes = 0, calls_on_dead = 0;
  bool end_record = false;  // the next record on a user stream is an end event
  bool fail_end_records = false, fail_queries = false;  // a launch's failure, reported late
  bool queries_say_destroyed = false;  // cuEventQuery: CUDA_ERROR_CONTEXT_IS_DESTROYED
  std::set<CUcontext> refuse_push;  // cuCtxPushCurrent: CUDA_ERROR_INVALID_CONTEXT (alive or not)
  std::set<CUcontext> gone;         // cuCtxGetApiVersion: CUDA_ERROR_INVALID_CONTEXT
  std::set<CUcontext> green;        // cuStreamGetCtx_v2 names a green context for these
  std::vector<CUstream> record_streams;
  // With `queued`, a user stream runs its replays one after another, as a GPU does: a start
  // event completes when the stream's earlier work has, the end event launch_ns after it.
  bool queued = false;
  std::map<CUstream, uint64_t> busy_until;  // GPU time each stream's queued work ends
  int queries = 0;                          // cuEventQuery calls

  uint64_t gpu_now() const { return now - gpu_offset; }
};
FakeDriver *fake = nullptr;

// The calling thread's stream-capture mode (cuThreadExchangeStreamCaptureMode), global by
// default as in CUDA. An "unsafe" call (event or stream creation, event query) made in the
// global mode would invalidate a global-mode capture on any thread of a real program.
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
int unsafe_calls_in_global_mode = 0;
void unsafe_call() {
  if (t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL) ++unsafe_calls_in_global_mode;
}
CUresult exchange_capture_mode(CUstreamCaptureMode *mode) {
  const CUstreamCaptureMode previous = t_capture_mode;
  t_capture_mode = *mode;
  *mode = previous;
  return CUDA_SUCCESS;
}

void check_context() {
  if (fake->dead.count(fake->current)) ++fake->calls_on_dead;
}

CUresult event_create(CUevent *event, unsigned) {
  check_context();
  unsafe_call();
  if (fake->create_fail_after >= 0 && fake->creates >= fake->create_fail_after)
    return CUDA_ERROR_OUT_OF_MEMORY;
  ++fake->creates;
  *event = reinterpret_cast<CUevent>(fake->next_handle++);
  fake->live.insert(*event);
  return CUDA_SUCCESS;
}
CUresult record_on(CUevent event, CUstream stream) {
  if (!fake->live.count(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (fake->end_record && fake->fail_end_records) {
    fake->end_record = false;
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  fake->record_streams.push_back(stream);
  // Our own stream (the alignment) completes at once; a user stream: the start event at
  // "now", the end event launch_ns later.
  if (fake->queued && stream != reinterpret_cast<CUstream>(0xABC)) {
    uint64_t &busy = fake->busy_until[stream];
    busy = fake->end_record ? busy + fake->launch_ns : std::max(busy, fake->gpu_now());
    fake->done_at[event] = busy;
  } else {
    fake->done_at[event] = fake->gpu_now() + (fake->end_record ? fake->launch_ns : 0);
  }
  fake->end_record = !fake->end_record && stream != reinterpret_cast<CUstream>(0xABC);
  return CUDA_SUCCESS;
}
CUresult event_record(CUevent event, CUstream stream) {
  ++fake->records;
  return record_on(event, stream);
}
CUresult event_record_ptsz(CUevent event, CUstream stream) {
  ++fake->records_ptsz;
  return record_on(event, stream);
}
CUresult event_query(CUevent event) {
  ++fake->queries;
  if (fake->fail_queries) return CUDA_ERROR_LAUNCH_FAILED;
  if (fake->queries_say_destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  unsafe_call();
  if (!fake->live.count(event)) return CUDA_ERROR_INVALID_HANDLE;
  auto found = fake->done_at.find(event);
  if (found == fake->done_at.end()) return CUDA_SUCCESS;
  return found->second <= fake->gpu_now() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult elapsed(float *ms, CUevent from, CUevent to) {
  if (!fake->live.count(from) || !fake->live.count(to)) return CUDA_ERROR_INVALID_HANDLE;
  *ms = static_cast<float>(
      (static_cast<double>(fake->done_at[to]) - static_cast<double>(fake->done_at[from])) / 1e6);
  return CUDA_SUCCESS;
}
CUresult event_destroy(CUevent event) {
  check_context();
  fake->live.erase(event);
  return CUDA_SUCCESS;
}
CUresult is_capturing(CUstream, CUstreamCaptureStatus *status) {
  if (fake->capture_query_fails) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  *status = fake->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult ctx_get_current(CUcontext *context) {
  *context = fake->current;
  return CUDA_SUCCESS;
}
CUresult ctx_get_device(CUdevice *device) {
  *device = 0;
  return CUDA_SUCCESS;
}
CUcontext saved_current = nullptr;
CUresult ctx_push(CUcontext context) {
  if (fake->refuse_push.count(context)) return CUDA_ERROR_INVALID_CONTEXT;
  if (fake->dead.count(context)) {
    ++fake->calls_on_dead;
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  ++fake->pushes;
  saved_current = fake->current;
  fake->current = context;
  return CUDA_SUCCESS;
}
CUresult ctx_pop(CUcontext *context) {
  *context = fake->current;
  fake->current = saved_current;
  return CUDA_SUCCESS;
}
CUresult ctx_api_version(CUcontext context, unsigned *version) {
  if (fake->gone.count(context) || fake->dead.count(context)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;
  return CUDA_SUCCESS;
}
CUresult stream_get_ctx_v2(CUstream, CUcontext *context, CUgreenCtx *green) {
  ++fake->get_ctx_v2_calls;
  const bool is_green = fake->green.count(fake->current) != 0;
  *context = is_green ? reinterpret_cast<CUcontext>(0x42) : fake->current;
  *green = is_green ? reinterpret_cast<CUgreenCtx>(fake->current) : nullptr;
  return CUDA_SUCCESS;
}
CUresult stream_create(CUstream *stream, unsigned) {
  unsafe_call();
  *stream = reinterpret_cast<CUstream>(0xABC);
  return CUDA_SUCCESS;
}
CUresult stream_destroy(CUstream) {
  check_context();
  return CUDA_SUCCESS;
}
uint64_t now_ns() {
  return fake->now;
}

gpu::EventApi fake_api() {
  gpu::EventApi api;
  api.event_create = event_create;
  api.event_record = event_record;
  api.event_record_ptsz = event_record_ptsz;
  api.event_query = event_query;
  api.elapsed = elapsed;
  api.event_destroy = event_destroy;
  api.is_capturing = is_capturing;
  api.is_capturing_ptsz = is_capturing;
  api.ctx_get_current = ctx_get_current;
  api.ctx_get_device = ctx_get_device;
  api.ctx_push = ctx_push;
  api.ctx_pop = ctx_pop;
  api.stream_create = stream_create;
  api.stream_destroy = stream_destroy;
  api.now_ns = now_ns;
  api.exchange_capture_mode = exchange_capture_mode;
  api.ctx_api_version = ctx_api_version;
  api.stream_get_ctx_v2 = stream_get_ctx_v2;
  return api;
}

struct Fixture {
  FakeDriver driver;
  gpu::Engine *engine = new gpu::Engine();  // large: on the heap
  ferrum_replay_gpu_replay batch[2048];
  uint64_t replay = 0;
  std::atomic<uint32_t> holds{0};  // the label's count of replays in flight (launch's name)
  // Graphs' liveness words (GraphRecord::live_ordinal): graph g lives while live[g] == g.
  static constexpr uint32_t kGraphs = 4096;
  std::atomic<uint32_t> live[kGraphs] = {};
  // As the registry retires a graph: its word no longer holds its ordinal (0, or a later
  // graph's that reused the record), and the count of retirements goes up.
  void retire(uint32_t graph, uint32_t word = 0) {
    live[graph] = word;
    ferrum_replay::shim::g_graphs_retired.fetch_add(1);
  }
  // One timed replay of `graph` on stream 0x77, read at once.
  void time_one(uint32_t graph) {
    REQUIRE(launch(reinterpret_cast<CUstream>(0x77), true, false, graph));
    driver.now += 1000000;
    REQUIRE(reap() == 1);
  }

  Fixture(uint32_t every = 1) {
    fake = &driver;
    gpu::configure(true, every);
    engine->set_api(fake_api());
  }
  ~Fixture() {
    delete engine;
    gpu::configure(false, 1);
    fake = nullptr;
  }
  // One launch on `stream`: begin, (the launch), end. True when it was timed.
  bool launch(CUstream stream = reinterpret_cast<CUstream>(0x77), bool ok = true,
              bool per_thread = false, uint32_t graph = 1) {
    gpu::Ticket ticket;
    engine->begin(ticket, stream, per_thread, "graph a", &holds, graph, ++replay,
                  graph < kGraphs ? &live[graph] : nullptr);
    const bool timed = ticket.pool != nullptr;
    engine->end(ticket, ok);
    driver.end_record = false;  // a failed launch records no end event: the next is a start
    return timed;
  }
  size_t reap() {
    bool more = false;
    return engine->reap_pass(batch, 2048, &more);
  }
  // The pool made (a first launch requests it, a pass creates it); from here on each user
  // stream runs its replays one after another, `launch_ns` each.
  void queue_on_streams(uint64_t launch_ns) {
    launch();
    reap();
    driver.queued = true;
    driver.launch_ns = launch_ns;
  }
};

// The process's own engine (gpu::engine()), as the hooks use it, on a fake driver; the fake and
// the configuration go back however the case ends.
struct ProcessEngine {
  FakeDriver driver;
  gpu::Engine &timing = start(driver);
  ProcessEngine() = default;
  ~ProcessEngine() {
    gpu::configure(false, 1);
    fake = nullptr;
  }
  ProcessEngine(const ProcessEngine &) = delete;
  ProcessEngine &operator=(const ProcessEngine &) = delete;

 private:
  static gpu::Engine &start(FakeDriver &driver) {
    fake = &driver;
    gpu::configure(true, 1);
    gpu::Engine &engine = gpu::engine();
    engine.set_api(fake_api());
    return engine;
  }
};

}  // namespace

TEST_CASE("gpu histogram: buckets within 6.25 %, percentiles clamped to min and max") {
  for (uint64_t v : {0ull, 1ull, 7ull, 8ull, 9ull, 100ull, 1000ull, 123456ull, 999999999ull}) {
    const uint64_t mid = gpu::Histogram::midpoint(gpu::Histogram::bucket_of(v));
    const double error = v ? (static_cast<double>(mid) - static_cast<double>(v)) / v : 0;
    CHECK(error <= 0.0625);
    CHECK(error >= -0.0625);
  }
  // Beyond 2^40 ns: the last bucket, no overflow.
  CHECK(gpu::Histogram::bucket_of(~0ull) == gpu::Histogram::kBuckets - 1);
  gpu::GraphStats stats;
  for (uint64_t i = 1; i <= 100; ++i) stats.add(i * 1000);
  CHECK(stats.count == 100);
  CHECK(stats.min_ns == 1000);
  CHECK(stats.max_ns == 100000);
  const double p50 = static_cast<double>(stats.percentile(0.5));
  const double p99 = static_cast<double>(stats.percentile(0.99));
  CHECK(p50 >= 50000 * 0.9375);
  CHECK(p50 <= 50000 * 1.0625);
  CHECK(p99 >= 99000 * 0.9375);
  CHECK(p99 <= 100000);
  gpu::GraphStats merged;
  merged.merge(stats);
  merged.merge(stats);
  CHECK(merged.count == 200);
  CHECK(merged.percentile(0.5) == stats.percentile(0.5));
}

TEST_CASE(
    "gpu engine: the first launch asks for a pool; once made, replays are timed and aligned") {
  Fixture f;
  CHECK_FALSE(f.launch());  // the pool is requested, not there yet
  CHECK(f.reap() == 0);     // the reaper makes it (in the context, pushed and popped)
  CHECK(f.driver.pushes == 1);
  CHECK(f.driver.current == reinterpret_cast<CUcontext>(0x100));
  CHECK(f.driver.creates == 2 + 2 * static_cast<int>(gpu::kPairsPerContext));
  CHECK(f.launch());
  CHECK(f.reap() == 0);  // the GPU has not finished it yet
  CHECK(f.engine->totals().in_flight == 1);
  f.driver.now += 1000000;
  REQUIRE(f.reap() == 1);
  const ferrum_replay_gpu_replay &r = f.batch[0];
  CHECK(r.size == sizeof r);
  CHECK(r.device == 0);
  CHECK(r.stream == 0x77);
  CHECK(std::string(r.name) == "graph a");
  CHECK(r.category == 1);
  CHECK(r.replay == 2);
  CHECK(r.end_ns - r.start_ns >= 49000);
  CHECK(r.end_ns - r.start_ns <= 51000);
  // The fake's events complete instantly on our stream: the bracket is 0, so the start is
  // the CPU time of the record, within the stated bound.
  const uint64_t expected_start = 1000000000;
  const uint64_t error =
      r.start_ns > expected_start ? r.start_ns - expected_start : expected_start - r.start_ns;
  CHECK(error <= r.align_error_ns);
  CHECK(r.align_error_ns < 2000);
  gpu::Totals totals = f.engine->totals();
  CHECK(totals.timed == 1);
  CHECK(totals.in_flight == 0);
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::pool_not_ready)] == 1);
  f.engine->lock();
  const gpu::GraphStats *stats = f.engine->stats_for(1);
  REQUIRE(stats != nullptr);
  CHECK(stats->count == 1);
  f.engine->unlock();
}

// Reads a graph's row of statistics (count 0: no row) and the shared row's count.
uint64_t row_count(gpu::Engine &engine, uint32_t graph) {
  engine.lock();
  const gpu::GraphStats *stats = engine.stats_for(graph);
  const uint64_t count = stats ? stats->count : 0;
  engine.unlock();
  return count;
}
uint64_t shared_row_count(gpu::Engine &engine) {
  uint64_t count = 0;
  engine.lock();
  engine.for_each_stats_locked([&](const gpu::GraphStats &stats) {
    if (stats.ordinal == 0) count = stats.count;
  });
  engine.unlock();
  return count;
}

TEST_CASE(
    "gpu engine: a graph no longer live gives its row of statistics to a new graph once none is "
    "free; live graphs keep theirs (review KK1, UU-1)") {
  Fixture f;
  const auto stream = reinterpret_cast<CUstream>(0x77);
  auto count_of = [&](uint32_t graph) { return row_count(*f.engine, graph); };
  for (uint32_t graph = 1; graph < Fixture::kGraphs; ++graph) f.live[graph] = graph;
  CHECK_FALSE(f.launch());  // the pool is requested
  f.reap();                 // and made
  // Every row taken: graphs 1 ... 1024, one replay each; 2 ... 11 then destroyed.
  for (uint32_t graph = 1; graph <= gpu::kMaxTimedGraphs; ++graph) f.time_one(graph);
  for (uint32_t graph = 2; graph <= 11; ++graph) f.retire(graph);
  CHECK(count_of(5) == 1);  // a destroyed graph keeps its row while none is needed
  // Ten new graphs get rows: the destroyed graphs', whose time goes to the shared row.
  for (uint32_t graph = 2000; graph < 2010; ++graph) {
    f.time_one(graph);
    f.time_one(graph);
    CHECK(count_of(graph) == 2);
  }
  for (uint32_t graph = 2; graph <= 11; ++graph) CHECK(count_of(graph) == 0);
  CHECK(shared_row_count(*f.engine) == 10);
  CHECK(count_of(1) == 1);  // live graphs keep theirs
  CHECK(count_of(12) == 1);
  f.time_one(1);
  CHECK(count_of(1) == 2);
  // No dead graph's row left: an eleventh new graph shares the shared row ...
  f.time_one(2010);
  CHECK(count_of(2010) == 0);
  CHECK(shared_row_count(*f.engine) == 11);
  // ... and so does a late replay of a destroyed graph whose row went (it takes no row back).
  f.time_one(3);
  CHECK(count_of(3) == 0);
  CHECK(shared_row_count(*f.engine) == 12);
  // A graph destroyed before its replay is read (a loop that launches, synchronises and
  // destroys runs ahead of the reaper) takes no dead graph's row, though graph 13's is there.
  f.retire(13);
  REQUIRE(f.launch(stream, true, false, 2011));
  f.retire(2011);
  f.driver.now += 1000000;
  REQUIRE(f.reap() == 1);
  CHECK(count_of(2011) == 0);
  CHECK(count_of(13) == 1);
  CHECK(shared_row_count(*f.engine) == 13);
  f.time_one(2012);  // a live one does
  CHECK(count_of(2012) == 1);
  CHECK(count_of(13) == 0);
  CHECK(shared_row_count(*f.engine) == 14);
  // A record reused for another graph (its destroy long past, or its handle instantiated anew)
  // holds another ordinal: graph 14 no longer lives.
  f.retire(14, 3999);
  f.time_one(2013);
  CHECK(count_of(2013) == 1);
  CHECK(count_of(14) == 0);
  CHECK(shared_row_count(*f.engine) == 15);
}

TEST_CASE(
    "gpu engine: the graphs of a context that ended give their rows of statistics to new graphs "
    "(review UU-2)") {
  Fixture f;
  const auto stream = reinterpret_cast<CUstream>(0x77);
  const auto first = reinterpret_cast<CUcontext>(0x100),
             second = reinterpret_cast<CUcontext>(0x200),
             primary = reinterpret_cast<CUcontext>(0x300);
  auto in_context = [&](CUcontext context) {
    f.driver.current = context;
    f.launch(stream, true, false, 0);  // asks for the context's pool (graph 0: no row)
    f.reap();
  };
  auto count_of = [&](uint32_t graph) { return row_count(*f.engine, graph); };
  for (uint32_t graph = 1; graph < Fixture::kGraphs; ++graph) f.live[graph] = graph;
  // Rows: graphs 1 ... 1022 in `first`, 1023 in the device's primary context, 1024 in `second`.
  in_context(first);
  for (uint32_t graph = 1; graph <= 1022; ++graph) f.time_one(graph);
  f.engine->note_primary(0, primary);
  in_context(primary);
  f.time_one(1023);
  in_context(second);
  f.time_one(1024);
  const uint64_t shared_before = shared_row_count(*f.engine);
  // `first` destroyed (its graphs never were): after the call, their rows are dead ones (the
  // hooks' decision of when that is sure: the next test case).
  f.engine->lock();
  f.engine->drop_context_locked(first, true);
  f.engine->drop_context_locked(first, false);
  f.engine->rows_of_ended_context_locked(first);
  f.engine->unlock();
  for (uint32_t graph = 1025; graph <= 2046; ++graph) {
    f.time_one(graph);
    CHECK(count_of(graph) == 1);
  }
  CHECK(count_of(1023) == 1);  // other contexts' graphs keep theirs
  CHECK(count_of(1024) == 1);
  f.time_one(2047);  // none dead left
  CHECK(count_of(2047) == 0);
  CHECK(shared_row_count(*f.engine) == shared_before + 1022 + 1);
  // The primary context's last release (after the call): graph 1023's row is a dead one.
  f.engine->lock();
  f.engine->drop_device_locked(0, false);
  f.engine->rows_of_ended_primary_locked(0);
  f.engine->unlock();
  f.time_one(2048);
  CHECK(count_of(2048) == 1);
  CHECK(count_of(1023) == 0);
  CHECK(count_of(1024) == 1);
  CHECK(shared_row_count(*f.engine) == shared_before + 1022 + 1 + 1);
}

TEST_CASE("gpu engine: a failed launch asks for no pool: dead contexts never take the slots") {
  // A thread still has a context current after another thread destroyed it; its next launch
  // fails (CUDA_ERROR_CONTEXT_IS_DESTROYED). Asked for before the launch, the pool took a slot
  // for good (the reaper's push into the dead context failed): after kMaxContexts of them, no
  // context was ever timed again (hostile review of 2026-12-05).
  Fixture f;
  const uint64_t dead_contexts = 2 * gpu::kMaxContexts;
  for (uint64_t i = 0; i < dead_contexts; ++i) {
    f.driver.current = reinterpret_cast<CUcontext>(0x10000 + 0x100 * i);
    CHECK_FALSE(f.launch(reinterpret_cast<CUstream>(0x77), /*ok=*/false));
    f.reap();
  }
  CHECK(f.driver.pushes == 0);  // no call into any of them
  gpu::Totals totals = f.engine->totals();
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::launch_failed)] == dead_contexts);
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::contexts_full)] == 0);
  // A live context: its first launch asks, the reaper makes the pool, the next is timed.
  f.driver.current = reinterpret_cast<CUcontext>(0x100);
  CHECK_FALSE(f.launch());
  f.reap();
  CHECK(f.launch());
  totals = f.engine->totals();
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::pool_not_ready)] == 1);
}

TEST_CASE(
    "gpu engine: a first launch in a context left by a jump, or ending after exit, counts once") {
  Fixture f;
  // A context without a pool: begin() leaves the counting to end(), which a jump skips.
  gpu::Ticket left;
  f.engine->begin(left, reinterpret_cast<CUstream>(0x77), false, "g", nullptr, 1, 1);
  REQUIRE(left.unpooled != nullptr);
  f.engine->give_back_abandoned();
  f.engine->give_back_abandoned();
  gpu::Totals totals = f.engine->totals();
  CHECK(totals.not_timed == 1);
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::abandoned)] == 1);
  // A launch whose end comes after the exit's last pass asks for no pool (no reaper then).
  gpu::Ticket late;
  f.engine->begin(late, reinterpret_cast<CUstream>(0x77), false, "g", nullptr, 1, 2);
  REQUIRE(late.unpooled != nullptr);
  f.engine->stop();
  CHECK_FALSE(f.engine->end(late, true));
  totals = f.engine->totals();
  CHECK(totals.not_timed == 2);
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::after_exit)] == 1);
  f.reap();
  CHECK(f.driver.pushes == 0);  // no pool was made
}

TEST_CASE("gpu engine: per-thread launches record with the _ptsz entry point") {
  Fixture f;
  f.launch();
  f.reap();
  const int legacy = f.driver.records;
  CHECK(f.launch(nullptr, true, true));
  CHECK(f.driver.records_ptsz == 2);
  CHECK(f.driver.records == legacy);
}

TEST_CASE("gpu engine: without room for its rows of statistics, every timed replay is counted" *
          doctest::skip(kNoAddressSpaceLimit)) {
  // The rows of GPU statistics (a few MiB) are mapped at the first reap. Under an address-space
  // limit that leaves no room for them (ulimit -v) the replays timed must still reach the
  // statistics the summary prints (the row of graphs without one of their own), and nothing
  // may be mapped per replay meanwhile.
  const int failed = in_child([&]() -> int {
    Fixture f;
    f.launch();
    f.reap();  // the pool is made
    if (!limit_address_space_to_now(256 * 1024)) return 2;
    uint64_t timed = 0;
    for (int i = 0; i < 200; ++i) {
      timed += f.launch();
      f.driver.now += 1000000;
      f.reap();
    }
    if (timed != 200) return 3;
    uint64_t counted = 0;
    f.engine->lock();
    f.engine->for_each_stats_locked([&](const gpu::GraphStats &stats) { counted += stats.count; });
    f.engine->unlock();
    return counted == timed ? 0 : 4;
  });
  CHECK(failed == 0);
}

TEST_CASE("gpu engine: a capturing stream (or a failed query) is never recorded on") {
  Fixture f;
  f.launch();
  f.reap();
  const int records = f.driver.records;
  f.driver.capturing = true;
  CHECK_FALSE(f.launch());
  f.driver.capturing = false;
  f.driver.capture_query_fails = true;
  CHECK_FALSE(f.launch());
  CHECK(f.driver.records == records);
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::capturing)] == 2);
}

TEST_CASE("gpu engine: a launch left by a jump gives its pair back; a late end leaves it alone") {
  Fixture f;
  f.launch();
  f.reap();
  const uint64_t timed = f.engine->totals().timed;
  gpu::Ticket left;
  f.engine->begin(left, reinterpret_cast<CUstream>(0x77), false, "g", nullptr, 1, 2);
  REQUIRE(left.pool != nullptr);
  const int records = f.driver.records;  // the start event's
  // The thread's next outermost graph call finds this one abandoned (siglongjmp): the pair
  // goes back, the replay counts as not timed.
  f.engine->give_back_abandoned();
  f.engine->give_back_abandoned();  // nothing held any more: nothing counted twice
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::abandoned)] == 1);
  // Judged abandoned wrongly, the launch still reaches end(): it records nothing on a pair
  // that may be another launch's now.
  f.engine->end(left, true);
  CHECK(f.driver.records == records);
  f.driver.now += 1000000;
  f.reap();
  CHECK(f.engine->totals().timed == timed);
  // Every pair is claimable again: a full pool's worth of launches, each timed.
  for (uint32_t i = 0; i < gpu::kPairsPerContext; ++i) CHECK(f.launch());
}

TEST_CASE("gpu engine: every Nth replay of a graph is timed; the rest counted as sampled out") {
  Fixture f(3);
  f.launch();  // replay 1: timed but no pool yet
  f.reap();
  int timed = 0;
  for (int i = 0; i < 30; ++i) timed += f.launch();
  CHECK(timed == 10);  // replays 4, 7, ..., 31
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::sampled_out)] == 20);
}

TEST_CASE(
    "gpu engine: an exhausted pool leaves replays untimed, never waits; reaping frees pairs") {
  Fixture f;
  f.launch();
  f.reap();
  int timed = 0;
  const int burst = static_cast<int>(gpu::kPairsPerContext) + 200;
  for (int i = 0; i < burst; ++i) timed += f.launch();
  CHECK(timed >= static_cast<int>(gpu::kPairsPerContext) * 95 / 100);
  CHECK(timed <= static_cast<int>(gpu::kPairsPerContext));
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::pool_exhausted)] ==
        static_cast<uint64_t>(burst - timed));
  f.driver.now += 10000000;
  CHECK(f.reap() == static_cast<size_t>(timed));
  CHECK(f.launch());  // pairs are back
}

TEST_CASE("gpu engine: a burst of a few hundred replays on one stream is timed in full") {
  Fixture f;
  f.launch();
  f.reap();
  int timed = 0;
  for (int i = 0; i < 500; ++i) timed += f.launch();
  CHECK(timed == 500);
}

TEST_CASE(
    "gpu engine: replays read minutes after the clock's first alignment keep exact starts and "
    "lengths: consecutive replays of a stream end to end, the error bound small (F138)") {
  // cuEventElapsedTime answers a float of milliseconds: a start read against a reference 140 s
  // old was rounded to a 15.6 us grid, and consecutive 10 us replays of a stream got equal
  // starts (the recorder then showed a third of them 0 us long). The fake's elapsed times are
  // floats of milliseconds too.
  Fixture f;
  f.queue_on_streams(10000);  // the pool made and aligned; then 10 us replays, back to back
  for (const uint64_t later_s : {140ull, 140ull + 86400ull}) {  // a long run, then a day on
    f.driver.now += later_s * 1000 * 1000 * 1000;
    for (int i = 0; i < 300; ++i) REQUIRE(f.launch());
    f.driver.now += 10 * 1000 * 1000;  // all finished
    REQUIRE(f.reap() == 300);
    std::vector<ferrum_replay_gpu_replay> read(f.batch, f.batch + 300);
    std::sort(read.begin(), read.end(),
              [](const auto &a, const auto &b) { return a.replay < b.replay; });
    bool end_to_end = true, exact = true, bounded = true;
    for (size_t i = 0; i < read.size(); ++i) {
      exact &= read[i].end_ns - read[i].start_ns == 10000;
      if (i > 0) end_to_end &= read[i].start_ns == read[i - 1].end_ns;
      bounded &= read[i].align_error_ns < 1000;  // bracket 0 here, resolution 500, rounding
    }
    CHECK(exact);
    CHECK(end_to_end);
    CHECK(bounded);
    CHECK(f.engine->totals().align_error_ns < 1000);
    // On the trace's clock: the first one started when it was launched.
    CHECK(read[0].start_ns + 10 * 1000 * 1000 == f.driver.now);
  }
}

TEST_CASE(
    "gpu engine: a pass asks the driver about each run's oldest unfinished replay, not about "
    "every replay in flight; every finished one is read at the next pass") {
  Fixture f;
  f.queue_on_streams(1000000);
  const auto a = reinterpret_cast<CUstream>(0x77), b = reinterpret_cast<CUstream>(0x88),
             c = reinterpret_cast<CUstream>(0x99);
  // Stream c: three replays of another thread's, then five of this one's (two runs on one
  // stream); a: 200 queued; b: 10. All queued at once; the streams run side by side. (Three,
  // fewer than kClaimProbes: wherever the two threads' cursors lie, each launch of this thread
  // finds a free pair among its neighbours, and every launch is timed without the samples.)
  static_assert(gpu::kClaimProbes > 3);
  std::thread other([&] {
    for (int i = 0; i < 3; ++i) REQUIRE(f.launch(c));
  });
  other.join();
  for (int i = 0; i < 200; ++i) {
    REQUIRE(f.launch(a));
    if (i < 10) REQUIRE(f.launch(b));
    if (i < 5) REQUIRE(f.launch(c));
  }
  const uint64_t queued_at = f.driver.now;
  f.driver.queries = 0;
  size_t read = 0, passes = 0, read_b = 0;
  while (read < 218 && passes < 2000) {
    f.driver.now += 250000;
    const size_t got = f.reap();
    ++passes;
    for (size_t i = 0; i < got; ++i) read_b += f.batch[i].stream == 0x88;
    read += got;
    const uint64_t done = (f.driver.now - queued_at) / 1000000;  // replays each stream finished
    const size_t finished =
        std::min<uint64_t>(done, 200) + std::min<uint64_t>(done, 10) + std::min<uint64_t>(done, 8);
    REQUIRE(read == finished);  // none held back behind another run
    REQUIRE(read_b == std::min<uint64_t>(done, 10));
  }
  CHECK(read == 218);
  CHECK(f.engine->totals().in_flight == 0);
  // One query per replay read, and at most one per run and pass besides (four runs: a, b, and
  // c's two), plus every pair in flight in a pass of every kFullPassEvery. Asking about every
  // pair in flight in every pass made it some 80,000.
  CHECK(static_cast<size_t>(f.driver.queries) <=
        218 + 4 * passes + 218 * (passes / gpu::Engine::kFullPassEvery + 1));
  MESSAGE("passes=", passes, " queries=", f.driver.queries);
}

TEST_CASE(
    "gpu engine: where stream order breaks unseen (a stream handle reused while its old work "
    "runs), a finished replay is read within kFullPassEvery passes, and by a pass asked for") {
  Fixture f;
  f.queue_on_streams(1000);
  const auto handle = reinterpret_cast<CUstream>(0x77);
  // A long replay on the stream; the stream destroyed, a new one gets the same handle (the
  // fake forgets the old stream's queue) and runs a short replay, which finishes first.
  const auto long_then_short_on_reused_handle = [&] {
    f.driver.launch_ns = 1000 * 1000 * 1000;
    REQUIRE(f.launch(handle));
    f.driver.busy_until.erase(handle);
    f.driver.launch_ns = 1000;
    REQUIRE(f.launch(handle));
    f.driver.now += 100000;  // the short one has finished, the long one has not
  };
  for (int round = 0; round < 2; ++round) {
    long_then_short_on_reused_handle();
    size_t read = 0, passes = 0;
    if (round == 0) {
      while (read == 0 && passes < 2 * gpu::Engine::kFullPassEvery) {
        read += f.reap();
        ++passes;
      }
      CHECK(passes <= gpu::Engine::kFullPassEvery);
    } else {
      f.engine->ask_full_pass();  // a flush, the exit
      read += f.reap();
      passes = 1;
    }
    CHECK(read == 1);  // the short one
    CHECK(f.batch[0].end_ns - f.batch[0].start_ns == 1000);
    CHECK(f.engine->totals().in_flight == 1);
    f.driver.now += 1000 * 1000 * 1000;
    CHECK(f.reap() == 1);  // the long one, once it has finished
    CHECK(f.engine->totals().in_flight == 0);
    MESSAGE("round ", round, ": read after ", passes, " passes");
  }
  // The same, and then the context goes while the long one runs: its last round reads the short
  // one (delivered at the next pass); only the long one is counted as dropped.
  long_then_short_on_reused_handle();
  f.engine->drop_context(reinterpret_cast<CUcontext>(0x100));
  CHECK(f.reap() == 1);
  CHECK(f.batch[0].end_ns - f.batch[0].start_ns == 1000);
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::context_dropped)] == 1);
  CHECK(f.engine->totals().in_flight == 0);
}

TEST_CASE(
    "gpu engine: threads whose replays are in flight in blocks of pairs leave each other's "
    "launches timed while half the pool is free") {
  // Each thread claims pairs one after another from a cursor of its own: a cursor that runs
  // into another thread's block found its neighbours taken launch after launch ("pool
  // exhausted") until past it. Eight rounds, fresh threads each (fresh cursors): each round,
  // three threads' 100 replays stay in flight, then this thread's 200 (500 of 1,024 pairs).
  for (int round = 0; round < 8; ++round) {
    Fixture f;
    f.queue_on_streams(uint64_t{1000} * 1000 * 1000);  // nothing finishes meanwhile
    int timed = 0;
    for (int t = 0; t < 3; ++t) {
      std::thread other([&, t] {
        for (int i = 0; i < 100; ++i)
          timed += f.launch(reinterpret_cast<CUstream>(static_cast<uintptr_t>(0x1000 + t)));
      });
      other.join();
    }
    for (int i = 0; i < 200; ++i) timed += f.launch(reinterpret_cast<CUstream>(0x77));
    CHECK(timed == 500);
    CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::pool_exhausted)] == 0);
  }
}

TEST_CASE("gpu engine: a failed launch or a failed record is not timed, the pair comes back") {
  Fixture f;
  f.launch();
  f.reap();
  CHECK(f.launch(reinterpret_cast<CUstream>(0x77), false));
  f.driver.now += 1000000;
  CHECK(f.reap() == 0);
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::launch_failed)] == 1);
  CHECK(f.engine->totals().in_flight == 0);
}

// F77: the registry reuses a graph's label once its count is 0; the name is read when the GPU
// has finished. Every way a pair goes back must lower the count once, and only then.
TEST_CASE("gpu engine: a replay holds its name until its time is read, whichever way it ends") {
  Fixture f;
  f.launch();
  f.reap();
  REQUIRE(f.holds == 0);
  // In flight: held; read: let go, and the name delivered is the launch's.
  for (int i = 0; i < 3; ++i) REQUIRE(f.launch());
  CHECK(f.holds == 3);
  CHECK(f.reap() == 0);  // not finished yet
  CHECK(f.holds == 3);
  f.driver.now += 1000000;
  REQUIRE(f.reap() == 3);
  CHECK(f.holds == 0);
  CHECK(std::string(f.batch[0].name) == "graph a");
  // A failed launch, a failed end record, a replay whose events report an error.
  CHECK(f.launch(reinterpret_cast<CUstream>(0x77), false));
  CHECK(f.holds == 0);
  f.driver.fail_end_records = true;
  CHECK(f.launch());
  f.driver.fail_end_records = false;
  CHECK(f.holds == 0);
  CHECK(f.launch());
  CHECK(f.holds == 1);
  f.driver.fail_queries = true;
  f.driver.now += 1000000;
  CHECK(f.reap() == 0);
  f.driver.fail_queries = false;
  CHECK(f.holds == 0);
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::event_error)] == 2);
  // A launch left by a jump.
  gpu::Ticket left;
  f.engine->begin(left, reinterpret_cast<CUstream>(0x77), false, "g", &f.holds, 1, 99);
  REQUIRE(left.pool != nullptr);
  CHECK(f.holds == 1);
  f.engine->give_back_abandoned();
  CHECK(f.holds == 0);
  f.engine->end(left, true);  // judged abandoned: touches nothing
  CHECK(f.holds == 0);
  f.driver.end_record = false;  // the abandoned launch never recorded its end event
  // Its context destroyed while replays are in flight: they are never read.
  for (int i = 0; i < 4; ++i) f.launch();
  CHECK(f.holds == 4);
  f.engine->drop_context(reinterpret_cast<CUcontext>(0x100));
  CHECK(f.holds == 0);
  // The child of a fork: the parent's replays are not its own.
  f.driver.current = reinterpret_cast<CUcontext>(0x200);
  f.launch();
  f.reap();
  REQUIRE(f.launch());
  CHECK(f.holds == 1);
  f.engine->reset_in_child();
  CHECK(f.holds == 0);
}

TEST_CASE("gpu engine: a destroyed context's pool goes first; no call into it afterwards") {
  Fixture f;
  f.launch();
  f.reap();
  for (int i = 0; i < 5; ++i) f.launch();
  const size_t live_before = f.driver.live.size();
  f.engine->drop_context(reinterpret_cast<CUcontext>(0x100));  // before the real destroy
  CHECK(f.driver.live.size() == live_before - 2 - 2 * gpu::kPairsPerContext);
  f.driver.dead.insert(reinterpret_cast<CUcontext>(0x100));
  gpu::Totals totals = f.engine->totals();
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::context_dropped)] == 5);
  CHECK(totals.in_flight == 0);
  f.driver.now += 1000000;
  CHECK(f.reap() == 0);
  CHECK(f.driver.calls_on_dead == 0);
  // A launch in a new context at the same slot gets a new pool.
  f.driver.current = reinterpret_cast<CUcontext>(0x200);
  CHECK_FALSE(f.launch());
  f.reap();
  CHECK(f.launch());
  CHECK(f.driver.calls_on_dead == 0);
}

TEST_CASE(
    "gpu engine: a context that ended unseen is forgotten at the driver's first word of it; its "
    "slot serves another") {
  // F167: an end the shim does not see (cuGreenCtxDestroy, before it was hooked) left the pool
  // keyed to the dead context: the reaper pushed it and queried its events for the rest of the
  // run, and kMaxContexts such contexts held every slot — no later context was ever timed.
  const uint64_t contexts = 2 * gpu::kMaxContexts;
  const auto context_at = [](uint64_t i) {
    return reinterpret_cast<CUcontext>(0x100000 + i * 0x100);
  };
  Fixture f;
  int dead_words = 0;    // the driver's answers that said a context had ended: one per context
  uint64_t dropped = 0;  // replays in flight when their context's end was learnt
  SUBCASE("a ready pool: the push of its clock's renewal says so") {
    for (uint64_t i = 0; i < contexts; ++i) {
      f.driver.current = context_at(i);
      f.launch();  // asks for the pool
      f.reap();    // makes it
      REQUIRE(f.launch());
      f.driver.dead.insert(context_at(i));  // ended, unseen
      f.driver.now += 2 * gpu::kReanchorNs;
      const int queries = f.driver.queries;
      CHECK(f.reap() == 0);
      CHECK(f.driver.queries == queries);  // none of its events asked about
      CHECK(f.reap() == 0);
    }
    dead_words = static_cast<int>(contexts);
    dropped = contexts;
  }
  SUBCASE("a pool asked for, not made yet: the push that would make it says so") {
    for (uint64_t i = 0; i < contexts; ++i) {
      f.driver.current = context_at(i);
      f.launch();
      f.driver.dead.insert(context_at(i));
      CHECK(f.reap() == 0);
      CHECK(f.reap() == 0);
    }
    dead_words = static_cast<int>(contexts);
  }
  SUBCASE("a replay's query says so") {
    for (uint64_t i = 0; i < contexts; ++i) {
      f.driver.current = context_at(i);
      f.launch();
      f.reap();
      REQUIRE(f.launch());
      f.driver.queries_say_destroyed = true;
      const int queries = f.driver.queries;
      CHECK(f.reap() == 0);
      CHECK(f.reap() == 0);
      CHECK(f.driver.queries == queries + 1);  // the one that said so, no more
      f.driver.queries_say_destroyed = false;
    }
    dropped = contexts;
  }
  CHECK(f.driver.calls_on_dead == dead_words);
  // Each context's slot was given back: a new context is timed, none "over 16 contexts".
  f.driver.current = reinterpret_cast<CUcontext>(0x900);
  CHECK_FALSE(f.launch());
  f.reap();
  CHECK(f.launch());
  const gpu::Totals totals = f.engine->totals();
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::contexts_full)] == 0);
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::context_dropped)] == dropped);
  CHECK(totals.in_flight == 1);
}

TEST_CASE(
    "gpu engine: replays read as their context ends count in flight until a pass hands them "
    "over") {
  // F165: read at a cuCtxDestroy for the next pass to deliver, they counted timed at once; where
  // no pass came (no reaper running, and the flush and the exit looked for replays in flight
  // only), the sink never got them while every count said timed.
  Fixture f;
  f.launch();
  f.reap();
  for (int i = 0; i < 5; ++i) f.launch();
  f.driver.now += 1000000;  // all five have finished
  f.engine->drop_context(reinterpret_cast<CUcontext>(0x100));
  gpu::Totals totals = f.engine->totals();
  CHECK(totals.timed == 0);
  CHECK(totals.in_flight == 5);  // what a flush or the exit looks for before it makes a pass
  CHECK(totals.not_timed == 1);  // the first launch (no pool yet)
  // A batch too small for them says there is more: a flush's or the exit's pass asks again only
  // then (the rest of a full batch stayed behind, with no reaper to come for it).
  bool more = false;
  CHECK(f.engine->reap_pass(f.batch, 3, &more) == 3);
  CHECK(more);
  CHECK(f.engine->totals().in_flight == 2);
  CHECK(f.engine->reap_pass(f.batch, 3, &more) == 2);
  CHECK_FALSE(more);
  totals = f.engine->totals();
  CHECK(totals.timed == 5);
  CHECK(totals.in_flight == 0);
}

TEST_CASE(
    "gpu engine: a drop waits for a launch between begin and end; that replay is counted once, "
    "its events outlive it") {
  Fixture f;
  f.launch();
  f.reap();
  // The launching thread is inside the real launch call (between begin and end, both on that
  // thread, as TimedReplay does) while this thread destroys the context: the drop must not
  // destroy the pair's events before end() is done with them.
  std::atomic<bool> begun{false}, ended{false};
  bool timed = false, events_alive_at_end = false;
  CUevent start = nullptr, end = nullptr;
  std::thread launcher([&] {
    gpu::Ticket ticket;
    f.engine->begin(ticket, reinterpret_cast<CUstream>(0x77), false, "g", nullptr, 1, 9);
    timed = ticket.pool != nullptr;
    if (timed) {
      start = ticket.pair->start;
      end = ticket.pair->end;
    }
    begun.store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    events_alive_at_end = timed && f.driver.live.count(start) && f.driver.live.count(end);
    f.engine->end(ticket, true);
    ended.store(true);
  });
  while (!begun.load()) std::this_thread::yield();
  f.engine->drop_context(reinterpret_cast<CUcontext>(0x100));
  CHECK(timed);
  CHECK(ended.load());  // the drop returned only after the launch let its pair go
  launcher.join();
  CHECK(events_alive_at_end);
  CHECK_FALSE(f.driver.live.count(start));  // and then every event went, this pair's too
  CHECK_FALSE(f.driver.live.count(end));
  gpu::Totals totals = f.engine->totals();
  CHECK(totals.not_timed == 2);  // the first launch (no pool yet) and this one, once
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::context_dropped)] == 1);
  // The slot is free again: a later launch in a new context is timed. (The fake pairs records
  // start, end: this replay's end was never recorded.)
  f.driver.end_record = false;
  f.driver.current = reinterpret_cast<CUcontext>(0x200);
  f.launch();
  f.reap();
  CHECK(f.launch());
}

TEST_CASE(
    "gpu engine: a graph replayed in another context than the one that ended keeps its row "
    "(review WW-1)") {
  Fixture f;
  const auto a = reinterpret_cast<CUcontext>(0x100), b = reinterpret_cast<CUcontext>(0x200);
  auto dead = [&](uint32_t graph) {
    f.engine->lock();
    const gpu::GraphStats *stats = f.engine->stats_for(graph);
    const bool answer = stats && stats->dead;
    f.engine->unlock();
    return answer;
  };
  f.live[5] = 5;
  f.live[6] = 6;
  for (CUcontext context : {a, b}) {  // both pools made
    f.driver.current = context;
    f.launch();
    f.reap();
  }
  f.driver.current = a;
  f.time_one(5);
  f.time_one(6);
  f.engine->lock();
  f.engine->rows_of_ended_context_locked(a);
  f.engine->unlock();
  REQUIRE(dead(5));
  REQUIRE(dead(6));
  f.retire(6);  // destroyed too
  f.driver.current = b;
  f.time_one(5);  // alive in `b` (a driver that allows it)
  f.time_one(6);  // a late replay of a destroyed graph
  CHECK_FALSE(dead(5));
  CHECK(row_count(*f.engine, 5) == 2);
  CHECK(dead(6));
}

TEST_CASE(
    "gpu timing: only a context-ending call that succeeded ends its graphs' rows of statistics "
    "(review VV-1)") {
  ProcessEngine process;  // graph numbers no other case times
  FakeDriver &driver = process.driver;
  gpu::Engine &timing = process.timing;
  const auto context = reinterpret_cast<CUcontext>(0x100);
  const auto stream = reinterpret_cast<CUstream>(0x77);
  std::atomic<uint32_t> live{7001};
  ferrum_replay_gpu_replay batch[64];
  bool more = false;
  uint64_t replay = 0;
  auto time_one = [&] {
    gpu::Ticket ticket;
    timing.begin(ticket, stream, false, "g", nullptr, 7001, ++replay, &live);
    timing.end(ticket, true);
    driver.now += 1000000;
    timing.reap_pass(batch, 64, &more);
  };
  auto dead = [&] {
    timing.lock();
    const gpu::GraphStats *stats = timing.stats_for(7001);
    const bool answer = stats && stats->dead;
    const bool has_row = stats != nullptr;
    timing.unlock();
    CHECK(has_row);
    return answer;
  };
  driver.current = context;
  time_one();  // asks for the pool
  time_one();
  REQUIRE_FALSE(dead());
  // Refused (the context lives on): its graphs keep their rows.
  CHECK(gpu::around_context_destroy(context, [] { return CUDA_ERROR_INVALID_VALUE; }) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK_FALSE(dead());
  // Left without returning (a cancellation in its wait, here an exception): it may have ended
  // nothing, so the rows stay.
  time_one();
  time_one();
  CHECK_THROWS(gpu::around_context_destroy(context, []() -> CUresult { throw 1; }));
  CHECK_FALSE(dead());
  // A reset of the device refused, its primary context known: the same.
  timing.note_primary(0, context);
  time_one();  // the pool again (the refused destroy took it)
  time_one();
  CHECK(gpu::around_primary_reset(0, [] { return CUDA_ERROR_INVALID_VALUE; }) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK_FALSE(dead());
  // Done: its graphs went with it.
  CHECK(gpu::around_context_destroy(context, [] { return CUDA_SUCCESS; }) == CUDA_SUCCESS);
  CHECK(dead());
}

TEST_CASE(
    "gpu timing: the engine's mutex is free during the real context-ending call, which no "
    "reap pass disturbs") {
  ProcessEngine process;
  FakeDriver &driver = process.driver;
  gpu::Engine &timing = process.timing;
  ferrum_replay_gpu_replay batch[64];
  bool more = false;
  gpu::Ticket first;
  timing.begin(first, reinterpret_cast<CUstream>(0x77), false, "g", nullptr, 1, 1);
  timing.end(first, true);
  timing.reap_pass(batch, 64, &more);  // the pool is made
  gpu::Ticket ticket;
  timing.begin(ticket, reinterpret_cast<CUstream>(0x77), false, "g", nullptr, 1, 2);
  REQUIRE(ticket.pool != nullptr);
  timing.end(ticket, true);
  driver.now += 1000000;  // that replay has finished
  // Another context asks for a pool: made at the next pass, not during the call below.
  driver.current = reinterpret_cast<CUcontext>(0x300);
  gpu::Ticket other;
  timing.begin(other, reinterpret_cast<CUstream>(0x77), false, "g", nullptr, 1, 3);
  timing.end(other, true);
  driver.current = reinterpret_cast<CUcontext>(0x100);

  std::atomic<bool> other_thread_done{false};
  size_t reaped_during = 99;
  int creates_during = -1;
  std::thread asker;  // joined after the call: were the mutex held, it could only end then
  const CUresult result =
      gpu::around_context_destroy(reinterpret_cast<CUcontext>(0x999), [&]() -> CUresult {
        // Inside the real cuCtxDestroy: a host function (or any thread) asking the engine for
        // anything must not wait for this call to end.
        const int creates = driver.creates;
        asker = std::thread([&] {
          bool more_inside = false;
          reaped_during = timing.reap_pass(batch, 64, &more_inside);
          (void)timing.totals();
          other_thread_done.store(true);
        });
        for (int i = 0; i < 2000 && !other_thread_done.load(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        creates_during = driver.creates - creates;
        return other_thread_done.load() ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
      });
  asker.join();
  CHECK(result == CUDA_SUCCESS);  // the asker finished while the call was still running
  CHECK(reaped_during == 0);      // and read nothing: no event query during the call
  CHECK(creates_during == 0);     // nor made the other context's pool
  CHECK(timing.reap_pass(batch, 64, &more) == 1);  // afterwards the finished replay is read
  CHECK(driver.calls_on_dead == 0);
  timing.drop_context(reinterpret_cast<CUcontext>(0x100));
  timing.drop_context(reinterpret_cast<CUcontext>(0x300));
}

TEST_CASE(
    "gpu engine: its calls on a program thread run in the relaxed capture mode, the thread's own "
    "mode given back") {
  Fixture f;
  unsafe_calls_in_global_mode = 0;
  REQUIRE(t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
  // At a graph's instantiation: the pool and its 2048 events are made on this thread.
  CHECK(f.engine->prepare_current_context(2000));
  CHECK(f.driver.creates > 2 * static_cast<int>(gpu::kPairsPerContext));
  f.launch();
  f.driver.now += 1000000;
  // Around the program's cuCtxDestroy: finished replays are read (event queries) on this
  // thread, then the events destroyed.
  f.engine->drop_context(reinterpret_cast<CUcontext>(0x100));
  CHECK(unsafe_calls_in_global_mode == 0);
  CHECK(t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
  // A thread that had chosen another mode keeps it.
  t_capture_mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
  f.driver.current = reinterpret_cast<CUcontext>(0x200);
  CHECK(f.engine->prepare_current_context(2000));
  CHECK(t_capture_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  CHECK(unsafe_calls_in_global_mode == 0);
}

TEST_CASE("gpu timing: a fork never waits for the engine's mutex; the child's engine works") {
  // The reaper holds the mutex across driver calls; a driver whose own fork handler takes a lock
  // those calls need (the stand-in's does) then deadlocked any fork that also waited for the
  // mutex. Here another thread simply holds it through the fork.
  gpu::install_handlers();
  gpu::Engine &timing = gpu::engine();
  std::atomic<bool> held{false}, release{false};
  std::thread holder([&] {
    timing.lock();
    held.store(true);
    // Let go after 2 s at the latest, so that a fork that waits fails rather than hangs.
    for (int ms = 0; ms < 2000 && !release.load(); ++ms)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    timing.unlock();
  });
  while (!held.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto before = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child == 0) {
    alarm(5);               // a child stuck on the parent's mutex dies of SIGALRM
    (void)timing.totals();  // takes the engine's mutex
    _exit(0);
  }
  const auto forked = std::chrono::steady_clock::now() - before;
  release.store(true);
  holder.join();
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(forked < std::chrono::seconds(1));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE(
    "gpu engine: a device's primary context released for good: pools forgotten without a "
    "CUDA call") {
  Fixture f;
  f.launch();
  f.reap();
  f.launch();
  f.driver.dead.insert(reinterpret_cast<CUcontext>(0x100));
  const int creates = f.driver.creates;
  const size_t live = f.driver.live.size();
  f.engine->forget_device(0);
  CHECK(f.driver.live.size() == live);  // nothing destroyed: the context took its events
  CHECK(f.driver.calls_on_dead == 0);
  f.driver.now += 1000000;
  CHECK(f.reap() == 0);
  CHECK(f.driver.creates == creates);
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::context_dropped)] == 1);
}

TEST_CASE("gpu engine: no event API, or cuEventCreate failing: that context is not timed, once") {
  SUBCASE("missing") {
    Fixture f;
    gpu::EventApi api = fake_api();
    api.event_create = nullptr;
    f.engine->set_api(api);
    f.launch();
    f.reap();
    for (int i = 0; i < 10; ++i) CHECK_FALSE(f.launch());
    f.reap();
    CHECK(f.driver.pushes == 0);
  }
  SUBCASE("create fails") {
    Fixture f;
    f.driver.create_fail_after = 10;
    f.launch();
    f.reap();
    CHECK(f.driver.live.empty());  // what was made is destroyed again
    for (int i = 0; i < 10; ++i) CHECK_FALSE(f.launch());
    f.reap();
    CHECK(f.driver.pushes == 1);  // not asked again
    CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::pool_not_ready)] == 11);
  }
}

TEST_CASE("gpu engine: after stop (exit) no CUDA call; in flight counted as such") {
  Fixture f;
  f.launch();
  f.reap();
  f.launch();
  f.launch();
  f.engine->stop();
  const int records = f.driver.records;
  f.driver.now += 1000000;
  CHECK(f.reap() == 0);
  CHECK_FALSE(f.launch());
  CHECK(f.driver.records == records);
  CHECK(f.engine->totals().in_flight == 2);
  // Said as a launch after the exit's last pass (a static destructor's), not as one without a
  // context: the context is still current.
  gpu::Totals totals = f.engine->totals();
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::after_exit)] == 1);
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::no_context)] == 0);
  CHECK(std::string(gpu::kUntimedNames[static_cast<unsigned>(gpu::Untimed::after_exit)]) ==
        "after exit");
}

TEST_CASE("gpu engine: a launch without a current context is not timed, and says why") {
  Fixture f;
  f.driver.current = nullptr;
  CHECK_FALSE(f.launch());
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::no_context)] == 1);
  CHECK(f.driver.records == 0);
}

TEST_CASE("gpu engine: the child of a fork forgets every pool and starts afresh") {
  Fixture f;
  f.launch();
  f.reap();
  f.launch();
  f.engine->reset_in_child();
  gpu::Totals totals = f.engine->totals();
  CHECK(totals.timed == 0);
  CHECK(totals.in_flight == 0);
  CHECK(totals.not_timed == 0);
  CHECK_FALSE(f.launch());  // asks again
  f.reap();
  CHECK(f.launch());
}

TEST_CASE(
    "gpu engine: contexts beyond the bound are not timed; statistics beyond the table share "
    "a row") {
  Fixture f;
  for (uintptr_t c = 1; c <= gpu::kMaxContexts + 3; ++c) {
    f.driver.current = reinterpret_cast<CUcontext>(0x1000 * c);
    f.launch();
  }
  f.reap();
  int timed = 0;
  for (uintptr_t c = 1; c <= gpu::kMaxContexts + 3; ++c) {
    f.driver.current = reinterpret_cast<CUcontext>(0x1000 * c);
    timed += f.launch();
  }
  CHECK(timed == static_cast<int>(gpu::kMaxContexts));
}

TEST_CASE("settings: FERRUM_REPLAY_GPU_TIME and _EVERY") {
  struct Env {
    std::map<std::string, std::string> values;
    std::vector<std::string> complaints;
    ferrum_replay::shim::Settings settings;
    void read() {
      ferrum_replay::shim::read_settings(
          settings,
          [](const char *name, void *self) -> const char * {
            auto &values = static_cast<Env *>(self)->values;
            auto found = values.find(name);
            return found == values.end() ? nullptr : found->second.c_str();
          },
          this,
          [](const char *sentence, void *self) {
            static_cast<Env *>(self)->complaints.emplace_back(sentence);
          },
          this);
    }
  };
  auto *env = new Env();
  env->read();
  CHECK_FALSE(env->settings.gpu_time);
  CHECK(env->settings.gpu_time_every == 1);
  CHECK(env->complaints.empty());
  env->values = {{"FERRUM_REPLAY_GPU_TIME", "on"}, {"FERRUM_REPLAY_GPU_TIME_EVERY", "10"}};
  env->read();
  CHECK(env->settings.gpu_time);
  CHECK(env->settings.gpu_time_every == 10);
  CHECK(env->complaints.empty());
  env->values = {{"FERRUM_REPLAY_GPU_TIME", "maybe\x1b"}, {"FERRUM_REPLAY_GPU_TIME_EVERY", "0"}};
  env->read();
  CHECK_FALSE(env->settings.gpu_time);
  CHECK(env->settings.gpu_time_every == 1);
  REQUIRE(env->complaints.size() == 2);
  CHECK(env->complaints[0].find("FERRUM_REPLAY_GPU_TIME='maybe") == 0);
  CHECK(env->complaints[0].find("\x1b") == std::string::npos);
  CHECK(env->complaints[0].find("using off") != std::string::npos);
  CHECK(env->complaints[1].find("FERRUM_REPLAY_GPU_TIME_EVERY='0'") == 0);
  CHECK(env->complaints[1].find("using 1") != std::string::npos);
  for (const char *bad : {"-3", "1x", "99999999999999999999", "1000001", " 5"}) {
    env->values = {{"FERRUM_REPLAY_GPU_TIME_EVERY", bad}};
    env->complaints.clear();
    env->read();
    CHECK(env->settings.gpu_time_every == 1);
    CHECK(env->complaints.size() == 1);
  }
  delete env;
}

TEST_CASE(
    "gpu engine: a context beyond the 16th is not timed, and says why; a slot freed is used") {
  Fixture f;
  const auto context = [](uintptr_t i) { return reinterpret_cast<CUcontext>(0x9000 + 0x10 * i); };
  for (uintptr_t i = 0; i < gpu::kMaxContexts; ++i) {
    f.driver.current = context(i);
    CHECK_FALSE(f.launch());  // each asks for a pool
  }
  f.reap();
  f.driver.current = context(gpu::kMaxContexts);
  const int asked = f.driver.get_ctx_v2_calls;
  CHECK_FALSE(f.launch());
  CHECK_FALSE(f.launch());
  for (int i = 0; i < 100; ++i) f.launch();
  // Whether the 17th context is green: asked once, not at each of its launches (review Y: a
  // driver call on every launch of a context that never gets a slot).
  CHECK(f.driver.get_ctx_v2_calls - asked == 1);
  gpu::Totals totals = f.engine->totals();
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::contexts_full)] == 102);
  CHECK(totals.untimed[static_cast<unsigned>(gpu::Untimed::pool_not_ready)] == gpu::kMaxContexts);
  CHECK(std::string(gpu::kUntimedNames[static_cast<unsigned>(gpu::Untimed::contexts_full)]) ==
        "over 16 contexts");
  // One of the 16 ends: the 17th gets its slot, and its replays are timed.
  f.engine->drop_context(context(3));
  CHECK_FALSE(f.launch());  // asks for a pool now
  f.reap();
  CHECK(f.launch());
  f.driver.current = reinterpret_cast<CUcontext>(0x100);
}

// ---- the stream watch (shim/gpu/stream_watch.hpp, F79) ----
// Another thread's launch inside a window is played out on a thread of its own while the main
// thread's window is open (one after the other: the fake driver is not thread-safe).
namespace {
struct Watched : Fixture {
  explicit Watched(uint32_t every = 1) : Fixture(every) { gpu::prepare_stream_slots(); }
  uint64_t shared() {
    return engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::stream_shared)];
  }
  // A launch's first half: true when it is being timed.
  bool begin(gpu::Ticket &ticket, CUstream stream, bool per_thread = false) {
    engine->begin(ticket, stream, per_thread, "graph a", &holds, 1, ++replay);
    return ticket.pool != nullptr;
  }
  void end(gpu::Ticket &ticket) {
    engine->end(ticket, true);
    driver.end_record = false;
  }
  // A whole launch: true when its time goes to the reaper (timed, and not met by another).
  bool kept(CUstream stream, bool per_thread = false) {
    const uint64_t before = shared();
    gpu::Ticket ticket;
    const bool timed = begin(ticket, stream, per_thread);
    end(ticket);
    return timed && shared() == before;
  }
  // The same on another thread, made now.
  bool kept_elsewhere(CUstream stream, bool per_thread = false,
                      CUcontext context = reinterpret_cast<CUcontext>(0x100)) {
    bool timed = false;
    std::thread([&] {
      const CUcontext before = driver.current;
      driver.current = context;
      timed = kept(stream, per_thread);
      driver.current = before;
    }).join();
    return timed;
  }
};
}  // namespace

TEST_CASE("gpu stream watch: another thread's launch inside a window: neither is timed") {
  Watched f;
  const CUstream stream = reinterpret_cast<CUstream>(0x5100);  // no other case's
  CHECK_FALSE(f.launch(stream));                               // the pool is requested
  f.reap();
  for (int i = 0; i < 3; ++i) CHECK(f.kept(stream));  // one thread: its own
  CHECK(f.shared() == 0);
  gpu::Ticket mine;
  REQUIRE(f.begin(mine, stream));
  CHECK_FALSE(f.kept_elsewhere(stream));  // it met this one's open window
  f.end(mine);                            // and this one met it
  CHECK(f.shared() == 2);
  CHECK(f.holds.load() == 3);  // the two given back let their name go
  // Shared from now on, for both threads; each alone is timed again.
  CHECK(f.kept(stream));
  CHECK(f.kept_elsewhere(stream));
  CHECK(f.kept(stream));
  CHECK(f.shared() == 2);
  // A window of the other thread's while this one's is open, shared mode now.
  REQUIRE(f.begin(mine, stream));
  CHECK_FALSE(f.kept_elsewhere(stream));
  f.end(mine);
  CHECK(f.shared() == 4);
  f.driver.now += 1000000;
  CHECK(f.reap() == 6);  // the timed ones, and none of those that met
}

TEST_CASE("gpu stream watch: two streams whose hashes meet keep their own slots") {
  Watched f;
  const auto home = [](uintptr_t key) {
    return (key * 0x9E3779B97F4A7C15ull) >> (64 - gpu::kStreamSlotBits);
  };
  const uintptr_t first = 0x7000;
  uintptr_t second = first + 0x10;
  while (home(second) != home(first)) second += 0x10;  // another stream, the same first slot
  const CUstream mine = reinterpret_cast<CUstream>(first);
  const CUstream other = reinterpret_cast<CUstream>(second);
  CHECK_FALSE(f.launch(mine));  // the pool is requested
  f.reap();
  CHECK(f.kept(mine));
  CHECK(f.kept_elsewhere(other));
  // Each thread's window on its own stream while the other's is open: neither met.
  gpu::Ticket ticket;
  REQUIRE(f.begin(ticket, mine));
  CHECK(f.kept_elsewhere(other));
  f.end(ticket);
  CHECK(f.shared() == 0);
  // The same stream from the other thread still meets.
  REQUIRE(f.begin(ticket, mine));
  CHECK_FALSE(f.kept_elsewhere(mine));
  f.end(ticket);
  CHECK(f.shared() == 2);
}

TEST_CASE("gpu stream watch: a window left by a jump is closed at the thread's next call") {
  Watched f;
  const CUstream stream = reinterpret_cast<CUstream>(0x5200);
  CHECK_FALSE(f.launch(stream));
  f.reap();
  for (bool shared_slot : {false, true}) {
    CAPTURE(shared_slot);
    if (shared_slot) f.kept_elsewhere(stream);  // the slot changes hands: shared for good
    gpu::Ticket left;
    REQUIRE(f.begin(left, stream));
    f.engine->give_back_abandoned();  // the jump out of the launch, found at the next call
    const uint64_t before = f.shared();
    // The window is closed: later launches alone, of either thread, are timed.
    CHECK(f.kept(stream));
    CHECK(f.kept_elsewhere(stream));
    CHECK(f.kept(stream));
    CHECK(f.shared() == before);
  }
}

TEST_CASE("gpu stream watch: the legacy stream is its context's; a per-thread stream, nobody's") {
  Watched f;
  CHECK_FALSE(f.launch(nullptr));
  f.reap();
  const CUcontext other = reinterpret_cast<CUcontext>(0x200);
  gpu::Ticket mine;
  // Another context's legacy stream is another stream (that launch itself is not timed: its
  // context has no pool yet).
  REQUIRE(f.begin(mine, nullptr));
  f.kept_elsewhere(nullptr, false, other);
  f.end(mine);
  CHECK(f.shared() == 0);
  // The per-thread default stream, whichever way it is spelled, is one thread's own.
  REQUIRE(f.begin(mine, nullptr, true));
  CHECK(f.kept_elsewhere(nullptr, true));
  CHECK(f.kept_elsewhere(CU_STREAM_PER_THREAD));
  f.end(mine);
  CHECK(f.shared() == 0);
  // The same context's legacy stream, spelled NULL or CU_STREAM_LEGACY, is one stream.
  REQUIRE(f.begin(mine, nullptr));
  CHECK_FALSE(f.kept_elsewhere(CU_STREAM_LEGACY));
  f.end(mine);
  CHECK(f.shared() == 2);
}

TEST_CASE("gpu stream watch: a replay not timed (sampled out) still counts for the timed one") {
  Watched f(2);  // replays 1, 3, 5 ... timed
  const CUstream stream = reinterpret_cast<CUstream>(0x5300);
  CHECK_FALSE(f.launch(stream));  // replay 1: the pool is requested
  f.reap();
  CHECK_FALSE(f.launch(stream));  // 2: sampled out
  gpu::Ticket mine;
  REQUIRE(f.begin(mine, stream));         // 3
  CHECK_FALSE(f.kept_elsewhere(stream));  // 4: sampled out, on the stream meanwhile
  f.end(mine);
  CHECK(f.shared() == 1);
  CHECK(f.engine->totals().untimed[static_cast<unsigned>(gpu::Untimed::sampled_out)] == 2);
}

TEST_CASE(
    "gpu engine: an instantiation waits for the engine's mutex no longer than its bound (a "
    "reaper let go inside a driver call holds it for good)") {
  Fixture f;
  std::atomic<bool> held{false}, release{false};
  std::thread holder([&] {
    f.engine->lock();
    held = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    f.engine->unlock();
  });
  while (!held) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto waited_ms = [&](long bound) {
    const auto start = std::chrono::steady_clock::now();
    CHECK_FALSE(f.engine->prepare_current_context(bound));  // the pool left requested
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start)
        .count();
  };
  CHECK(waited_ms(0) < 50);  // one try
  const long long bounded = waited_ms(100);
  CHECK(bounded >= 100);
  CHECK(bounded < 1000);
  CHECK(f.driver.creates == 0);  // no pool made without the mutex
  release = true;
  holder.join();
  CHECK(f.engine->prepare_current_context(0));  // free again: made at once
  CHECK(f.driver.creates > 2 * static_cast<int>(gpu::kPairsPerContext));
}

TEST_CASE(
    "gpu engine: a push refused as an invalid context forgets the pool only where the context "
    "is confirmed ended") {
  // F173: CUDA_ERROR_INVALID_CONTEXT is also a refusal of a live context (cuda.h: a green context
  // current elsewhere, one not converted); forgotten, a live pool's events and stream leaked.
  Fixture f;
  const auto context_at = [](uintptr_t i) { return reinterpret_cast<CUcontext>(0x200000 + i); };
  const auto untimed = [&](gpu::Untimed why) {
    return f.engine->totals().untimed[static_cast<unsigned>(why)];
  };
  f.driver.current = context_at(1);
  f.launch();
  f.reap();
  REQUIRE(f.launch());
  f.driver.refuse_push.insert(context_at(1));  // alive: cuCtxGetApiVersion answers
  f.driver.now += 2 * gpu::kReanchorNs;
  CHECK(f.reap() == 1);  // kept: its replay read against the reference it had
  f.driver.refuse_push.clear();
  CHECK(f.launch());
  CHECK(untimed(gpu::Untimed::context_dropped) == 0);
  // Confirmed ended: forgotten, its replay in flight counted, no call into it after.
  f.driver.refuse_push.insert(context_at(1));
  f.driver.gone.insert(context_at(1));
  f.driver.now += 2 * gpu::kReanchorNs;
  CHECK(f.reap() == 0);
  CHECK(untimed(gpu::Untimed::context_dropped) == 1);
}

TEST_CASE("gpu engine: a green context gets no pool, is never pushed, and its replays say why") {
  // F173: cuda.h gives a green context to one thread at a time; the reaper pushed it to make its
  // pool, align and renew its clock while the program had it current.
  Fixture f;
  const auto untimed = [&](gpu::Untimed why) {
    return f.engine->totals().untimed[static_cast<unsigned>(why)];
  };
  // Said by the driver (cuStreamGetCtx_v2 on the NULL stream), once: then remembered.
  const CUcontext said = reinterpret_cast<CUcontext>(0x300000);
  f.driver.current = said;
  f.driver.green.insert(said);
  for (int i = 0; i < 3; ++i) CHECK_FALSE(f.launch());
  f.reap();
  CHECK_FALSE(f.launch());
  f.driver.green.clear();  // remembered without asking again
  CHECK_FALSE(f.launch());
  // Remembered from cuCtxFromGreenCtx's answer (a driver without cuStreamGetCtx_v2).
  const CUcontext converted = reinterpret_cast<CUcontext>(0x310000);
  f.engine->note_green(converted);
  f.driver.current = converted;
  CHECK_FALSE(f.launch());
  CHECK_FALSE(f.engine->prepare_current_context(0));
  f.reap();
  CHECK(f.driver.pushes == 0);
  CHECK(untimed(gpu::Untimed::green_context) == 6);
  CHECK(untimed(gpu::Untimed::pool_not_ready) == 0);
  // Its end forgets it: a context given its address later is timed.
  f.engine->forget_green(converted);
  CHECK_FALSE(f.launch());
  f.reap();
  CHECK(f.launch());
}
