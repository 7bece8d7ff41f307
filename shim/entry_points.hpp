// The shim's exported functions that lookups can hand out as wrappers (lookup_wrappers.cpp).
#pragma once

namespace ferrum {

enum class ProcAddressAbi {
  v11030,  // cuGetProcAddress(symbol, pfn, version, flags)
  v12000,  // cuGetProcAddress_v2(symbol, pfn, version, flags, symbolStatus)
};

// Our cuGetProcAddress of `abi`, after noting `genuine` (what the lookup found) as the real
// one it calls. `how` names the lookup for the debug log.
void *proc_address_wrapper_for(ProcAddressAbi abi, void *genuine, const char *how);

}  // namespace ferrum
