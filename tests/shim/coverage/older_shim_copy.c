/* Stand-in for a copy of the shim built before copies stepped aside for one another (before
 * common/shim_identity.hpp's marker): it exports what such a copy exported — the naming API,
 * dlsym, the driver's cuGraphLaunch — and, as such a copy did, opens an NVTX range around every
 * launch it is handed before it calls the next definition. A container's image may preload one
 * while `ferrum-replay record` puts today's shim first: every launch today's shim passed on to
 * it was a second, nested range, and the judges passed the doubled count (review CP-1). Only the
 * driver's launch is modelled: the route a copy's ranges were doubled on. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <nvtx3/nvToolsExt.h>

__attribute__((visibility("default"))) int ferrum_replay_name_graph_exec(void *graph_exec,
                                                                         const char *name) {
  (void)graph_exec;
  (void)name;
  return -ENOTSUP;
}

/* The C library's, found by version: a call of dlsym from here binds to the definition below. */
__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name) {
  static void *(*libc_dlsym)(void *, const char *);
  if (!libc_dlsym)
    libc_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!libc_dlsym)
    libc_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
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
