// An object's own exported functions, read from its dynamic symbol table (DT_GNU_HASH) through
// the loader's record of it (a link_map), without asking the loader: dlsym answers through
// whatever interposes it — the shim exports dlsym, and an older shim's dlsym hook, asked for a
// CUDA name from inside an NVTX tool's start, started that shim and deadlocked the tool (review
// CQ-1) — and names a definition anywhere in an object's scope, not the object's own. The shim
// finds the C library's loader functions this way (shim/resolve/libc_symbols.hpp); both it and
// the recorder tell a copy of the shim by it (shim_identity.hpp).
//
// Internal to each file that includes it (an unnamed namespace): the shim's copy is compiled
// without sanitizer instrumentation, as it runs inside a sanitizer's own start.
#pragma once

#include <elf.h>
#include <link.h>
#include <stdint.h>

namespace ferrum_replay::common {
namespace {

// Runs inside sanitizer runtimes' own initialisation (ASan/TSan resolve their interceptors
// with dlsym(RTLD_NEXT), i.e. through us, before their interceptors work): nothing on this
// path may call an interceptable libc function — no strcmp, no dl_iterate_phdr.
inline bool same_name(const char *a, const char *b) {
  for (; *a && *a == *b; ++a, ++b) {
  }
  return *a == *b;
}

inline uint32_t gnu_hash(const char *name) {
  uint32_t hash = 5381;
  for (const unsigned char *p = reinterpret_cast<const unsigned char *>(name); *p; ++p)
    hash = hash * 33 + *p;
  return hash;
}

struct DynamicTables {
  const ElfW(Sym) *symbols = nullptr;
  const char *strings = nullptr;
  const uint32_t *gnu_hash = nullptr;
  const ElfW(Half) *versions = nullptr;
};

// The loader relocates d_ptr entries in place on most architectures but not all; an
// address below the load base is still file-relative.
inline const void *dynamic_pointer(ElfW(Addr) base, ElfW(Addr) value) {
  if (value < base) value += base;
  return reinterpret_cast<const void *>(value);
}

inline bool read_dynamic_tables(ElfW(Addr) base, const ElfW(Dyn) * entry, DynamicTables &tables) {
  if (!entry) return false;
  for (; entry->d_tag != DT_NULL; ++entry) {
    switch (entry->d_tag) {
      case DT_SYMTAB:
        tables.symbols = static_cast<const ElfW(Sym) *>(dynamic_pointer(base, entry->d_un.d_ptr));
        break;
      case DT_STRTAB:
        tables.strings = static_cast<const char *>(dynamic_pointer(base, entry->d_un.d_ptr));
        break;
      case DT_GNU_HASH:
        tables.gnu_hash = static_cast<const uint32_t *>(dynamic_pointer(base, entry->d_un.d_ptr));
        break;
      case DT_VERSYM:
        tables.versions = static_cast<const ElfW(Half) *>(dynamic_pointer(base, entry->d_un.d_ptr));
        break;
    }
  }
  return tables.symbols && tables.strings && tables.gnu_hash;
}

// A defined function named `name` in this object, preferring its default version.
inline void *lookup_gnu_hash(ElfW(Addr) base, const DynamicTables &tables, const char *name) {
  const uint32_t bucket_count = tables.gnu_hash[0];
  const uint32_t first_symbol = tables.gnu_hash[1];
  const uint32_t bloom_words = tables.gnu_hash[2];
  if (bucket_count == 0) return nullptr;
  auto *bloom = reinterpret_cast<const ElfW(Addr) *>(tables.gnu_hash + 4);
  auto *buckets = reinterpret_cast<const uint32_t *>(bloom + bloom_words);
  const uint32_t *chain = buckets + bucket_count;
  const uint32_t hash = gnu_hash(name);
  uint32_t index = buckets[hash % bucket_count];
  if (index < first_symbol) return nullptr;
  void *fallback = nullptr;
  for (;; ++index) {
    const uint32_t chained = chain[index - first_symbol];
    const ElfW(Sym) &symbol = tables.symbols[index];
    if ((chained | 1) == (hash | 1) && symbol.st_shndx != SHN_UNDEF &&
        ELF64_ST_TYPE(symbol.st_info) == STT_FUNC &&
        same_name(tables.strings + symbol.st_name, name)) {
      void *address = reinterpret_cast<void *>(base + symbol.st_value);
      const bool hidden_version = tables.versions && (tables.versions[index] & 0x8000);
      if (!hidden_version) return address;
      if (!fallback) fallback = address;
    }
    if (chained & 1) break;
  }
  return fallback;
}

// A defined function named `name` exported by `object` itself; null if none.
inline void *exported_function(const link_map *object, const char *name) {
  DynamicTables tables;
  if (!object || !read_dynamic_tables(object->l_addr, object->l_ld, tables)) return nullptr;
  return lookup_gnu_hash(object->l_addr, tables, name);
}

}  // namespace
}  // namespace ferrum_replay::common
