// What the shim hands back when a lookup returns a driver entry point it intercepts.
//
// Most programs never call a launch by name: the CUDA runtime (shared or static) opens
// libcuda privately, dlsym()s cuGetProcAddress_v2 on that handle, and fetches every entry
// point through it. So both lookups are watched:
//   - dlsym/dlvsym on an explicit handle (loader_hooks.cpp) -> wrap_loaded_symbol()
//   - cuGetProcAddress / _v2 (exported below) -> wrap_proc_address_answer()
// and the answers for cuGraphLaunch, the instantiate functions, cuGraphExecDestroy, the
// context-ending functions (and cuGetProcAddress itself) are replaced by wrappers that call the
// genuine function found.
#include <cudaTypedefs.h>
#include <stdio.h>
#include <string.h>

#include <atomic>
#include <utility>

#include "gpu/gpu_timing.hpp"
#include "hooks/hook_table.hpp"
#include "hooks/loader_hooks.hpp"
#include "loader_error.hpp"
#include "range/launch_range.hpp"
#include "resolve/real_functions.hpp"

// Our cuGetProcAddress of each ABI (at the end of this file).
extern "C" {
__attribute__((visibility("hidden"))) CUresult CUDAAPI
ferrum_cuGetProcAddress_v11030(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
__attribute__((visibility("hidden"))) CUresult CUDAAPI
ferrum_cuGetProcAddress_v12000(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                               CUdriverProcAddressQueryResult *symbolStatus);
}

namespace ferrum_replay::shim {

// A lookup's answer for `symbol`, wrapped when it is a function we intercept (below).
void *wrap_proc_address_answer(const char *symbol, void *found, int cuda_version, cuuint64_t flags);

namespace {

// The real lookups: g_cuGetProcAddress, g_cuGetProcAddress_v2.
#define FERRUM_REAL_lookup FERRUM_HOOK_REAL_FUNCTION
#define FERRUM_REAL_launch(API, NAME, PARAMS)
#define FERRUM_REAL_instantiate_legacy(API, NAME, PARAMS)
#define FERRUM_REAL_instantiate_flags(API, NAME, PARAMS)
#define FERRUM_REAL_instantiate_params(API, NAME, PARAMS)
#define FERRUM_REAL_destroy(API, NAME, PARAMS)
#define FERRUM_REAL_context_destroy(API, NAME, PARAMS)
#define FERRUM_REAL_green_context_destroy(API, NAME, PARAMS)
#define FERRUM_REAL_primary_release(API, NAME, PARAMS)
#define FERRUM_REAL_primary_reset(API, NAME, PARAMS)
#define FERRUM_REAL_primary_retain(API, NAME, PARAMS)
#define FERRUM_REAL_green_context_convert(API, NAME, PARAMS)
#define HOOK(KIND, API, NAME, PARAMS, ...) FERRUM_REAL_##KIND(API, NAME, PARAMS)
#include "hooks/hooked_functions.def"
#undef HOOK

enum class ProcAddressAbi {
  v11030,  // cuGetProcAddress(symbol, pfn, version, flags)
  v12000,  // cuGetProcAddress_v2(symbol, pfn, version, flags, symbolStatus)
};

// Our cuGetProcAddress of `abi` (below), after noting `genuine` (what the lookup found) as the
// real one it calls. `how` names the lookup for the debug log.
void *proc_address_wrapper_for(ProcAddressAbi abi, void *genuine, const char *how);

// ---- what each wrapper does around the genuine function ----

struct LaunchHook {
  using Function = PFN_cuGraphLaunch_v10000;
  static constexpr const char *kWhat = "cuGraphLaunch";
  static CUresult call(Function genuine, CUgraphExec exec, CUstream stream) {
    return launch_through(genuine, exec, stream, false, CUDA_SUCCESS);
  }
};

// cuGraphLaunch_ptsz, by name or as the per-thread-stream answer for cuGraphLaunch: a null
// stream is the per-thread default stream.
struct LaunchPerThreadHook {
  using Function = PFN_cuGraphLaunch_v10000;
  static constexpr const char *kWhat = "cuGraphLaunch_ptsz";
  static CUresult call(Function genuine, CUgraphExec exec, CUstream stream) {
    return launch_through(genuine, exec, stream, true, CUDA_SUCCESS);
  }
};

// The context-ending calls (GPU timing's pools go first; gpu_timing.hpp). Wrapped while GPU
// timing is on, or may be (a lookup answered before the shim's start had ended).
struct ContextDestroyHook {
  using Function = PFN_cuCtxDestroy_v4000;
  static constexpr const char *kWhat = "cuCtxDestroy";
  static CUresult call(Function genuine, CUcontext context) {
    if (!gpu::timing_on()) return genuine(context);
    return gpu::around_context_destroy(context, [&] { return genuine(context); });
  }
};

struct GreenContextDestroyHook {
  using Function = PFN_cuGreenCtxDestroy_v12040;
  static constexpr const char *kWhat = "cuGreenCtxDestroy";
  static CUresult call(Function genuine, CUgreenCtx green) {
    if (!gpu_timing_possible()) return genuine(green);  // a green context noted: forgotten
    return gpu::around_green_context_destroy(green, [&] { return genuine(green); });
  }
};

struct PrimaryReleaseHook {
  using Function = PFN_cuDevicePrimaryCtxRelease_v11000;
  static constexpr const char *kWhat = "cuDevicePrimaryCtxRelease";
  static CUresult call(Function genuine, CUdevice device) {
    if (!gpu::timing_on()) return genuine(device);
    return gpu::around_primary_release(device, [&] { return genuine(device); });
  }
};

struct PrimaryResetHook {
  using Function = PFN_cuDevicePrimaryCtxReset_v11000;
  static constexpr const char *kWhat = "cuDevicePrimaryCtxReset";
  static CUresult call(Function genuine, CUdevice device) {
    if (!gpu::timing_on()) return genuine(device);
    return gpu::around_primary_reset(device, [&] { return genuine(device); });
  }
};

struct PrimaryRetainHook {
  using Function = PFN_cuDevicePrimaryCtxRetain_v7000;
  static constexpr const char *kWhat = "cuDevicePrimaryCtxRetain";
  static CUresult call(Function genuine, CUcontext *context, CUdevice device) {
    const CUresult result = genuine(context, device);
    if (result == CUDA_SUCCESS && context && gpu_timing_possible())
      gpu::note_primary_context(device, *context);
    return result;
  }
};

struct GreenContextConvertHook {
  using Function = PFN_cuCtxFromGreenCtx_v12040;
  static constexpr const char *kWhat = "cuCtxFromGreenCtx";
  static CUresult call(Function genuine, CUcontext *context, CUgreenCtx green) {
    const CUresult result = genuine(context, green);
    if (result == CUDA_SUCCESS && context && gpu_timing_possible())
      gpu::note_green_context(*context);
    return result;
  }
};

// cuGraphInstantiate before 12.0 and cuGraphInstantiate_v2: five arguments.
struct InstantiateLegacyHook {
  using Function = PfnGraphInstantiateLegacy;
  static constexpr const char *kWhat = "cuGraphInstantiate";
  static CUresult call(Function genuine, CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node,
                       char *log, size_t log_size) {
    return instantiate_and_register(CUDA_SUCCESS, exec, graph, kWhat, [&] {
      return genuine(exec, graph, error_node, log, log_size);
    });
  }
};

// cuGraphInstantiateWithFlags, and cuGraphInstantiate from 12.0 on.
struct InstantiateFlagsHook {
  using Function = PFN_cuGraphInstantiateWithFlags_v11040;
  static constexpr const char *kWhat = "cuGraphInstantiateWithFlags";
  static CUresult call(Function genuine, CUgraphExec *exec, CUgraph graph,
                       unsigned long long flags) {
    return instantiate_and_register(CUDA_SUCCESS, exec, graph, kWhat,
                                    [&] { return genuine(exec, graph, flags); });
  }
};

struct InstantiateParamsHook {
  using Function = PFN_cuGraphInstantiateWithParams_v12000;
  static constexpr const char *kWhat = "cuGraphInstantiateWithParams";
  static CUresult call(Function genuine, CUgraphExec *exec, CUgraph graph,
                       CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    return instantiate_and_register(CUDA_SUCCESS, exec, graph, kWhat,
                                    [&] { return genuine(exec, graph, params); });
  }
};

// The driver's lookup itself, per driver instance (two instances — a copy at another path,
// dlmopen, a driver unloaded and loaded again elsewhere — each answer for their own): its
// answers for the functions above are wrapped in turn.
struct LookupHook {
  using Function = PFN_cuGetProcAddress_v11030;
  static constexpr const char *kWhat = "cuGetProcAddress";
  static CUresult call(Function genuine, const char *symbol, void **pfn, int cuda_version,
                       cuuint64_t flags) {
    const CUresult result = genuine(symbol, pfn, cuda_version, flags);
    if (result == CUDA_SUCCESS && pfn && *pfn)
      *pfn = wrap_proc_address_answer(symbol, *pfn, cuda_version, flags);
    return result;
  }
};

struct LookupV2Hook {
  using Function = PFN_cuGetProcAddress_v12000;
  static constexpr const char *kWhat = "cuGetProcAddress_v2";
  static CUresult call(Function genuine, const char *symbol, void **pfn, int cuda_version,
                       cuuint64_t flags, CUdriverProcAddressQueryResult *symbol_status) {
    const CUresult result = genuine(symbol, pfn, cuda_version, flags, symbol_status);
    if (result == CUDA_SUCCESS && pfn && *pfn)
      *pfn = wrap_proc_address_answer(symbol, *pfn, cuda_version, flags);
    return result;
  }
};

struct ExecDestroyHook {
  using Function = PFN_cuGraphExecDestroy_v10000;
  static constexpr const char *kWhat = "cuGraphExecDestroy";
  static CUresult call(Function genuine, CUgraphExec exec) {
    return destroy_and_forget(exec, [&] { return genuine(exec); });
  }
};

// ---- one wrapper per distinct genuine function handed out ----
// A wrapper must be a distinct function to know which genuine function it calls (legacy and
// per-thread-stream launches are different driver functions; a second driver library would
// add more), hence a fixed set per hook, instantiated from a template.

template <typename Hook, typename Function = typename Hook::Function>
struct WrapperSet;

template <typename Hook, typename Result, typename... Args>
struct WrapperSet<Hook, Result(CUDAAPI *)(Args...)> {
  using Function = Result(CUDAAPI *)(Args...);
  static constexpr int kCount = 8;
  static inline std::atomic<Function> targets[kCount];

  template <int Index>
  static Result CUDAAPI wrapper(Args... args) {
    return Hook::call(targets[Index].load(std::memory_order_acquire), args...);
  }

  // Wrapper `i`, computed rather than read from a table of pointers: such a table costs the
  // loader a relocation per entry in every process (docs/performance.md, "Start-up").
  template <int... Index>
  static Function wrapper_at(int i, std::integer_sequence<int, Index...>) {
    Function found = nullptr;
    (void)((i == Index && (found = &wrapper<Index>, true)) || ...);
    return found;
  }

  // `found`: a genuine function, never the shim's own (wrap_kind and proc_address_wrapper_for
  // have kept those as they are: wrapping one would loop or double the range).
  static void *wrap(const char *how, void *found) {
    auto genuine = reinterpret_cast<Function>(found);
    note_driver_library(found);
    for (int i = 0; i < kCount; ++i) {
      Function target = targets[i].load(std::memory_order_acquire);
      if (target == nullptr &&
          targets[i].compare_exchange_strong(target, genuine, std::memory_order_acq_rel))
        target = genuine;
      if (target == genuine) {
        log_line(LogLevel::debug, "%s: wrapped %s %p as wrapper %d", how, Hook::kWhat, found, i);
        return reinterpret_cast<void *>(wrapper_at(i, std::make_integer_sequence<int, kCount>{}));
      }
    }
    // Every wrapper taken: one whose function's library has been unloaded since (a driver
    // loaded again elsewhere, over and over) serves the new one.
    for (int i = 0; i < kCount; ++i) {
      Function target = targets[i].load(std::memory_order_acquire);
      if (target && !is_loaded_address(reinterpret_cast<const void *>(target)) &&
          targets[i].compare_exchange_strong(target, genuine, std::memory_order_acq_rel)) {
        log_line(LogLevel::debug, "%s: wrapped %s %p as wrapper %d (its library was unloaded)", how,
                 Hook::kWhat, found, i);
        return reinterpret_cast<void *>(wrapper_at(i, std::make_integer_sequence<int, kCount>{}));
      }
    }
    log_line(LogLevel::error, "%s: more than %d distinct %s functions; %p is not wrapped", how,
             kCount, Hook::kWhat, found);
    return found;
  }
};

// `per_thread`: a launch with per-thread default stream semantics (cuGraphLaunch_ptsz, or
// cuGraphLaunch asked for with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM).
void *wrap_kind(HookKind kind, const char *how, void *found, bool per_thread) {
  // Already ours — our export, reached through a handle of the program or of the shim
  // (dlsym(dlopen(NULL), ...), Python's ctypes.CDLL(None), a probe for CUDA in a process that
  // never loads it) or through an interposable driver; a wrapper handed out before: as is,
  // before anything else. Only a genuine driver function starts the shim: such a lookup reads
  // no setting and attaches no tool, as the same lookup through RTLD_DEFAULT (F121).
  if (is_own_address(found)) {
    log_line(LogLevel::debug, "%s: the lookup returned the shim's own %p; kept", how, found);
    return found;
  }
  // Nothing to record (FERRUM_REPLAY=off, or no tool and no summary): the genuine function,
  // so that such a process pays nothing per launch, not even our check. While another thread
  // is still starting the shim: the wrapper, without waiting (activation.hpp wrap_lookups).
  if (!wrap_lookups()) return found;
  // GPU timing's setting is not known before the start has ended: wrapped then too (the
  // wrappers pass straight through with timing off).
  const bool timing = gpu_timing_possible();
  switch (kind) {
    case HookKind::launch:
      if (per_thread) return WrapperSet<LaunchPerThreadHook>::wrap(how, found);
      return WrapperSet<LaunchHook>::wrap(how, found);
    case HookKind::context_destroy:
      return timing ? WrapperSet<ContextDestroyHook>::wrap(how, found) : found;
    case HookKind::green_context_destroy:
      return timing ? WrapperSet<GreenContextDestroyHook>::wrap(how, found) : found;
    case HookKind::primary_release:
      return timing ? WrapperSet<PrimaryReleaseHook>::wrap(how, found) : found;
    case HookKind::primary_reset:
      return timing ? WrapperSet<PrimaryResetHook>::wrap(how, found) : found;
    case HookKind::primary_retain:
      return timing ? WrapperSet<PrimaryRetainHook>::wrap(how, found) : found;
    case HookKind::green_context_convert:
      return timing ? WrapperSet<GreenContextConvertHook>::wrap(how, found) : found;
    case HookKind::instantiate_legacy:
      return WrapperSet<InstantiateLegacyHook>::wrap(how, found);
    case HookKind::instantiate_flags:
      return WrapperSet<InstantiateFlagsHook>::wrap(how, found);
    case HookKind::instantiate_params:
      return WrapperSet<InstantiateParamsHook>::wrap(how, found);
    case HookKind::destroy:
      return WrapperSet<ExecDestroyHook>::wrap(how, found);
    case HookKind::none:
    case HookKind::lookup:
      break;
  }
  return found;
}

// The KIND of a driver function a lookup answered with, by its name, from the table
// (hooked_functions.def); none for every other name. Runtime functions are never a lookup's
// answer, so only the table's driver rows count.
HookKind driver_hook_kind(const char *name) {
  struct Row {
    char name[40];  // the text itself: a pointer would be a relocation at every load
    HookKind kind;
  };
  static constexpr Row kRows[] = {
#define HOOK(KIND, API, NAME, PARAMS, ...) \
  {#NAME, HookApi::API == HookApi::driver ? HookKind::KIND : HookKind::none},
#include "hooks/hooked_functions.def"
#undef HOOK
  };
  for (const Row &row : kRows)
    if (strcmp(row.name, name) == 0) return row.kind;
  return HookKind::none;
}

// The KIND of a cuGetProcAddress answer: by name and, for cuGraphInstantiate, by version (the
// name meant the 5-argument function before CUDA 12, the flags one from 12.0 on).
HookKind kind_of_answer(const char *symbol, int cuda_version) {
  const HookKind kind = driver_hook_kind(symbol);
  if (kind == HookKind::instantiate_legacy && strcmp(symbol, "cuGraphInstantiate") == 0 &&
      cuda_version >= 12000)
    return HookKind::instantiate_flags;
  return kind;
}

// The cuGetProcAddress ABI a lookup name stands for.
ProcAddressAbi lookup_abi(const char *name) {
  return strcmp(name, "cuGetProcAddress_v2") == 0 ? ProcAddressAbi::v12000 : ProcAddressAbi::v11030;
}

}  // namespace

void *wrap_loaded_symbol(const char *name, void *found) {
  // Every dlsym of the process passes here: reject the common case at once.
  if (!name || name[0] != 'c' || name[1] != 'u' || name[2] < 'A' || name[2] > 'Z') return found;
  const HookKind kind = driver_hook_kind(name);
  if (kind == HookKind::none) return found;
  // Called once the program's own lookup succeeded, when none is pending: whatever our work
  // below leaves (activation: a tool that is not there) is read off (loader_error.hpp).
  const common::LoaderErrorCleared loader_error;
  if (kind == HookKind::lookup) return proc_address_wrapper_for(lookup_abi(name), found, "dlsym");
  char how[96];
  snprintf(how, sizeof how, "dlsym(\"%s\")", name);
  const size_t length = strlen(name);
  const bool per_thread = length > 5 && strcmp(name + length - 5, "_ptsz") == 0;
  return wrap_kind(kind, how, found, per_thread);
}

void *wrap_proc_address_answer(const char *symbol, void *found, int cuda_version,
                               cuuint64_t flags) {
  if (!symbol || !found || symbol[0] != 'c' || symbol[1] != 'u') return found;
  if (strcmp(symbol, "cuGetProcAddress") == 0) {
    // The runtime asks at 11030 and at 12000 and keeps the 12000 answer as its lookup
    // function: answering with ourselves is what lets every later lookup reach us.
    ProcAddressAbi abi = cuda_version >= 12000 ? ProcAddressAbi::v12000 : ProcAddressAbi::v11030;
    return proc_address_wrapper_for(abi, found, "cuGetProcAddress self-query");
  }
  const HookKind kind = kind_of_answer(symbol, cuda_version);
  if (kind == HookKind::none || kind == HookKind::lookup) return found;
  char how[96];
  snprintf(how, sizeof how, "cuGetProcAddress(\"%s\", %d, flags %llu)", symbol, cuda_version,
           static_cast<unsigned long long>(flags));
  const size_t length = strlen(symbol);
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 ||
                          (length > 5 && strcmp(symbol + length - 5, "_ptsz") == 0);
  return wrap_kind(kind, how, found, per_thread);
}

namespace {

void *proc_address_wrapper_for(ProcAddressAbi abi, void *genuine, const char *how) {
  const bool v2 = abi == ProcAddressAbi::v12000;
  if (is_own_address(genuine)) {
    // An interposable driver (or a stacked interposer) returned our own export, or the
    // program looked it up through a handle of its own or of the shim: keep the real function
    // we know; never record ourselves as the real one. Before the settings, as wrap_kind: our
    // own export starts nothing (F121); these lines show once a genuine lookup has read them.
    log_line(LogLevel::debug, "%s: lookup returned the shim's own cuGetProcAddress%s", how,
             v2 ? "_v2" : "");
    log_line(LogLevel::debug, "%s: answered with the shim's cuGetProcAddress%s (%s ABI)", how,
             v2 ? "_v2" : "", v2 ? "5-argument" : "4-argument");
    return v2 ? reinterpret_cast<void *>(&ferrum_cuGetProcAddress_v12000)
              : reinterpret_cast<void *>(&ferrum_cuGetProcAddress_v11030);
  }
  (void)settings();  // the log level, for the lines below
  // The export's real function too (a program calling cuGetProcAddress by name), and a wrapper
  // of this very instance's lookup (WrapperSet, per distinct genuine function).
  if (v2) {
    g_cuGetProcAddress_v2.provide(genuine);
  } else {
    g_cuGetProcAddress.provide(genuine);
  }
  log_line(LogLevel::debug, "%s: answered with a wrapper of cuGetProcAddress%s (%s ABI)", how,
           v2 ? "_v2" : "", v2 ? "5-argument" : "4-argument");
  return v2 ? WrapperSet<LookupV2Hook>::wrap(how, genuine)
            : WrapperSet<LookupHook>::wrap(how, genuine);
}

}  // namespace
}  // namespace ferrum_replay::shim

extern "C" {

// ---- the driver's lookup ----
// Defined under hidden names and exported through aliases, so that handing out our own
// wrapper takes its address inside the shim — never through the GOT, where an interposer
// stacked before us would substitute its own function and create a loop.

__attribute__((visibility("hidden"))) CUresult CUDAAPI
ferrum_cuGetProcAddress_v11030(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
  PFN_cuGetProcAddress_v11030 real =
      ferrum_replay::shim::g_cuGetProcAddress.get(__builtin_return_address(0));
  if (!real)
    return ferrum_replay::shim::missing_real_function(ferrum_replay::shim::g_cuGetProcAddress,
                                                      CUDA_ERROR_NOT_FOUND);
  return ferrum_replay::shim::LookupHook::call(real, symbol, pfn, cudaVersion, flags);
}

__attribute__((visibility("hidden"))) CUresult CUDAAPI
ferrum_cuGetProcAddress_v12000(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                               CUdriverProcAddressQueryResult *symbolStatus) {
  PFN_cuGetProcAddress_v12000 real =
      ferrum_replay::shim::g_cuGetProcAddress_v2.get(__builtin_return_address(0));
  if (!real)
    return ferrum_replay::shim::missing_real_function(ferrum_replay::shim::g_cuGetProcAddress_v2,
                                                      CUDA_ERROR_NOT_FOUND);
  return ferrum_replay::shim::LookupV2Hook::call(real, symbol, pfn, cudaVersion, flags,
                                                 symbolStatus);
}

__attribute__((visibility("default"))) CUresult CUDAAPI
cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
    __attribute__((alias("ferrum_cuGetProcAddress_v11030")));
__attribute__((visibility("default"))) CUresult CUDAAPI
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *symbolStatus)
    __attribute__((alias("ferrum_cuGetProcAddress_v12000")));

}  // extern "C"
