// ferrum-bench-launch: what one graph launch costs in *this* process, through each route a
// real program takes to the driver. bench/run_bench.py runs it several times — without a
// preload (the baseline), under libferrum-replay.so with no NVTX tool, with the recorder, with
// FERRUM_REPLAY=off, and under the naive interposer (bench/naive_interposer.c) — and reports
// the differences. Run it against the stand-ins with FERRUM_STANDIN_BENCH=1, which makes the
// stand-in driver's launch the cheapest real call into libcuda.so.1 there can be.
//
// Routes (each a benchmark):
//   runtime     cudaGraphLaunch of the shared runtime (libcudart.so.13), called through the PLT
//   driver      cuGraphLaunch of the driver (libcuda.so.1), called through the PLT
//   procaddress the pointer the runtime itself would use: dlopen("libcuda.so.1", RTLD_LOCAL),
//               dlsym "cuGetProcAddress_v2", the "cuGetProcAddress"@12000 self-query, then
//               "cuGraphLaunch"@10000 with flags 0 through the self-query's answer
//
// Modes:
//   (default)          Google Benchmark; every --benchmark_* flag is honoured. Extra flags:
//     --ferrum-iterations=N   fixed iterations per repetition (the recorder keeps every event
//                             until exit, in memory or its spill file: keep its runs bounded)
//     --ferrum-warmup=N       launch graph 0 N times through each route first (with
//                             --ferrum-iterations, which excludes Google Benchmark's warm-up)
//     --ferrum-set=S          launch (runtime, driver and procaddress at 1 graph), scaling
//                             (procaddress at 10,000 graphs and at 1/8 threads), all (default:
//                             launch and scaling); timed, timed-baseline: see below
//   --rss=N1,N2        N2 launches round-robin over 8 graphs and the three routes; prints
//                      rss_kib_at_<N1>= and rss_kib_at_<N2>= (VmRSS after N1 and after N2
//                      launches), minor_faults_between= (page faults in between: 0 when the
//                      launch path touches no new memory), unnamed_file_bytes= (held in
//                      files without a name, open or mapped: a tool's spill file), then
//                      end_monotonic_ns= just before main returns (the parent times what runs
//                      after it: a tool's exit report)
//     --ferrum-flush-every=N  (with --rss) every N launches, ferrum_replay_gpu_flush (when
//                             the shim is loaded): every timed replay is reaped before the
//                             event pool runs out; prints timed= and not_timed= at the end
//   --loop=ROUTE,G,N   N launches through one route, round-robin over G graphs, and nothing
//                      else: for valgrind --tool=callgrind (instructions per launch)
//
// GPU timing (FERRUM_REPLAY_GPU_TIME=on): with timing on, the shim brackets each replay with two
// event records from a pool of 1,024 pairs that its reaper thread refills. A loop of bare
// launches would exhaust the pool within microseconds (the stand-in has no GPU to slow the
// launches down) and measure the cheaper untimed path. The timed sets therefore launch in
// batches of kTimedBatch (fewer than the pool holds) and, between batches, with the timer
// paused, call ferrum_replay_gpu_flush (which returns once the reaper has freed every finished
// pair); without the shim the pause is the same, the flush absent. Benchmarks:
//   batched:ROUTE  (set timed)           the route's plain launch, in batches
//   events:ROUTE   (set timed-baseline)  the same, each launch between two direct
//                                        cuEventRecord calls on its stream (start event
//                                        before, end event after): what the shim does by hand
// set timed-baseline runs both. Each reports the counter timed_fraction: replays timed (from
// ferrum_replay_gpu_flush) over launches, 0 without the shim.
//
// The recorder's floor (set all, read in the baseline configuration): what recording a range
// costs at the least on this machine, whatever the code around it —
//   floor:timestamps   two reads of the clock the recorder reads (recorder/clock.hpp: the CPU's
//                      counter where the kernel keeps CLOCK_MONOTONIC on it)
//   floor:event        one completed range appended to the recorder's own per-thread buffer
//                      (recorder/thread_buffer.hpp, no spill file): a 16-byte packed record
//                      (recorder/event_chunk.hpp) in memory the process has not touched
//                      before, as every range of a run is
//
// Each graph is one empty node, instantiated through the driver; the runtime launches the same
// executable graphs (both stand-ins share the driver's handles, as NVIDIA's do).
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>
#include "clock.hpp"
#include "ferrum_replay/ferrum_replay.h"
#include "thread_buffer.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int kManyGraphs = 10000;  // "10,000 live graphs"
constexpr int kThreadsMax = 8;

std::vector<CUgraphExec> g_execs;               // kManyGraphs of them
PFN_cuGraphLaunch_v10000 g_procaddress_launch;  // the trampoline route's pointer

[[noreturn]] void die(const char *what, int code) {
  std::fprintf(stderr, "ferrum-bench-launch: %s failed (%d)\n", what, code);
  std::exit(1);
}

void check(CUresult r, const char *what) {
  if (r != CUDA_SUCCESS) die(what, static_cast<int>(r));
}

void set_up() {
  check(cuInit(0), "cuInit");
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  g_execs.resize(kManyGraphs);
  for (CUgraphExec &exec : g_execs) {
    CUgraph graph = nullptr;
    CUgraphNode node = nullptr;
    check(cuGraphCreate(&graph, 0), "cuGraphCreate");
    check(cuGraphAddEmptyNode(&node, graph, nullptr, 0), "cuGraphAddEmptyNode");
    check(cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  }
  // The runtime initialises (dlopen of libcuda, self-query, table) at its first call.
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) die("cudaGetDeviceCount", e);

  // The trampoline route, exactly as the CUDA runtime takes it (docs/architecture.md, "Following a
  // launch").
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) die("dlopen(libcuda.so.1)", 0);
  auto lookup = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(driver, "cuGetProcAddress_v2"));
  if (!lookup) die("dlsym(cuGetProcAddress_v2)", 0);
  void *self = nullptr;
  CUdriverProcAddressQueryResult status{};
  check(lookup("cuGetProcAddress", &self, 12000, 0, &status), "cuGetProcAddress self-query");
  lookup = reinterpret_cast<PFN_cuGetProcAddress_v12000>(self);
  void *launch = nullptr;
  check(lookup("cuGraphLaunch", &launch, 10000, 0, &status), "cuGetProcAddress(cuGraphLaunch)");
  g_procaddress_launch = reinterpret_cast<PFN_cuGraphLaunch_v10000>(launch);
}

// ---- the benchmarks: identical loops, only the call differs ----

// Round-robin over `graphs` executable graphs; a thread of a multi-threaded run launches its
// own graph (CUDA requires launches of one graph exec to be serialised by the caller), or,
// with `shared`, every thread the same one.
template <typename Launch>
void launch_loop(benchmark::State &state, Launch &&launch) {
  const int graphs = static_cast<int>(state.range(0));
  const bool shared = state.range(1) != 0;
  CUgraphExec *execs = g_execs.data();
  if (graphs == 1 && !shared) execs += state.thread_index();
  int next = 0;
  long failures = 0;
  for (auto _ : state) {
    failures += launch(execs[next], static_cast<CUstream>(nullptr)) != 0;
    if (++next == graphs) next = 0;
  }
  if (failures) state.SkipWithError("a launch failed");
}

void BM_runtime(benchmark::State &state) {
  launch_loop(state, [](CUgraphExec e, CUstream s) {
    return static_cast<int>(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(e), s));
  });
}
void BM_driver(benchmark::State &state) {
  launch_loop(state,
              [](CUgraphExec e, CUstream s) { return static_cast<int>(cuGraphLaunch(e, s)); });
}
void BM_procaddress(benchmark::State &state) {
  const PFN_cuGraphLaunch_v10000 launch = g_procaddress_launch;
  launch_loop(state,
              [launch](CUgraphExec e, CUstream s) { return static_cast<int>(launch(e, s)); });
}

// ---- the timed sets: launches in batches, the pool refilled in between ----

constexpr long kTimedBatch = 512;        // < the shim's 1,024 event pairs per context
ferrum_replay_gpu_flush_fn g_gpu_flush;  // the shim's, when it is loaded
CUevent g_start_event, g_end_event;      // for the events:ROUTE baseline

// Replays timed and not timed so far (both 0 without the shim or with timing off).
void gpu_counts(unsigned long long *timed, unsigned long long *not_timed) {
  ferrum_replay_gpu_status status{};
  status.size = sizeof status;
  *timed = *not_timed = 0;
  if (g_gpu_flush && g_gpu_flush(&status) == 0) {
    *timed = status.timed;
    *not_timed = status.not_timed + status.in_flight;
  }
}

template <bool kEvents, typename Launch>
void timed_loop(benchmark::State &state, Launch &&launch) {
  const CUgraphExec exec = g_execs[0];
  const CUstream stream = nullptr;
  unsigned long long timed_before = 0, untimed_before = 0;
  gpu_counts(&timed_before, &untimed_before);
  long failures = 0, in_batch = 0;
  for (auto _ : state) {
    if constexpr (kEvents) failures += cuEventRecord(g_start_event, stream) != CUDA_SUCCESS;
    failures += launch(exec, stream) != 0;
    if constexpr (kEvents) failures += cuEventRecord(g_end_event, stream) != CUDA_SUCCESS;
    if (__builtin_expect(++in_batch == kTimedBatch, 0)) {
      in_batch = 0;
      state.PauseTiming();
      if (g_gpu_flush) g_gpu_flush(nullptr);
      state.ResumeTiming();
    }
  }
  unsigned long long timed_after = 0, untimed_after = 0;
  gpu_counts(&timed_after, &untimed_after);
  if (failures) state.SkipWithError("a launch or event record failed");
  const double launches = static_cast<double>(state.iterations());
  state.counters["timed_fraction"] =
      launches > 0 ? static_cast<double>(timed_after - timed_before) / launches : 0.0;
}

int runtime_launch(CUgraphExec e, CUstream s) {
  return static_cast<int>(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(e), s));
}
int driver_launch(CUgraphExec e, CUstream s) {
  return static_cast<int>(cuGraphLaunch(e, s));
}

template <bool kEvents>
void BM_timed_runtime(benchmark::State &state) {
  timed_loop<kEvents>(state, runtime_launch);
}
template <bool kEvents>
void BM_timed_driver(benchmark::State &state) {
  timed_loop<kEvents>(state, driver_launch);
}
template <bool kEvents>
void BM_timed_procaddress(benchmark::State &state) {
  const PFN_cuGraphLaunch_v10000 launch = g_procaddress_launch;
  timed_loop<kEvents>(
      state, [launch](CUgraphExec e, CUstream s) { return static_cast<int>(launch(e, s)); });
}

void BM_floor_timestamps(benchmark::State &state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(ferrum_replay::recorder::read_cpu_counter());
    benchmark::DoNotOptimize(ferrum_replay::recorder::read_cpu_counter());
  }
}

void BM_floor_event(benchmark::State &state) {
  // A buffer per repetition, kept until exit as the recorder keeps its events (freed, its
  // chunks would be recycled by the next repetition's: not fresh memory).
  auto *buffer = new ferrum_replay::recorder::ThreadBuffer(1, "bench");
  ferrum_replay::recorder::Event event{};
  event.attrs.name = "graph";
  for (auto _ : state) {
    ++event.start;
    event.end = event.start + 1;
    buffer->append(event);
    benchmark::ClobberMemory();
  }
}

void register_benchmarks(const std::string &set, long fixed_iterations) {
  // Warm-up: --benchmark_min_warmup_time (a per-benchmark MinWarmUpTime cannot be combined
  // with fixed iterations), or --ferrum-warmup.
  auto finish = [&](benchmark::internal::Benchmark *b) {
    if (fixed_iterations > 0) b->Iterations(fixed_iterations);
    return b;
  };
  if (set == "all" || set == "launch") {
    finish(benchmark::RegisterBenchmark("runtime", BM_runtime)->Args({1, 0}));
    finish(benchmark::RegisterBenchmark("driver", BM_driver)->Args({1, 0}));
    finish(benchmark::RegisterBenchmark("procaddress", BM_procaddress)->Args({1, 0}));
  }
  if (set == "all") {  // not in the recorder's runs (set launch): read without a preload
    benchmark::RegisterBenchmark("floor:timestamps", BM_floor_timestamps);
    // Fixed iterations: every repetition's events stay in memory until exit (6.4 MB each).
    benchmark::RegisterBenchmark("floor:event", BM_floor_event)->Iterations(100000);
  }
  if (set == "all" || set == "scaling") {
    finish(benchmark::RegisterBenchmark("procaddress", BM_procaddress)->Args({kManyGraphs, 0}));
    // Thread CPU time (Google Benchmark's default): total CPU of all threads / all launches.
    // This machine may have fewer cores than threads; wall time would measure the scheduler.
    finish(benchmark::RegisterBenchmark("procaddress", BM_procaddress)->Args({1, 0})->Threads(1));
    finish(benchmark::RegisterBenchmark("procaddress", BM_procaddress)
               ->Args({1, 0})
               ->Threads(kThreadsMax));
    finish(benchmark::RegisterBenchmark("procaddress", BM_procaddress)
               ->Args({1, 1})
               ->Threads(kThreadsMax));
  }
  if (set == "timed" || set == "timed-baseline") {
    g_gpu_flush =
        reinterpret_cast<ferrum_replay_gpu_flush_fn>(dlsym(RTLD_DEFAULT, FERRUM_REPLAY_GPU_FLUSH));
    finish(benchmark::RegisterBenchmark("batched:runtime", BM_timed_runtime<false>));
    finish(benchmark::RegisterBenchmark("batched:driver", BM_timed_driver<false>));
    finish(benchmark::RegisterBenchmark("batched:procaddress", BM_timed_procaddress<false>));
  }
  if (set == "timed-baseline") {
    check(cuEventCreate(&g_start_event, CU_EVENT_DEFAULT), "cuEventCreate");
    check(cuEventCreate(&g_end_event, CU_EVENT_DEFAULT), "cuEventCreate");
    finish(benchmark::RegisterBenchmark("events:runtime", BM_timed_runtime<true>));
    finish(benchmark::RegisterBenchmark("events:driver", BM_timed_driver<true>));
    finish(benchmark::RegisterBenchmark("events:procaddress", BM_timed_procaddress<true>));
  }
}

// ---- --rss mode ----

// VmRSS in KiB, read without allocating (the point is to see the launch path's growth).
long rss_kib() {
  char buf[4096];
  const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char *line = std::strstr(buf, "VmRSS:");
  return line ? std::strtol(line + 6, nullptr, 10) : -1;
}

// Bytes held in files that have no name (O_TMPFILE, or unlinked), open or mapped: where a tool
// may keep what it records instead of resident memory (the recorder spills full chunks of
// events into such files, mapped, without keeping a descriptor). Each file counted once.
long long unnamed_file_bytes() {
  long long total = 0;
  std::set<std::pair<dev_t, ino_t>> seen;
  if (FILE *maps = std::fopen("/proc/self/maps", "re")) {
    char line[4096];
    while (std::fgets(line, sizeof line, maps)) {
      unsigned long start = 0, end = 0, inode = 0;
      unsigned major = 0, minor = 0;
      if (std::sscanf(line, "%lx-%lx %*s %*s %x:%x %lu", &start, &end, &major, &minor, &inode) !=
              5 ||
          inode == 0 || !std::strstr(line, " (deleted)\n"))
        continue;
      if (seen.insert({makedev(major, minor), inode}).second)
        total += static_cast<long long>(end - start);
    }
    std::fclose(maps);
  }
  DIR *dir = opendir("/proc/self/fd");
  if (!dir) return total;
  for (dirent *e; (e = readdir(dir));) {
    if (e->d_name[0] == '.') continue;
    char link[300], target[4096];
    std::snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    const char *deleted = std::strstr(target, " (deleted)");
    struct stat st {};
    if (deleted && deleted[10] == '\0' && fstat(std::atoi(e->d_name), &st) == 0 &&
        S_ISREG(st.st_mode) && seen.insert({st.st_dev, st.st_ino}).second)
      total += st.st_size;
  }
  closedir(dir);
  return total;
}

int rss_mode(const char *spec, long flush_every) {
  char *end = nullptr;
  const long first = std::strtol(spec, &end, 10);
  const long total = (end && *end == ',') ? std::strtol(end + 1, nullptr, 10) : 0;
  if (first <= 0 || total < first) {
    std::fprintf(stderr, "ferrum-bench-launch: --rss=N1,N2 with 0 < N1 <= N2\n");
    return 2;
  }
  constexpr int kGraphs = 8;
  long rss_first = -1, faults_first = 0, failures = 0;
  rusage usage{};
  for (long i = 0; i < total; ++i) {
    CUgraphExec exec = g_execs[static_cast<size_t>(i % kGraphs)];
    switch (i % 3) {
      case 0:
        failures += cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(exec), nullptr) != 0;
        break;
      case 1:
        failures += cuGraphLaunch(exec, nullptr) != 0;
        break;
      default:
        failures += g_procaddress_launch(exec, nullptr) != 0;
        break;
    }
    if (flush_every > 0 && (i + 1) % flush_every == 0 && g_gpu_flush) g_gpu_flush(nullptr);
    if (i + 1 == first) {
      rss_first = rss_kib();
      getrusage(RUSAGE_SELF, &usage);
      faults_first = usage.ru_minflt;
    }
  }
  const long rss_total = rss_kib();
  getrusage(RUSAGE_SELF, &usage);
  // Reading VmRSS (open, read, close) faults nothing in: what remains is the launches'.
  const long faults_between = usage.ru_minflt - faults_first;
  const long long unnamed_bytes = unnamed_file_bytes();
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  std::printf("launches=%ld failed=%ld\nrss_kib_at_%ld=%ld\nrss_kib_at_%ld=%ld\n", total, failures,
              first, rss_first, total, rss_total);
  std::printf("minor_faults_between=%ld\nunnamed_file_bytes=%lld\n", faults_between, unnamed_bytes);
  if (flush_every > 0) {
    unsigned long long timed = 0, not_timed = 0;
    gpu_counts(&timed, &not_timed);
    std::printf("timed=%llu\nnot_timed=%llu\n", timed, not_timed);
  }
  std::printf("end_monotonic_ns=%lld\n",
              static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
  std::fflush(stdout);
  return failures ? 3 : 0;
}

// ---- --loop mode: one route, nothing else (for valgrind --tool=callgrind) ----

int loop_mode(const char *spec) {
  char route[32] = "";
  long graphs = 0, total = 0;
  if (std::sscanf(spec, "%31[a-z],%ld,%ld", route, &graphs, &total) != 3 || graphs < 1 ||
      graphs > kManyGraphs || total < 1) {
    std::fprintf(stderr, "ferrum-bench-launch: --loop=runtime|driver|procaddress,GRAPHS,N\n");
    return 2;
  }
  int (*launch)(CUgraphExec) = nullptr;
  if (std::strcmp(route, "runtime") == 0)
    launch = [](CUgraphExec e) {
      return static_cast<int>(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(e), nullptr));
    };
  else if (std::strcmp(route, "driver") == 0)
    launch = [](CUgraphExec e) { return static_cast<int>(cuGraphLaunch(e, nullptr)); };
  else
    launch = [](CUgraphExec e) { return static_cast<int>(g_procaddress_launch(e, nullptr)); };
  long failures = 0;
  for (long i = 0; i < total; ++i)
    failures += launch(g_execs[static_cast<size_t>(i % graphs)]) != 0;
  std::printf("launches=%ld failed=%ld\n", total, failures);
  return failures ? 3 : 0;
}

}  // namespace

int main(int argc, char **argv) {
  std::string set = "all";
  long fixed_iterations = 0, warmup = 0, flush_every = 0;
  const char *rss = nullptr, *loop = nullptr;
  std::vector<char *> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--ferrum-iterations=", 20) == 0)
      fixed_iterations = std::strtol(argv[i] + 20, nullptr, 10);
    else if (std::strncmp(argv[i], "--ferrum-warmup=", 16) == 0)
      warmup = std::strtol(argv[i] + 16, nullptr, 10);
    else if (std::strncmp(argv[i], "--ferrum-set=", 13) == 0)
      set = argv[i] + 13;
    else if (std::strncmp(argv[i], "--ferrum-flush-every=", 21) == 0)
      flush_every = std::strtol(argv[i] + 21, nullptr, 10);
    else if (std::strncmp(argv[i], "--rss=", 6) == 0)
      rss = argv[i] + 6;
    else if (std::strncmp(argv[i], "--loop=", 7) == 0)
      loop = argv[i] + 7;
    else
      rest.push_back(argv[i]);
  }
  set_up();
  if (rss) {
    if (flush_every > 0)
      g_gpu_flush = reinterpret_cast<ferrum_replay_gpu_flush_fn>(
          dlsym(RTLD_DEFAULT, FERRUM_REPLAY_GPU_FLUSH));
    return rss_mode(rss, flush_every);
  }
  if (loop) return loop_mode(loop);

  int rest_argc = static_cast<int>(rest.size());
  rest.push_back(nullptr);
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  for (long i = 0; i < warmup; ++i) {
    (void)cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(g_execs[0]), nullptr);
    (void)cuGraphLaunch(g_execs[0], nullptr);
    (void)g_procaddress_launch(g_execs[0], nullptr);
  }
  register_benchmarks(set, fixed_iterations);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
