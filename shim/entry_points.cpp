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

#include "activation.hpp"
#include "hook_table.hpp"
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
}

namespace ferrum {
namespace {

// The real function behind every row of the table: g_cudaGraphLaunch, g_cuGraphLaunch, ...
#define HOOK(KIND, API, NAME, PARAMS, ...) \
  constinit RealFunction<FERRUM_HOOK_FUNCTION_TYPE(API, PARAMS)> g_##NAME{#NAME};
#include "hooked_functions.def"
#undef HOOK

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
Result intercept_destroy(RealFunction<Function> &function, Result success, Result not_found,
                         Exec exec) {
  (void)success;
  Function real = function.get();
  if (__builtin_expect(real == nullptr, 0)) return missing(function, not_found);
  return destroy_and_forget(exec, [&] { return real(exec); });
}

}  // namespace
}  // namespace ferrum

// ---- every launch, instantiate and destroy function, called by name ----
// One definition per row of hooked_functions.def, by its KIND; the lookups are written below.
#define FERRUM_DEFINE_HOOK(INTERCEPT, API, NAME, PARAMS, ...)                                  \
  extern "C" __attribute__((visibility(                                                        \
      "default"))) ::ferrum::ApiResult<::ferrum::HookApi::API>::Type CUDAAPI NAME PARAMS {     \
    using Api = ::ferrum::ApiResult<::ferrum::HookApi::API>;                                   \
    return ::ferrum::INTERCEPT(::ferrum::g_##NAME, Api::success, Api::not_found, __VA_ARGS__); \
  }
#define FERRUM_DEFINE_launch(...) FERRUM_DEFINE_HOOK(intercept_launch, __VA_ARGS__)
#define FERRUM_DEFINE_instantiate_legacy(...) FERRUM_DEFINE_HOOK(intercept_instantiate, __VA_ARGS__)
#define FERRUM_DEFINE_instantiate_flags(...) FERRUM_DEFINE_HOOK(intercept_instantiate, __VA_ARGS__)
#define FERRUM_DEFINE_instantiate_params(...) FERRUM_DEFINE_HOOK(intercept_instantiate, __VA_ARGS__)
#define FERRUM_DEFINE_destroy(...) FERRUM_DEFINE_HOOK(intercept_destroy, __VA_ARGS__)
#define FERRUM_DEFINE_lookup(...)
#define HOOK(KIND, API, NAME, PARAMS, ...) FERRUM_DEFINE_##KIND(API, NAME, PARAMS, __VA_ARGS__)
#include "hooked_functions.def"
#undef HOOK

extern "C" {

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
