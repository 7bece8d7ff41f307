// What tells a copy of the shim (libferrum-replay.so: any build, from any path) from anything else
// that exports one of its names. One container may hold two copies — the one its image preloads
// for every process, the one `ferrum-replay record` adds from a checkout or a wheel — and each
// must know the other: the first names the replays and a later one steps aside, the first never
// takes the other's interposers for the real functions (an older later copy, which does not step
// aside, made every replay two nested ranges: review CP-1), and a tool hands its GPU-time sink to
// the copy that names the replays (CP-3). A program's own fallback definition of the naming API
// (a weak no-op, exported) is not a copy: taken for one, it switched the shim off (CP-5).
//
// The rule (the public header says it too): an object that itself exports kShimMarker (every build
// from this one on), or — a copy built before the marker — all of kOlderShimExports. Asked of the
// object's own export table (`exports(name)`: whether the object itself, not a library it depends
// on, defines `name`), read from the table itself (elf_exports.hpp), never through dlsym.
#pragma once

#include <dlfcn.h>

#include "elf_exports.hpp"
#include "ferrum_replay/ferrum_replay.h"

namespace ferrum_replay::common {

inline constexpr char kShimMarker[] = FERRUM_REPLAY_SHIM_IDENTITY;
inline constexpr const char *kOlderShimExports[] = {FERRUM_REPLAY_NAME_GRAPH_EXEC, "cuGraphLaunch",
                                                    "dlsym"};

template <typename Exports>
bool is_shim_copy(Exports &&exports) {
  if (exports(kShimMarker)) return true;
  for (const char *name : kOlderShimExports)
    if (!exports(name)) return false;
  return true;
}

// The rule on an object the loader has loaded, read from its own export table (elf_exports.hpp:
// never through dlsym, which an older shim interposes).
inline bool is_loaded_shim_copy(const link_map *object) {
  return is_shim_copy([&](const char *name) { return exported_function(object, name) != nullptr; });
}

// The object that answers `lookup(RTLD_DEFAULT, name)` — the global scope's first definition:
// what the program's calls reach first — when it is a copy of the shim; null otherwise. `lookup`
// is a dlsym: the shim passes the C library's own (its exported dlsym is an interposer), the
// recorder plain dlsym (for names no shim's dlsym hook acts on). The copy is judged by its table.
template <typename Lookup>
const link_map *shim_copy_answering(Lookup lookup, const char *name) {
  void *address = lookup(RTLD_DEFAULT, name);
  Dl_info where{};
  link_map *object = nullptr;
  if (!address || !dladdr1(address, &where, reinterpret_cast<void **>(&object), RTLD_DL_LINKMAP) ||
      !object || !is_loaded_shim_copy(object))
    return nullptr;
  return object;
}

}  // namespace ferrum_replay::common
