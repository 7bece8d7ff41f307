// The call site of a graph: the first frame on the current stack outside the CUDA libraries,
// the shim and the user's FERRUM_REPLAY_SITE_SKIP prefixes, as "function" (demangled, without
// its parameter list) or, where no symbol is known (stripped binaries), "module+0xoffset".
//
// Stack walking and symbolization use libunwind, opened lazily the first time a site is
// wanted (never at load: it would cost every process that inherits LD_PRELOAD); without it,
// glibc's backtrace() and dladdr() (exported symbols only). Symbolization is cached by
// return address: a graph instantiated from the same place costs one lookup.
#pragma once

#include <stddef.h>

namespace ferrum_replay::shim {

// Fills `out` (always terminated; "" when no frame qualifies). Not for the launch hot path.
void capture_call_site(char *out, size_t out_size, const char *skip_prefixes);

// Exposed for tests: whether a frame in `module` (a path) named `symbol` (demangled, may be
// "") is skipped by the built-in rules (CUDA libraries, the shim, the static CUDA runtime)
// or by `skip_prefixes` (comma-separated, matched against the symbol and the module's base
// name).
bool is_skipped_frame(const char *module, const char *symbol, const char *skip_prefixes);

}  // namespace ferrum_replay::shim
