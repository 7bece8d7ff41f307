/* The driver set-up of the C test programs (tests/reliability/fork_first_walk.c and
 * launch_at_load.c, tests/support/programs/instantiate_cuda11.c): libcuda.so.1 loaded and its
 * functions looked up by name (as a launcher written in C does through its loader), a context and
 * a graph with one empty node made. Exits 1 where any of it fails. */
#ifndef FERRUM_REPLAY_TESTS_C_DRIVER_H
#define FERRUM_REPLAY_TESTS_C_DRIVER_H

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

struct c_driver {
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*launch)(CUgraphExec, CUstream);
  CUcontext context;
  CUgraph graph;
};

static void *c_driver_need(void *driver, const char *name) {
  void *function = dlsym(driver, name);
  if (!function) {
    fprintf(stderr, "no %s in the driver\n", name);
    exit(1);
  }
  return function;
}

static struct c_driver c_driver_set_up(void) {
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!driver) {
    fprintf(stderr, "%s\n", dlerror());
    exit(1);
  }
  CUresult (*init)(unsigned) = c_driver_need(driver, "cuInit");
  CUresult (*device_get)(CUdevice *, int) = c_driver_need(driver, "cuDeviceGet");
  CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice) =
      c_driver_need(driver, "cuCtxCreate_v4");
  CUresult (*graph_create)(CUgraph *, unsigned) = c_driver_need(driver, "cuGraphCreate");
  CUresult (*add_empty)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t) =
      c_driver_need(driver, "cuGraphAddEmptyNode");
  struct c_driver d;
  d.ctx_set_current = c_driver_need(driver, "cuCtxSetCurrent");
  d.instantiate = c_driver_need(driver, "cuGraphInstantiateWithFlags");
  d.launch = c_driver_need(driver, "cuGraphLaunch");
  CUdevice device;
  CUgraphNode node;
  if (init(0) || device_get(&device, 0) || ctx_create(&d.context, NULL, 0, device) ||
      graph_create(&d.graph, 0) || add_empty(&node, d.graph, NULL, 0)) {
    fprintf(stderr, "driver set-up failed\n");
    exit(1);
  }
  return d;
}

#endif
