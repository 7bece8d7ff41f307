/* Another LD_PRELOAD interposer, of the kind people stack with ours (GPU-sharing layers,
 * API tracers: HAMi-core, vgpu-manager): it exports cuGraphLaunch, finds "the next" one
 * with dlsym(RTLD_NEXT, ...), counts calls, and writes the count at exit to
 * $COUNTING_INTERPOSER_OUT. With a dlsym that forwarded RTLD_NEXT through an ordinary call,
 * its lookup would resolve relative to the wrong library and recurse or skip a layer. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_ulong launch_calls;

__attribute__((visibility("default"))) CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  static CUresult (*next)(CUgraphExec, CUstream);
  if (!next) next = (CUresult(*)(CUgraphExec, CUstream))dlsym(RTLD_NEXT, "cuGraphLaunch");
  if (!next) return CUDA_ERROR_NOT_FOUND;
  atomic_fetch_add(&launch_calls, 1);
  return next(exec, stream);
}

__attribute__((destructor)) static void write_count(void) {
  const char *path = getenv("COUNTING_INTERPOSER_OUT");
  if (!path) return;
  FILE *out = fopen(path, "w");
  if (!out) return;
  fprintf(out, "interposer_launches=%lu\n", (unsigned long)atomic_load(&launch_calls));
  fclose(out);
}
