// A library that brings its own copy of the CUDA runtime (linked to a runtime stand-in under a
// name of its own, as wheels vendor libcudart-<hash>.so) and calls it by name, for
// runtime_copies.cpp: loaded RTLD_LOCAL beside another such library, each copy in its own scope.
#include <cuda_runtime_api.h>

// Launches a graph `launches` times (failures counted in *failed), then launches it once more
// after destroying it: that error is this runtime's, and its cudaGetLastError must return it.
extern "C" __attribute__((visibility("default"))) int copy_check(int launches, int *failed,
                                                                 int *stale_launch,
                                                                 int *last_error) {
  cudaGraph_t graph = nullptr;
  cudaGraphNode_t node = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaGraphCreate(&graph, 0) || cudaGraphAddEmptyNode(&node, graph, nullptr, 0) ||
      cudaGraphInstantiate(&exec, graph, 0))
    return 1;
  for (int i = 0; i < launches; ++i)
    if (cudaGraphLaunch(exec, nullptr) != cudaSuccess) ++*failed;
  if (cudaStreamSynchronize(nullptr) || cudaGraphExecDestroy(exec)) return 1;
  (void)cudaGetLastError();
  *stale_launch = cudaGraphLaunch(exec, nullptr);
  *last_error = cudaGetLastError();
  return cudaGraphDestroy(graph) != cudaSuccess;
}
