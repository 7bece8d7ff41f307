// handler_launch: a signal handler calls CUDA (or the shim's API) while the thread it interrupted
// is inside the shim.
//
//   handler_launch
//     The handler launches a graph while the thread it interrupted is inside the shim's first
//     reading of its settings (a watchdog's SIGALRM handler, or a profiler's timer). The reading
//     is made to last: stderr is a full pipe nobody reads, where the shim's one line about a bad
//     setting (the test gives one) waits, up to 2 s; alarm(1) fires meanwhile. The first reading
//     is started by dlsym(handle, "cuGetProcAddress_v2"), as the runtime does.
//     Prints `handler: result=R` (what the handler's cuGraphLaunch of a null graph returned; the
//     shim must pass it through: the driver's own answer) and `launches=1 failed=F result=R`.
//
//   handler_launch instantiating null|name
//     The main thread instantiates and destroys a one-node graph in a loop (a server that
//     re-instantiates for new shapes) while an interval timer (SIGALRM every 100 us) runs a
//     handler that, on the interrupted thread, calls cuGraphLaunch(NULL, NULL) (null: a handle
//     nobody registered) or ferrum_replay_name_graph_exec on a graph instantiated up front
//     (name). The signals land, among other places, where the shim registers a new graph.
//     A watchdog thread (SIGALRM blocked there) ends the process with status 9 and a `HANG`
//     line after 5 s without a round done.
//     Prints `handler: calls=C result=R` (null: what every launch returned, or `handler: calls=C
//     results differ`; name: `handler: calls=C named=N refused=E other=O`, counting the results
//     0, -EAGAIN and any other) and `rounds=N`.
//
//   handler_launch forking
//     A fork handler of the program's (pthread_atfork after cuInit, before the first graph call:
//     the driver's parent and child handlers run before it, the shim's after it) launches a null
//     graph, instantiates and destroys a graph and names one, in the parent and in the child: as
//     a signal handler landing between the fork's handlers would, while the shim holds its
//     registry's mutex for the fork. Prints `parent: R` and `child: R`, R being `launch=L
//     instantiate=I destroy=D name=N` (the results; N `absent` without the shim's export).
//     Status 9 when the child did not end within 10 s.
//
// Exit status 0 once the handler ran; 1 on a setup error; 9 on a hang. Links libcuda.so.1.
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

namespace {

volatile sig_atomic_t g_handled = 0;
volatile CUresult g_result = CUDA_SUCCESS;

void on_alarm(int) {
  g_result = cuGraphLaunch(nullptr, nullptr);
  g_handled = 1;
}

int while_reading_settings() {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) return perror("pipe"), 1;
  fcntl(pipe_ends[1], F_SETFL, O_NONBLOCK);
  char filler[4096];
  memset(filler, 'x', sizeof filler);
  while (write(pipe_ends[1], filler, sizeof filler) > 0) {
  }
  fcntl(pipe_ends[1], F_SETFL, 0);
  const int saved_stderr = dup(2);
  dup2(pipe_ends[1], 2);  // the shim's warning waits here until its bound
  struct sigaction action {};
  action.sa_handler = on_alarm;
  sigaction(SIGALRM, &action, nullptr);
  alarm(1);
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void *lookup = driver ? dlsym(driver, "cuGetProcAddress_v2") : nullptr;
  for (int waited = 0; !g_handled && waited < 100; ++waited) usleep(50000);
  dup2(saved_stderr, 2);
  if (!lookup) return fprintf(stderr, "handler_launch: no driver lookup\n"), 1;
  if (!g_handled) return fprintf(stderr, "handler_launch: the alarm never came\n"), 1;
  printf("handler: result=%d\n", static_cast<int>(g_result));
  printf("launches=1 failed=%d result=%d\n", g_result != CUDA_SUCCESS, static_cast<int>(g_result));
  return 0;
}

// ---- instantiating ----

using NameGraphExec = int (*)(void *, const char *);

bool g_name_mode = false;
NameGraphExec g_name = nullptr;
CUgraphExec g_named = nullptr;
volatile sig_atomic_t g_calls = 0;
volatile sig_atomic_t g_first_result = 0, g_results_differ = 0;
volatile sig_atomic_t g_named_ok = 0, g_refused = 0, g_other = 0;
std::atomic<long> g_rounds{0};

void on_timer(int) {
  const int saved_errno = errno;
  if (g_name_mode) {
    const int result = g_name(g_named, "renamed by a signal handler");
    if (result == 0)
      g_named_ok = g_named_ok + 1;
    else if (result == -EAGAIN)
      g_refused = g_refused + 1;
    else
      g_other = g_other + 1;
  } else {
    const int result = static_cast<int>(cuGraphLaunch(nullptr, nullptr));
    if (g_calls == 0)
      g_first_result = result;
    else if (result != g_first_result)
      g_results_differ = 1;
  }
  g_calls = g_calls + 1;
  errno = saved_errno;
}

void *watchdog(void *) {
  long last = -1;
  for (int still = 0;;) {
    sleep(1);
    const long now = g_rounds.load();
    still = now == last ? still + 1 : 0;
    if (still == 5) {
      fprintf(stderr, "HANG: no round for 5 s after %ld rounds and %d handler calls\n", now,
              static_cast<int>(g_calls));
      _exit(9);
    }
    last = now;
  }
}

#define MUST(call)                                                     \
  do {                                                                 \
    if (CUresult r = (call); r != CUDA_SUCCESS)                        \
      return fprintf(stderr, "handler_launch: %s: %d\n", #call, r), 1; \
  } while (0)

// The device's primary context, current on this thread (both modes' set-up). 0 or 1.
int use_primary_context() {
  MUST(cuInit(0));
  CUdevice device;
  MUST(cuDeviceGet(&device, 0));
  CUcontext context;
  MUST(cuDevicePrimaryCtxRetain(&context, device));
  MUST(cuCtxSetCurrent(context));
  return 0;
}

int while_instantiating(const char *mode) {
  g_name_mode = strcmp(mode, "name") == 0;
  if (!g_name_mode && strcmp(mode, "null") != 0)
    return fprintf(stderr, "handler_launch: instantiating null|name\n"), 1;
  if (use_primary_context() != 0) return 1;
  CUgraph graph;
  MUST(cuGraphCreate(&graph, 0));
  CUgraphNode node;
  MUST(cuGraphAddEmptyNode(&node, graph, nullptr, 0));
  // One launch of the program's own, whatever the handler's: the run has a range to show.
  MUST(cuGraphInstantiate(&g_named, graph, 0));
  MUST(cuGraphLaunch(g_named, nullptr));
  if (g_name_mode) {
    g_name = reinterpret_cast<NameGraphExec>(dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec"));
    if (!g_name) return fprintf(stderr, "handler_launch: no ferrum_replay_name_graph_exec\n"), 1;
  }
  // The watchdog never takes the timer's signal: it must stay free to say the program hung.
  sigset_t alarm_only;
  sigemptyset(&alarm_only);
  sigaddset(&alarm_only, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alarm_only, nullptr);
  pthread_t watcher;
  if (pthread_create(&watcher, nullptr, watchdog, nullptr) != 0) return perror("thread"), 1;
  pthread_sigmask(SIG_UNBLOCK, &alarm_only, nullptr);
  struct sigaction action {};
  action.sa_handler = on_timer;
  action.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &action, nullptr);
  const itimerval every{{0, 100}, {0, 100}};
  setitimer(ITIMER_REAL, &every, nullptr);
  // Enough rounds and enough signals that some land where the shim registers a graph; bounded.
  long rounds = 0;
  for (; rounds < 1000000 && (rounds < 2000 || g_calls < 200); ++rounds) {
    CUgraphExec exec;
    MUST(cuGraphInstantiate(&exec, graph, 0));
    MUST(cuGraphExecDestroy(exec));
    g_rounds.store(rounds + 1);
  }
  const itimerval off{};
  setitimer(ITIMER_REAL, &off, nullptr);
  if (g_calls == 0) return fprintf(stderr, "handler_launch: the timer never came\n"), 1;
  if (g_name_mode)
    printf("handler: calls=%d named=%d refused=%d other=%d\n", static_cast<int>(g_calls),
           static_cast<int>(g_named_ok), static_cast<int>(g_refused), static_cast<int>(g_other));
  else if (g_results_differ)
    printf("handler: calls=%d results differ\n", static_cast<int>(g_calls));
  else
    printf("handler: calls=%d result=%d\n", static_cast<int>(g_calls),
           static_cast<int>(g_first_result));
  printf("rounds=%ld\n", rounds);
  return 0;
}

// ---- forking ----

CUgraph g_graph = nullptr;
char g_parent_line[160], g_child_line[160];

void calls_in_fork_handler(char *line) {
  const int launched = static_cast<int>(cuGraphLaunch(nullptr, nullptr));
  CUgraphExec exec = nullptr;
  const int instantiated = static_cast<int>(cuGraphInstantiate(&exec, g_graph, 0));
  const int destroyed = exec ? static_cast<int>(cuGraphExecDestroy(exec)) : -1;
  char name[32] = "absent";
  if (g_name) snprintf(name, sizeof name, "%d", g_name(g_named, "named in a fork handler"));
  snprintf(line, sizeof g_parent_line, "launch=%d instantiate=%d destroy=%d name=%s", launched,
           instantiated, destroyed, name);
}
void in_parent() {
  calls_in_fork_handler(g_parent_line);
}
void in_child() {
  calls_in_fork_handler(g_child_line);
}

int while_forking() {
  if (use_primary_context() != 0) return 1;
  if (pthread_atfork(nullptr, in_parent, in_child) != 0) return perror("pthread_atfork"), 1;
  MUST(cuGraphCreate(&g_graph, 0));
  CUgraphNode node;
  MUST(cuGraphAddEmptyNode(&node, g_graph, nullptr, 0));
  MUST(cuGraphInstantiate(&g_named, g_graph, 0));
  MUST(cuGraphLaunch(g_named, nullptr));
  (void)cuGraphLaunch(nullptr, nullptr);  // as the handlers' will be
  g_name = reinterpret_cast<NameGraphExec>(dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec"));
  fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return perror("fork"), 1;
  if (child == 0) {
    printf("child: %s\n", g_child_line);
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  for (int waited = 0; waitpid(child, &status, WNOHANG) == 0; ++waited) {
    if (waited == 1000) {
      kill(child, SIGKILL);
      fprintf(stderr, "HANG: the child did not end within 10 s\n");
      return 9;
    }
    usleep(10000);
  }
  printf("parent: %s\n", g_parent_line);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "instantiating") == 0)
    return while_instantiating(argc > 2 ? argv[2] : "null");
  if (argc > 1 && strcmp(argv[1], "forking") == 0) return while_forking();
  return while_reading_settings();
}
