#include "resolve/real_functions.hpp"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "errno_kept.hpp"
#include "loader_error.hpp"
#include "resolve/libc_symbols.hpp"
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

// The link_map of the library `address` lies in; null when none does.
const void *library_of(const void *address) {
  Dl_info owner{};
  link_map *map = nullptr;
  if (!address || !dladdr1(address, &owner, reinterpret_cast<void **>(&map), RTLD_DL_LINKMAP))
    return nullptr;
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

void RealFunctionSlot::keep(void *address, bool if_none) {
  KeptDefinition *entry = kept_entry(this);
  const void *library = library_of(address);
  if (if_none) {
    void *expected = nullptr;
    if (!function_.compare_exchange_strong(expected, address, std::memory_order_acq_rel)) return;
    if (entry) entry->library.store(library, std::memory_order_release);
  } else {
    if (entry) entry->library.store(library, std::memory_order_release);
    function_.store(address, std::memory_order_release);
  }
}

void *RealFunctionSlot::resolve() {
  void *function = find_next_definition(name_);
  if (function) keep(function, false);
  return function;
}

void RealFunctionSlot::provide(void *address) {
  if (!address || is_own_address(address)) return;
  keep(address, true);
  note_driver_library(address);
}

void forget_unloaded() {
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: dladdr may set it
  const int count = g_kept_count.load(std::memory_order_acquire);
  for (int i = 0; i < count && i < kMaxKept; ++i) {
    RealFunctionSlot *slot = g_kept[i].slot.load(std::memory_order_acquire);
    void *function = slot ? slot->function_.load(std::memory_order_acquire) : nullptr;
    if (!function) continue;
    // Gone, or another library now lies where it was: found anew at the next call.
    if (library_of(function) != g_kept[i].library.load(std::memory_order_acquire)) {
      slot->function_.store(nullptr, std::memory_order_release);
      log_line(LogLevel::debug, "real %s: its library was unloaded; forgotten", slot->name_);
    }
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
  if (!address && g_driver_path_state.load(std::memory_order_acquire) == 2) {
    // RTLD_NOLOAD: only while the driver is still loaded, never a new load; the reference is
    // dropped at once (the program may unload the driver whenever it likes).
    DlopenFunction libc_open = libc_dlopen();
    if (void *driver = libc_open ? libc_open(g_driver_path, RTLD_LAZY | RTLD_NOLOAD) : nullptr) {
      address = libc_lookup(driver, name);
      if (address && is_own_address(address)) address = nullptr;
      dlclose(driver);
    }
  }
  if (!address) {
    // Loaded in no scope of ours: as the dependency of a library dlopened RTLD_LOCAL, whose
    // calls by name reach our exports first. With several such libraries the first loaded
    // answers every caller (a caller's own scope is not known here): said when logs are asked.
    int others = 0;
    address = find_definition_in_any_object(name, &others);
    if (address && others > 0)
      log_line(LogLevel::error,
               "%d libraries outside the global scope export %s: calls by name go to the first "
               "loaded's (%p)",
               others + 1, name, address);
  }
  log_line(LogLevel::debug, "real %s resolved to %p", name, address);
  return address;
}

}  // namespace ferrum_replay::shim
