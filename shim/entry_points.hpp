// The shim's exported functions that lookups can hand out as wrappers (lookup_wrappers.cpp).
#pragma once

#include <cuda.h>

namespace ferrum {

// cuGraphInstantiate before CUDA 12 and cuGraphInstantiate_v2 (cudaTypedefs.h declares their
// PFN types only when compiled as NVIDIA compiles the driver).
using PfnGraphInstantiateLegacy = CUresult(CUDAAPI *)(CUgraphExec *, CUgraph, CUgraphNode *, char *,
                                                      size_t);

enum class ProcAddressAbi {
  v11030,  // cuGetProcAddress(symbol, pfn, version, flags)
  v12000,  // cuGetProcAddress_v2(symbol, pfn, version, flags, symbolStatus)
};

// Our cuGetProcAddress of `abi`, after noting `genuine` (what the lookup found) as the real
// one it calls. `how` names the lookup for the debug log.
void *proc_address_wrapper_for(ProcAddressAbi abi, void *genuine, const char *how);

}  // namespace ferrum
