// What the columns of hooked_functions.def mean in C++: the table is the one list of the CUDA
// functions the shim intercepts; this header gives its KIND and API columns their types and
// the values each API returns.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

// cuda.h maps these names onto newer entry points (and onto _ptsz names when a program opts
// into per-thread default streams); the table names the exported symbols themselves.
#undef cuGetProcAddress
#undef cuGraphInstantiate
#undef cuGraphInstantiateWithParams
#undef cuGraphLaunch
#undef cudaGraphInstantiateWithParams
#undef cudaGraphLaunch

namespace ferrum {

enum class HookKind {
  none,  // not a hooked function
  launch,
  instantiate_legacy,
  instantiate_flags,
  instantiate_params,
  destroy,
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
  ::ferrum::ApiResult<::ferrum::HookApi::API>::Type(CUDAAPI *) PARAMS

}  // namespace ferrum
