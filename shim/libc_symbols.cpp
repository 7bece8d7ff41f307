#include "libc_symbols.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

#include <atomic>

namespace ferrum {
namespace {

uint32_t gnu_hash(const char *name) {
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
const void *dynamic_pointer(const dl_phdr_info *info, ElfW(Addr) value) {
  if (value < info->dlpi_addr) value += info->dlpi_addr;
  return reinterpret_cast<const void *>(value);
}

bool read_dynamic_tables(const dl_phdr_info *info, DynamicTables &tables) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
    auto *entry = reinterpret_cast<const ElfW(Dyn) *>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    for (; entry->d_tag != DT_NULL; ++entry) {
      switch (entry->d_tag) {
        case DT_SYMTAB:
          tables.symbols = static_cast<const ElfW(Sym) *>(dynamic_pointer(info, entry->d_un.d_ptr));
          break;
        case DT_STRTAB:
          tables.strings = static_cast<const char *>(dynamic_pointer(info, entry->d_un.d_ptr));
          break;
        case DT_GNU_HASH:
          tables.gnu_hash = static_cast<const uint32_t *>(dynamic_pointer(info, entry->d_un.d_ptr));
          break;
        case DT_VERSYM:
          tables.versions =
              static_cast<const ElfW(Half) *>(dynamic_pointer(info, entry->d_un.d_ptr));
          break;
      }
    }
    return tables.symbols && tables.strings && tables.gnu_hash;
  }
  return false;
}

// A defined function named `name` in this object, preferring its default version.
void *lookup_gnu_hash(const dl_phdr_info *info, const DynamicTables &tables, const char *name) {
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
        strcmp(tables.strings + symbol.st_name, name) == 0) {
      void *address = reinterpret_cast<void *>(info->dlpi_addr + symbol.st_value);
      const bool hidden_version = tables.versions && (tables.versions[index] & 0x8000);
      if (!hidden_version) return address;
      if (!fallback) fallback = address;
    }
    if (chained & 1) break;
  }
  return fallback;
}

struct Search {
  const char *name;
  uintptr_t own_base;
  bool past_own = false;
  void *found = nullptr;
};

int search_object(dl_phdr_info *info, size_t, void *data) {
  auto &search = *static_cast<Search *>(data);
  if (info->dlpi_addr == search.own_base) {
    search.past_own = true;
    return 0;
  }
  if (!search.past_own) return 0;
  DynamicTables tables;
  if (!read_dynamic_tables(info, tables)) return 0;
  search.found = lookup_gnu_hash(info, tables, search.name);
  return search.found ? 1 : 0;
}

uintptr_t own_base() {
  Dl_info self{};
  // dladdr is not one of our exports; it answers for our own address without recursion.
  if (!dladdr(reinterpret_cast<void *>(&own_base), &self)) return 0;
  return reinterpret_cast<uintptr_t>(self.dli_fbase);
}

template <typename Function>
Function resolve_once(std::atomic<Function> &cache, const char *name) {
  Function function = cache.load(std::memory_order_acquire);
  if (!function) {
    function = reinterpret_cast<Function>(find_definition_after_shim(name));
    if (function) cache.store(function, std::memory_order_release);
  }
  return function;
}

std::atomic<DlsymFunction> g_dlsym{nullptr};
std::atomic<DlvsymFunction> g_dlvsym{nullptr};
std::atomic<DlopenFunction> g_dlopen{nullptr};

}  // namespace

void *find_definition_after_shim(const char *name) {
  // When the shim's code is linked into a program (unit tests), "after the shim" means
  // after the main program, whose base dladdr reports just the same.
  Search search{name, own_base()};
  dl_iterate_phdr(search_object, &search);
  return search.found;
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

}  // namespace ferrum
