// What the dynamic loader sees: every function this library exports. Start here to find
// where a launch is intercepted.
//
//   cudaGraphLaunch / cudaGraphLaunch_ptsz   programs linked to the shared CUDA runtime
//                                            (PyTorch, vLLM extensions, llama.cpp)
//   cuGraphLaunch / cuGraphLaunch_ptsz       programs linked to the driver (libcuda)
//   cu/cudaGraphInstantiate*, *ExecDestroy   give each executable graph its identity
//                                            (graph_registry.hpp) at instantiation
//   ferrum_replay_name_graph_exec            a program's own name for a graph
//   ferrum_replay_push/pop_graph_name        ... or for the graphs it instantiates in a scope
//                                            (include/ferrum_replay/ferrum_replay.h)
//   cuCtxDestroy, cuGreenCtxDestroy,         GPU timing's event pools go before their context
//   cuDevicePrimaryCtxRelease,               (shim/gpu/gpu_timing.hpp)
//   cuDevicePrimaryCtxReset (and _v2 forms)
//   cuDevicePrimaryCtxRetain                 which context is the device's primary one
//   cuCtxFromGreenCtx                        which contexts are green (never timed)
//   ferrum_replay_set_gpu_sink(_sized), _gpu_flush   GPU times per replay, handed to a tool
//   ferrum_replay_shim_identity              tells a copy of the shim from an imitator
//                                            (common/shim_identity.hpp)
//   cuGetProcAddress / cuGetProcAddress_v2   the driver's lookup: its answers for
//                                            cuGraphLaunch and for itself are wrapped
//                                            (lookup_wrappers.cpp)
//   dlsym / dlvsym / dlopen                  the loader: how the runtime (static or shared)
//                                            reaches the driver (loader_stubs_x86_64.S,
//                                            loader_hooks.cpp)
//   dlclose                                  real functions of an unloaded library forgotten
//                                            (real_functions.hpp, loader_hooks.cpp)
//   longjmp / _longjmp / siglongjmp /        a jump that leaves a graph call marks it left
//   __longjmp_chk                            (launch_range.hpp note_jump, jump_hooks.cpp)
//
// Every launch, whichever route, ends in launch_through() (launch_range.hpp), whose
// outermost-call guard keeps a runtime launch that reaches the driver underneath to one range.
#include <errno.h>

#include "gpu/gpu_timing.hpp"
#include "hooks/hook_table.hpp"
#include "range/activation.hpp"
#include "range/launch_range.hpp"
#include "range/scope_names.hpp"
#include "resolve/real_functions.hpp"

#include "ferrum_replay/ferrum_replay.h"

// The writable segment's last byte: hooks/file_backed_bss.ld places it after .bss, so .bss is
// mapped from the file with the rest (no anonymous mapping, no zeroing at load).
[[gnu::used, gnu::section(".ferrum_replay_end")]] constinit char g_ferrum_replay_end = 1;

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

namespace ferrum_replay::shim {
namespace {

// The real function behind every row but the lookups: g_cudaGraphLaunch, g_cuGraphLaunch, ...
#define FERRUM_REAL_lookup(API, NAME, PARAMS)
#define FERRUM_REAL_launch FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_instantiate_legacy FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_instantiate_flags FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_instantiate_params FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_destroy FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_context_destroy FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_green_context_destroy FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_primary_release FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_primary_reset FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_primary_retain FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_green_context_convert FERRUM_HOOK_REAL_FUNCTION
#define HOOK(KIND, API, NAME, PARAMS, ...) FERRUM_REAL_##KIND(API, NAME, PARAMS)
#include "hooks/hooked_functions.def"
#undef HOOK

// The _ptsz launches: a null stream is the per-thread default stream (GPU timing's records
// follow the same rule). Decided at compile time from the row's name.
constexpr bool per_thread_name(const char *name) {
  size_t length = 0;
  while (name[length]) ++length;
  return length > 5 && name[length - 5] == '_' && name[length - 4] == 'p' &&
         name[length - 3] == 't' && name[length - 2] == 's' && name[length - 1] == 'z';
}

// A launch whose real function is not resolved yet (the first), or with none loaded. Out of
// line, so that a launch (below) needs no frame of its own: a load, a branch, a tail call.
template <bool PerThread, typename Result, typename Function, typename Exec, typename Stream>
__attribute__((noinline, cold)) Result intercept_unresolved_launch(RealFunction<Function> &function,
                                                                   Result success, Result not_found,
                                                                   const void *caller, Exec exec,
                                                                   Stream stream) {
  Function real = function.get(caller);
  if (real == nullptr) return missing_real_function(function, not_found);
  return launch_through(real, exec, stream, PerThread, success);
}

template <bool PerThread, typename Result, typename Function, typename Exec, typename Stream>
Result intercept_launch(RealFunction<Function> &function, Result success, Result not_found,
                        const void *caller, Exec exec, Stream stream) {
  Function real = function.resolved();
  if (__builtin_expect(real != nullptr, 1))
    return launch_through(real, exec, stream, PerThread, success);
  return intercept_unresolved_launch<PerThread>(function, success, not_found, caller, exec, stream);
}

// The context-ending calls: GPU timing lets go of the context's pool first. With timing off
// only the call.
template <typename Result, typename Function>
Result intercept_context_destroy(RealFunction<Function> &function, Result, Result not_found,
                                 const void *caller, CUcontext context) {
  Function real = function.get(caller);
  if (__builtin_expect(real == nullptr, 0)) return missing_real_function(function, not_found);
  if (!gpu::timing_on()) return real(context);
  return gpu::around_context_destroy(context, [&] { return real(context); });
}

template <typename Result, typename Function>
Result intercept_green_context_destroy(RealFunction<Function> &function, Result, Result not_found,
                                       const void *caller, CUgreenCtx green) {
  Function real = function.get(caller);
  if (__builtin_expect(real == nullptr, 0)) return missing_real_function(function, not_found);
  if (!gpu_timing_possible()) return real(green);  // a green context noted: forgotten
  return gpu::around_green_context_destroy(green, [&] { return real(green); });
}

template <typename Result, typename Function>
Result intercept_primary_release(RealFunction<Function> &function, Result, Result not_found,
                                 const void *caller, CUdevice device) {
  Function real = function.get(caller);
  if (__builtin_expect(real == nullptr, 0)) return missing_real_function(function, not_found);
  if (!gpu::timing_on()) return real(device);
  return gpu::around_primary_release(device, [&] { return real(device); });
}

template <typename Result, typename Function>
Result intercept_primary_reset(RealFunction<Function> &function, Result, Result not_found,
                               const void *caller, CUdevice device) {
  Function real = function.get(caller);
  if (__builtin_expect(real == nullptr, 0)) return missing_real_function(function, not_found);
  if (!gpu::timing_on()) return real(device);
  return gpu::around_primary_reset(device, [&] { return real(device); });
}

template <typename Result, typename Function>
Result intercept_primary_retain(RealFunction<Function> &function, Result success, Result not_found,
                                const void *caller, CUcontext *context, CUdevice device) {
  Function real = function.get(caller);
  if (__builtin_expect(real == nullptr, 0)) return missing_real_function(function, not_found);
  const Result result = real(context, device);
  if (gpu_timing_possible() && result == success && context)
    gpu::note_primary_context(device, *context);
  return result;
}

template <typename Result, typename Function>
Result intercept_green_context_convert(RealFunction<Function> &function, Result success,
                                       Result not_found, const void *caller, CUcontext *context,
                                       CUgreenCtx green) {
  Function real = function.get(caller);
  if (__builtin_expect(real == nullptr, 0)) return missing_real_function(function, not_found);
  const Result result = real(context, green);
  if (gpu_timing_possible() && result == success && context) gpu::note_green_context(*context);
  return result;
}

// GPU timing as the settings ask (read here: a tool may register its sink before the shim's
// first launch).
bool gpu_timing_asked() {
  const Settings &config = settings();
  // A copy that steps aside for an earlier one times nothing (range/activation.cpp, later_copy).
  return config.enabled && config.gpu_time && !later_copy();
}

template <typename Result, typename Function, typename Exec, typename Graph, typename... Rest>
Result intercept_instantiate(RealFunction<Function> &function, Result success, Result not_found,
                             const void *caller, Exec *exec, Graph graph, Rest... rest) {
  Function real = function.get(caller);
  if (__builtin_expect(real == nullptr, 0)) return missing_real_function(function, not_found);
  return instantiate_and_register(success, exec, graph, function.name(),
                                  [&] { return real(exec, graph, rest...); });
}

template <typename Result, typename Function, typename Exec>
Result intercept_destroy(RealFunction<Function> &function, Result success, Result not_found,
                         const void *caller, Exec exec) {
  (void)success;
  Function real = function.get(caller);
  if (__builtin_expect(real == nullptr, 0)) return missing_real_function(function, not_found);
  return destroy_and_forget(exec, [&] { return real(exec); });
}

}  // namespace
}  // namespace ferrum_replay::shim

// ---- every launch, instantiate and destroy function, called by name ----
// One definition per row of hooked_functions.def, by its KIND; the lookups are written by hand
// in lookup_wrappers.cpp.
#define FERRUM_DEFINE_HOOK(INTERCEPT, API, NAME, PARAMS, ...)                                  \
  extern "C" __attribute__((visibility(                                                        \
      "default"))) ::ferrum_replay::shim::ApiResult<::ferrum_replay::shim::HookApi::API>::Type \
      CUDAAPI NAME PARAMS {                                                                    \
    using Api = ::ferrum_replay::shim::ApiResult<::ferrum_replay::shim::HookApi::API>;         \
    return ::ferrum_replay::shim::INTERCEPT(::ferrum_replay::shim::g_##NAME, Api::success,     \
                                            Api::not_found, __builtin_return_address(0),       \
                                            __VA_ARGS__);                                      \
  }
#define FERRUM_DEFINE_launch(API, NAME, ...)                                                       \
  FERRUM_DEFINE_HOOK(intercept_launch<(::ferrum_replay::shim::per_thread_name(#NAME))>, API, NAME, \
                     __VA_ARGS__)
#define FERRUM_DEFINE_instantiate_legacy(...) FERRUM_DEFINE_HOOK(intercept_instantiate, __VA_ARGS__)
#define FERRUM_DEFINE_instantiate_flags(...) FERRUM_DEFINE_HOOK(intercept_instantiate, __VA_ARGS__)
#define FERRUM_DEFINE_instantiate_params(...) FERRUM_DEFINE_HOOK(intercept_instantiate, __VA_ARGS__)
#define FERRUM_DEFINE_destroy(...) FERRUM_DEFINE_HOOK(intercept_destroy, __VA_ARGS__)
#define FERRUM_DEFINE_context_destroy(...) \
  FERRUM_DEFINE_HOOK(intercept_context_destroy, __VA_ARGS__)
#define FERRUM_DEFINE_green_context_destroy(...) \
  FERRUM_DEFINE_HOOK(intercept_green_context_destroy, __VA_ARGS__)
#define FERRUM_DEFINE_primary_release(...) \
  FERRUM_DEFINE_HOOK(intercept_primary_release, __VA_ARGS__)
#define FERRUM_DEFINE_primary_reset(...) FERRUM_DEFINE_HOOK(intercept_primary_reset, __VA_ARGS__)
#define FERRUM_DEFINE_primary_retain(...) FERRUM_DEFINE_HOOK(intercept_primary_retain, __VA_ARGS__)
#define FERRUM_DEFINE_green_context_convert(...) \
  FERRUM_DEFINE_HOOK(intercept_green_context_convert, __VA_ARGS__)
#define FERRUM_DEFINE_lookup(...)
#define HOOK(KIND, API, NAME, PARAMS, ...) FERRUM_DEFINE_##KIND(API, NAME, PARAMS, __VA_ARGS__)
#include "hooks/hooked_functions.def"
#undef HOOK

extern "C" {

// ---- the program's own names ----

// The header's contract: 0 only when the name was taken. A null handle or name is refused
// whatever the shim's state; a shim that names nothing in this process (FERRUM_REPLAY=off, or
// no NVTX tool and no summary: every launch passes through) says so, -ENOTSUP, as GPU timing's
// functions do when it is off. (It used to return 0 there, null handle included: the
// program, and Python's name(), took a name nothing would ever show for taken.)
__attribute__((visibility("default"))) int ferrum_replay_name_graph_exec(void *graph_exec,
                                                                         const char *name) {
  if (!graph_exec || !name) return -EINVAL;
  if (!ferrum_replay::shim::shim_active()) {
    // Passing through for good, or not started yet: another thread's start took over 2 s (a
    // tool slow to initialise), or this call came from inside it. The second is no promise
    // that names are ignored: -EAGAIN, so that a program may try again.
    namespace detail = ferrum_replay::shim::detail;
    return detail::g_phase.load(std::memory_order_acquire) == detail::Phase::pass_through ? -ENOTSUP
                                                                                          : -EAGAIN;
  }
  return ferrum_replay::shim::name_graph_exec(graph_exec, name);
}

// Not gated on shim_active(): they read no setting, so a program may open a scope before it
// touches CUDA without activating anything; with the shim off nothing is registered anyway.
__attribute__((visibility("default"))) int ferrum_replay_push_graph_name(const char *name) {
  return ferrum_replay::shim::push_scope_name(name);
}

__attribute__((visibility("default"))) int ferrum_replay_pop_graph_name(void) {
  return ferrum_replay::shim::pop_scope_name();
}

// ---- what tells a copy of the shim from anything else exporting its names ----

// common/shim_identity.hpp: another copy steps aside for the first, never takes this one's
// interposers for the real functions, and a tool hands its GPU-time sink to this one only if it
// is one. What it returns is for a person reading a core file; nothing depends on it.
__attribute__((visibility("default"))) const char *ferrum_replay_shim_identity(void) {
  return "ferrum-replay shim";
}

// ---- GPU time per replay, for a tool ----

__attribute__((visibility("default"))) int ferrum_replay_set_gpu_sink(
    ferrum_replay_gpu_sink_fn sink, void *context) {
  if (!ferrum_replay::shim::gpu_timing_asked()) return -ENOTSUP;
  return ferrum_replay::shim::gpu::set_sink(sink, context, FERRUM_REPLAY_GPU_REPLAY_FIRST_SIZE,
                                            /*stride_known=*/false);
}

__attribute__((visibility("default"))) int ferrum_replay_set_gpu_sink_sized(
    ferrum_replay_gpu_sink_fn sink, void *context, size_t replay_size) {
  if (!ferrum_replay::shim::gpu_timing_asked()) return -ENOTSUP;
  if (replay_size < FERRUM_REPLAY_GPU_REPLAY_FIRST_SIZE) return -EINVAL;
  return ferrum_replay::shim::gpu::set_sink(sink, context, replay_size);
}

__attribute__((visibility("default"))) int ferrum_replay_gpu_flush(
    ferrum_replay_gpu_status *status) {
  if (!ferrum_replay::shim::gpu_timing_asked()) return -ENOTSUP;
  return ferrum_replay::shim::gpu::flush(status);
}

}  // extern "C"
