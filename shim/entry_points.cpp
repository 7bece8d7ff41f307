// What the dynamic loader sees: every function this library exports. Start here to find
// where a launch is intercepted.
//
//   cudaGraphLaunch / cudaGraphLaunch_ptsz   programs linked to the shared CUDA runtime
//                                            (PyTorch, vLLM extensions, llama.cpp)
//   cuGraphLaunch / cuGraphLaunch_ptsz       programs linked to the driver (libcuda)
//   cu/cudaGraphInstantiate*, *ExecDestroy   give each executable graph its identity
//                                            (graph_registry.hpp) at instantiation
//   ferrum_replay_name_graph_exec            a program's own name for a graph
//                                            (include/ferrum_replay/ferrum_replay.h)
//   cuGetProcAddress / cuGetProcAddress_v2   the driver's lookup: its answers for
//                                            cuGraphLaunch and for itself are wrapped
//                                            (lookup_wrappers.cpp)
//   dlsym / dlvsym / dlopen                  the loader: how the runtime (static or shared)
//                                            reaches the driver (loader_stubs_x86_64.S,
//                                            loader_hooks.cpp)
//
// Every launch, whichever route, ends in launch_in_range() (launch_range.hpp), whose depth
// guard keeps a runtime launch that reaches the driver underneath to one range.
#include "entry_points.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "activation.hpp"
#include "launch_range.hpp"
#include "log.hpp"
#include "lookup_wrappers.hpp"
#include "real_functions.hpp"

#include "ferrum_replay/ferrum_replay.h"

// Not declared by the headers unless the program itself opts into per-thread default streams
// (or, for the legacy instantiate, unless compiled as NVIDIA compiles the driver).
extern "C" {
cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t CUDARTAPI cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec,
                                                          cudaGraph_t graph,
                                                          cudaGraphInstantiateParams *params);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *params);
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer,
                                       size_t bufferSize);
}

namespace ferrum {
namespace {

using RuntimeGraphLaunch = cudaError_t (*)(cudaGraphExec_t, cudaStream_t);
using RuntimeInstantiate = cudaError_t (*)(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
using RuntimeInstantiateParams = cudaError_t (*)(cudaGraphExec_t *, cudaGraph_t,
                                                 cudaGraphInstantiateParams *);
using RuntimeExecDestroy = cudaError_t (*)(cudaGraphExec_t);

constinit RealFunction<RuntimeGraphLaunch> g_cudaGraphLaunch{"cudaGraphLaunch"};
constinit RealFunction<RuntimeGraphLaunch> g_cudaGraphLaunch_ptsz{"cudaGraphLaunch_ptsz"};
constinit RealFunction<PFN_cuGraphLaunch_v10000> g_cuGraphLaunch{"cuGraphLaunch"};
constinit RealFunction<PFN_cuGraphLaunch_v10000_ptsz> g_cuGraphLaunch_ptsz{"cuGraphLaunch_ptsz"};
constinit RealFunction<RuntimeInstantiate> g_cudaGraphInstantiate{"cudaGraphInstantiate"};
constinit RealFunction<RuntimeInstantiate> g_cudaGraphInstantiateWithFlags{
    "cudaGraphInstantiateWithFlags"};
constinit RealFunction<RuntimeInstantiateParams> g_cudaGraphInstantiateWithParams{
    "cudaGraphInstantiateWithParams"};
constinit RealFunction<RuntimeInstantiateParams> g_cudaGraphInstantiateWithParams_ptsz{
    "cudaGraphInstantiateWithParams_ptsz"};
constinit RealFunction<RuntimeExecDestroy> g_cudaGraphExecDestroy{"cudaGraphExecDestroy"};
constinit RealFunction<PfnGraphInstantiateLegacy> g_cuGraphInstantiate{"cuGraphInstantiate"};
constinit RealFunction<PfnGraphInstantiateLegacy> g_cuGraphInstantiate_v2{"cuGraphInstantiate_v2"};
constinit RealFunction<PFN_cuGraphInstantiateWithFlags_v11040> g_cuGraphInstantiateWithFlags{
    "cuGraphInstantiateWithFlags"};
constinit RealFunction<PFN_cuGraphInstantiateWithParams_v12000> g_cuGraphInstantiateWithParams{
    "cuGraphInstantiateWithParams"};
constinit RealFunction<PFN_cuGraphInstantiateWithParams_v12000_ptsz>
    g_cuGraphInstantiateWithParams_ptsz{"cuGraphInstantiateWithParams_ptsz"};
constinit RealFunction<PFN_cuGraphExecDestroy_v10000> g_cuGraphExecDestroy{"cuGraphExecDestroy"};
constinit RealFunction<PFN_cuGetProcAddress_v11030> g_cuGetProcAddress{"cuGetProcAddress"};
constinit RealFunction<PFN_cuGetProcAddress_v12000> g_cuGetProcAddress_v2{"cuGetProcAddress_v2"};

// No real definition is loaded (the program found our export without loading CUDA, say).
// Say so where asked, and answer as the missing library's absence would.
template <typename Function, typename Result>
Result missing(RealFunction<Function> &function, Result not_found) {
  (void)settings();  // reads FERRUM_REPLAY_LOG so the line below can be asked for
  log_line(LogLevel::error, "%s called but no real %s is loaded; returning error %d",
           function.name(), function.name(), static_cast<int>(not_found));
  return not_found;
}

template <typename Result, typename Function, typename Exec, typename Stream>
Result intercept_launch(RealFunction<Function> &function, Result success, Result not_found,
                        Exec exec, Stream stream) {
  Function real = function.get();
  if (__builtin_expect(real == nullptr, 0)) return missing(function, not_found);
  return launch_in_range(exec, success, [&] { return real(exec, stream); });
}

template <typename Result, typename Function, typename Exec, typename Graph, typename... Rest>
Result intercept_instantiate(RealFunction<Function> &function, Result success, Result not_found,
                             Exec *exec, Graph graph, Rest... rest) {
  Function real = function.get();
  if (__builtin_expect(real == nullptr, 0)) return missing(function, not_found);
  return instantiate_and_register(success, exec, graph, function.name(),
                                  [&] { return real(exec, graph, rest...); });
}

template <typename Result, typename Function, typename Exec>
Result intercept_destroy(RealFunction<Function> &function, Result not_found, Exec exec) {
  Function real = function.get();
  if (__builtin_expect(real == nullptr, 0)) return missing(function, not_found);
  return destroy_and_forget(exec, [&] { return real(exec); });
}

}  // namespace
}  // namespace ferrum

using ferrum::intercept_destroy;
using ferrum::intercept_instantiate;
using ferrum::intercept_launch;

extern "C" {

// ---- graph launches called by name ----

__attribute__((visibility("default"))) cudaError_t CUDARTAPI
cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return intercept_launch(ferrum::g_cudaGraphLaunch, cudaSuccess, cudaErrorSymbolNotFound,
                          graphExec, stream);
}

__attribute__((visibility("default"))) cudaError_t CUDARTAPI
cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return intercept_launch(ferrum::g_cudaGraphLaunch_ptsz, cudaSuccess, cudaErrorSymbolNotFound,
                          graphExec, stream);
}

__attribute__((visibility("default"))) CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec,
                                                                      CUstream hStream) {
  return intercept_launch(ferrum::g_cuGraphLaunch, CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND, hGraphExec,
                          hStream);
}

__attribute__((visibility("default"))) CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec,
                                                                           CUstream hStream) {
  return intercept_launch(ferrum::g_cuGraphLaunch_ptsz, CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND,
                          hGraphExec, hStream);
}

// ---- instantiation and destruction called by name ----

__attribute__((visibility("default"))) cudaError_t CUDARTAPI
cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return intercept_instantiate(ferrum::g_cudaGraphInstantiate, cudaSuccess, cudaErrorSymbolNotFound,
                               pGraphExec, graph, flags);
}

__attribute__((visibility("default"))) cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(
    cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return intercept_instantiate(ferrum::g_cudaGraphInstantiateWithFlags, cudaSuccess,
                               cudaErrorSymbolNotFound, pGraphExec, graph, flags);
}

__attribute__((visibility("default"))) cudaError_t CUDARTAPI cudaGraphInstantiateWithParams(
    cudaGraphExec_t *pGraphExec, cudaGraph_t graph, cudaGraphInstantiateParams *params) {
  return intercept_instantiate(ferrum::g_cudaGraphInstantiateWithParams, cudaSuccess,
                               cudaErrorSymbolNotFound, pGraphExec, graph, params);
}

__attribute__((visibility("default"))) cudaError_t CUDARTAPI cudaGraphInstantiateWithParams_ptsz(
    cudaGraphExec_t *pGraphExec, cudaGraph_t graph, cudaGraphInstantiateParams *params) {
  return intercept_instantiate(ferrum::g_cudaGraphInstantiateWithParams_ptsz, cudaSuccess,
                               cudaErrorSymbolNotFound, pGraphExec, graph, params);
}

__attribute__((visibility("default"))) cudaError_t CUDARTAPI
cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  return intercept_destroy(ferrum::g_cudaGraphExecDestroy, cudaErrorSymbolNotFound, graphExec);
}

// cuda.h maps cuGraphInstantiate to ...WithFlags; the driver still exports the legacy one.
#undef cuGraphInstantiate
__attribute__((visibility("default"))) CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec,
                                                                           CUgraph hGraph,
                                                                           CUgraphNode *phErrorNode,
                                                                           char *logBuffer,
                                                                           size_t bufferSize) {
  return intercept_instantiate(ferrum::g_cuGraphInstantiate, CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND,
                               phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

__attribute__((visibility("default"))) CUresult CUDAAPI
cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                      char *logBuffer, size_t bufferSize) {
  return intercept_instantiate(ferrum::g_cuGraphInstantiate_v2, CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND,
                               phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

__attribute__((visibility("default"))) CUresult CUDAAPI
cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
  return intercept_instantiate(ferrum::g_cuGraphInstantiateWithFlags, CUDA_SUCCESS,
                               CUDA_ERROR_NOT_FOUND, phGraphExec, hGraph, flags);
}

#undef cuGraphInstantiateWithParams
__attribute__((visibility("default"))) CUresult CUDAAPI cuGraphInstantiateWithParams(
    CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
  return intercept_instantiate(ferrum::g_cuGraphInstantiateWithParams, CUDA_SUCCESS,
                               CUDA_ERROR_NOT_FOUND, phGraphExec, hGraph, params);
}

__attribute__((visibility("default"))) CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(
    CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
  return intercept_instantiate(ferrum::g_cuGraphInstantiateWithParams_ptsz, CUDA_SUCCESS,
                               CUDA_ERROR_NOT_FOUND, phGraphExec, hGraph, params);
}

__attribute__((visibility("default"))) CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  return intercept_destroy(ferrum::g_cuGraphExecDestroy, CUDA_ERROR_NOT_FOUND, hGraphExec);
}

// ---- the program's own names ----

__attribute__((visibility("default"))) int ferrum_replay_name_graph_exec(void *graph_exec,
                                                                         const char *name) {
  if (!ferrum::shim_active()) return 0;  // FERRUM_REPLAY=off: nothing to name, not an error
  return ferrum::graph_registry().name_graph(graph_exec, name);
}

// ---- the driver's lookup ----
// Defined under hidden names and exported through aliases, so that handing out our own
// wrapper takes its address inside the shim — never through the GOT, where an interposer
// stacked before us would substitute its own function and create a loop.

__attribute__((visibility("hidden"))) CUresult CUDAAPI
ferrum_cuGetProcAddress_v11030(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
  PFN_cuGetProcAddress_v11030 real = ferrum::g_cuGetProcAddress.get();
  if (!real) return ferrum::missing(ferrum::g_cuGetProcAddress, CUDA_ERROR_NOT_FOUND);
  CUresult result = real(symbol, pfn, cudaVersion, flags);
  if (result == CUDA_SUCCESS && pfn && *pfn)
    *pfn = ferrum::wrap_proc_address_answer(symbol, *pfn, cudaVersion, flags);
  return result;
}

__attribute__((visibility("hidden"))) CUresult CUDAAPI
ferrum_cuGetProcAddress_v12000(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                               CUdriverProcAddressQueryResult *symbolStatus) {
  PFN_cuGetProcAddress_v12000 real = ferrum::g_cuGetProcAddress_v2.get();
  if (!real) return ferrum::missing(ferrum::g_cuGetProcAddress_v2, CUDA_ERROR_NOT_FOUND);
  CUresult result = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (result == CUDA_SUCCESS && pfn && *pfn)
    *pfn = ferrum::wrap_proc_address_answer(symbol, *pfn, cudaVersion, flags);
  return result;
}

// cuda.h maps cuGetProcAddress to the _v2 name; the driver still exports the 4-argument one.
#undef cuGetProcAddress
__attribute__((visibility("default"))) CUresult CUDAAPI
cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
    __attribute__((alias("ferrum_cuGetProcAddress_v11030")));
__attribute__((visibility("default"))) CUresult CUDAAPI
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *symbolStatus)
    __attribute__((alias("ferrum_cuGetProcAddress_v12000")));

}  // extern "C"

namespace ferrum {

void *proc_address_wrapper_for(ProcAddressAbi abi, void *genuine, const char *how) {
  (void)settings();  // the log level, for the lines below
  const bool v2 = abi == ProcAddressAbi::v12000;
  if (is_own_address(genuine)) {
    // An interposable driver (or a stacked interposer) returned our own export: keep the
    // real function we know; never record ourselves as the real one.
    log_line(LogLevel::debug, "%s: lookup returned the shim's own cuGetProcAddress%s", how,
             v2 ? "_v2" : "");
  } else if (v2) {
    g_cuGetProcAddress_v2.provide(genuine);
  } else {
    g_cuGetProcAddress.provide(genuine);
  }
  log_line(LogLevel::debug, "%s: answered with the shim's cuGetProcAddress%s (%s ABI)", how,
           v2 ? "_v2" : "", v2 ? "5-argument" : "4-argument");
  return v2 ? reinterpret_cast<void *>(&ferrum_cuGetProcAddress_v12000)
            : reinterpret_cast<void *>(&ferrum_cuGetProcAddress_v11030);
}

}  // namespace ferrum
