/* Stand-in for a copy of the shim built before copies stepped aside for one another (before
 * common/shim_identity.hpp's marker), in the GPU-timing era: it exports what such a copy
 * exported — the naming API, the GPU-time hand-off (timing off: -ENOTSUP), dlsym, the driver's
 * cuGraphLaunch — and behaves as such a copy did where it mattered:
 *   - it opens an NVTX range, "older copy", around every launch it is handed before it calls
 *     the next definition. A container's image may preload one while `ferrum-replay record` puts
 *     today's shim first: every launch today's shim passed on to it was a second, nested range,
 *     and the judges passed the doubled count (review CP-1);
 *   - its dlsym, asked through a handle for cuGraphLaunch, starts it: its first NVTX call
 *     (nvtxDomainCreateA). A recorder that asked it so from inside its own start waited for
 *     itself for ever (review CQ-1).
 * Only the driver's launch is modelled. Its dlsym resolves RTLD_NEXT after itself, not after
 * its caller (a real copy's does: shim/hooks/loader_stubs_*.S): do not preload a sanitizer
 * runtime before it. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <nvtx3/nvToolsExt.h>
#include <string.h>

#include "ferrum_replay/ferrum_replay.h"

__attribute__((visibility("default"))) int ferrum_replay_name_graph_exec(void *graph_exec,
                                                                         const char *name) {
  (void)graph_exec;
  (void)name;
  return -ENOTSUP;
}

__attribute__((visibility("default"))) int ferrum_replay_set_gpu_sink(
    ferrum_replay_gpu_sink_fn sink, void *context) {
  (void)sink;
  (void)context;
  return -ENOTSUP;
}

__attribute__((visibility("default"))) int ferrum_replay_gpu_flush(
    ferrum_replay_gpu_status *status) {
  (void)status;
  return -ENOTSUP;
}

/* Its activation, once: the first NVTX call of such a copy. */
static void start(void) {
  static int started;
  if (__atomic_exchange_n(&started, 1, __ATOMIC_ACQ_REL)) return;
  (void)nvtxDomainCreateA("ferrum-replay");
}

/* The C library's, found by version: a call of dlsym from here binds to the definition below. */
__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name) {
  static void *(*libc_dlsym)(void *, const char *);
  if (!libc_dlsym)
    libc_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!libc_dlsym)
    libc_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (handle != RTLD_DEFAULT && handle != RTLD_NEXT && strcmp(name, "cuGraphLaunch") == 0) start();
  return libc_dlsym ? libc_dlsym(handle, name) : NULL;
}

__attribute__((visibility("default"))) CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  static CUresult (*next)(CUgraphExec, CUstream);
  if (!next) next = (CUresult(*)(CUgraphExec, CUstream))dlsym(RTLD_NEXT, "cuGraphLaunch");
  if (!next) return CUDA_ERROR_NOT_FOUND;
  nvtxRangePushA("older copy");
  const CUresult result = next(exec, stream);
  nvtxRangePop();
  return result;
}
