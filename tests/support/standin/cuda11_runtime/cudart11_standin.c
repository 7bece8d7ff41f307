/* Stands in for the CUDA 11 shared runtime (libcudart.so.11.0), only where its ABI differs from
 * the CUDA 12+ runtime's: cudaGraphInstantiate took five arguments before CUDA 12.0,
 *   cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
 *                        cudaGraphNode_t *pErrorNode, char *pLogBuffer, size_t bufferSize)
 * (CUDA 11.8's cuda_runtime_api.h), and CUDA 12.0 kept the name for (pGraphExec, graph, flags).
 * Like the real one: its symbols are versioned libcudart.so.11.0; it reaches the driver through
 * the driver's own lookup (cuGetProcAddress at version 11000, which answers cuGraphInstantiate
 * with the legacy five-argument function) and hands the program's error node, log buffer and
 * size to the driver, which writes its diagnostic there. cudaGraphLaunch too (an ABI that did
 * not change), so that what it instantiates can be replayed through it. The CUDA 13 headers
 * declare only the CUDA 12 prototype, so the five-argument one is declared here. */
#include <cuda.h>
#include <dlfcn.h>
#include <driver_types.h>
#include <stddef.h>

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 cudaGraphNode_t *pErrorNode, char *pLogBuffer, size_t bufferSize);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);

typedef CUresult (*GetProcAddress)(const char *, void **, int, cuuint64_t);
typedef CUresult (*InstantiateLegacy)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
typedef CUresult (*Launch)(CUgraphExec, CUstream);

/* The driver function `name` as a CUDA 11.0 runtime asks for it; NULL where there is none. */
static void *driver_function(const char *name) {
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) return NULL;
  GetProcAddress lookup = (GetProcAddress)dlsym(driver, "cuGetProcAddress");
  void *function = NULL;
  if (!lookup || lookup(name, &function, 11000, CU_GET_PROC_ADDRESS_DEFAULT) != CUDA_SUCCESS)
    return NULL;
  return function;
}

static cudaError_t runtime_error(CUresult result) {
  if (result == CUDA_SUCCESS) return cudaSuccess;
  return result == CUDA_ERROR_INVALID_VALUE ? cudaErrorInvalidValue : cudaErrorUnknown;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 cudaGraphNode_t *pErrorNode, char *pLogBuffer, size_t bufferSize) {
  InstantiateLegacy instantiate = (InstantiateLegacy)driver_function("cuGraphInstantiate");
  if (!instantiate) return cudaErrorInitializationError;
  return runtime_error(instantiate(pGraphExec, graph, pErrorNode, pLogBuffer, bufferSize));
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  Launch launch = (Launch)driver_function("cuGraphLaunch");
  if (!launch) return cudaErrorInitializationError;
  return runtime_error(launch(graphExec, stream));
}
