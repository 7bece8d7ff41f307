#include "resolve/libc_symbols.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

#include <atomic>

#include "elf_exports.hpp"
#include "shim_identity.hpp"

namespace ferrum_replay::shim {

using common::DynamicTables;
using common::lookup_gnu_hash;
using common::read_dynamic_tables;

namespace {

// The loader's record of the object holding the shim's code (the shim, or the program in
// unit tests). dladdr1 is not one of our exports and no sanitizer intercepts it.
const link_map *find_own_object() {
  Dl_info self{};
  link_map *object = nullptr;
  if (!dladdr1(reinterpret_cast<void *>(&find_own_object), &self,
               reinterpret_cast<void **>(&object), RTLD_DL_LINKMAP))
    return nullptr;
  return object;
}

// Noted at load, by a constructor: dladdr1 takes the loader's main lock, and the first use of
// the shim's own object may come where that lock must not be waited for — the process's first
// non-local jump (hooks/jump_hooks.cpp), from a signal handler, inside the program's own
// dl_iterate_phdr while another thread is in dlopen: a deadlock, in any process (S1). Beside the
// pid of loading_process.cpp, in the page the loader writes at start-up anyway.
[[gnu::section(".data.ferrum_replay_phase")]] const link_map *g_own_object = nullptr;

// The loader's own record is also where lazy binding keeps it: the loader writes the object's
// link_map into the second word of the object's PLT GOT (DT_PLTGOT; x86-64 and AArch64 alike)
// for its resolver to find. Read there first — a short walk of our own dynamic section and one
// load, each checked: the GOT within our own object (the loader relocates DT_PLTGOT in place on
// both), the link_map's dynamic section ours — since dladdr1 scans the shim's symbol table and
// cost about 4 us of every process's start-up here. Where lazy binding is off (LD_BIND_NOW)
// the word is unset (0 in the file) and dladdr1 answers.
extern "C" ElfW(Dyn) _DYNAMIC[] __attribute__((visibility("hidden")));

const link_map *own_object_from_plt_got() {
  const uintptr_t dynamic = reinterpret_cast<uintptr_t>(_DYNAMIC);
  constexpr uintptr_t kWithinObject = 1u << 24;  // the GOT lies in our own writable segment
  for (const ElfW(Dyn) *entry = _DYNAMIC; entry->d_tag != DT_NULL; ++entry) {
    if (entry->d_tag != DT_PLTGOT) continue;
    const uintptr_t got = entry->d_un.d_ptr;
    const uintptr_t distance = got > dynamic ? got - dynamic : dynamic - got;
    if (distance >= kWithinObject) return nullptr;  // not relocated in place: a file offset
    const link_map *own = reinterpret_cast<const link_map *const *>(got)[1];
    return own && own->l_ld == _DYNAMIC ? own : nullptr;
  }
  return nullptr;
}

__attribute__((constructor)) void note_own_object() {
  const link_map *own = own_object_from_plt_got();
  if (!own) own = find_own_object();
  __atomic_store_n(&g_own_object, own, __ATOMIC_RELEASE);
}

// Before the constructor has run (a sanitizer's initialisation resolving its interceptors
// through our dlsym, a linked library's constructor): found now.
const link_map *own_object() {
  const link_map *own = __atomic_load_n(&g_own_object, __ATOMIC_ACQUIRE);
  return own ? own : find_own_object();
}

template <typename Function>
Function resolve_once(std::atomic<Function> &cache, const char *name) {
  Function function = cache.load(std::memory_order_acquire);
  if (!function) {
    void *found = find_definition_after_shim(name);
    // Nothing after us: the shim was dlopened (its naming API, RTLD_GLOBAL) rather than
    // preloaded, and the C library lies before it. Read without the loader's lock: this may
    // run inside a sanitizer's initialisation (above), where dl_iterate_phdr is not callable.
    if (!found) found = find_definition_in_any_object(name, nullptr, false);
    function = reinterpret_cast<Function>(found);
    if (function) cache.store(function, std::memory_order_release);
  }
  return function;
}

std::atomic<DlsymFunction> g_dlsym{nullptr};
std::atomic<DlvsymFunction> g_dlvsym{nullptr};
std::atomic<DlopenFunction> g_dlopen{nullptr};
std::atomic<DlcloseFunction> g_dlclose{nullptr};

}  // namespace

namespace {

struct ObjectWalk {
  LoadedObjects which;
  bool (*visit)(const link_map *, void *);
  void *context;
};

void walk_list(const ObjectWalk &walk) {
  const link_map *own = own_object();
  const link_map *object = own;
  if (walk.which == LoadedObjects::after_shim)
    object = own ? own->l_next : nullptr;
  else  // the head of the shim's namespace: each object is linked to the one before it
    while (object && object->l_prev) object = object->l_prev;
  for (; object; object = object->l_next)
    if (walk.visit(object, walk.context)) return;
}

// Called once, holding the loader's write lock: the whole walk, then stop.
int walk_holding_loader_lock(dl_phdr_info *, size_t, void *walk) {
  walk_list(*static_cast<const ObjectWalk *>(walk));
  return 1;
}

}  // namespace

void walk_loaded_objects(LoadedObjects which, bool (*visit)(const link_map *, void *),
                         void *context, bool under_loader_lock) {
  const ObjectWalk walk{which, visit, context};
  if (under_loader_lock)
    dl_iterate_phdr(walk_holding_loader_lock, const_cast<ObjectWalk *>(&walk));
  else
    walk_list(walk);
}

namespace {

struct NameSearch {
  const char *name;
  void *found;
};

// common/shim_identity.hpp's rule, on an object's own export table.
bool is_shim_copy(const link_map *object, const DynamicTables &tables) {
  return common::is_shim_copy(
      [&](const char *name) { return lookup_gnu_hash(object->l_addr, tables, name) != nullptr; });
}

bool search_after_shim(const link_map *object, void *data) {
  NameSearch &search = *static_cast<NameSearch *>(data);
  DynamicTables tables;
  if (!read_dynamic_tables(object->l_addr, object->l_ld, tables)) return false;
  // Another copy of the shim after this one: its exports (dlsym, the launches) are interposers
  // like ours, never the C library's or the driver's own (review CP-1).
  void *found = lookup_gnu_hash(object->l_addr, tables, search.name);
  if (!found || is_shim_copy(object, tables)) return false;
  search.found = found;
  return true;
}

struct OtherCopySearch {
  const link_map *own;
  const link_map *other = nullptr;
};

bool find_other_shim_copy(const link_map *object, void *data) {
  OtherCopySearch &search = *static_cast<OtherCopySearch *>(data);
  if (object == search.own) return false;
  DynamicTables tables;
  if (!read_dynamic_tables(object->l_addr, object->l_ld, tables) || !is_shim_copy(object, tables))
    return false;
  search.other = object;
  return true;
}

}  // namespace

void *find_definition_after_shim(const char *name) {
  // When the shim's code is linked into a program (unit tests), "after the shim" means after
  // the main program.
  NameSearch search{name, nullptr};
  walk_loaded_objects(LoadedObjects::after_shim, search_after_shim, &search);
  return search.found;
}

namespace {

struct ExportSearch {
  const char *name;
  const link_map *own;
  void *first = nullptr;
  int others = 0;  // distinct definitions after the first
};

bool search_object(const link_map *object, void *data) {
  ExportSearch &search = *static_cast<ExportSearch *>(data);
  if (object == search.own) return false;
  DynamicTables tables;
  if (!read_dynamic_tables(object->l_addr, object->l_ld, tables)) return false;
  void *found = lookup_gnu_hash(object->l_addr, tables, search.name);
  if (!found) return false;
  // Another copy of ferrum-replay (preloaded too, or loaded by a program for its naming API from
  // another path): its exports are interposers like ours, never the real function.
  if (is_shim_copy(object, tables)) return false;
  if (!search.first)
    search.first = found;
  else if (found != search.first)
    ++search.others;
  return false;
}

}  // namespace

const char *shim_copy_before_this_one() {
  DlsymFunction lookup = libc_dlsym();
  if (!lookup) return nullptr;
  // The global scope's first definitions (what the program's launches reach first): of the
  // marker (copies from the marker on), and of the naming API (every copy exports it; a
  // program's own fallback of it is none: the rule says so).
  for (const char *name : {common::kShimMarker, common::kOlderShimExports[0]}) {
    const link_map *object = common::shim_copy_answering(lookup, name);
    if (object && object != own_object()) return object->l_name ? object->l_name : "";
  }
  return nullptr;
}

const char *another_shim_copy(bool under_loader_lock) {
  OtherCopySearch search{own_object()};
  walk_loaded_objects(LoadedObjects::all, find_other_shim_copy, &search, under_loader_lock);
  if (!search.other) return nullptr;
  return search.other->l_name ? search.other->l_name : "";
}

bool is_other_shim_copy(const link_map *object) {
  if (!object || object == own_object()) return false;
  DynamicTables tables;
  return read_dynamic_tables(object->l_addr, object->l_ld, tables) && is_shim_copy(object, tables);
}

void *find_definition_in_any_object(const char *name, int *others, bool under_loader_lock) {
  ExportSearch search{name, own_object(), nullptr, 0};
  walk_loaded_objects(LoadedObjects::all, search_object, &search, under_loader_lock);
  if (others) *others = search.others;
  return search.first;
}

DlsymFunction libc_dlsym() {
  return resolve_once(g_dlsym, "dlsym");
}
DlvsymFunction libc_dlvsym() {
  return resolve_once(g_dlvsym, "dlvsym");
}
DlopenFunction libc_dlopen() {
  return resolve_once(g_dlopen, "dlopen");
}
DlcloseFunction libc_dlclose() {
  return resolve_once(g_dlclose, "dlclose");
}

namespace {
std::atomic<JumpFunction> g_jumps[4]{};
}  // namespace

JumpFunction libc_jump(LibcJump which) {
  switch (which) {
    case LibcJump::longjmp:
      return resolve_once(g_jumps[0], "longjmp");
    case LibcJump::underscore_longjmp:
      return resolve_once(g_jumps[1], "_longjmp");
    case LibcJump::siglongjmp:
      return resolve_once(g_jumps[2], "siglongjmp");
    case LibcJump::longjmp_chk:
      return resolve_once(g_jumps[3], "__longjmp_chk");
  }
  return nullptr;
}

}  // namespace ferrum_replay::shim
