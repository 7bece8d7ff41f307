#include "lookup_wrappers.hpp"

#include <cudaTypedefs.h>
#include <stdio.h>
#include <string.h>

#include <array>
#include <utility>

#include <atomic>

#include "entry_points.hpp"
#include "launch_range.hpp"
#include "log.hpp"
#include "real_functions.hpp"

namespace ferrum {
namespace {

// One wrapper per distinct genuine launch function handed out (legacy and per-thread-stream
// are different driver functions; a second driver library would add more). A wrapper must
// be a distinct function to know which genuine function it calls, hence a fixed set,
// instantiated from a template.
constexpr int kLaunchWrapperCount = 8;
std::atomic<PFN_cuGraphLaunch_v10000> g_launch_targets[kLaunchWrapperCount];

template <int Index>
CUresult CUDAAPI launch_wrapper(CUgraphExec exec, CUstream stream) {
  PFN_cuGraphLaunch_v10000 genuine = g_launch_targets[Index].load(std::memory_order_acquire);
  return launch_in_range(exec, CUDA_SUCCESS, [&] { return genuine(exec, stream); });
}

template <int... Index>
constexpr auto make_launch_wrappers(std::integer_sequence<int, Index...>) {
  return std::array<PFN_cuGraphLaunch_v10000, sizeof...(Index)>{&launch_wrapper<Index>...};
}
constexpr auto kLaunchWrappers =
    make_launch_wrappers(std::make_integer_sequence<int, kLaunchWrapperCount>{});

void *launch_wrapper_for(const char *how, void *found) {
  // Already ours (our export reached through an interposable driver, or a wrapper handed
  // out before): return it as is — wrapping it again would loop or double the range.
  if (is_own_address(found)) {
    log_line(LogLevel::debug, "%s: the lookup returned the shim's own %p; kept", how, found);
    return found;
  }
  auto genuine = reinterpret_cast<PFN_cuGraphLaunch_v10000>(found);
  note_driver_library(found);
  for (int i = 0; i < kLaunchWrapperCount; ++i) {
    PFN_cuGraphLaunch_v10000 target = g_launch_targets[i].load(std::memory_order_acquire);
    if (target == nullptr &&
        g_launch_targets[i].compare_exchange_strong(target, genuine, std::memory_order_acq_rel))
      target = genuine;
    if (target == genuine) {
      log_line(LogLevel::debug, "%s: wrapped cuGraphLaunch %p as wrapper %d", how, found, i);
      return reinterpret_cast<void *>(kLaunchWrappers[i]);
    }
  }
  log_line(LogLevel::error, "%s: more than %d distinct cuGraphLaunch functions; %p is not wrapped",
           how, kLaunchWrapperCount, found);
  return found;
}

bool is_launch_name(const char *name) {
  return strcmp(name, "cuGraphLaunch") == 0 || strcmp(name, "cuGraphLaunch_ptsz") == 0;
}

}  // namespace

void *wrap_loaded_symbol(const char *name, void *found) {
  // Every dlsym of the process passes here: reject the common case with one comparison.
  if (!name || name[0] != 'c' || name[1] != 'u' || name[2] == 'd') return found;
  char how[96];
  if (strcmp(name, "cuGetProcAddress") == 0) {
    return proc_address_wrapper_for(ProcAddressAbi::v11030, found, "dlsym");
  }
  if (strcmp(name, "cuGetProcAddress_v2") == 0) {
    return proc_address_wrapper_for(ProcAddressAbi::v12000, found, "dlsym");
  }
  if (is_launch_name(name)) {
    snprintf(how, sizeof how, "dlsym(\"%s\")", name);
    return launch_wrapper_for(how, found);
  }
  return found;
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
  if (is_launch_name(symbol)) {
    char how[96];
    snprintf(how, sizeof how, "cuGetProcAddress(\"%s\", %d, flags %llu)", symbol, cuda_version,
             static_cast<unsigned long long>(flags));
    return launch_wrapper_for(how, found);
  }
  return found;
}

}  // namespace ferrum
