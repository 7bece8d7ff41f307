// What the columns of hooked_functions.def mean in C++: the table is the one list of the CUDA
// functions the shim intercepts; this header gives its KIND and API columns their types and
// the values each API returns.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

// cuda_runtime_api.h declares cudaGraphInstantiate with CUDA 12's three parameters; the shim's
// export takes CUDA 11's five (hooked_functions.def says why), which C++ rejects as a second C
// function of one name: the header's declaration is renamed out of the way. It only works
// where this header includes cuda_runtime_api.h first.
#if defined(__CUDA_RUNTIME_API_H__)
#error "hook_table.hpp must be the first to include cuda_runtime_api.h (cudaGraphInstantiate)"
#endif
#define cudaGraphInstantiate ferrum_replay_cuda12_cudaGraphInstantiate_declaration
#include <cuda_runtime_api.h>
#undef cudaGraphInstantiate

// cuda.h maps these names onto newer entry points (and onto _ptsz names when a program opts
// into per-thread default streams); the table names the exported symbols themselves.
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuGetProcAddress
#undef cuGraphInstantiate
#undef cuGraphInstantiateWithParams
#undef cuGraphLaunch
#undef cudaGraphInstantiateWithParams
#undef cudaGraphLaunch

namespace ferrum_replay::shim {

enum class HookKind {
  none,  // not a hooked function
  launch,
  instantiate_legacy,
  instantiate_flags,
  instantiate_params,
  destroy,
  context_destroy,
  green_context_destroy,
  primary_release,
  primary_reset,
  primary_retain,
  green_context_convert,
  lookup,
};

enum class HookApi { runtime, driver };

template <HookApi>
struct ApiResult;

template <>
struct ApiResult<HookApi::runtime> {
  using Type = cudaError_t;
  static constexpr Type success = cudaSuccess;
  static constexpr Type not_found = cudaErrorSymbolNotFound;
};

template <>
struct ApiResult<HookApi::driver> {
  using Type = CUresult;
  static constexpr Type success = CUDA_SUCCESS;
  static constexpr Type not_found = CUDA_ERROR_NOT_FOUND;
};

// The function type of a table row: its API's result, its parameters.
#define FERRUM_HOOK_FUNCTION_TYPE(API, PARAMS) \
  ::ferrum_replay::shim::ApiResult<::ferrum_replay::shim::HookApi::API>::Type(CUDAAPI *) PARAMS

// The real function behind a table row, g_NAME (real_functions.hpp): where the row's wrapper
// is written (entry_points.cpp for launches, instantiations and destroys; lookup_wrappers.cpp
// for the lookups).
#define FERRUM_HOOK_REAL_FUNCTION(API, NAME, PARAMS)                                              \
  constinit ::ferrum_replay::shim::RealFunction<FERRUM_HOOK_FUNCTION_TYPE(API, PARAMS)> g_##NAME{ \
      #NAME};

// cuGraphInstantiate before CUDA 12 and cuGraphInstantiate_v2 (cudaTypedefs.h declares their
// PFN types only when compiled as NVIDIA compiles the driver).
using PfnGraphInstantiateLegacy = CUresult(CUDAAPI *)(CUgraphExec *, CUgraph, CUgraphNode *, char *,
                                                      size_t);

}  // namespace ferrum_replay::shim
