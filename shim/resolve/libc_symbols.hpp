// The C library's own dlsym, dlvsym, dlopen and dlclose, found without going through the dynamic
// linker's symbol lookup — which would hand us back our own exports of those names.
//
// Why not dlvsym(RTLD_NEXT, "dlsym", ...): we export dlvsym too, and a versioned reference
// from this library binds to our unversioned definition (glibc accepts an unversioned
// definition for a versioned reference), so every route through the dynamic linker ends
// in our own code. Instead we read the exported symbol table of the first object after us
// in load order that defines the name (what RTLD_NEXT would find), from the loader's list
// (walk_loaded_objects) and the object's GNU hash table. Resolved once, lazily; safe to race
// (the answer is the same).
// The same table lookup finds a name exported by any loaded library (real_functions.cpp's last
// resort: a runtime loaded as a dependency of a library dlopened RTLD_LOCAL).
#pragma once

struct link_map;  // <link.h>

namespace ferrum_replay::shim {

using DlsymFunction = void *(*)(void *, const char *);
using DlvsymFunction = void *(*)(void *, const char *, const char *);
using DlopenFunction = void *(*)(const char *, int);
using DlcloseFunction = int (*)(void *);

DlsymFunction libc_dlsym();
DlvsymFunction libc_dlvsym();
DlopenFunction libc_dlopen();
DlcloseFunction libc_dlclose();

// The C library's non-local jumps, which the shim exports too (hooks/jump_hooks.cpp).
using JumpFunction = void (*)(void *, int);
enum class LibcJump { longjmp, underscore_longjmp, siglongjmp, longjmp_chk };
JumpFunction libc_jump(LibcJump which);

// The one way the shim reads which objects are loaded: the loader's own list (the link_map
// chain that dl_iterate_phdr walks), read directly — inside dl_iterate_phdr only to hold its
// lock, and only where asked (below). dl_iterate_phdr holds the loader's write lock
// (dl_load_write_lock) for its whole walk, and glibc (2.36) does not reset that lock in a fork()
// child: a child forked while another thread of its parent
// held it (in dl_iterate_phdr — C++ unwinding, a sanitizer — or loading or unloading a
// library) waits for it for ever. A bare program's child takes it only to load or unload a
// library; none of the shim's paths may take it where the program would not (F51, F151–F153).
// Read-only and calling nothing. An object that another thread unloads while a walk reads it
// would be read after its memory went back (a crash): dlclose takes it off the list under that
// write lock, and unmaps it after. So where the lock cannot have been left held by a thread the
// process lacks — the process that loaded the shim (support/loading_process.hpp): pass
// `under_loader_lock` — the walk runs inside dl_iterate_phdr, only as the lock's holder: no
// object leaves the list while it is read. In a fork child it reads the list as it is (a thread
// of the child's own unloading at that moment is the walk's risk, where the lock could wait for
// ever). Every walk is at resolution time (once per name or call site) or a diagnostic, never
// on a launch. Known limit of the locked walk: a child another thread forks meanwhile inherits
// the lock held (as during the program's own dl_iterate_phdr) and waits at its first load of a
// library.
//
// Which objects, in load order: `after_shim`: those after the shim (what RTLD_NEXT searches; in
// unit tests, after the main program); `all`: every object of the shim's namespace (what
// dl_iterate_phdr visits when the shim calls it: its caller's namespace). `visit` is called
// with each (a `struct link_map *`) and its `context`; true stops the walk.
enum class LoadedObjects { after_shim, all };
void walk_loaded_objects(LoadedObjects which, bool (*visit)(const link_map *, void *),
                         void *context, bool under_loader_lock = false);

// The definition of `name` in the first object after the shim (load order) that exports it,
// another copy of the shim skipped (common/shim_identity.hpp); null if none. Exposed for tests.
void *find_definition_after_shim(const char *name);

// Where another copy of the shim lies (its link_map's name; common/shim_identity.hpp) that comes
// before this one in the global scope — the program's launches reach it first — or null. Copies
// loaded RTLD_LOCAL are not in it: one such, never reached by a launch, made the shim step aside
// and nothing was named (review CQ-2). Asks the loader (RTLD_DEFAULT lookups).
const char *shim_copy_before_this_one();
// Where the first other copy of the shim in load order lies, in any scope; null if none. For a
// diagnostic: pass `under_loader_lock` as walk_loaded_objects says.
const char *another_shim_copy(bool under_loader_lock);
// Whether `object` (a link_map) is a copy of the shim other than this one.
bool is_other_shim_copy(const link_map *object);

// The definition of `name` (a function) exported by the first loaded object in load order
// (the shim's namespace), that is not the shim (nor another copy of it); null if none. `others`:
// how many other objects export a different definition of it. Resolution time only
// (walk_loaded_objects, which says when to pass `under_loader_lock`).
void *find_definition_in_any_object(const char *name, int *others, bool under_loader_lock);

}  // namespace ferrum_replay::shim
