// The C library's own dlsym, dlvsym, dlopen and dlclose, found without going through the dynamic
// linker's symbol lookup — which would hand us back our own exports of those names.
//
// Why not dlvsym(RTLD_NEXT, "dlsym", ...): we export dlvsym too, and a versioned reference
// from this library binds to our unversioned definition (glibc accepts an unversioned
// definition for a versioned reference), so every route through the dynamic linker ends
// in our own code. Instead we read the exported symbol table of the first object after us
// in load order that defines the name (what RTLD_NEXT would find), via dl_iterate_phdr and
// its GNU hash table. Resolved once, lazily; safe to race (the answer is the same).
// The same table lookup finds a name exported by any loaded library (real_functions.cpp's last
// resort: a runtime loaded as a dependency of a library dlopened RTLD_LOCAL).
#pragma once

namespace ferrum_replay::shim {

using DlsymFunction = void *(*)(void *, const char *);
using DlvsymFunction = void *(*)(void *, const char *, const char *);
using DlopenFunction = void *(*)(const char *, int);
using DlcloseFunction = int (*)(void *);

DlsymFunction libc_dlsym();
DlvsymFunction libc_dlvsym();
DlopenFunction libc_dlopen();
DlcloseFunction libc_dlclose();

// The definition of `name` in the first object after the shim (load order) that exports it;
// null if none. Exposed for tests.
void *find_definition_after_shim(const char *name);

// The definition of `name` (a function) exported by the first loaded object in load order,
// every namespace, that is not the shim (nor another copy of it); null if none. `others`: how many
// other objects export a different definition of it. Takes the loader's lock (dl_iterate_phdr):
// resolution time only.
void *find_definition_in_any_object(const char *name, int *others);

}  // namespace ferrum_replay::shim
