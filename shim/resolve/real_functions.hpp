// Resolution of the real functions behind the shim's exports and wrappers. Lazy (first
// call, never at load time), thread-safe (racing resolutions find the same address; the
// first non-null result is cached for the life of the process) and lock-free on the hot path.
//
// A real function is found, in order: by dlsym(RTLD_NEXT) (what the program binds to without
// us); for the shim's own calls (no caller), from the library that owns the real driver (the
// runtime opens libcuda RTLD_LOCAL, out of RTLD_NEXT's reach); or, for a runtime or driver
// loaded as the dependency of a library dlopened RTLD_LOCAL (a Python extension module,
// ctypes.CDLL: in no scope of ours, yet that library's calls by name reach our exports first),
// per caller: the definition the calling library's own scope holds — two such libraries may
// each bring a copy of the runtime, and each must reach its own (cached per call site,
// lock-free; a lookup in the loader only at a call site's first call) — else the driver
// library's, else the first loaded library's, else what a lookup handed out (provide(): the
// driver's cuGetProcAddress answer on a handle). What a lookup taught is a fallback only: the
// handle may be another instance's (a copy at another path, dlmopen), and the program's own
// call by name must reach what it binds to (F158). Never one of the shim's own functions:
// that would be an infinite loop.
//
// The library a definition lies in may be unloaded (the program dlcloses the driver, or a
// plugin and the runtime it brought) and another loaded in its place: a definition found once
// is forgotten when its library goes (forget_unloaded(), from our dlclose and dlopen), and found
// again at the next call.
#pragma once

#include <atomic>

namespace ferrum_replay::shim {

// True when `address` lies in the shim itself (one of our exports or wrappers). Uses dladdr:
// for resolution time only, never the launch path.
bool is_own_address(const void *address);

// Remembers the library that defines `real_driver_function` (a genuine driver entry point)
// as the place to resolve other driver functions from: its file name only, never a handle (the
// program must stay able to unload the driver; GPU timing alone keeps it loaded, keep_loaded).
void note_driver_library(const void *real_driver_function);

// Takes a reference of the caller's own to the library that defines `function` (dladdr's path,
// opened RTLD_NOLOAD: that very instance, never a new load), never dropped: the library stays
// loaded whatever the program dlcloses. Only GPU timing asks (gpu_timing.cpp: its events may be
// in flight whenever the program unloads the driver). True when held, or when no reference is
// needed (the main program); false when the instance cannot be opened by its path (loaded with
// dlmopen into another namespace). Resolution time only, never the launch path.
bool keep_loaded(const void *function);

// The next definition of `name` after the shim (dlsym(RTLD_NEXT): what the program binds to
// without us); never ours. Null when none is — a later call tries again (or, with a caller, its
// own scope's).
void *find_next_definition(const char *name);

// The definition of `name` in the scope of the driver library a lookup noted
// (note_driver_library); null when none is noted or loaded. A fallback only (F158).
void *definition_in_driver_library(const char *name);

// Whether `address` lies in a loaded library (or the program): a definition found earlier whose
// library has been unloaded no longer does. Resolution time only (dladdr).
bool is_loaded_address(const void *address);

// What every RealFunction keeps, whatever its type: its name and the definition found. (The
// library each definition lies in is noted apart, in a table of real_functions.cpp: a slot
// stays two words, as the loader relocates each slot's name in every process.)
class RealFunctionSlot {
 public:
  constexpr explicit RealFunctionSlot(const char *name) : name_(name) {}
  RealFunctionSlot(const RealFunctionSlot &) = delete;
  RealFunctionSlot &operator=(const RealFunctionSlot &) = delete;
  const char *name() const { return name_; }

 protected:
  // find_next_definition, kept; else `caller`'s scope's definition (per caller, never kept here:
  // another caller may have another); what provide() taught only where neither has one (F158);
  // null when none.
  void *resolve(const void *caller);
  // A lookup's genuine answer (the first one): a fallback for callers that find no definition by
  // RTLD_NEXT nor in their own scope (the driver held only by a private RTLD_LOCAL handle in
  // another namespace) — never ahead of them: the handle may be another instance's.
  void provide(void *address);
  void *provided();
  std::atomic<void *> function_{nullptr};

 private:
  friend void forget_unloaded();
  // `address` kept; the library it lies in noted for forget_unloaded.
  void keep(void *address);
  void *definition_for(const void *caller);    // per-caller mode: `caller`'s scope's definition
  void *cached_for(const void *caller) const;  // ... as found at that call site before; or null
  const char *name_;
};

// Whether any real function has been found yet (false in a process that never reached CUDA).
bool any_real_function_kept();

// After each dlclose of the program's and before each dlopen: every definition whose library is
// gone (or is another library now) is forgotten (the next call finds the definition anew). Asks
// the loader only where each kept definition lies (no dl_iterate_phdr: it may run in a fork
// child, libc_symbols.hpp). Off every launch path.
void forget_unloaded();

template <typename Function>
class RealFunction : public RealFunctionSlot {
 public:
  constexpr explicit RealFunction(const char *name) : RealFunctionSlot(name) {}

  // `caller`: a return address in the code that called our export by name (null: the first
  // loaded library's definition stands for a caller's own).
  Function get(const void *caller = nullptr) {
    void *function = function_.load(std::memory_order_acquire);
    return reinterpret_cast<Function>(__builtin_expect(function != nullptr, 1) ? function
                                                                               : resolve(caller));
  }
  // The definition found so far, without resolving one: null until a get() or provide() found it.
  Function resolved() const {
    return reinterpret_cast<Function>(function_.load(std::memory_order_acquire));
  }
  void provide(void *address) { RealFunctionSlot::provide(address); }
};

}  // namespace ferrum_replay::shim
