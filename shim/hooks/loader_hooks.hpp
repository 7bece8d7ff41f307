// The C++ side of the exported dlsym / dlvsym / dlopen (loader_stubs_<arch>.S); dlclose is
// exported from loader_hooks.cpp itself (it does not depend on its caller).
#pragma once

extern "C" {
// Explicit-handle lookups: the real answer, or our wrapper when it is a driver entry point
// we intercept (wrap_loaded_symbol, below).
void *ferrum_dlsym_on_handle(void *handle, const char *name);
void *ferrum_dlvsym_on_handle(void *handle, const char *name, const char *version);
// For the stubs' tail jumps: the C library's definitions (null if none).
void *ferrum_libc_dlsym_address();
void *ferrum_libc_dlvsym_address();
// Notes dlopen(file, RTLD_DEEPBIND) of a CUDA library (once), returns libc's dlopen.
void *ferrum_dlopen_prologue(const char *file, int mode);
}

namespace ferrum_replay::shim {
// What an explicit-handle lookup answers: `found` (what dlsym(handle, name) returned, non-null)
// or our wrapper when it is a driver entry point we intercept. Declared here, where it is
// called, and defined with the wrappers (lookup_wrappers.cpp), which include this file.
void *wrap_loaded_symbol(const char *name, void *found);
}  // namespace ferrum_replay::shim
