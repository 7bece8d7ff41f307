// The function that contains an address, from its module's full symbol table (.symtab): local
// and hidden functions too, which the dynamic symbol table, and so dladdr, does not have. Read
// from the module's file with pread — never mapped (a file truncated meanwhile would raise
// SIGBUS in the host) — through a descriptor opened and closed within the call; a bounded
// buffer on the stack, no allocation. Used for call sites (call_site.cpp).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace ferrum_replay::shim {

// The (mangled) name of the function symbol of `module_path`'s .symtab that covers `address`
// in a module loaded at `load_bias` (link_map::l_addr), into `out`. A symbol without a size
// covers only its first byte. False when the file cannot be read, is not an ELF file of this
// process's class, has no .symtab (stripped), or no function there covers the address.
bool symtab_function_name(const char *module_path, uintptr_t load_bias, uintptr_t address,
                          char *out, size_t out_size);

}  // namespace ferrum_replay::shim
