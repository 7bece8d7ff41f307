/* A program built against the CUDA 11 runtime (libcudart.so.11.0: the stand-in of
 * tests/support/standin/cuda11_runtime): it calls cudaGraphInstantiate with the five arguments
 * the name took before CUDA 12 — as PyTorch, TensorRT or any program built with CUDA 11 does —
 * first on no graph (the runtime must fail it, clear the error node and leave its diagnostic in
 * the program's log buffer), then on a graph, which it replays through the runtime.
 *
 *   instantiate_cuda11 [LAUNCHES]      (default 10)
 *
 * Prints what the program sees: failed_result=, failed_log=, error_node_cleared=, result=,
 * launched= (launches that returned cudaSuccess). Run with LD_LIBRARY_PATH=<stand-in dir>. */
#include <driver_types.h>
#include <stdlib.h>
#include <string.h>

#include "../c_driver.h"

/* CUDA 11.8's cuda_runtime_api.h (the CUDA 13 headers declare only CUDA 12's three-argument
 * cudaGraphInstantiate). */
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 cudaGraphNode_t *pErrorNode, char *pLogBuffer, size_t bufferSize);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);

int main(int argc, char **argv) {
  const int launches = argc > 1 ? atoi(argv[1]) : 10;
  const struct c_driver d = c_driver_set_up();

  char log[64];
  memset(log, '#', sizeof log - 1);
  log[sizeof log - 1] = '\0';
  cudaGraphNode_t error_node = (cudaGraphNode_t)log; /* any node: the runtime clears it */
  cudaGraphExec_t exec = NULL;
  const cudaError_t failed = cudaGraphInstantiate(&exec, NULL, &error_node, log, sizeof log);
  printf("failed_result=%d\nfailed_log=%s\nerror_node_cleared=%d\n", (int)failed, log,
         error_node == NULL);

  const cudaError_t made =
      cudaGraphInstantiate(&exec, (cudaGraph_t)d.graph, &error_node, log, sizeof log);
  printf("result=%d\n", (int)made);
  int launched = 0;
  for (int i = 0; made == cudaSuccess && i < launches; ++i)
    if (cudaGraphLaunch(exec, 0) == cudaSuccess) ++launched;
  printf("launched=%d\n", launched);
  return 0;
}
