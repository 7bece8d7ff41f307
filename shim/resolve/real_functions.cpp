#include "resolve/real_functions.hpp"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "errno_kept.hpp"
#include "loader_error.hpp"
#include "resolve/libc_symbols.hpp"
#include "support/loading_process.hpp"
#include "support/log.hpp"

namespace ferrum_replay::shim {
namespace {

// The file name of the library that owns the real driver, copied. No handle is kept: a
// reference of ours would keep the driver loaded after the program's own dlclose. A lookup
// takes a dlopen(RTLD_NOLOAD) reference for the time of one dlsym only. (GPU timing, once on,
// keeps one for good: keep_loaded.)
char g_driver_path[4096];
std::atomic<int> g_driver_path_state{0};  // 0: unknown, 1: being written, 2: known

// Every RealFunctionSlot that has kept a definition, with the library of the definition, for
// forget_unloaded(): each slot is listed at its first definition and never leaves (the slots
// are the shim's own globals, a few dozen). Zeros until then: no relocation, no page written
// at load.
struct KeptDefinition {
  std::atomic<RealFunctionSlot *> slot;
  std::atomic<const void *> library;  // the link_map of the library its definition lies in
  std::atomic<bool> per_caller;       // no definition in a scope of ours: each caller's own
  // What a lookup handed out (RealFunctionSlot::provide), and the link_map it lies in: a
  // fallback only, for a caller that finds no definition by any other route (F158).
  std::atomic<void *> provided;
  std::atomic<const void *> provided_library;
};
constexpr int kMaxKept = 128;
KeptDefinition g_kept[kMaxKept];
std::atomic<int> g_kept_count{0};

// The table's entry of `slot`: found, or claimed (null when the table is full).
KeptDefinition *kept_entry(RealFunctionSlot *slot) {
  const int count = g_kept_count.load(std::memory_order_acquire);
  for (int i = 0; i < count && i < kMaxKept; ++i)
    if (g_kept[i].slot.load(std::memory_order_acquire) == slot) return &g_kept[i];
  const int index = g_kept_count.fetch_add(1, std::memory_order_acq_rel);
  if (index >= kMaxKept) return nullptr;
  g_kept[index].slot.store(slot, std::memory_order_release);
  return &g_kept[index];
}

// Per-caller definitions (KeptDefinition::per_caller), by call site: open addressing, a few
// probes from the hash of (slot, return address); lock-free to read. Emptied whenever the
// loader unloads something (forget_unloaded). A call site that finds no room is looked up in
// the loader at each call: correct, slower.
struct CallerDefinition {
  std::atomic<const void *> caller;  // a return address; null: free
  std::atomic<RealFunctionSlot *> slot;
  std::atomic<void *> function;
  // The link_maps of the libraries the caller and the function lie in, as found: the entry
  // stands while both are still there (forget_unloaded).
  std::atomic<const void *> caller_library;
  std::atomic<const void *> library;
};
constexpr uint32_t kCallerBits = 9;  // 512 call sites of hooked functions
constexpr uint32_t kCallerProbes = 8;
CallerDefinition g_callers[1u << kCallerBits];

// Whether a per-caller definition has been stored since the table was last emptied: most
// processes never store one, and their dlopen need not read the table.
std::atomic<bool> g_callers_used{false};

uint32_t caller_home(const RealFunctionSlot *slot, const void *caller) {
  const uint64_t key = reinterpret_cast<uintptr_t>(caller) ^
                       (reinterpret_cast<uintptr_t>(slot) * 0x9E3779B97F4A7C15ull);
  return static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - kCallerBits));
}

// The definition of `name` in the scope of the loaded library at `path` (the library and its
// dependencies, in its order); null when none there is not ours. RTLD_NOLOAD: only while the
// library is loaded, never a new load; the reference is dropped at once (the program may
// unload it whenever it likes).
void *definition_in_scope_of(const char *path, const char *name) {
  DlopenFunction open = libc_dlopen();
  DlsymFunction lookup = libc_dlsym();
  DlcloseFunction close = libc_dlclose();
  if (!open || !lookup || !close) return nullptr;
  void *handle = open(path, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return nullptr;
  void *found = lookup(handle, name);
  close(handle);
  return found && !is_own_address(found) ? found : nullptr;
}

#ifdef DLFO_STRUCT_HAS_EH_DBASE  // <dlfcn.h> of glibc 2.35 on: _dl_find_object
using FindObjectFunction = int (*)(void *, dl_find_object *);
std::atomic<FindObjectFunction> g_find_object{nullptr};
std::atomic<bool> g_find_object_looked_up{false};

// glibc's _dl_find_object where the C library has one (2.35 on), else null. Looked up, not
// linked: a reference would make the shim depend on ld.so by name (docs/performance.md,
// "Start-up") and on glibc 2.35.
FindObjectFunction find_object_function() {
  if (g_find_object_looked_up.load(std::memory_order_acquire))
    return g_find_object.load(std::memory_order_acquire);
  const common::ErrnoKept errno_kept;  // errno_kept.hpp
  FindObjectFunction found = nullptr;
  if (DlsymFunction lookup = libc_dlsym()) {
    const common::LoaderErrorCleared loader_error;  // loader_error.hpp: an older C library
    found = reinterpret_cast<FindObjectFunction>(lookup(RTLD_DEFAULT, "_dl_find_object"));
  }
  g_find_object.store(found, std::memory_order_release);
  g_find_object_looked_up.store(true, std::memory_order_release);
  return found;
}
#endif

// The link_map of the library `address` lies in; null when none does. Asked at each dlopen and
// dlclose of a process that kept a real function, for each definition kept (forget_unloaded):
// _dl_find_object answers without a lock and without reading a symbol table; else dladdr1
// (the loader's dl_load_lock, which glibc resets in a fork child — never its write lock).
const void *library_of(const void *address) {
  if (!address) return nullptr;
#ifdef DLFO_STRUCT_HAS_EH_DBASE
  if (FindObjectFunction find = find_object_function()) {
    dl_find_object object{};
    return find(const_cast<void *>(address), &object) == 0 ? object.dlfo_link_map : nullptr;
  }
#endif
  Dl_info owner{};
  link_map *map = nullptr;
  if (!dladdr1(address, &owner, reinterpret_cast<void **>(&map), RTLD_DL_LINKMAP)) return nullptr;
  return map;
}

const void *own_base() {
  static std::atomic<const void *> base{nullptr};
  const void *known = base.load(std::memory_order_acquire);
  if (!known) {
    Dl_info self{};
    if (dladdr(reinterpret_cast<void *>(&is_own_address), &self)) known = self.dli_fbase;
    base.store(known, std::memory_order_release);
  }
  return known;
}

}  // namespace

bool is_own_address(const void *address) {
  Dl_info owner{};
  if (!address || !dladdr(address, &owner)) return false;
  return owner.dli_fbase == own_base();
}

void note_driver_library(const void *real_driver_function) {
  if (g_driver_path_state.load(std::memory_order_acquire) != 0) return;
  Dl_info owner{};
  // The main program has an empty name: nothing to open by name there.
  if (!dladdr(real_driver_function, &owner) || !owner.dli_fname || !owner.dli_fname[0]) return;
  const size_t length = strlen(owner.dli_fname);
  if (length >= sizeof g_driver_path) return;
  int expected = 0;
  if (!g_driver_path_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
  memcpy(g_driver_path, owner.dli_fname, length + 1);
  g_driver_path_state.store(2, std::memory_order_release);
  log_line(LogLevel::debug, "driver library: '%s'", message_value(g_driver_path).text);
}

bool keep_loaded(const void *function) {
  Dl_info owner{};
  link_map *map = nullptr;
  if (!function || !dladdr1(function, &owner, reinterpret_cast<void **>(&map), RTLD_DL_LINKMAP) ||
      !map)
    return false;
  if (!map->l_name || !map->l_name[0]) return true;  // the main program: never unloaded
  if (!owner.dli_fname || !owner.dli_fname[0]) return false;
  DlopenFunction libc_open = libc_dlopen();
  if (!libc_open) return false;
  const common::LoaderErrorCleared loader_error;  // loader_error.hpp: a NOLOAD that fails
  void *handle = libc_open(owner.dli_fname, RTLD_NOLOAD | RTLD_LAZY | RTLD_LOCAL);
  if (!handle) return false;
  // The same path may name another instance (the function's own is in another namespace).
  link_map *opened = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &opened) != 0 || opened != map) {
    dlclose(handle);
    return false;
  }
  log_line(LogLevel::debug, "'%s' kept loaded", message_value(owner.dli_fname).text);
  return true;  // the handle is never closed
}

bool any_real_function_kept() {
  return g_kept_count.load(std::memory_order_acquire) != 0;
}

bool is_loaded_address(const void *address) {
  return library_of(address) != nullptr;
}

namespace {

// The library of every entry of `slot` (two threads listing it at once make two).
void note_library(const RealFunctionSlot *slot, const void *library) {
  const int count = g_kept_count.load(std::memory_order_acquire);
  for (int i = 0; i < count && i < kMaxKept; ++i)
    if (g_kept[i].slot.load(std::memory_order_acquire) == slot)
      g_kept[i].library.store(library, std::memory_order_release);
}

// The definition of `name` in the scope of the library `caller` lies in (what that library's
// call by name would reach without us); null when none there is not ours.
void *scope_definition(const char *name, const void *caller) {
  Dl_info owner{};
  link_map *map = nullptr;
  if (!caller || !dladdr1(caller, &owner, reinterpret_cast<void **>(&map), RTLD_DL_LINKMAP) ||
      !map || !map->l_name || !map->l_name[0])
    return nullptr;  // the main program's scope is the global one: searched already
  return definition_in_scope_of(map->l_name, name);
}

}  // namespace

void RealFunctionSlot::keep(void *address) {
  (void)kept_entry(this);
  note_library(this, library_of(address));
  function_.store(address, std::memory_order_release);
}

void *RealFunctionSlot::cached_for(const void *caller) const {
  if (!caller) return nullptr;
  const uint32_t home = caller_home(this, caller);
  constexpr uint32_t kMask = (1u << kCallerBits) - 1;
  for (uint32_t probe = 0; probe < kCallerProbes; ++probe) {
    CallerDefinition &entry = g_callers[(home + probe) & kMask];
    const void *seen = entry.caller.load(std::memory_order_acquire);
    if (!seen) break;
    if (seen == caller && entry.slot.load(std::memory_order_acquire) == this)
      if (void *function = entry.function.load(std::memory_order_acquire)) return function;
  }
  return nullptr;
}

void *RealFunctionSlot::definition_for(const void *caller) {
  if (void *function = cached_for(caller)) return function;
  const uint32_t home = caller_home(this, caller);
  constexpr uint32_t kMask = (1u << kCallerBits) - 1;
  // This call site's first call (or no room for it): its own scope's definition, else the
  // driver library's own, else the first loaded library's, else what a lookup handed out.
  const common::ErrnoKept errno_kept;             // errno_kept.hpp
  const common::LoaderErrorCleared loader_error;  // loader_error.hpp: a NOLOAD that fails
  void *function = scope_definition(name_, caller);
  if (!function) function = definition_in_driver_library(name_);
  if (!function) function = find_definition_in_any_object(name_, nullptr, in_loading_process());
  if (!function) function = provided();
  if (!function || !caller) return function;
  for (uint32_t probe = 0; probe < kCallerProbes; ++probe) {
    CallerDefinition &entry = g_callers[(home + probe) & kMask];
    const void *free = nullptr;
    if (entry.caller.compare_exchange_strong(free, caller, std::memory_order_acq_rel)) {
      entry.caller_library.store(library_of(caller), std::memory_order_release);
      entry.library.store(library_of(function), std::memory_order_release);
      entry.slot.store(this, std::memory_order_release);
      entry.function.store(function, std::memory_order_release);
      g_callers_used.store(true, std::memory_order_release);
      break;
    }
  }
  return function;
}

// The order is the rule of F158: what the program's own binding reaches (RTLD_NEXT) first, then
// the caller's own scope; what any lookup taught us (the driver library a handle's lookup found,
// a lookup's answer) only where neither has a definition. A value learnt on one route (a
// dlsym on some handle, perhaps another instance of the driver) never answers another (a call
// by name).
void *RealFunctionSlot::resolve(const void *caller) {
  // A call site met before, in per-caller mode: lock-free, no scan.
  if (void *function = cached_for(caller)) return function;
  KeptDefinition *entry = kept_entry(this);
  if (entry && entry->per_caller.load(std::memory_order_acquire)) return definition_for(caller);
  void *function = find_next_definition(name_);
  if (function) {
    keep(function);
    return function;
  }
  // The shim's own calls (no caller: graph_content.cpp) have no scope of their own: the
  // driver library's definition, kept (the driver the runtime opened RTLD_LOCAL).
  if (!caller) {
    function = definition_in_driver_library(name_);
    if (function) {
      keep(function);
      return function;
    }
  }
  // In no scope of ours: a library dlopened RTLD_LOCAL brought it. Each caller's own from now
  // on (a second copy of the runtime, brought by another such library, may come later).
  int others = 0;
  if (!find_definition_in_any_object(name_, &others, in_loading_process())) return provided();
  if (entry) entry->per_caller.store(true, std::memory_order_release);
  log_line(LogLevel::debug, "real %s: only in libraries loaded RTLD_LOCAL (%d): per caller", name_,
           others + 1);
  return definition_for(caller);
}

void RealFunctionSlot::provide(void *address) {
  if (!address || is_own_address(address)) return;
  note_driver_library(address);
  KeptDefinition *entry = kept_entry(this);
  if (!entry) return;
  void *expected = nullptr;
  if (entry->provided.compare_exchange_strong(expected, address, std::memory_order_acq_rel))
    entry->provided_library.store(library_of(address), std::memory_order_release);
}

void *RealFunctionSlot::provided() {
  KeptDefinition *entry = kept_entry(this);
  return entry ? entry->provided.load(std::memory_order_acquire) : nullptr;
}

namespace {

// Whether each library a definition was found in is still where it was, asked of the loader once
// per library (most definitions lie in the driver): forget_unloaded runs at every dlopen and
// dlclose of a process that kept one.
class LibrariesStillThere {
 public:
  // Whether `address`, found in `library` (a link_map; null: none known), still lies in it.
  bool holds(const void *library, const void *address) {
    if (!library) return library_of(address) == nullptr;
    for (int i = 0; i < count_; ++i)
      if (known_[i].library == library) return known_[i].there;
    const bool there = library_of(address) == library;
    if (count_ < kKnown) known_[count_++] = {library, there};
    return there;
  }

 private:
  static constexpr int kKnown = 8;
  struct Known {
    const void *library;
    bool there;
  };
  Known known_[kKnown];
  int count_ = 0;
};

}  // namespace

void forget_unloaded() {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: dladdr may set it
  LibrariesStillThere libraries;
  const int count = g_kept_count.load(std::memory_order_acquire);
  for (int i = 0; i < count && i < kMaxKept; ++i) {
    RealFunctionSlot *slot = g_kept[i].slot.load(std::memory_order_acquire);
    if (void *provided = g_kept[i].provided.load(std::memory_order_acquire))
      if (!libraries.holds(g_kept[i].provided_library.load(std::memory_order_acquire), provided))
        g_kept[i].provided.store(nullptr, std::memory_order_release);
    void *function = slot ? slot->function_.load(std::memory_order_acquire) : nullptr;
    if (!function) continue;
    // Gone, or another library now lies where it was: found anew at the next call.
    if (!libraries.holds(g_kept[i].library.load(std::memory_order_acquire), function)) {
      slot->function_.store(nullptr, std::memory_order_release);
      log_line(LogLevel::debug, "real %s: its library was unloaded; forgotten", slot->name_);
    }
  }
  // Per-caller definitions: when the library of one's caller or of its definition is gone,
  // all are found anew (each at its call site's next call). All, not that one: the table's
  // probe chains have no holes.
  if (!g_callers_used.load(std::memory_order_acquire)) return;
  bool any_gone = false;
  for (const CallerDefinition &entry : g_callers) {
    const void *caller = entry.caller.load(std::memory_order_acquire);
    void *function = entry.function.load(std::memory_order_acquire);
    if (!caller || !function) continue;  // free, or being filled in (its libraries just read)
    if (!libraries.holds(entry.caller_library.load(std::memory_order_acquire), caller) ||
        !libraries.holds(entry.library.load(std::memory_order_acquire), function)) {
      any_gone = true;
      break;
    }
  }
  if (!any_gone) return;
  g_callers_used.store(false, std::memory_order_release);
  for (CallerDefinition &entry : g_callers) {
    if (!entry.caller.load(std::memory_order_acquire)) continue;
    entry.function.store(nullptr, std::memory_order_release);
    entry.slot.store(nullptr, std::memory_order_release);
    entry.caller.store(nullptr, std::memory_order_release);
  }
}

void *find_next_definition(const char *name) {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: the loader's lookups, a log line
  DlsymFunction libc_lookup = libc_dlsym();
  if (!libc_lookup) return nullptr;
  const common::LoaderErrorCleared loader_error;  // loader_error.hpp: RTLD_NEXT may miss
  // Called from here, libc's dlsym resolves RTLD_NEXT relative to the shim.
  void *address = libc_lookup(RTLD_NEXT, name);
  if (address && is_own_address(address)) address = nullptr;
  // Another copy of the shim after this one — one built before copies stepped aside keeps
  // naming the replays it is handed: every replay was two nested ranges (review CP-1). Its
  // export is an interposer like ours, and what comes after it in the global scope cannot be
  // asked for: no definition here, so each caller gets its own scope's (RealFunctionSlot::
  // resolve), as where the driver is only in libraries loaded RTLD_LOCAL. The first definition
  // in load order instead was a plugin's private runtime, kept for every caller: another
  // plugin's calls ran in it (review CQ-3).
  if (address && is_other_shim_copy(static_cast<const link_map *>(library_of(address)))) {
    log_line(LogLevel::debug, "real %s: another copy of the shim's (%p): per caller", name,
             address);
    return nullptr;
  }
  log_line(LogLevel::debug, "real %s resolved to %p", name, address);
  return address;
}

void *definition_in_driver_library(const char *name) {
  if (g_driver_path_state.load(std::memory_order_acquire) != 2) return nullptr;
  const common::ErrnoKept errno_kept;             // errno_kept.hpp
  const common::LoaderErrorCleared loader_error;  // loader_error.hpp: a NOLOAD that fails
  return definition_in_scope_of(g_driver_path, name);
}

}  // namespace ferrum_replay::shim
