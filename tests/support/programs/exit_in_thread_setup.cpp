// exit_in_thread_setup: a signal handler calls exit() (a SIGTERM handler does) while a worker
// thread's first launch is inside the shim's set-up of that thread (where its thread-end and exit
// hooks are armed: pthread_setspecific among other calls).
//
//   exit_in_thread_setup N
//     The main thread launches a graph (the shim starts), then a worker thread launches the same
//     graph; this program's own pthread_setspecific (which the shim's set-up calls through the
//     C library's symbol) raises SIGUSR1 at the worker's Nth call of it, and the handler calls
//     exit(0). N larger than the calls made: no signal; the worker's launch returns.
//     Prints `raised` when the signal was raised (before the handler's exit), else `returned`.
//
// The shim must pop only what it pushed: a pop owed for a push not yet issued was issued at
// exit ("pop without push" in the recorder's trace). Links libcuda.so.1 (the stand-in).
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <thread>

namespace {

thread_local int t_seen = 0;
thread_local bool t_armed = false;
int g_raise_at = 0;

void exit_now(int) {
  exit(0);
}

}  // namespace

// Interposes libc's for the shim (this executable exports it). Not instrumented, and no
// function-local static's guard: ThreadSanitizer's runtime calls it while it sets up a new
// thread, before it could track either (as tests/reliability/fault_program.cpp's).
extern "C" __attribute__((no_sanitize("thread"))) int pthread_setspecific(pthread_key_t key,
                                                                          const void *value) {
  using Fn = int (*)(pthread_key_t, const void *);
  static Fn resolved;
  Fn real = __atomic_load_n(&resolved, __ATOMIC_ACQUIRE);
  if (!real) {
    real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_setspecific"));
    __atomic_store_n(&resolved, real, __ATOMIC_RELEASE);
  }
  if (t_armed && ++t_seen == g_raise_at) {
    (void)!write(1, "raised\n", 7);
    raise(SIGUSR1);
  }
  return real(key, value);
}

int main(int argc, char **argv) {
  if (argc != 2) return 1;
  g_raise_at = atoi(argv[1]);
  CUdevice device;
  CUcontext context;
  CUgraph graph;
  CUgraphNode node;
  CUgraphExec exec;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuCtxCreate(&context, nullptr, 0, device) != CUDA_SUCCESS ||
      cuGraphCreate(&graph, 0) != CUDA_SUCCESS ||
      cuGraphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS ||
      cuGraphInstantiate(&exec, graph, 0) != CUDA_SUCCESS)
    return 1;
  if (cuGraphLaunch(exec, nullptr) != CUDA_SUCCESS) return 1;
  signal(SIGUSR1, exit_now);
  std::thread([&] {
    cuCtxSetCurrent(context);
    t_armed = true;
    cuGraphLaunch(exec, nullptr);
    t_armed = false;
  }).join();
  puts("returned");
  return 0;
}
