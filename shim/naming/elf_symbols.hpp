// The function that contains an address, from its module's full symbol table (.symtab): local
// and hidden functions too, which the dynamic symbol table, and so dladdr, does not have. Read
// from the module's file with pread — never mapped (a file truncated meanwhile would raise
// SIGBUS in the host) — through a descriptor opened and closed within the call; a bounded
// buffer on the stack, no allocation. Used for call sites (call_site.cpp).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace ferrum_replay::shim {

// A module's GNU build ID (the linker's NT_GNU_BUILD_ID note): what tells the file a module was
// loaded from apart from whatever its path names now. `size` 0: none known.
struct BuildId {
  unsigned char bytes[64];
  size_t size = 0;
};

// The build ID of a loaded module, read from its notes in memory: `module_start` is where its
// first page is mapped (Dl_info::dli_fbase), `load_bias` its link_map::l_addr. Size 0 when it
// has none. Reads the loaded image only, through no loader call: dl_iterate_phdr takes a lock
// of the loader's that a fork() child may find held for ever (a thread of the parent's was
// loading a library at the fork), and this runs inside the program's graph calls.
BuildId loaded_build_id(const void *module_start, uintptr_t load_bias);

// The (mangled) name of the function symbol of `module_path`'s .symtab that covers `address`
// in a module loaded at `load_bias` (link_map::l_addr), into `out`. A symbol without a size
// covers only its first byte. False when the file cannot be read, is not an ELF file of this
// process's class, has no .symtab (stripped), or no function there covers the address — and,
// when `loaded` has a build ID, when the file does not carry the same one: the path may name
// another file by now (a library replaced on disk by an upgrade while the program runs, a
// relative path after a chdir), whose symbols are not the loaded module's.
bool symtab_function_name(const char *module_path, const BuildId &loaded, uintptr_t load_bias,
                          uintptr_t address, char *out, size_t out_size);

}  // namespace ferrum_replay::shim
