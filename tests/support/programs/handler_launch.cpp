// handler_launch: a signal handler launches a graph while the thread it interrupted is inside the
// shim's first reading of its settings (a watchdog's SIGALRM handler, or a profiler's timer).
// The reading is made to last: stderr is a full pipe nobody reads, where the shim's one line
// about a bad setting (the test gives one) waits, up to 2 s; alarm(1) fires meanwhile. The
// first reading is started by dlsym(handle, "cuGetProcAddress_v2"), as the runtime does.
//
//   handler_launch
//
// Prints `handler: result=R` (what the handler's cuGraphLaunch of a null graph returned; the
// shim must pass it through: the driver's own answer) and `launches=1 failed=F result=R`.
// Exit status 0 once the handler ran; 1 on a setup error. Links libcuda.so.1.
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

namespace {

volatile sig_atomic_t g_handled = 0;
volatile CUresult g_result = CUDA_SUCCESS;

void on_alarm(int) {
  g_result = cuGraphLaunch(nullptr, nullptr);
  g_handled = 1;
}

}  // namespace

int main() {
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
