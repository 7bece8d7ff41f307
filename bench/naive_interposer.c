/* libferrum-bench-naive.so: the design ferrum-replay is measured against, preloaded instead of
 * libferrum-replay.so. What a first attempt looks like: interpose cudaGraphLaunch and
 * cuGraphLaunch by name, format a label per launch and push it with nvtxRangePushA in NVTX's
 * default domain, pop after the call. (It does not see the launches that reach the driver
 * through cuGetProcAddress at all; the benchmark reports that route as not intercepted.)
 *
 * The real functions are resolved once with dlsym(RTLD_NEXT) and cached: the naive part is the
 * per-launch snprintf and the unregistered, default-domain message, not a dlsym per call. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <stdatomic.h>
#include <stdio.h>

typedef cudaError_t (*runtime_launch_fn)(cudaGraphExec_t, cudaStream_t);
typedef CUresult (*driver_launch_fn)(CUgraphExec, CUstream);

static _Atomic(runtime_launch_fn) real_runtime_launch;
static _Atomic(driver_launch_fn) real_driver_launch;

__attribute__((visibility("default"))) cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t exec,
                                                                             cudaStream_t stream) {
  runtime_launch_fn real = atomic_load_explicit(&real_runtime_launch, memory_order_acquire);
  if (!real) {
    real = (runtime_launch_fn)dlsym(RTLD_NEXT, "cudaGraphLaunch");
    if (!real) return cudaErrorSymbolNotFound;
    atomic_store_explicit(&real_runtime_launch, real, memory_order_release);
  }
  char label[32];
  snprintf(label, sizeof label, "graph %p", (void *)exec);
  nvtxRangePushA(label);
  cudaError_t result = real(exec, stream);
  nvtxRangePop();
  return result;
}

__attribute__((visibility("default"))) CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec,
                                                                      CUstream stream) {
  driver_launch_fn real = atomic_load_explicit(&real_driver_launch, memory_order_acquire);
  if (!real) {
    real = (driver_launch_fn)dlsym(RTLD_NEXT, "cuGraphLaunch");
    if (!real) return CUDA_ERROR_NOT_FOUND;
    atomic_store_explicit(&real_driver_launch, real, memory_order_release);
  }
  char label[32];
  snprintf(label, sizeof label, "graph %p", (void *)exec);
  nvtxRangePushA(label);
  CUresult result = real(exec, stream);
  nvtxRangePop();
  return result;
}
