// The call site of a graph: the first frame on the current stack outside the CUDA libraries,
// the shim and the user's FERRUM_REPLAY_SITE_SKIP prefixes, as "function" (demangled, without
// its parameter list) or, where no symbol is known (stripped binaries), "module+0xoffset".
//
// The stack is walked with glibc's backtrace(); a frame is named by the dynamic symbol that
// covers it (dladdr1), else from its module file's .symtab (elf_symbols.hpp: local
// functions), else module+offset. Nothing is opened at load, and no descriptor outlives a
// call (libunwind's validation pipe did: F39). Names are cached by return address, until the
// loader unloads a module (another may then take its addresses): a graph instantiated from
// the same place costs one lookup.
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
