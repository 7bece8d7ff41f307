// A library linked to the CUDA driver (libcuda.so.1) that calls it by name, for driver_reloads:
// loaded and unloaded again by its host, the driver with it.
#include <cuda.h>

extern "C" __attribute__((visibility("default"))) int reload_plugin_launch(int launches,
                                                                           int *failed,
                                                                           int *result) {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  CUgraphExec exec = nullptr;
  if (cuInit(0) || cuDeviceGet(&device, 0) || cuDevicePrimaryCtxRetain(&context, device) ||
      cuCtxSetCurrent(context) || cuGraphCreate(&graph, 0) ||
      cuGraphAddEmptyNode(&node, graph, nullptr, 0) || cuGraphInstantiate(&exec, graph, 0))
    return 1;
  for (int i = 0; i < launches; ++i) {
    const CUresult launched = cuGraphLaunch(exec, nullptr);
    if (launched != CUDA_SUCCESS) {
      ++*failed;
      *result = launched;
    }
  }
  if (cuStreamSynchronize(nullptr) || cuGraphExecDestroy(exec) || cuGraphDestroy(graph) ||
      cuDevicePrimaryCtxRelease(device))
    return 1;
  return 0;
}
