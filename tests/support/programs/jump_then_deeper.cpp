// jump_then_deeper: a watchdog leaves one launch by siglongjmp (the stand-in driver raises
// FERRUM_STANDIN_LAUNCH_RAISE in every launch; the handler jumps once, back to a sigsetjmp in
// main), then the program serves from a deeper frame that holds a large buffer it has not
// written yet (a request buffer): the abandoned launch's stack words under the jump target stay
// as they were, and calls from below them must not be taken for calls nested in it (F160).
//
//   jump_then_deeper [--name] [--fork] [--runtime] [--jump siglongjmp|longjmp|_longjmp] N
//       N launches from the deep frame. --name: first names the graph "decode" there
//       (ferrum_replay_name_graph_exec, prints `name=R`). --fork: then forks there; the child
//       makes 3 launches from that frame and exits (prints `child=S`, its exit status).
//       --runtime: every launch through the runtime (cudaGraphLaunch) instead of the driver.
//       --jump: the handler's jump (siglongjmp by default; built with _FORTIFY_SOURCE, as
//       jump_then_deeper_fortified is, each becomes __longjmp_chk).
//
// Prints `first=R`, `served=K` (launches that returned success) and exits 0 when all did.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

sigjmp_buf g_jump;
jmp_buf g_plain_jump;
volatile sig_atomic_t g_jump_next = 0;
const char *g_jump_kind = "siglongjmp";
CUgraphExec g_exec = nullptr;
bool g_runtime = false;

void on_signal(int) {
  if (g_jump_next) {
    g_jump_next = 0;
    if (strcmp(g_jump_kind, "longjmp") == 0) longjmp(g_plain_jump, 1);
    if (strcmp(g_jump_kind, "_longjmp") == 0) _longjmp(g_plain_jump, 1);
    siglongjmp(g_jump, 1);
  }
}

__attribute__((noinline)) int launch_once() {
  if (g_runtime) return cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(g_exec), nullptr);
  return cuGraphLaunch(g_exec, nullptr);
}

struct Options {
  bool name = false, fork = false;
  int launches = 100;
};

// The deep frame: 64 KiB not written before the calls below it.
__attribute__((noinline)) int serve(const Options &options) {
  volatile char request[64 * 1024];
  if (options.name) {
    using NameGraphExec = int (*)(const void *, const char *);
    auto name =
        reinterpret_cast<NameGraphExec>(dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec"));
    printf("name=%d\n", name ? name(g_exec, "decode") : -1);
  }
  int ok = 0;
  for (int i = 0; i < options.launches; ++i) ok += launch_once() == 0;
  if (options.fork) {
    fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      int child_ok = 0;
      for (int i = 0; i < 3; ++i) child_ok += launch_once() == 0;
      exit(child_ok == 3 ? 0 : 3);
    }
    int status = -1;
    if (child > 0) waitpid(child, &status, 0);
    printf("child=%d\n", child > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  request[0] = 1;
  return ok + request[0] - 1;
}

}  // namespace

int main(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--name") == 0) {
      options.name = true;
    } else if (strcmp(argv[i], "--fork") == 0) {
      options.fork = true;
    } else if (strcmp(argv[i], "--runtime") == 0) {
      g_runtime = true;
    } else if (strcmp(argv[i], "--jump") == 0 && i + 1 < argc) {
      g_jump_kind = argv[++i];
    } else {
      options.launches = atoi(argv[i]);
    }
  }
  signal(SIGUSR1, on_signal);
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  if (cuInit(0) || cuDeviceGet(&device, 0) || cuDevicePrimaryCtxRetain(&context, device) ||
      cuCtxSetCurrent(context) || cuGraphCreate(&graph, 0) ||
      cuGraphAddEmptyNode(&node, graph, nullptr, 0) || cuGraphInstantiate(&g_exec, graph, 0))
    return fprintf(stderr, "jump_then_deeper: setup failed\n"), 1;
  printf("first=%d\n", launch_once());  // the shim active, the thread set up
  const bool plain = strcmp(g_jump_kind, "siglongjmp") != 0;
  if ((plain ? setjmp(g_plain_jump) : sigsetjmp(g_jump, 1)) == 0) {
    g_jump_next = 1;
    (void)launch_once();
    return fprintf(stderr, "jump_then_deeper: the watchdog did not jump\n"), 1;
  }
  const int served = serve(options);
  printf("served=%d\n", served);
  fflush(stdout);
  return served == options.launches ? 0 : 3;
}
