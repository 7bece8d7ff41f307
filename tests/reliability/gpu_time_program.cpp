// gpu_time_program: the programs of the GPU-timing reliability tests (test_gpu_time.py). Links
// the (stand-in) driver and launches graphs through cuGraphLaunch by name; each graph has one
// empty node, so its simulated duration is what FERRUM_STANDIN_GRAPH_NS gives its
// instantiation (the k-th value for the k-th instantiation, in the order below).
//
// Usage: gpu_time_program MODE [N] [M]
//   ctx-destroy N M   context A: N launches of graph 1 (make it long), then cuCtxDestroy(A) with
//                     the replays in flight; then context B: M launches of graph 2, synchronised,
//                     then B destroyed.
//   primary-release N M   the same with the primary context: retain, N launches, the last
//                     cuDevicePrimaryCtxRelease with them in flight; retain again, a new graph, M
//                     launches, synchronised, released.
//   primary-and-created N M   a context of cuCtxCreate (C, its graph instantiated first) and the
//                     primary context (P, its graph second): N launches in P and M in C, all in
//                     flight when P's last reference is released; then M more in C,
//                     synchronised, and C destroyed. C lives on through P's end.
//   burst N [sync]    one stream, one graph, N launches as fast as possible, each launch's
//                     duration measured; with `sync`, cuStreamSynchronize after the loop. Prints
//                     max_launch_ns=<slowest launch> loop_ns=<the whole loop>.
//   many N [S]        one graph, N launches on one stream, synchronised every S (default 100,
//                     a burst of an ordinary run); prints
//                     quarter_rss_kib=<VmRSS after each quarter> seconds=<the loop>.
//   destroyed-in-flight N  graph 1 launched once (make it long) and destroyed at once; then N
//                     graphs instantiated and destroyed one after another while it runs; prints
//                     in_flight_after_churn=<1 if graph 1's replay had not finished then>; then
//                     one more graph launched once, everything synchronised.
//   recapture N M K   K graphs (kept) launched once each; then N graphs each made, launched
//                     once, synchronised, its time read (ferrum_replay_gpu_flush, so that it
//                     is read while the graph lives) and destroyed (a program that re-captures
//                     its graphs); then each kept graph and a new one (kept too) launched M
//                     times, synchronised and read.
//   recapture-threads N T   T threads in one context, each with a kept graph and a stream of
//                     its own: N times a graph made, launched, the kept graph launched, every
//                     8th time synchronised, the graph destroyed (records reused while the
//                     reaper reads).
//   recontext N M     N rounds of: a new context, a graph made and launched once, synchronised,
//                     the context destroyed (its graph with it, never destroyed itself); then a
//                     new context and graph, launched M times, synchronised.
//   default-streams N  two threads launch a graph each N times on their per-thread default
//                     streams (CU_STREAM_PER_THREAD) at once, synchronised; then two contexts
//                     launch a graph each N times on their legacy default streams (NULL),
//                     interleaved, synchronised. Graphs 1 and 2 per thread, 3 (the second
//                     context's) and 4 on the legacy streams.
//   shared-stream N [legacy]  two threads, a graph each (graphs 1 and 2), on one stream of the
//                     program's (`legacy`: the legacy default stream, NULL): one thread launches
//                     N times alone, then both N times each at once, then the other N times
//                     alone; synchronised.
//   exit-in-flight N  N launches, then exit(0) with the replays in flight (no synchronisation).
//   capture N         one graph: N launches on a stream, then the same graph launched N times
//                     into a capture of another stream; the captured graph is instantiated and
//                     launched once; everything synchronised. Prints captured_nodes=<n>.
//   fork-storm N M    N rounds: a new context, M launches, a fork whose child exits at once,
//                     the context destroyed.
//   fork N M          N launches, synchronised; fork: the child creates its own context and
//                     graph, launches M times, synchronises and exits normally; the parent waits
//                     for it, launches N more times, synchronises. Prints child_status=<s>.
//   main-exits N M [HOW]  the primary context: N launches, left in flight; with M > 0, a thread
//                     of the program's that waits 100 ms, launches M times, synchronises, prints
//                     and returns; then the main thread ends — HOW: pthread_exit (default),
//                     thrd_exit, or cancel (another thread cancels it, blocked in pause()). The
//                     process ends with its last thread, exit status 0.
//   cancel-pending N  a thread times N launches, asks for its own cancellation and returns
//                     before any cancellation point; main joins it and prints
//                     first=<returned|cancelled>; then a second thread times N launches.
//   end-cancel-pending HOW  one graph of one long replay (FERRUM_STANDIN_GRAPH_NS) in a context,
//                     launched once by a thread that then launches it again, where it waits for
//                     the first (FERRUM_STANDIN_LAUNCH_QUEUE=1) holding its timing pair; 200 ms
//                     into that wait another thread asks for its own cancellation and ends the
//                     context — HOW: destroy (cuCtxDestroy of a created context) or release (the
//                     last cuDevicePrimaryCtxRelease), neither a cancellation point. Prints
//                     ender=<returned|cancelled>.
//   fork-thread N     a thread of the program's forks; the child (that thread alone) makes a
//                     context, launches N times, synchronises, prints, and returns from the
//                     thread's function — its last thread. The parent prints child_status=<s>. An
//                     exit handler launches the graph once more and prints `exit_handler on=<its
//                     thread's name> sigterm_blocked=<0|1> launch=<CUresult> sync=<CUresult>`.
//   no-keys N M       every thread-specific key of the process taken first (prints
//                     keys_taken=<k>); then the main thread and M threads, one after the other,
//                     launch one graph N times each, synchronised.
//   sink N LAYOUT     a tool's GPU-time sink registered by the program itself (no recorder), as
//                     a tool built against LAYOUT of ferrum_replay.h reads the batches: `first`
//                     (ferrum_replay_set_gpu_sink, the struct before it grew, indexed by its
//                     sizeof), `first-grown` (the same way, indexed by today's sizeof: a tool
//                     built against a grown header before the sized way existed), `sized`
//                     (ferrum_replay_set_gpu_sink_sized with today's sizeof,
//                     stepping by `size`), `sized-first` (the same with the first layout's
//                     size), `sized-newer` (a size 32 bytes larger: a tool newer than the shim),
//                     `sized-short` (8 bytes: refused), `exiting` (a sink that calls exit(3)
//                     on its first batch; the main thread then waits 20 s for it, prints
//                     sink_never_exited). Graphs 1, 2, 3 launched N times each,
//                     in turn, on one stream; synchronised; flushed. Prints set_sink=<rc>, a line
//                     `sink_replay size= category= replay= name= dur_ns= context=` per replay
//                     (context: `absent` where `size` does not cover it), flush=<rc>.
//   sink-reenter N PATH ACTION  a new context; graph 1 launched once (make it long), then graph
//                     2 N times, on one stream: by the main thread (PATH `reaper`: its reaper
//                     delivers), or by a thread that then returns with them in flight (its end
//                     stops the reaper), after which main synchronises the context and — PATH
//                     `flush`: calls ferrum_replay_gpu_flush; `exit`: returns (the exit's pass
//                     delivers); `destroyed-flush`, `destroyed-exit`: the same after cuCtxDestroy.
//                     ACTION: the program's own sink, which on its first batch `unregister`s
//                     itself, `replace`s itself with a second sink, or `keep`s; `none`: no sink
//                     of the program's (a recorder's); with `-first-way` (`unregister-first-way`,
//                     `replace-first-way`) both sinks are registered without their size. Prints
//                     set_sink=<rc>, per batch `sink_batch sink=<0|1> count= on=<thread name>
//                     set=<the sink's set_sink rc>`, flush=<rc> timed= in_flight= not_timed= (flush
//                     paths), and at exit (after the shim's exit pass) sinks_at_exit
//                     first=<replays> second=<replays>.
//   dead-contexts R N R rounds: a new context, a thread that makes it current, launches 5 times
//                     (synchronised) and waits while the main thread destroys the context, then
//                     launches once more (it fails: the context is gone, as on a real driver);
//                     then a new context, N launches, each synchronised.
//   cancelled-in-destroy N M  a new context, N launches, synchronised; a thread with a
//                     cancellation request pending calls cuCtxDestroy on it (with
//                     FERRUM_STANDIN_DESTROY_WAIT_MS the call waits in a cancellation point,
//                     and the thread is cancelled inside it; prints ender=<cancelled|returned>);
//                     then a new context, M launches, synchronised.
//   flush-signal N    the primary context; a thread instantiates a graph and ends; the main
//                     thread, which never launched, calls ferrum_replay_gpu_flush in a loop (2 s
//                     or N calls) while another thread sends it SIGUSR1 every 20 us, whose
//                     handler launches the graph: the main thread's first timed launch may land
//                     inside the flush. Stops once 20 handlers ran. Prints handled=<n>.
//   reaper-stuck N    (with FERRUM_STANDIN_EVENT_QUERY_HANG_MS: the shim's reaper stuck inside the
//                     driver) a thread instantiates a graph in a new context, times N launches,
//                     synchronises and returns; main joins it, prints joined_ms=<from its return
//                     to the join>, then times N launches of that graph and synchronises; a
//                     second thread and main do the same again (second_joined_ms=,
//                     second_instantiate_ms=: the second thread's instantiation); meanwhile,
//                     1 s into the first thread's end, a third thread launches that graph N
//                     times (late_longest_ms=: its longest launch) and calls
//                     ferrum_replay_gpu_flush (late_flush_ms=); main calls
//                     ferrum_replay_gpu_flush (flush=<rc> flush_ms=) and returns from main.
//   reaper-returns N M  as reaper-stuck (with FERRUM_STANDIN_EVENT_QUERY_HANG_MS=12000,1: the
//                     reaper's first query returns after 12 s) up to main's N launches; then main
//                     waits 3 s (the query has returned) and launches M times in synchronised
//                     bursts of 100.
//   long-run MS N     a new context and stream: graph 1 launched 3 times, synchronised (its pool
//                     made and the clock aligned); then MS milliseconds without a launch; then
//                     graph 2 launched N times back to back, synchronised.
//   retain-release N R  the primary context retained and current: N launches of one graph on a
//                     stream, left in flight; then R pairs of cuDevicePrimaryCtxRetain and
//                     cuDevicePrimaryCtxRelease (none the last: the first retain is held), timed.
//                     Prints release_pairs_ns=<the R pairs>.
//   green J N [F]     J jobs, each in a green context of its own (cuGreenCtxCreate, made current
//                     through cuCtxFromGreenCtx): a graph, N launches on its legacy stream, then
//                     cuGreenCtxDestroy — the first F jobs (default 1) with their replays in
//                     flight, the others synchronised first; 1.5 s later, a context of
//                     cuCtxCreate times N launches, synchronised, and is destroyed.
//   primary-reset N M  the primary context retained and current: N launches on a stream, left in
//                     flight; cuDevicePrimaryCtxReset; retained again (the same handle), a new
//                     stream and graph, M launches, synchronised; both references released.
//   green-stale N M   a context of cuCtxCreate, current: N launches left in flight; then
//                     cuGreenCtxDestroy given that context's handle (no live green context: a
//                     stale green handle whose memory the driver gave to this context), which the
//                     driver refuses — prints stale_destroy=<its result>; M launches more,
//                     synchronised; the context destroyed.
//   green-thread N M  a thread makes a green context current (cuCtxSetCurrent of its
//                     cuCtxFromGreenCtx context), launches N times, pausing 2 ms every 10, keeps
//                     it current meanwhile, synchronises, unsets it and destroys it; at the same
//                     time the main thread times M launches in a context of cuCtxCreate (the
//                     primary context retained first, released last).
// GPU_TIME_PROGRAM_ROUTE=dlsym|procaddress: the green and reset modes reach cuGreenCtxDestroy,
// cuCtxFromGreenCtx and cuDevicePrimaryCtxReset_v2 through dlsym on a handle of libcuda.so.1, or
// cuGetProcAddress_v2 (by name otherwise).
// Every mode prints `launches=<L> failed=<F>` (F: launches that did not return CUDA_SUCCESS).
// Exit status 0, or 1 on a set-up error (message on stderr).

#include <cuda.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include <dlfcn.h>
#include <ferrum_replay/ferrum_replay.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

unsigned long long g_launches = 0, g_failed = 0;

void check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return;
  std::fprintf(stderr, "gpu_time_program: %s failed: %d\n", what, static_cast<int>(r));
  std::exit(1);
}

unsigned long long now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1000000000ull +
         static_cast<unsigned long long>(ts.tv_nsec);
}

CUgraphExec make_exec() {
  CUgraph graph = nullptr;
  check(cuGraphCreate(&graph, 0), "cuGraphCreate");
  CUgraphNode node = nullptr;
  check(cuGraphAddEmptyNode(&node, graph, nullptr, 0), "cuGraphAddEmptyNode");
  CUgraphExec exec = nullptr;
  check(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
  check(cuGraphDestroy(graph), "cuGraphDestroy");
  return exec;
}

void launch(CUgraphExec exec, CUstream stream) {
  ++g_launches;
  if (cuGraphLaunch(exec, stream) != CUDA_SUCCESS) ++g_failed;
}

void launches(CUgraphExec exec, CUstream stream, long n) {
  for (long i = 0; i < n; ++i) launch(exec, stream);
}

CUcontext new_context() {
  CUcontext ctx = nullptr;
  check(cuCtxCreate(&ctx, nullptr, 0, 0), "cuCtxCreate");
  return ctx;
}

CUstream new_stream() {
  CUstream stream = nullptr;
  check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return stream;
}

long rss_kib() {
  FILE *f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) kib = std::strtol(line + 6, nullptr, 10);
  }
  std::fclose(f);
  return kib;
}

void finish() {
  std::printf("launches=%llu failed=%llu\n", g_launches, g_failed);
  std::fflush(stdout);
}

struct LaterLaunches {
  CUcontext ctx;
  CUgraphExec exec;
  long count;
};

void *launch_later(void *argument) {
  const auto *later = static_cast<const LaterLaunches *>(argument);
  timespec pause{0, 100 * 1000 * 1000};
  nanosleep(&pause, nullptr);
  check(cuCtxSetCurrent(later->ctx), "cuCtxSetCurrent");
  launches(later->exec, nullptr, later->count);
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  finish();
  return nullptr;
}

CUgraphExec g_exit_exec = nullptr;

// What a program's exit handler finds on the thread it runs on (after the main thread ended,
// the program's last thread): its name, its signal mask, and whether CUDA still works there.
void report_at_exit() {
  char name[16] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  const int launched = static_cast<int>(cuGraphLaunch(g_exit_exec, nullptr));
  const int synchronised = static_cast<int>(cuCtxSynchronize());
  std::printf("exit_handler on=%s sigterm_blocked=%d launch=%d sync=%d\n", name,
              sigismember(&mask, SIGTERM), launched, synchronised);
  std::fflush(stdout);
}

pthread_t g_main_thread;
CUcontext g_context = nullptr;
CUgraphExec g_exec = nullptr;
long g_per_thread_count = 0;  // default-streams, shared-stream: launches per thread
CUstream g_shared_stream = nullptr;
std::atomic<int> g_shared_ready{0};
std::atomic<unsigned long long> g_failed_per_thread{0};

void *launch_then_cancel_self(void *argument) {
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  if (!g_exec) g_exec = make_exec();  // here, not on main: only these threads time anything
  launches(g_exec, nullptr, *static_cast<const long *>(argument));
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  // A cancellation request this thread never acts on (no cancellation point before it
  // returns) — as when a program cancels a worker already past its last one.
  pthread_cancel(pthread_self());
  return argument;
}

std::atomic<long long> g_returned_ns{0};

long long monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1000000000LL + now.tv_nsec;
}

std::atomic<long long> g_instantiate_ms{0};

void *launch_then_return(void *argument) {
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  const long long start = monotonic_ns();
  g_exec = make_exec();  // here, not on main: main registers with the shim only afterwards
  g_instantiate_ms.store((monotonic_ns() - start) / 1000000);
  launches(g_exec, nullptr, *static_cast<const long *>(argument));
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  // The shim's reaper, which looks every millisecond while replays are unread, is inside a
  // driver call by now (a whole 500 ms to be scheduled once, on a loaded machine too).
  const timespec settle{0, 500 * 1000 * 1000};
  nanosleep(&settle, nullptr);
  g_returned_ns.store(monotonic_ns());
  return nullptr;
}

// reaper-stuck, reaper-returns: a thread (launch_then_return) in g_context (made on the first
// call) times `n` launches and ends; joined, `joined` printed (ms from its return to the join);
// then main times `n` launches of the thread's graph, synchronised.
void thread_then_main(long n, const char *joined) {
  if (!g_context) g_context = new_context();
  static long count;
  count = n;
  pthread_t thread;
  if (pthread_create(&thread, nullptr, launch_then_return, &count) != 0)
    check(CUDA_ERROR_UNKNOWN, "pthread_create");
  pthread_join(thread, nullptr);
  std::printf("%s=%lld\n", joined, (monotonic_ns() - g_returned_ns.load()) / 1000000);
  launches(g_exec, nullptr, n);
  check(cuCtxSynchronize(), "cuCtxSynchronize");
}

// reaper-stuck: a thread that makes its first launches 1 s after the first thread returned, while
// that thread's end waits for the stuck reaper; it keeps its own counts (added once joined) and
// the longest of its launches, in ms.
struct LateLaunches {
  long count;
  unsigned long long launched, failed;
  long long longest_ms, flush_ms;
};

ferrum_replay_gpu_flush_fn flush_fn() {
  return reinterpret_cast<ferrum_replay_gpu_flush_fn>(dlsym(RTLD_DEFAULT, FERRUM_REPLAY_GPU_FLUSH));
}

void *launch_late(void *argument) {
  auto &late = *static_cast<LateLaunches *>(argument);
  while (g_returned_ns.load() == 0) {
    const timespec poll{0, 1000 * 1000};
    nanosleep(&poll, nullptr);
  }
  const timespec into_the_wait{1, 0};
  nanosleep(&into_the_wait, nullptr);
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  for (long i = 0; i < late.count; ++i) {
    const long long start = monotonic_ns();
    ++late.launched;
    if (cuGraphLaunch(g_exec, nullptr) != CUDA_SUCCESS) ++late.failed;
    late.longest_ms = std::max(late.longest_ms, (monotonic_ns() - start) / 1000000);
  }
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  const long long start = monotonic_ns();
  if (auto flush = flush_fn()) flush(nullptr);
  late.flush_ms = (monotonic_ns() - start) / 1000000;
  return nullptr;
}

void *cancel_main(void *) {
  // The process ends with its last thread, which runs the exit handlers: the main thread once
  // cancelled, or this one, should it return after the main thread is gone (seen under ASan).
  // Either has the context current, so that the handler's launch means the same on both.
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  pthread_cancel(g_main_thread);
  return nullptr;
}

// Forks; the child makes its own context, stream and graph, launches `count` times,
// synchronises and prints. True in the child (which ends as its caller decides); false in the
// parent, with the child's pid in *child.
bool fork_timing_child(long count, pid_t *child) {
  std::fflush(stdout);
  *child = fork();
  if (*child < 0) check(CUDA_ERROR_UNKNOWN, "fork");
  if (*child != 0) return false;
  g_launches = g_failed = 0;
  new_context();
  launches(make_exec(), new_stream(), count);
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  finish();
  return true;
}

void *launch_shared_graph(void *argument) {
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  launches(g_exec, nullptr, *static_cast<const long *>(argument));
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  return nullptr;
}

void *fork_from_thread(void *argument) {
  pid_t child = 0;
  // The child's only thread: the process ends here, as its last thread ends.
  if (fork_timing_child(*static_cast<const long *>(argument), &child)) return nullptr;
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("child_status=%d\n", status);
  return nullptr;
}

// end-cancel-pending: see the usage above.
std::atomic<bool> g_waiting_launch{false};
std::string g_end_how;
CUstream g_end_stream = nullptr;

void *launch_twice(void *) {
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  launch(g_exec, g_end_stream);
  g_waiting_launch.store(true);
  launch(g_exec, g_end_stream);  // waits for the first replay, inside the timed launch
  return nullptr;
}

void *end_context_cancel_pending(void *) {
  pthread_cancel(pthread_self());  // pending: it calls no cancellation point of its own
  CUresult result = CUDA_ERROR_UNKNOWN;
  if (g_end_how == "destroy") result = cuCtxDestroy(g_context);
  if (g_end_how == "release") result = cuDevicePrimaryCtxRelease(0);
  return result == CUDA_SUCCESS ? &g_end_how : nullptr;
}

std::atomic<int> g_dead_step{0};  // dead-contexts: 1 launched, 2 destroyed

void *launch_across_destroy(void *) {
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  CUstream stream = new_stream();
  launches(g_exec, stream, 5);
  check(cuStreamSynchronize(stream), "cuStreamSynchronize");
  g_dead_step.store(1);
  while (g_dead_step.load() != 2) sched_yield();
  launch(g_exec, stream);  // fails: its current context was destroyed meanwhile
  return nullptr;
}

void *destroy_cancel_pending(void *) {
  pthread_cancel(pthread_self());  // acted on only at a cancellation point inside the driver
  return cuCtxDestroy(g_context) == CUDA_SUCCESS ? &g_context : nullptr;
}

std::atomic<long> g_handled{0};

void launch_in_handler(int) {
  const int saved = errno;
  CUcontext current = nullptr;
  if (cuCtxGetCurrent(&current) == CUDA_SUCCESS && !current) cuCtxSetCurrent(g_context);
  cuGraphLaunch(g_exec, nullptr);
  g_handled.fetch_add(1);
  errno = saved;
}

void *instantiate_in_thread(void *) {
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  g_exec = make_exec();
  return nullptr;
}

std::atomic<bool> g_stop_signals{false};

void *signal_main(void *) {
  while (!g_stop_signals.load()) {
    pthread_kill(g_main_thread, SIGUSR1);
    const timespec pause{0, 20 * 1000};
    nanosleep(&pause, nullptr);
  }
  return nullptr;
}

// One thread of default-streams: its graph launched on its per-thread default stream.
void *launch_per_thread(void *argument) {
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  const CUgraphExec exec = *static_cast<const CUgraphExec *>(argument);
  for (long i = 0; i < g_per_thread_count; ++i)
    if (cuGraphLaunch(exec, CU_STREAM_PER_THREAD) != CUDA_SUCCESS) g_failed_per_thread.fetch_add(1);
  check(cuStreamSynchronize(CU_STREAM_PER_THREAD), "cuStreamSynchronize");
  return nullptr;
}

// One thread of shared-stream: its graph launched on the stream both threads use, alone (the
// thread that arrives first, then the other) and at once.
void *launch_on_shared_stream(void *argument) {
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  const CUgraphExec exec = *static_cast<const CUgraphExec *>(argument);
  auto launch_all = [exec] {
    for (long i = 0; i < g_per_thread_count; ++i)
      if (cuGraphLaunch(exec, g_shared_stream) != CUDA_SUCCESS) g_failed_per_thread.fetch_add(1);
  };
  const bool first = g_shared_ready.fetch_add(1) == 0;
  if (first) launch_all();  // alone: the other waits
  g_shared_ready.fetch_add(1);
  while (g_shared_ready.load() < 4) sched_yield();  // both at once, not one after the other
  launch_all();
  g_shared_ready.fetch_add(1);
  if (!first) {
    while (g_shared_ready.load() < 6) sched_yield();  // alone again: the first has finished
    launch_all();
  }
  return nullptr;
}

// Two threads running `body` with a graph each (instantiated here, in the current context), N
// launches each; joined, their launches counted.
void launch_on_two_threads(void *(*body)(void *), long n) {
  static CUgraphExec execs[2];
  execs[0] = make_exec();
  execs[1] = make_exec();
  g_per_thread_count = n;
  pthread_t threads[2];
  for (int i = 0; i < 2; ++i)
    if (pthread_create(&threads[i], nullptr, body, &execs[i]) != 0)
      check(CUDA_ERROR_UNKNOWN, "pthread_create");
  for (pthread_t thread : threads) pthread_join(thread, nullptr);
  g_launches += 2 * static_cast<unsigned long long>(n);
  g_failed += g_failed_per_thread.load();
}

// A driver function as GPU_TIME_PROGRAM_ROUTE asks for it (see the usage above): by name (the
// `by_name` given), through dlsym of `name` on the driver's handle, or through
// cuGetProcAddress_v2 of `base` (the name without its _v2: the lookup's version picks the ABI).
template <typename Function>
Function driver_function(const char *name, const char *base, Function by_name) {
  const char *route = std::getenv("GPU_TIME_PROGRAM_ROUTE");
  void *found = nullptr;
  if (route && std::strcmp(route, "dlsym") == 0) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    found = driver ? dlsym(driver, name) : nullptr;
  } else if (route && std::strcmp(route, "procaddress") == 0) {
    CUdriverProcAddressQueryResult status{};
    if (cuGetProcAddress(base, &found, 12040, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS)
      found = nullptr;
  } else {
    return by_name;
  }
  if (!found) check(CUDA_ERROR_NOT_FOUND, name);
  return reinterpret_cast<Function>(found);
}

int usage() {
  std::fprintf(stderr, "usage: gpu_time_program MODE [N] [M] (see the source)\n");
  return 2;
}

}  // namespace

// The first layout of ferrum_replay_gpu_replay, as a tool compiled before the struct grew
// declares it. The header only ever grows at its end: these offsets must stay its own.
struct FirstLayoutReplay {
  uint32_t size;
  int32_t device;
  uint64_t stream;
  const char *name;
  uint32_t category;
  uint64_t replay;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t align_error_ns;
};
static_assert(sizeof(FirstLayoutReplay) == FERRUM_REPLAY_GPU_REPLAY_FIRST_SIZE);
static_assert(offsetof(FirstLayoutReplay, name) == offsetof(ferrum_replay_gpu_replay, name));
static_assert(offsetof(FirstLayoutReplay, replay) == offsetof(ferrum_replay_gpu_replay, replay));
static_assert(offsetof(FirstLayoutReplay, align_error_ns) ==
              offsetof(ferrum_replay_gpu_replay, align_error_ns));

void print_replay(uint32_t size, uint32_t category, uint64_t replay, const char *name,
                  uint64_t start_ns, uint64_t end_ns, const uint64_t *context) {
  char owner[32] = "absent";
  if (context)
    std::snprintf(owner, sizeof owner, "%#llx", static_cast<unsigned long long>(*context));
  std::printf("sink_replay size=%u category=%u replay=%llu name=%s dur_ns=%llu context=%s\n", size,
              category, static_cast<unsigned long long>(replay), name ? name : "(null)",
              static_cast<unsigned long long>(end_ns - start_ns), owner);
}

// A tool built against the first layout: steps through the batch by its own sizeof.
void first_layout_sink(const ferrum_replay_gpu_replay *replays, size_t count, void *) {
  const auto *r = reinterpret_cast<const FirstLayoutReplay *>(replays);
  for (size_t i = 0; i < count; ++i)
    print_replay(r[i].size, r[i].category, r[i].replay, r[i].name, r[i].start_ns, r[i].end_ns,
                 nullptr);
}

// A tool built against a header whose struct had grown, before the sized way existed: registered
// the first way, yet steps by its own, larger sizeof, reading the first layout's fields. The shim
// cannot tell it from a first-layout tool: given 64-byte steps it read garbage names and crashed
// the host (review CP-4); one replay per call reads right either way.
void grown_unsized_sink(const ferrum_replay_gpu_replay *replays, size_t count, void *) {
  for (size_t i = 0; i < count; ++i)
    print_replay(replays[i].size, replays[i].category, replays[i].replay, replays[i].name,
                 replays[i].start_ns, replays[i].end_ns, nullptr);
}

// A tool that registered its size: steps by `size`, reads only what `size` covers.
void sized_sink(const ferrum_replay_gpu_replay *replays, size_t count, void *) {
  const size_t stride = count ? replays[0].size : 0;
  const char *bytes = reinterpret_cast<const char *>(replays);
  for (size_t i = 0; i < count; ++i) {
    ferrum_replay_gpu_replay r{};
    std::memcpy(&r, bytes + i * stride, stride < sizeof r ? stride : sizeof r);
    const bool owner = r.size >= offsetof(ferrum_replay_gpu_replay, context) + sizeof r.context;
    print_replay(r.size, r.category, r.replay, r.name, r.start_ns, r.end_ns,
                 owner ? &r.context : nullptr);
  }
}

// A tool that ends the process from its sink (the contract forbids it; the shim must still end
// the process, and say in one line why its summary is missing).
void exiting_sink(const ferrum_replay_gpu_replay *, size_t, void *) {
  std::exit(3);
}

int sink_mode(long n, const std::string &layout) {
  auto set_sink = reinterpret_cast<ferrum_replay_set_gpu_sink_fn>(
      dlsym(RTLD_DEFAULT, FERRUM_REPLAY_SET_GPU_SINK));
  auto set_sized = reinterpret_cast<ferrum_replay_set_gpu_sink_sized_fn>(
      dlsym(RTLD_DEFAULT, FERRUM_REPLAY_SET_GPU_SINK_SIZED));
  auto flush = flush_fn();
  if (!set_sink || !set_sized || !flush) {
    std::fprintf(stderr, "gpu_time_program: the shim's GPU sink functions are not there\n");
    return 1;
  }
  const size_t ours = sizeof(ferrum_replay_gpu_replay);
  int registered = -1;
  if (layout == "first")
    registered = set_sink(first_layout_sink, nullptr);
  else if (layout == "first-grown")
    registered = set_sink(grown_unsized_sink, nullptr);
  else if (layout == "sized")
    registered = set_sized(sized_sink, nullptr, ours);
  else if (layout == "sized-first")
    registered = set_sized(sized_sink, nullptr, FERRUM_REPLAY_GPU_REPLAY_FIRST_SIZE);
  else if (layout == "sized-newer")
    registered = set_sized(sized_sink, nullptr, ours + 32);
  else if (layout == "sized-short")
    registered = set_sized(sized_sink, nullptr, 8);
  else if (layout == "exiting")
    registered = set_sized(exiting_sink, nullptr, ours);
  else
    return usage();
  std::printf("set_sink=%d\n", registered);
  new_context();
  CUstream stream = new_stream();
  CUgraphExec graphs[3] = {make_exec(), make_exec(), make_exec()};
  for (long i = 0; i < n; ++i)
    for (CUgraphExec exec : graphs) launch(exec, stream);
  check(cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::fflush(stdout);
  std::printf("flush=%d\n", flush(nullptr));
  if (layout == "exiting") {
    // The sink ends the process, on the reaper's thread or inside this flush. Returning here
    // would call exit() a second time while the reaper's may still run (undefined in C; on
    // glibc 2.36 either status can win): wait for the sink's, then say it never came.
    std::fflush(stdout);
    const timespec pause{0, 10'000'000};
    for (int i = 0; i < 2000; ++i) nanosleep(&pause, nullptr);
    std::printf("sink_never_exited\n");
  }
  return 0;
}

// sink-reenter: the program's own sink, which on its first batch unregisters itself or
// registers a second sink in its place (F166), delivered on the reaper, a flushing thread or the
// exit's pass; and replays read as their context is destroyed on a thread without a reaper
// (F165). Each sink counts what it gets (atomics: the reaper, a flush and the exit may call it).
std::atomic<long> g_sink_replays[2] = {};
std::atomic<int> g_sink_batches[2] = {};
std::atomic<bool> g_sink_reentered{false};
std::string g_sink_action;
ferrum_replay_set_gpu_sink_sized_fn g_set_sized = nullptr;
// ACTION-first-way: the sinks are registered the first way (no size): each gets one replay a call.
ferrum_replay_set_gpu_sink_fn g_set_first_way = nullptr;
bool g_first_way = false;

int set_reentering_sink(ferrum_replay_gpu_sink_fn sink, void *context) {
  return g_first_way ? g_set_first_way(sink, context)
                     : g_set_sized(sink, context, sizeof(ferrum_replay_gpu_replay));
}

void reentering_sink(const ferrum_replay_gpu_replay *, size_t count, void *which) {
  const int sink = which ? 1 : 0;
  g_sink_replays[sink] += static_cast<long>(count);
  ++g_sink_batches[sink];
  char on[16] = {};
  prctl(PR_GET_NAME, on, 0, 0, 0);
  int set = 0;
  const bool first = sink == 0 && !g_sink_reentered.exchange(true);
  if (first && g_sink_action == "unregister")
    set = set_reentering_sink(nullptr, nullptr);
  else if (first && g_sink_action == "replace")
    set = set_reentering_sink(reentering_sink, &g_sink_replays[1]);
  std::printf("sink_batch sink=%d count=%zu on=%s set=%d\n", sink, count, on, set);
  std::fflush(stdout);
}

void report_sinks() {  // registered before the shim's exit handler: runs after it
  std::printf("sinks_at_exit first=%ld second=%ld\n", g_sink_replays[0].load(),
              g_sink_replays[1].load());
  std::fflush(stdout);
}

long g_reenter_count = 0;

// Graph 1 once (make it long: nothing has finished when a worker running this ends), then graph 2
// g_reenter_count times, on a stream of the context's.
void *reenter_launches(void *) {
  check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
  CUstream stream = new_stream();
  CUgraphExec first = make_exec(), second = make_exec();  // here: only this thread registers
  launch(first, stream);
  launches(second, stream, g_reenter_count);
  return nullptr;  // replays in flight
}

int sink_reenter_mode(long n, const std::string &path, const std::string &action) {
  g_set_sized = reinterpret_cast<ferrum_replay_set_gpu_sink_sized_fn>(
      dlsym(RTLD_DEFAULT, FERRUM_REPLAY_SET_GPU_SINK_SIZED));
  auto flush = flush_fn();
  if (!g_set_sized || !flush) {
    std::fprintf(stderr, "gpu_time_program: the shim's GPU sink functions are not there\n");
    return 1;
  }
  g_set_first_way = reinterpret_cast<ferrum_replay_set_gpu_sink_fn>(
      dlsym(RTLD_DEFAULT, FERRUM_REPLAY_SET_GPU_SINK));
  const std::string first_way = "-first-way";
  g_first_way = action.size() > first_way.size() &&
                action.compare(action.size() - first_way.size(), first_way.size(), first_way) == 0;
  g_sink_action = g_first_way ? action.substr(0, action.size() - first_way.size()) : action;
  if (g_first_way && !g_set_first_way) return 1;
  std::atexit(report_sinks);
  if (action != "none") std::printf("set_sink=%d\n", set_reentering_sink(reentering_sink, nullptr));
  g_context = new_context();
  g_reenter_count = n;
  if (path == "reaper") {  // this thread launches: registered, its reaper delivers
    reenter_launches(nullptr);
  } else {  // a worker launches and ends: the reaper ends with it
    check(cuCtxPopCurrent(nullptr), "cuCtxPopCurrent");
    pthread_t worker;
    if (pthread_create(&worker, nullptr, reenter_launches, nullptr) != 0)
      check(CUDA_ERROR_UNKNOWN, "pthread_create");
    pthread_join(worker, nullptr);
    check(cuCtxPushCurrent(g_context), "cuCtxPushCurrent");
  }
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  if (path.rfind("destroyed-", 0) == 0) check(cuCtxDestroy(g_context), "cuCtxDestroy");
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, "flush") == 0) {
    ferrum_replay_gpu_status status{};
    status.size = sizeof status;
    const int flushed = flush(&status);
    std::printf("flush=%d timed=%llu in_flight=%llu not_timed=%llu\n", flushed,
                static_cast<unsigned long long>(status.timed),
                static_cast<unsigned long long>(status.in_flight),
                static_cast<unsigned long long>(status.not_timed));
  }
  return 0;  // the exit's pass delivers what is left
}

int main(int argc, char **argv) {
  if (argc < 3) return usage();
  const std::string mode = argv[1];
  const long n = std::strtol(argv[2], nullptr, 10);
  const long m = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 0;
  check(cuInit(0), "cuInit");

  if (mode == "sink") {
    if (argc < 4) return usage();
    const int status = sink_mode(n, argv[3]);
    if (status != 0) return status;
  } else if (mode == "sink-reenter") {
    if (argc < 5) return usage();
    const int status = sink_reenter_mode(n, argv[3], argv[4]);
    if (status != 0) return status;
  } else if (mode == "ctx-destroy") {
    CUcontext a = new_context();
    CUstream s = new_stream();
    launches(make_exec(), s, n);
    check(cuCtxDestroy(a), "cuCtxDestroy");  // replays of graph 1 still in flight
    CUcontext b = new_context();
    CUstream t = new_stream();
    CUgraphExec exec = make_exec();
    launches(exec, t, m);
    check(cuStreamSynchronize(t), "cuStreamSynchronize");
    check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
    check(cuCtxDestroy(b), "cuCtxDestroy");
  } else if (mode == "primary-release") {
    CUcontext p = nullptr;
    check(cuDevicePrimaryCtxRetain(&p, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(p), "cuCtxSetCurrent");
    CUstream s = new_stream();
    launches(make_exec(), s, n);
    check(cuDevicePrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease");  // replays in flight
    check(cuDevicePrimaryCtxRetain(&p, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(p), "cuCtxSetCurrent");
    CUstream t = new_stream();
    CUgraphExec exec = make_exec();
    launches(exec, t, m);
    check(cuStreamSynchronize(t), "cuStreamSynchronize");
    check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
    check(cuDevicePrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease");
  } else if (mode == "primary-and-created") {
    CUcontext c = new_context();
    CUstream in_c = new_stream();
    CUgraphExec graph_c = make_exec();
    CUcontext p = nullptr;
    check(cuDevicePrimaryCtxRetain(&p, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(p), "cuCtxSetCurrent");
    CUstream in_p = new_stream();
    launches(make_exec(), in_p, n);
    check(cuCtxSetCurrent(c), "cuCtxSetCurrent");
    launches(graph_c, in_c, m);
    check(cuDevicePrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease");  // P ends, C does not
    launches(graph_c, in_c, m);
    check(cuStreamSynchronize(in_c), "cuStreamSynchronize");
    check(cuGraphExecDestroy(graph_c), "cuGraphExecDestroy");
    check(cuCtxDestroy(c), "cuCtxDestroy");
  } else if (mode == "burst") {
    new_context();
    CUstream s = new_stream();
    CUgraphExec exec = make_exec();
    unsigned long long slowest = 0;
    const unsigned long long begin = now_ns();
    for (long i = 0; i < n; ++i) {
      const unsigned long long t0 = now_ns();
      launch(exec, s);
      const unsigned long long took = now_ns() - t0;
      if (took > slowest) slowest = took;
    }
    const unsigned long long loop = now_ns() - begin;
    if (argc > 3 && std::strcmp(argv[3], "sync") == 0)
      check(cuStreamSynchronize(s), "cuStreamSynchronize");
    std::printf("max_launch_ns=%llu loop_ns=%llu\n", slowest, loop);
  } else if (mode == "many") {
    new_context();
    CUstream s = new_stream();
    CUgraphExec exec = make_exec();
    const long every = m > 0 ? m : 100;
    long rss[4] = {};
    const unsigned long long begin = now_ns();
    for (long i = 1; i <= n; ++i) {
      launch(exec, s);
      if (i % every == 0) check(cuStreamSynchronize(s), "cuStreamSynchronize");
      for (int q = 0; q < 4; ++q) {
        if (i == n * (q + 1) / 4) rss[q] = rss_kib();
      }
    }
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    std::printf("quarter_rss_kib=%ld,%ld,%ld,%ld seconds=%.3f\n", rss[0], rss[1], rss[2], rss[3],
                static_cast<double>(now_ns() - begin) / 1e9);
  } else if (mode == "destroyed-in-flight") {
    new_context();
    CUstream s = new_stream();
    CUgraphExec exec = make_exec();
    launch(exec, s);  // graph 1: one long replay (FERRUM_STANDIN_GRAPH_NS), left in flight
    check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
    for (long i = 0; i < n; ++i) check(cuGraphExecDestroy(make_exec()), "cuGraphExecDestroy");
    std::printf("in_flight_after_churn=%d\n", cuStreamQuery(s) == CUDA_ERROR_NOT_READY);
    CUgraphExec last = make_exec();
    launch(last, s);
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    check(cuGraphExecDestroy(last), "cuGraphExecDestroy");
  } else if (mode == "recapture") {
    new_context();
    CUstream s = new_stream();
    const long kept_count = argc > 4 ? std::strtol(argv[4], nullptr, 10) : 1;
    std::vector<CUgraphExec> kept;
    for (long i = 0; i < kept_count; ++i) {
      kept.push_back(make_exec());
      launch(kept.back(), s);
    }
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    const ferrum_replay_gpu_flush_fn flush = flush_fn();
    for (long i = 0; i < n; ++i) {
      CUgraphExec exec = make_exec();
      launch(exec, s);
      check(cuStreamSynchronize(s), "cuStreamSynchronize");
      if (flush) flush(nullptr);
      check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
    }
    kept.push_back(make_exec());
    for (CUgraphExec exec : kept) {  // read at once: a slow reader leaves the pool free
      launches(exec, s, m);
      check(cuStreamSynchronize(s), "cuStreamSynchronize");
      if (flush) flush(nullptr);
    }
  } else if (mode == "recapture-threads") {
    const CUcontext context = new_context();
    std::vector<std::thread> threads;
    for (long t = 0; t < m; ++t)
      threads.emplace_back([context, n] {
        check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
        CUstream s = new_stream();
        CUgraphExec kept = make_exec();
        for (long i = 0; i < n; ++i) {  // g_launches is the main thread's plain count
          CUgraphExec exec = make_exec();
          if (cuGraphLaunch(exec, s) != CUDA_SUCCESS) g_failed_per_thread.fetch_add(1);
          if (cuGraphLaunch(kept, s) != CUDA_SUCCESS) g_failed_per_thread.fetch_add(1);
          if (i % 8 == 0) check(cuStreamSynchronize(s), "cuStreamSynchronize");
          check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
        }
        check(cuStreamSynchronize(s), "cuStreamSynchronize");
      });
    for (std::thread &thread : threads) thread.join();
    g_launches += 2 * static_cast<unsigned long long>(n) * static_cast<unsigned long long>(m);
    g_failed += g_failed_per_thread.load();
  } else if (mode == "recontext") {
    for (long i = 0; i < n; ++i) {
      CUcontext context = new_context();
      CUstream s = new_stream();
      launch(make_exec(), s);
      check(cuStreamSynchronize(s), "cuStreamSynchronize");
      check(cuCtxDestroy(context), "cuCtxDestroy");
    }
    new_context();
    CUstream s = new_stream();
    launches(make_exec(), s, m);
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
  } else if (mode == "default-streams") {
    // Two threads, each N launches of its own graph on its per-thread default stream, at once.
    g_context = new_context();
    launch_on_two_threads(launch_per_thread, n);
    // Two contexts, N launches each on its legacy default stream, interleaved.
    CUcontext other = new_context();
    CUgraphExec in_other = make_exec();
    check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
    CUgraphExec in_first = make_exec();
    for (long i = 0; i < n; ++i) {
      check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
      launch(in_first, nullptr);
      check(cuCtxSetCurrent(other), "cuCtxSetCurrent");
      launch(in_other, nullptr);
    }
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
    check(cuCtxSynchronize(), "cuCtxSynchronize");
  } else if (mode == "shared-stream") {
    // Two threads, each 2N launches of its own graph on one stream, N of them at once.
    g_context = new_context();
    g_shared_stream = argc > 3 && std::string(argv[3]) == "legacy" ? nullptr : new_stream();
    launch_on_two_threads(launch_on_shared_stream, n);
    g_launches += 2 * static_cast<unsigned long long>(n);  // the N alone of each
    check(cuStreamSynchronize(g_shared_stream), "cuStreamSynchronize");
  } else if (mode == "exit-in-flight") {
    new_context();
    launches(make_exec(), new_stream(), n);
    finish();
    std::exit(0);
  } else if (mode == "capture") {
    new_context();
    CUstream s = new_stream(), c = new_stream();
    CUgraphExec exec = make_exec();
    launches(exec, s, n);
    check(cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    launches(exec, c, n);
    CUgraph captured = nullptr;
    check(cuStreamEndCapture(c, &captured), "cuStreamEndCapture");
    size_t nodes = 0;
    check(cuGraphGetNodes(captured, nullptr, &nodes), "cuGraphGetNodes");
    std::printf("captured_nodes=%zu\n", nodes);
    CUgraphExec replay = nullptr;
    check(cuGraphInstantiate(&replay, captured, 0), "cuGraphInstantiate");
    launch(replay, s);
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
  } else if (mode == "fork-storm") {
    // N rounds: a new context (its event pool made at the graph's instantiation, its clock
    // aligned by the reaper right after), M launches, and at once a fork whose child exits; then
    // the context is destroyed. A fork must never wait on the shim's reaper.
    for (long round = 0; round < n; ++round) {
      CUcontext ctx = new_context();
      CUstream s = new_stream();
      CUgraphExec exec = make_exec();
      launches(exec, s, m);
      std::fflush(stdout);
      const pid_t child = fork();
      if (child < 0) check(CUDA_ERROR_UNKNOWN, "fork");
      if (child == 0) _exit(0);
      int status = 0;
      waitpid(child, &status, 0);
      check(cuStreamSynchronize(s), "cuStreamSynchronize");
      check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
      check(cuCtxDestroy(ctx), "cuCtxDestroy");
    }
  } else if (mode == "fork") {
    CUcontext ctx = new_context();
    CUstream s = new_stream();
    CUgraphExec exec = make_exec();
    launches(exec, s, n);
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    pid_t child = 0;
    if (fork_timing_child(m, &child)) std::exit(0);
    int status = 0;
    waitpid(child, &status, 0);
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    launches(exec, s, n);
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    std::printf("child_status=%d\n", status);
  } else if (mode == "main-exits") {
    CUdevice device = 0;
    check(cuDeviceGet(&device, 0), "cuDeviceGet");
    CUcontext ctx = nullptr;
    check(cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    g_context = ctx;  // for cancel_main's thread
    CUgraphExec exec = make_exec();
    g_exit_exec = exec;
    std::atexit(report_at_exit);
    launches(exec, nullptr, n);  // in flight as the main thread ends
    if (m <= 0) {
      finish();
    } else {
      static LaterLaunches later{ctx, exec, m};
      pthread_t thread;
      if (pthread_create(&thread, nullptr, launch_later, &later) != 0)
        check(CUDA_ERROR_UNKNOWN, "pthread_create");
      pthread_detach(thread);
    }
    const std::string how = argc > 4 ? argv[4] : "pthread_exit";
    if (how == "thrd_exit") thrd_exit(0);
    if (how == "cancel") {
      g_main_thread = pthread_self();
      pthread_t canceller;
      if (pthread_create(&canceller, nullptr, cancel_main, nullptr) != 0)
        check(CUDA_ERROR_UNKNOWN, "pthread_create");
      pthread_detach(canceller);
      for (;;) pause();
    }
    pthread_exit(nullptr);
  } else if (mode == "cancel-pending") {
    g_context = new_context();
    static long count = n;
    for (int round = 0; round < 2; ++round) {
      pthread_t thread;
      if (pthread_create(&thread, nullptr, launch_then_cancel_self, &count) != 0)
        check(CUDA_ERROR_UNKNOWN, "pthread_create");
      void *result = nullptr;
      pthread_join(thread, &result);
      if (round == 0)
        std::printf("first=%s\n", result == PTHREAD_CANCELED ? "cancelled" : "returned");
    }
  } else if (mode == "no-keys") {
    long taken = 0;
    for (pthread_key_t key; pthread_key_create(&key, nullptr) == 0;) ++taken;
    std::printf("keys_taken=%ld\n", taken);
    g_context = new_context();
    g_exec = make_exec();
    static long count = n;
    launch_shared_graph(&count);
    for (long i = 0; i < m; ++i) {  // one at a time: g_launches is this program's plain count
      pthread_t thread;
      if (pthread_create(&thread, nullptr, launch_shared_graph, &count) != 0)
        check(CUDA_ERROR_UNKNOWN, "pthread_create");
      pthread_join(thread, nullptr);
    }
  } else if (mode == "dead-contexts") {
    for (long round = 0; round < n; ++round) {
      g_context = new_context();
      g_exec = make_exec();
      g_dead_step.store(0);
      pthread_t thread;
      if (pthread_create(&thread, nullptr, launch_across_destroy, nullptr) != 0)
        check(CUDA_ERROR_UNKNOWN, "pthread_create");
      while (g_dead_step.load() != 1) sched_yield();
      check(cuCtxDestroy(g_context), "cuCtxDestroy");
      g_dead_step.store(2);
      pthread_join(thread, nullptr);
    }
    new_context();
    CUstream stream = new_stream();
    CUgraphExec exec = make_exec();
    for (long i = 0; i < m; ++i) {
      launch(exec, stream);
      check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    }
  } else if (mode == "cancelled-in-destroy") {
    g_context = new_context();
    CUstream stream = new_stream();
    launches(make_exec(), stream, n);
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    pthread_t ender;
    if (pthread_create(&ender, nullptr, destroy_cancel_pending, nullptr) != 0)
      check(CUDA_ERROR_UNKNOWN, "pthread_create");
    void *ended = nullptr;
    pthread_join(ender, &ended);
    std::printf("ender=%s\n", ended == PTHREAD_CANCELED ? "cancelled" : "returned");
    new_context();
    CUstream later = new_stream();
    launches(make_exec(), later, m);
    check(cuStreamSynchronize(later), "cuStreamSynchronize");
  } else if (mode == "flush-signal") {
    check(cuDevicePrimaryCtxRetain(&g_context, 0), "cuDevicePrimaryCtxRetain");
    pthread_t thread;
    if (pthread_create(&thread, nullptr, instantiate_in_thread, nullptr) != 0)
      check(CUDA_ERROR_UNKNOWN, "pthread_create");
    pthread_join(thread, nullptr);
    auto flush = flush_fn();
    g_main_thread = pthread_self();
    struct sigaction action {};
    action.sa_handler = launch_in_handler;
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &action, nullptr);
    pthread_t sender;
    if (pthread_create(&sender, nullptr, signal_main, nullptr) != 0)
      check(CUDA_ERROR_UNKNOWN, "pthread_create");
    const unsigned long long until = now_ns() + 2000000000ull;
    for (long i = 0; i < n && now_ns() < until && g_handled.load() <= 20; ++i) {
      ferrum_replay_gpu_status status{};
      status.size = sizeof status;
      if (flush) flush(&status);
    }
    g_stop_signals.store(true);
    pthread_join(sender, nullptr);
    signal(SIGUSR1, SIG_IGN);
    std::printf("handled=%ld\n", g_handled.load());
    g_launches += static_cast<unsigned long long>(g_handled.load());
  } else if (mode == "end-cancel-pending") {
    g_end_how = argv[2];
    if (g_end_how == "destroy") {
      g_context = new_context();
    } else {
      check(cuDevicePrimaryCtxRetain(&g_context, 0), "cuDevicePrimaryCtxRetain");
      check(cuCtxSetCurrent(g_context), "cuCtxSetCurrent");
    }
    g_end_stream = new_stream();
    g_exec = make_exec();
    pthread_t launcher, ender;
    if (pthread_create(&launcher, nullptr, launch_twice, nullptr) != 0)
      check(CUDA_ERROR_UNKNOWN, "pthread_create");
    while (!g_waiting_launch.load()) sched_yield();
    timespec pause{0, 200 * 1000 * 1000};
    nanosleep(&pause, nullptr);
    if (pthread_create(&ender, nullptr, end_context_cancel_pending, nullptr) != 0)
      check(CUDA_ERROR_UNKNOWN, "pthread_create");
    void *ended = nullptr;
    pthread_join(ender, &ended);
    std::printf("ender=%s\n", ended == PTHREAD_CANCELED ? "cancelled" : "returned");
    check(ended == &g_end_how ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN, g_end_how.c_str());
    pthread_join(launcher, nullptr);  // its second launch may fail: the context ended under it
  } else if (mode == "reaper-stuck") {
    LateLaunches late{n, 0, 0, 0, 0};
    pthread_t late_thread;
    if (pthread_create(&late_thread, nullptr, launch_late, &late) != 0)
      check(CUDA_ERROR_UNKNOWN, "pthread_create");
    thread_then_main(n, "joined_ms");
    pthread_join(late_thread, nullptr);
    g_launches += late.launched;
    g_failed += late.failed;
    std::printf("late_longest_ms=%lld late_flush_ms=%lld\n", late.longest_ms, late.flush_ms);
    thread_then_main(n, "second_joined_ms");  // the same context; the thread makes its own graph
    std::printf("second_instantiate_ms=%lld\n", g_instantiate_ms.load());
    auto flush = flush_fn();
    const long long flush_start = monotonic_ns();
    const int flushed = flush ? flush(nullptr) : -1;
    std::printf("flush=%d flush_ms=%lld\n", flushed, (monotonic_ns() - flush_start) / 1000000);
  } else if (mode == "reaper-returns") {
    thread_then_main(n, "joined_ms");  // main registers while the reaper let go is still stuck
    const timespec after_return{3, 0};
    nanosleep(&after_return, nullptr);
    for (long burst = 0; burst < m / 100; ++burst) {
      launches(g_exec, nullptr, 100);
      check(cuCtxSynchronize(), "cuCtxSynchronize");
    }
  } else if (mode == "long-run") {
    new_context();
    CUstream s = new_stream();
    launches(make_exec(), s, 3);
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    const timespec idle{n / 1000, (n % 1000) * 1000 * 1000};
    nanosleep(&idle, nullptr);
    launches(make_exec(), s, m);
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
  } else if (mode == "retain-release") {
    CUcontext p = nullptr;
    check(cuDevicePrimaryCtxRetain(&p, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(p), "cuCtxSetCurrent");
    launches(make_exec(), new_stream(), n);
    const unsigned long long begin = now_ns();
    for (long i = 0; i < m; ++i) {
      CUcontext again = nullptr;
      check(cuDevicePrimaryCtxRetain(&again, 0), "cuDevicePrimaryCtxRetain");
      check(cuDevicePrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease");
    }
    std::printf("release_pairs_ns=%llu\n", now_ns() - begin);
  } else if (mode == "green") {
    using GreenDestroy = CUresult (*)(CUgreenCtx);
    const auto green_destroy =
        driver_function<GreenDestroy>("cuGreenCtxDestroy", "cuGreenCtxDestroy", cuGreenCtxDestroy);
    using FromGreen = CUresult (*)(CUcontext *, CUgreenCtx);
    const auto from_green =
        driver_function<FromGreen>("cuCtxFromGreenCtx", "cuCtxFromGreenCtx", cuCtxFromGreenCtx);
    const long in_flight = argc > 4 ? std::strtol(argv[4], nullptr, 10) : 1;
    for (long job = 0; job < n; ++job) {
      CUgreenCtx green = nullptr;
      CUcontext ctx = nullptr;
      check(cuGreenCtxCreate(&green, CUdevResourceDesc{}, 0, CU_GREEN_CTX_DEFAULT_STREAM),
            "cuGreenCtxCreate");
      check(from_green(&ctx, green), "cuCtxFromGreenCtx");
      check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
      launches(make_exec(), nullptr, m);
      if (job >= in_flight) check(cuCtxSynchronize(), "cuCtxSynchronize");
      check(cuCtxSetCurrent(nullptr), "cuCtxSetCurrent");
      check(green_destroy(green), "cuGreenCtxDestroy");
    }
    const timespec later{1, 500 * 1000 * 1000};  // the reaper's passes meanwhile
    nanosleep(&later, nullptr);
    CUcontext ctx = new_context();
    launches(make_exec(), nullptr, m);
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    check(cuCtxDestroy(ctx), "cuCtxDestroy");
  } else if (mode == "green-stale") {
    using GreenDestroy = CUresult (*)(CUgreenCtx);
    const auto green_destroy =
        driver_function<GreenDestroy>("cuGreenCtxDestroy", "cuGreenCtxDestroy", cuGreenCtxDestroy);
    CUcontext ctx = new_context();
    CUgraphExec exec = make_exec();
    launches(exec, nullptr, n);
    std::printf("stale_destroy=%d\n",
                static_cast<int>(green_destroy(reinterpret_cast<CUgreenCtx>(ctx))));
    launches(exec, nullptr, m);
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    check(cuCtxDestroy(ctx), "cuCtxDestroy");
  } else if (mode == "green-thread") {
    // The primary context held, as a runtime's program holds it: the green context's end is then
    // not its last release (with the primary context unknown to the shim, that release would
    // take every pool of the device, the created context's too).
    CUcontext primary = nullptr;
    check(cuDevicePrimaryCtxRetain(&primary, 0), "cuDevicePrimaryCtxRetain");
    std::atomic<bool> green_ready{false};
    unsigned long long green_failed = 0;  // the worker's (g_failed is the main thread's)
    std::thread worker([&] {
      CUgreenCtx green = nullptr;
      CUcontext ctx = nullptr;
      check(cuGreenCtxCreate(&green, CUdevResourceDesc{}, 0, CU_GREEN_CTX_DEFAULT_STREAM),
            "cuGreenCtxCreate");
      check(cuCtxFromGreenCtx(&ctx, green), "cuCtxFromGreenCtx");
      check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
      CUgraphExec exec = make_exec();
      green_ready.store(true);
      for (long i = 0; i < n; ++i) {
        if (cuGraphLaunch(exec, nullptr) != CUDA_SUCCESS) ++green_failed;
        if (i % 10 == 9) {
          const timespec pause{0, 2 * 1000 * 1000};  // the reaper's passes meanwhile
          nanosleep(&pause, nullptr);
        }
      }
      check(cuCtxSynchronize(), "cuCtxSynchronize");
      check(cuCtxSetCurrent(nullptr), "cuCtxSetCurrent");
      check(cuGreenCtxDestroy(green), "cuGreenCtxDestroy");
    });
    while (!green_ready.load()) sched_yield();
    CUcontext ctx = new_context();
    CUstream stream = new_stream();
    launches(make_exec(), stream, m);
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    worker.join();
    g_launches += static_cast<unsigned long long>(n);
    g_failed += green_failed;
    check(cuCtxDestroy(ctx), "cuCtxDestroy");
    check(cuDevicePrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease");
  } else if (mode == "primary-reset") {
    using Reset = CUresult (*)(CUdevice);
    const auto reset = driver_function<Reset>("cuDevicePrimaryCtxReset_v2",
                                              "cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset);
    CUcontext p = nullptr;
    check(cuDevicePrimaryCtxRetain(&p, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(p), "cuCtxSetCurrent");
    launches(make_exec(), new_stream(), n);
    check(reset(0), "cuDevicePrimaryCtxReset");  // replays in flight
    CUcontext again = nullptr;
    check(cuDevicePrimaryCtxRetain(&again, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(again), "cuCtxSetCurrent");
    CUstream t = new_stream();
    launches(make_exec(), t, m);
    check(cuStreamSynchronize(t), "cuStreamSynchronize");
    check(cuDevicePrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease");
    check(cuDevicePrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease");
  } else if (mode == "fork-thread") {
    static long count = n;
    pthread_t thread;
    if (pthread_create(&thread, nullptr, fork_from_thread, &count) != 0)
      check(CUDA_ERROR_UNKNOWN, "pthread_create");
    pthread_join(thread, nullptr);
  } else {
    return usage();
  }
  finish();
  return 0;
}
