// standin_timeline: checks, through the real CUDA driver API, that the stand-in libcuda models
// an asynchronous GPU (tests/support/standin/meson.build runs it, suite `standin`).
//
// Usage: standin_timeline MODE
//   model              kernels' declared costs make a replay's GPU time; launches return before
//                      the work is done; events time replays; streams overlap; the per-thread
//                      and legacy default streams are distinct; stream capture; context stacks;
//                      a destroyed context's streams and events are invalid handles.
//   overrides          run with FERRUM_STANDIN_GRAPH_NS=700000,0 FERRUM_STANDIN_KERNEL_NS=30000.
//   launch-queue       run with FERRUM_STANDIN_GRAPH_NS=700000 FERRUM_STANDIN_LAUNCH_QUEUE=2.
//   no-events          run with FERRUM_STANDIN_NO_EVENTS=1.
//   event-create-fail  run with FERRUM_STANDIN_EVENT_CREATE_FAIL=1.
//   capture-child      (model's child) one event record captured on a stream of its own.
// Prints one line per failed check and `ok` at the end; exit status 0 when every check held.

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

// Exported by libcuda.so.1 but not declared by <cuda.h> (checked against cudaTypedefs.h's PFN
// types in the stand-in itself).
extern "C" {
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags);
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out,
                                                size_t *numDependencies_out);
}

namespace {

int g_failures = 0;

void check(bool ok, const char *what, long long detail = 0) {
  if (ok) return;
  ++g_failures;
  std::printf("FAILED: %s (%lld)\n", what, detail);
}

void check_result(CUresult got, CUresult want, const char *what) {
  if (got == want) return;
  ++g_failures;
  const char *g = nullptr, *w = nullptr;
  cuGetErrorName(got, &g);
  cuGetErrorName(want, &w);
  std::printf("FAILED: %s: %s (%d), expected %s\n", what, g ? g : "?", got, w ? w : "?");
}

#define OK(call) check_result((call), CUDA_SUCCESS, #call)

long long now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// Kernels with declared costs (the stand-in's `.pragma "ferrum_cost_ns=N";`); `plain` has none.
constexpr char kPtx[] = R"(.version 7.0
.target sm_80
.address_size 64
.visible .entry attention(.param .u64 p)
{
  .pragma "ferrum_cost_ns=300000";
  ret;
}
.visible .entry mlp()
{
  .pragma "ferrum_cost_ns=200000";
  ret;
}
.visible .entry long_kernel()
{
  .pragma "ferrum_cost_ns=50000000";
  ret;
}
.visible .entry plain()
{
  ret;
}
)";

CUmodule g_module = nullptr;

CUfunction function(const char *name) {
  CUfunction f = nullptr;
  check_result(cuModuleGetFunction(&f, g_module, name), CUDA_SUCCESS, name);
  return f;
}

// A graph of one kernel node per name, instantiated.
CUgraphExec graph_of(std::initializer_list<const char *> kernels) {
  CUgraph g = nullptr;
  OK(cuGraphCreate(&g, 0));
  static unsigned long long arg = 0;
  for (const char *name : kernels) {
    CUDA_KERNEL_NODE_PARAMS p{};
    p.func = function(name);
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = p.blockDimY = p.blockDimZ = 1;
    void *args[] = {&arg};
    p.kernelParams = std::strcmp(name, "attention") == 0 ? args : nullptr;
    CUgraphNode n = nullptr;
    OK(cuGraphAddKernelNode_v2(&n, g, nullptr, 0, &p));
  }
  CUgraphExec e = nullptr;
  OK(cuGraphInstantiateWithFlags(&e, g, 0));
  OK(cuGraphDestroy(g));
  return e;
}

CUgraphExec empty_graph() {
  CUgraph g = nullptr;
  OK(cuGraphCreate(&g, 0));
  CUgraphNode n = nullptr;
  OK(cuGraphAddEmptyNode(&n, g, nullptr, 0));
  CUgraphExec e = nullptr;
  OK(cuGraphInstantiateWithFlags(&e, g, 0));
  OK(cuGraphDestroy(g));
  return e;
}

float elapsed_ms(CUevent a, CUevent b) {
  float ms = -1;
  OK(cuEventElapsedTime_v2(&ms, a, b));
  return ms;
}

bool near(float got, double want, double tolerance = 0.05) {
  return std::fabs(got - want) <= want * tolerance;
}

CUcontext set_up() {
  OK(cuInit(0));
  CUcontext ctx = nullptr;
  OK(cuDevicePrimaryCtxRetain(&ctx, 0));
  OK(cuCtxSetCurrent(ctx));
  OK(cuModuleLoadData(&g_module, kPtx));
  return ctx;
}

// Three replays of a 300 us + 200 us graph on one stream, events around each.
void replays_timed_by_events() {
  CUgraphExec exec = graph_of({"attention", "mlp"});
  CUstream s = nullptr;
  OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent start[3], end[3];
  for (int i = 0; i < 3; ++i) {
    OK(cuEventCreate(&start[i], CU_EVENT_DEFAULT));
    OK(cuEventCreate(&end[i], CU_EVENT_BLOCKING_SYNC));
  }
  // Whether the host got back before the GPU could have finished is a matter of scheduling:
  // the NOT_READY checks count only when it provably did (else the round is tried again).
  bool raced = false;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const long long t0 = now_ns();
    bool early = true;
    CUresult right_after_launch = CUDA_SUCCESS, last_end = CUDA_SUCCESS;
    // The first start event is recorded on an idle stream, so it completes at once, and the
    // replay begins when the launch is made: that replay's events also span the host's own time
    // from the record to the launch (tens of microseconds on a loaded machine, under TSan).
    // The later replays queue behind it: their start is the previous replay's end, exactly.
    long long first_gap_ns = 0;
    for (int i = 0; i < 3; ++i) {
      const long long recorded = now_ns();
      OK(cuEventRecord(start[i], s));
      const long long before = now_ns();
      OK(cuGraphLaunch(exec, s));
      if (i == 0) first_gap_ns = now_ns() - recorded;
      const CUresult q = cuEventQuery(start[i]);
      OK(cuEventRecord(end[i], s));
      if (i == 0) right_after_launch = cuEventQuery(end[0]);
      if (i == 0) early = now_ns() - before < 500000;
      (void)q;
    }
    last_end = cuEventQuery(end[2]);
    const bool host_was_fast = now_ns() - t0 < 1500000;
    check_result(cuEventElapsedTime(nullptr, start[0], end[0]), CUDA_ERROR_INVALID_VALUE,
                 "cuEventElapsedTime(NULL)");
    float ms = 0;
    const CUresult before_sync = cuEventElapsedTime(&ms, start[0], end[2]);
    OK(cuStreamSynchronize(s));
    const long long synced = now_ns();
    if (!early || !host_was_fast) {
      raced = true;
      continue;
    }
    raced = false;
    check_result(right_after_launch, CUDA_ERROR_NOT_READY, "cuEventQuery right after a launch");
    check_result(last_end, CUDA_ERROR_NOT_READY, "cuEventQuery of the third replay's end");
    check_result(before_sync, CUDA_ERROR_NOT_READY, "cuEventElapsedTime before completion");
    check(synced - t0 >= 1500000, "cuStreamSynchronize waited for 3 x 500 us", synced - t0);
    for (int i = 0; i < 3; ++i) {
      OK(cuEventQuery(start[i]));
      OK(cuEventQuery(end[i]));
      const float e = elapsed_ms(start[i], end[i]);
      const float host = i == 0 ? static_cast<float>(first_gap_ns) / 1e6f : 0.0f;
      check(e >= 0.5f * 0.95f && e <= 0.5f * 1.05f + host,
            "a replay of 300 us + 200 us kernels takes 0.5 ms", std::lround(e * 1e6));
      float legacy = -1;
      OK(cuEventElapsedTime(&legacy, start[i], end[i]));
      check(legacy == e, "cuEventElapsedTime and _v2 agree");
    }
    const float all = elapsed_ms(start[0], end[2]);
    check(all >= 1.5f * 0.95f, "three replays back to back take 1.5 ms", std::lround(all * 1e6));
    break;
  }
  check(!raced, "the host never got back before the GPU (machine too loaded?)");
  // A never-recorded event is complete; timing it is an invalid handle; so is a timing-disabled
  // one.
  CUevent fresh = nullptr, untimed = nullptr;
  OK(cuEventCreate(&fresh, CU_EVENT_DEFAULT));
  OK(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  OK(cuEventQuery(fresh));
  OK(cuEventSynchronize(fresh));
  float ms = 0;
  check_result(cuEventElapsedTime_v2(&ms, start[0], fresh), CUDA_ERROR_INVALID_HANDLE,
               "elapsed to a never-recorded event");
  OK(cuEventRecord(untimed, s));
  check_result(cuEventElapsedTime_v2(&ms, start[0], untimed), CUDA_ERROR_INVALID_HANDLE,
               "elapsed to a CU_EVENT_DISABLE_TIMING event");
  check_result(cuEventCreate(&fresh, 0x100), CUDA_ERROR_INVALID_VALUE, "cuEventCreate(bad flags)");
  // cuEventSynchronize sleeps until the event's work is done.
  OK(cuGraphLaunch(exec, s));
  OK(cuEventRecord(end[0], s));
  OK(cuEventSynchronize(end[0]));
  OK(cuEventQuery(end[0]));
  for (int i = 0; i < 3; ++i) {
    OK(cuEventDestroy_v2(start[i]));
    OK(cuEventDestroy(end[i]));
  }
  OK(cuEventDestroy_v2(untimed));
  check_result(cuEventQuery(untimed), CUDA_ERROR_INVALID_HANDLE, "cuEventQuery after destroy");
  // A graph without kernels takes 1 us; a kernel without a declared cost 20 us (timed behind a
  // 50 ms replay, so that the stream is busy and the host's own pace does not count).
  CUgraphExec empty = empty_graph(), plain = graph_of({"plain"}), busy = graph_of({"long_kernel"});
  CUevent a = nullptr, b = nullptr, c = nullptr;
  OK(cuEventCreate(&a, 0));
  OK(cuEventCreate(&b, 0));
  OK(cuEventCreate(&c, 0));
  OK(cuGraphLaunch(busy, s));
  OK(cuEventRecord(a, s));
  OK(cuGraphLaunch(empty, s));
  OK(cuEventRecord(b, s));
  OK(cuGraphLaunch(plain, s));
  OK(cuEventRecord(c, s));
  OK(cuStreamSynchronize(s));
  check(elapsed_ms(a, b) == 0.001f, "a graph without kernels takes 1 us");
  check(near(elapsed_ms(b, c), 0.020), "a kernel without a declared cost takes 20 us");
  OK(cuStreamDestroy(s));
  check_result(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE, "cuStreamSynchronize(destroyed)");
  check_result(cuGraphLaunch(exec, s), CUDA_ERROR_INVALID_HANDLE,
               "cuGraphLaunch(destroyed stream)");
}

// Two streams overlap; one stream serialises.
void streams_overlap() {
  CUgraphExec exec = graph_of({"long_kernel"});  // 50 ms
  CUstream s1 = nullptr, s2 = nullptr;
  OK(cuStreamCreate(&s1, 0));
  OK(cuStreamCreateWithPriority(&s2, 0, -1));
  long long t0 = now_ns();
  OK(cuGraphLaunch(exec, s1));
  OK(cuGraphLaunch(exec, s2));
  check(now_ns() - t0 < 25000000, "two launches return before their work is done", now_ns() - t0);
  OK(cuCtxSynchronize());
  const long long parallel = now_ns() - t0;
  t0 = now_ns();
  OK(cuGraphLaunch(exec, s1));
  OK(cuGraphLaunch(exec, s1));
  OK(cuCtxSynchronize());
  const long long serial = now_ns() - t0;
  check(parallel >= 50000000 && parallel < 90000000, "two streams overlap (~1x)", parallel);
  check(serial >= 100000000, "one stream serialises (~2x)", serial);
  OK(cuStreamDestroy_v2(s1));
  OK(cuStreamDestroy_v2(s2));
}

// The per-thread default stream is not the legacy one, and each thread has its own; the legacy
// stream waits for blocking streams, a non-blocking one does not.
void default_streams() {
  CUgraphExec exec = graph_of({"long_kernel"});  // 50 ms
  OK(cuGraphLaunch_ptsz(exec, nullptr));         // NULL with _ptsz: the per-thread stream
  check_result(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY,
               "per-thread stream busy after cuGraphLaunch_ptsz(NULL)");
  check_result(cuStreamQuery_ptsz(nullptr), CUDA_ERROR_NOT_READY, "cuStreamQuery_ptsz(NULL)");
  OK(cuStreamQuery(nullptr));
  OK(cuStreamQuery(CU_STREAM_LEGACY));
  CUresult other = CUDA_ERROR_UNKNOWN;
  CUcontext ctx = nullptr;
  OK(cuCtxGetCurrent(&ctx));
  std::thread([&] {
    cuCtxSetCurrent(ctx);
    other = cuStreamQuery(CU_STREAM_PER_THREAD);
  }).join();
  check_result(other, CUDA_SUCCESS, "another thread's per-thread stream is idle");
  CUstream non_blocking = nullptr;
  OK(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING));
  CUevent on_legacy = nullptr, on_free = nullptr;
  OK(cuEventCreate(&on_legacy, 0));
  OK(cuEventCreate(&on_free, 0));
  OK(cuEventRecord(on_legacy, CU_STREAM_LEGACY));
  OK(cuEventRecord(on_free, non_blocking));
  check_result(cuEventQuery(on_legacy), CUDA_ERROR_NOT_READY,
               "the legacy stream waits for the per-thread stream's work");
  OK(cuEventQuery(on_free));
  CUcontext got = nullptr;
  OK(cuStreamGetCtx(non_blocking, &got));
  check(got == ctx, "cuStreamGetCtx");
  OK(cuStreamGetCtx_ptsz(nullptr, &got));
  check(got == ctx, "cuStreamGetCtx_ptsz(NULL)");
  OK(cuStreamSynchronize_ptsz(nullptr));
  OK(cuEventQuery(on_legacy));
  OK(cuStreamDestroy(non_blocking));
  OK(cuEventDestroy(on_legacy));
  OK(cuEventDestroy(on_free));
}

// Launches and event records into a capturing stream are captured, not run.
void capture() {
  CUgraphExec exec = graph_of({"attention", "mlp"});
  CUstream s = nullptr;
  OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent ev = nullptr, a = nullptr, b = nullptr;
  OK(cuEventCreate(&ev, 0));
  OK(cuEventCreate(&a, 0));
  OK(cuEventCreate(&b, 0));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  OK(cuStreamIsCapturing(s, &status));
  check(status == CU_STREAM_CAPTURE_STATUS_NONE, "not capturing before begin");
  check_result(cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
               CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "capture of the legacy stream");
  OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  OK(cuStreamIsCapturing(s, &status));
  check(status == CU_STREAM_CAPTURE_STATUS_ACTIVE, "capturing after begin");
  OK(cuGraphLaunch(exec, s));
  OK(cuEventRecord(ev, s));
  cuuint64_t id = 0;
  CUgraph during = nullptr;
  const CUgraphNode *deps = nullptr;
  const CUgraphEdgeData *edges = nullptr;
  size_t ndeps = 0;
  OK(cuStreamGetCaptureInfo_v3(s, &status, &id, &during, &deps, &edges, &ndeps));
  check(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0 && during != nullptr && ndeps == 1 &&
            deps != nullptr && edges == nullptr,
        "cuStreamGetCaptureInfo_v3 while capturing");
  CUgraph g = nullptr;
  OK(cuStreamEndCapture(s, &g));
  OK(cuStreamIsCapturing(s, &status));
  check(status == CU_STREAM_CAPTURE_STATUS_NONE, "not capturing after end");
  check(g == during, "the captured graph is the one being captured");
  // Nothing ran: the event was never really recorded, the stream is idle.
  OK(cuEventQuery(ev));
  OK(cuStreamQuery(s));
  size_t n = 0;
  OK(cuGraphGetNodes(g, nullptr, &n));
  check(n == 2, "the captured graph holds the two captured calls", static_cast<long long>(n));
  CUgraphNode nodes[2] = {};
  OK(cuGraphGetNodes(g, nodes, &n));
  CUgraphNodeType t0 = CU_GRAPH_NODE_TYPE_EMPTY, t1 = CU_GRAPH_NODE_TYPE_EMPTY;
  OK(cuGraphNodeGetType(nodes[0], &t0));
  OK(cuGraphNodeGetType(nodes[1], &t1));
  check(t0 == CU_GRAPH_NODE_TYPE_GRAPH && t1 == CU_GRAPH_NODE_TYPE_EVENT_RECORD,
        "a launch is a child-graph node, an event record an event record node");
  // The captured graph replays for the captured launch's duration.
  CUgraphExec captured = nullptr;
  OK(cuGraphInstantiateWithFlags(&captured, g, 0));
  // From an idle stream the host's own pace between the record and the launch (tens of
  // microseconds under TSan on a loaded machine) counts into the interval; it can only add to
  // it, so the replay's own length is the interval of a try the host did not slow down.
  float replay_ms = 0;
  for (int attempt = 0; attempt < 5 && !near(replay_ms, 0.5); ++attempt) {
    OK(cuEventRecord(a, s));
    OK(cuGraphLaunch(captured, s));
    OK(cuEventRecord(b, s));
    OK(cuStreamSynchronize(s));
    replay_ms = elapsed_ms(a, b);
  }
  check(near(replay_ms, 0.5), "the captured graph's replay takes 0.5 ms (ns)",
        std::llround(replay_ms * 1e6));
  // Synchronizing a capturing stream is not allowed and invalidates the capture.
  OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  check_result(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
               "cuStreamSynchronize while capturing");
  OK(cuStreamIsCapturing(s, &status));
  check(status == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "invalidated capture");
  check_result(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
               "end of an invalidated capture");
  check(g == nullptr, "an invalidated capture gives a NULL graph");
  check_result(cuStreamEndCapture(s, &g), CUDA_ERROR_INVALID_VALUE, "end without a capture");
}

// What capture-child does: one event record captured, in a process of its own.
bool capture_one_record() {
  CUstream s = nullptr;
  CUevent ev = nullptr;
  CUgraph g = nullptr;
  return cuStreamCreate(&s, 0) == CUDA_SUCCESS && cuEventCreate(&ev, 0) == CUDA_SUCCESS &&
         cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS &&
         cuEventRecordWithFlags(ev, s, CU_EVENT_RECORD_EXTERNAL) == CUDA_SUCCESS &&
         cuStreamEndCapture(s, &g) == CUDA_SUCCESS;
}

// The report counts captured event records (a test of the shim asserts it added none): a child
// process, started afresh with FERRUM_STANDIN_REPORT set (the stand-in reads it when it is
// loaded, never at exit), captures one, and its report at exit says so.
void captured_records_reported() {
  char path[] = "/tmp/standin-timeline-report.XXXXXX";
  const int fd = mkstemp(path);
  check(fd >= 0, "mkstemp");
  if (fd < 0) return;
  close(fd);
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    setenv("FERRUM_STANDIN_REPORT", path, 1);
    execl("/proc/self/exe", "standin_timeline", "capture-child", static_cast<char *>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the capturing child", status);
  char line[512] = {};
  FILE *f = std::fopen(path, "r");
  if (f != nullptr) {
    if (std::fgets(line, sizeof line, f) == nullptr) line[0] = '\0';
    std::fclose(f);
  }
  unlink(path);
  check(std::strstr(line, " captured_event_records=1 ") != nullptr,
        "the report says captured_event_records=1");
}

// Context stack, and what a destroyed context's handles do.
void contexts(CUcontext primary) {
  CUcontext mine = nullptr, got = nullptr;
  OK(cuCtxCreate_v4(&mine, nullptr, 0, 0));
  OK(cuCtxGetCurrent(&got));
  check(got == mine, "cuCtxCreate makes the new context current");
  CUdevice dev = -1;
  OK(cuCtxGetDevice(&dev));
  check(dev == 0, "cuCtxGetDevice");
  OK(cuCtxPopCurrent_v2(&got));
  check(got == mine, "cuCtxPopCurrent gives the popped context");
  OK(cuCtxGetCurrent(&got));
  check(got == primary, "the primary context is current again");
  OK(cuCtxPushCurrent_v2(mine));
  CUstream s = nullptr;
  CUevent ev = nullptr, timed = nullptr, foreign = nullptr;
  OK(cuStreamCreate(&s, 0));
  OK(cuEventCreate(&ev, 0));
  OK(cuEventCreate(&timed, 0));
  CUgraphExec exec = graph_of({"long_kernel"});
  OK(cuEventRecord(timed, s));
  OK(cuGraphLaunch(exec, s));
  OK(cuEventRecord(ev, s));
  OK(cuCtxPushCurrent_v2(primary));
  OK(cuEventCreate(&foreign, 0));
  check_result(cuEventRecord(foreign, s), CUDA_ERROR_INVALID_HANDLE,
               "recording an event on another context's stream");
  OK(cuCtxPopCurrent_v2(nullptr));
  CUresult other_thread = CUDA_SUCCESS;
  bool current = false, destroyed = false;
  {
    // Another thread keeps `mine` current across its destruction.
    std::thread t([&] {
      check_result(cuCtxSetCurrent(mine), CUDA_SUCCESS, "cuCtxSetCurrent in another thread");
      __atomic_store_n(&current, true, __ATOMIC_RELEASE);
      while (!__atomic_load_n(&destroyed, __ATOMIC_ACQUIRE)) std::this_thread::yield();
      CUevent e = nullptr;
      other_thread = cuEventCreate(&e, 0);
    });
    while (!__atomic_load_n(&current, __ATOMIC_ACQUIRE)) std::this_thread::yield();
    OK(cuCtxDestroy_v2(mine));
    __atomic_store_n(&destroyed, true, __ATOMIC_RELEASE);
    t.join();
  }
  check_result(other_thread, CUDA_ERROR_CONTEXT_IS_DESTROYED,
               "cuEventCreate in a thread whose current context was destroyed");
  OK(cuCtxGetCurrent(&got));
  check(got == primary, "destroying the current context pops it");
  float ms = 0;
  check_result(cuEventQuery(ev), CUDA_ERROR_INVALID_HANDLE, "cuEventQuery(destroyed ctx)");
  check_result(cuEventSynchronize(ev), CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize(destroyed)");
  check_result(cuEventRecord(ev, nullptr), CUDA_ERROR_INVALID_HANDLE, "cuEventRecord(destroyed)");
  check_result(cuEventRecord_ptsz(ev, nullptr), CUDA_ERROR_INVALID_HANDLE,
               "cuEventRecord_ptsz(destroyed)");
  check_result(cuEventElapsedTime_v2(&ms, timed, ev), CUDA_ERROR_INVALID_HANDLE,
               "cuEventElapsedTime(destroyed)");
  check_result(cuEventDestroy_v2(ev), CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy(destroyed)");
  check_result(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE, "cuStreamSynchronize(destroyed)");
  check_result(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE, "cuStreamQuery(destroyed)");
  check_result(cuStreamGetCtx(s, &got), CUDA_ERROR_INVALID_HANDLE, "cuStreamGetCtx(destroyed)");
  check_result(cuGraphLaunch(exec, s), CUDA_ERROR_INVALID_HANDLE, "cuGraphLaunch(destroyed)");
  check_result(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy(destroyed)");
  check_result(cuCtxDestroy_v2(mine), CUDA_ERROR_INVALID_CONTEXT, "cuCtxDestroy twice");
  check_result(cuCtxPushCurrent_v2(mine), CUDA_ERROR_INVALID_CONTEXT, "push a destroyed ctx");
  OK(cuEventDestroy(foreign));
}

// cuGetProcAddress answers the new functions at the versions of cudaTypedefs.h's PFN names
// (run with FERRUM_STANDIN_PROC_EXPORTED=1: the answers are the exported functions).
void proc_addresses() {
  struct Query {
    const char *name;
    int version;
    cuuint64_t flags;
    void *want;
  };
  const Query queries[] = {
      {"cuEventCreate", 2000, 0, reinterpret_cast<void *>(&cuEventCreate)},
      {"cuEventRecord", 12000, 2, reinterpret_cast<void *>(&cuEventRecord_ptsz)},
      {"cuEventRecordWithFlags", 12000, 2, reinterpret_cast<void *>(&cuEventRecordWithFlags_ptsz)},
      {"cuEventElapsedTime", 12000, 0, reinterpret_cast<void *>(&cuEventElapsedTime)},
      {"cuEventElapsedTime", 12080, 0, reinterpret_cast<void *>(&cuEventElapsedTime_v2)},
      {"cuEventDestroy", 4000, 0, reinterpret_cast<void *>(&cuEventDestroy_v2)},
      {"cuStreamBeginCapture", 10000, 0, reinterpret_cast<void *>(&cuStreamBeginCapture)},
      {"cuStreamBeginCapture", 12000, 2, reinterpret_cast<void *>(&cuStreamBeginCapture_v2_ptsz)},
      {"cuStreamGetCaptureInfo", 12030, 0, reinterpret_cast<void *>(&cuStreamGetCaptureInfo_v3)},
      {"cuStreamGetCaptureInfo", 12000, 2,
       reinterpret_cast<void *>(&cuStreamGetCaptureInfo_v2_ptsz)},
      {"cuCtxPushCurrent", 4000, 0, reinterpret_cast<void *>(&cuCtxPushCurrent_v2)},
      {"cuCtxGetDevice", 13000, 0, reinterpret_cast<void *>(&cuCtxGetDevice_v2)},
      {"cuStreamGetCtx", 9020, 2, reinterpret_cast<void *>(&cuStreamGetCtx_ptsz)},
  };
  for (const Query &q : queries) {
    void *fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult r = cuGetProcAddress_v2(q.name, &fn, q.version, q.flags, &status);
    check(r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && fn == q.want, q.name,
          q.version);
  }
  void *fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  check_result(cuGetProcAddress_v2("cuEventElapsedTime", &fn, 1000, 0, &status),
               CUDA_ERROR_NOT_FOUND, "cuEventElapsedTime@1000");
  check(status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, "VERSION_NOT_SUFFICIENT");
}

int model() {
  const CUcontext primary = set_up();
  captured_records_reported();  // first: the child's count includes what this process captured
  replays_timed_by_events();
  streams_overlap();
  default_streams();
  capture();
  contexts(primary);
  proc_addresses();
  return 0;
}

// FERRUM_STANDIN_GRAPH_NS=700000,0 FERRUM_STANDIN_KERNEL_NS=30000
int overrides() {
  set_up();
  CUgraphExec first = graph_of({"attention", "mlp"});  // instantiation 1: 700 us
  CUgraphExec second = graph_of({"attention"});        // instantiation 2: 0 ns
  CUgraphExec third = graph_of({"plain", "plain"});    // instantiation 3: 2 x 30 us
  // Instantiation 4, past the overrides: its kernel's declared 50 ms keeps the stream busy, so
  // that the replays below queue behind it and the host's own pace between a record and a
  // launch (tens of microseconds under TSan on a loaded machine) does not count into them.
  CUgraphExec busy = graph_of({"long_kernel"});
  CUstream s = nullptr;
  OK(cuStreamCreate(&s, 0));
  CUevent e[4];
  for (CUevent &x : e) OK(cuEventCreate(&x, 0));
  bool raced = true;
  for (int attempt = 0; attempt < 5 && raced; ++attempt) {
    const long long t0 = now_ns();
    OK(cuGraphLaunch(busy, s));
    OK(cuEventRecord(e[0], s));
    OK(cuGraphLaunch(first, s));
    OK(cuEventRecord(e[1], s));
    OK(cuGraphLaunch(second, s));
    OK(cuEventRecord(e[2], s));
    OK(cuGraphLaunch(third, s));
    OK(cuEventRecord(e[3], s));
    raced = now_ns() - t0 >= 50000000;  // the busy replay ended before the last record
    OK(cuStreamSynchronize(s));
  }
  check(!raced, "the host never queued within 50 ms (machine too loaded?)");
  const float ms[] = {elapsed_ms(e[0], e[1]), elapsed_ms(e[1], e[2]), elapsed_ms(e[2], e[3])};
  check(near(ms[0], 0.7), "FERRUM_STANDIN_GRAPH_NS: first instantiation (ns)",
        std::llround(ms[0] * 1e6));
  check(ms[1] == 0.0f, "FERRUM_STANDIN_GRAPH_NS: second instantiation (ns)",
        std::llround(ms[1] * 1e6));
  check(near(ms[2], 0.060), "FERRUM_STANDIN_KERNEL_NS for the third (ns)",
        std::llround(ms[2] * 1e6));
  return 0;
}

// FERRUM_STANDIN_GRAPH_NS=700000 FERRUM_STANDIN_LAUNCH_QUEUE=2: two launches return at once, the
// third waits until the first replay is done.
int launch_queue() {
  set_up();
  CUgraphExec exec = graph_of({"mlp"});  // 700 us
  CUstream s = nullptr;
  OK(cuStreamCreate(&s, 0));
  const long long t0 = now_ns();
  OK(cuGraphLaunch(exec, s));
  OK(cuGraphLaunch(exec, s));
  const long long two = now_ns() - t0;
  OK(cuGraphLaunch(exec, s));
  const long long three = now_ns() - t0;
  check(three >= 700000, "a launch into a full queue waits for the oldest replay", three);
  if (two < 700000) check(three - two >= 700000 - two - 1000, "the wait is the replay's", three);
  OK(cuStreamSynchronize(s));
  const long long all = now_ns() - t0;
  check(all >= 2 * 700000, "the queue's replays run one after the other", all);
  return 0;
}

// A driver without the event API: cuGetProcAddress does not know it, the exported names return
// CUDA_ERROR_NOT_SUPPORTED; the rest works.
int no_events() {
  set_up();
  for (const char *name :
       {"cuEventCreate", "cuEventRecord", "cuEventRecordWithFlags", "cuEventQuery",
        "cuEventSynchronize", "cuEventElapsedTime", "cuEventDestroy"}) {
    void *fn = reinterpret_cast<void *>(1);
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    check_result(cuGetProcAddress_v2(name, &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND, name);
    check(fn == nullptr && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, name);
    check(dlsym(RTLD_DEFAULT, name) != nullptr, "dlsym still finds the exported name");
  }
  CUevent ev = nullptr;
  float ms = 0;
  check_result(cuEventCreate(&ev, 0), CUDA_ERROR_NOT_SUPPORTED, "cuEventCreate");
  check_result(cuEventRecord(ev, nullptr), CUDA_ERROR_NOT_SUPPORTED, "cuEventRecord");
  check_result(cuEventRecord_ptsz(ev, nullptr), CUDA_ERROR_NOT_SUPPORTED, "cuEventRecord_ptsz");
  check_result(cuEventRecordWithFlags(ev, nullptr, 0), CUDA_ERROR_NOT_SUPPORTED,
               "cuEventRecordWithFlags");
  check_result(cuEventRecordWithFlags_ptsz(ev, nullptr, 0), CUDA_ERROR_NOT_SUPPORTED,
               "cuEventRecordWithFlags_ptsz");
  check_result(cuEventQuery(ev), CUDA_ERROR_NOT_SUPPORTED, "cuEventQuery");
  check_result(cuEventSynchronize(ev), CUDA_ERROR_NOT_SUPPORTED, "cuEventSynchronize");
  check_result(cuEventElapsedTime(&ms, ev, ev), CUDA_ERROR_NOT_SUPPORTED, "cuEventElapsedTime");
  check_result(cuEventElapsedTime_v2(&ms, ev, ev), CUDA_ERROR_NOT_SUPPORTED,
               "cuEventElapsedTime_v2");
  check_result(cuEventDestroy(ev), CUDA_ERROR_NOT_SUPPORTED, "cuEventDestroy");
  check_result(cuEventDestroy_v2(ev), CUDA_ERROR_NOT_SUPPORTED, "cuEventDestroy_v2");
  void *fn = nullptr;
  OK(cuGetProcAddress_v2("cuGraphLaunch", &fn, 12000, 0, nullptr));
  CUgraphExec exec = graph_of({"mlp"});
  OK(reinterpret_cast<PFN_cuGraphLaunch_v10000>(fn)(exec, nullptr));
  OK(cuStreamSynchronize(nullptr));
  return 0;
}

int event_create_fail() {
  set_up();
  CUevent ev = nullptr;
  check_result(cuEventCreate(&ev, 0), CUDA_ERROR_OUT_OF_MEMORY, "cuEventCreate");
  check_result(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_ERROR_OUT_OF_MEMORY,
               "cuEventCreate(DISABLE_TIMING)");
  void *fn = nullptr;
  OK(cuGetProcAddress_v2("cuEventCreate", &fn, 12000, 0, nullptr));
  CUgraphExec exec = graph_of({"mlp"});
  OK(cuGraphLaunch(exec, nullptr));
  OK(cuCtxSynchronize());
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "model") {
    model();
  } else if (mode == "overrides") {
    overrides();
  } else if (mode == "launch-queue") {
    launch_queue();
  } else if (mode == "no-events") {
    no_events();
  } else if (mode == "event-create-fail") {
    event_create_fail();
  } else if (mode == "capture-child") {  // captured_records_reported's child
    set_up();
    return capture_one_record() ? 0 : 1;
  } else {
    std::fprintf(stderr, "usage: standin_timeline MODE (see the source)\n");
    return 2;
  }
  if (g_failures == 0) std::printf("ok\n");
  return g_failures == 0 ? 0 : 1;
}
