// What the shim hands back when a lookup returns a driver entry point it intercepts.
//
// Most programs never call a launch by name: the CUDA runtime (shared or static) opens
// libcuda privately, dlsym()s cuGetProcAddress_v2 on that handle, and fetches every entry
// point through it (DESIGN.md §1). So both lookups are watched:
//   - dlsym/dlvsym on an explicit handle (loader_hooks.cpp) -> wrap_loaded_symbol()
//   - cuGetProcAddress / _v2 (our wrappers, entry_points.cpp) -> wrap_proc_address_answer()
// and the answers for cuGraphLaunch, the instantiate functions, cuGraphExecDestroy (and
// cuGetProcAddress itself) are replaced by wrappers that call the genuine function found.
#pragma once

#include <cuda.h>

namespace ferrum {

// `found` is what dlsym(handle, name) returned (non-null): our wrapper for the entry points
// we intercept, else `found` itself.
void *wrap_loaded_symbol(const char *name, void *found);

// `found` is what the driver's cuGetProcAddress answered for (symbol, version, flags).
// The self-query "cuGetProcAddress" is answered with our wrapper of the matching ABI
// (4 arguments below 12000, 5 from 12000 on); cuGraphLaunch with a wrapper bound to the
// driver's answer — so flags 0 and 2 (per-thread stream) get separate wrappers;
// "cuGraphInstantiate" by its ABI at that version (5 arguments below 12000, flags from 12000).
void *wrap_proc_address_answer(const char *symbol, void *found, int cuda_version, cuuint64_t flags);

}  // namespace ferrum
