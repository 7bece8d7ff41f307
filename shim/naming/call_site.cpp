#include "naming/call_site.hpp"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "naming/symbol_names.hpp"
#include "no_cancel.hpp"
#include "resolve/cuda_libraries.hpp"
#include "resolve/libc_symbols.hpp"
#include "resolve/real_functions.hpp"
#include "support/log.hpp"
#include "text_rules.hpp"

#if FERRUM_HAVE_LIBUNWIND_H
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#endif

namespace ferrum_replay::shim {
namespace {

constexpr int kMaxFrames = 64;

bool has_prefix(const char *text, const char *prefix, size_t prefix_length) {
  return prefix_length && strncmp(text, prefix, prefix_length) == 0;
}

}  // namespace

namespace {

// ---- the symbolization cache, by return address ----

struct CachedSite {
  uintptr_t address;
  char site[128];
};
constexpr size_t kCacheSize = 1024;  // distinct instantiation sites of a process: a handful
// Allocated on first use (under the cache mutex): .bss would cost every process at start-up.
CachedSite *g_cache = nullptr;

bool ensure_cache() {
  if (!g_cache) g_cache = static_cast<CachedSite *>(calloc(kCacheSize, sizeof(CachedSite)));
  return g_cache != nullptr;
}
pthread_mutex_t g_cache_mutex = PTHREAD_MUTEX_INITIALIZER;

bool cached_site(uintptr_t address, char *out, size_t out_size) {
  pthread_mutex_lock(&g_cache_mutex);
  bool found = false;
  if (ensure_cache())
    for (size_t i = address % kCacheSize, probes = 0; probes < kCacheSize;
         ++probes, i = (i + 1) % kCacheSize) {
      if (g_cache[i].address == 0) break;
      if (g_cache[i].address == address) {
        common::printable_copy(g_cache[i].site, out, out_size);
        found = true;
        break;
      }
    }
  pthread_mutex_unlock(&g_cache_mutex);
  return found;
}

void remember_site(uintptr_t address, const char *site) {
  pthread_mutex_lock(&g_cache_mutex);
  if (ensure_cache())
    for (size_t i = address % kCacheSize, probes = 0; probes < kCacheSize;
         ++probes, i = (i + 1) % kCacheSize) {
      if (g_cache[i].address == 0 || g_cache[i].address == address) {
        g_cache[i].address = address;
        common::printable_copy(site, g_cache[i].site, sizeof g_cache[i].site);
        break;
      }
    }
  pthread_mutex_unlock(&g_cache_mutex);
}

// "module+0xoffset" for a frame without a symbol.
void module_and_offset(const Dl_info &info, uintptr_t address, char *out, size_t out_size) {
  snprintf(out, out_size, "%s+0x%lx", file_base_name(info.dli_fname),
           static_cast<unsigned long>(address - reinterpret_cast<uintptr_t>(info.dli_fbase)));
}

// ---- symbol extents ----

// What dladdr1 knows of a frame's address: its module and the nearest exported (dynamic)
// symbol, with that symbol's size.
struct FrameModule {
  Dl_info info{};
  const ElfW(Sym) *symbol = nullptr;
};

// Whether `address` lies inside the dynamic symbol dladdr1 reported. A name is only as good
// as this: the nearest export *below* an address (libffi's unexported call stub, answered as
// ffi_prep_go_closure; glibc's __libc_start_call_main, as __libc_init_first) is another
// function. A symbol without a size covers only its first byte.
bool dynamic_symbol_covers(const FrameModule &frame, uintptr_t address) {
  if (!frame.info.dli_sname || !frame.info.dli_saddr || !frame.symbol) return false;
  const uintptr_t start = reinterpret_cast<uintptr_t>(frame.info.dli_saddr);
  const uintptr_t size = frame.symbol->st_size ? frame.symbol->st_size : 1;
  return address >= start && address - start < size;
}

// ---- stack walking ----

// Decides a frame: `symbol_of` names it (expensive, only called when the module is not
// skipped and the address is not cached). Returns true when `out` holds the site.
template <typename SymbolOf>
bool try_frame(uintptr_t address, const char *skip_prefixes, char *out, size_t out_size,
               SymbolOf &&symbol_of) {
  FrameModule frame;
  Dl_info &info = frame.info;
  void *symbol_entry = nullptr;
  if (!address ||
      !dladdr1(reinterpret_cast<void *>(address), &info, &symbol_entry, RTLD_DL_SYMENT) ||
      !info.dli_fname)
    return false;
  frame.symbol = static_cast<const ElfW(Sym) *>(symbol_entry);
  if (is_own_address(reinterpret_cast<void *>(address))) return false;
  if (is_skipped_frame(info.dli_fname, "", skip_prefixes)) return false;
  if (cached_site(address, out, out_size)) return out[0] != '\0';
  char symbol[256];
  symbol_of(frame, symbol, sizeof symbol);
  if (is_skipped_frame(info.dli_fname, symbol, skip_prefixes)) {
    remember_site(address, "");  // skipped: remember that too
    return false;
  }
  if (symbol[0])
    common::printable_copy(symbol, out, out_size);
  else
    module_and_offset(info, address, out, out_size);
  remember_site(address, out);
  return true;
}

#if FERRUM_HAVE_LIBUNWIND_H
// libunwind's API names are macros for per-architecture symbols (unw_step is _ULx86_64_step
// on x86-64, _ULaarch64_step on aarch64): look up whatever the header maps them to.
#define FERRUM_SYMBOL_NAME(macro) FERRUM_SYMBOL_STRING(macro)
#define FERRUM_SYMBOL_STRING(name) #name

struct Libunwind {
  int (*getcontext)(unw_context_t *);  // null where unw_getcontext is inline assembly
  int (*init_local)(unw_cursor_t *, unw_context_t *);
  int (*step)(unw_cursor_t *);
  int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
  int (*get_proc_name)(unw_cursor_t *, char *, size_t, unw_word_t *);
  int (*get_proc_info)(unw_cursor_t *, unw_proc_info_t *);  // optional
};

template <typename Function>
void find(void *library, DlsymFunction lookup, const char *name, Function &function) {
  function = reinterpret_cast<Function>(lookup(library, name));
}

// Opened once; null when libunwind.so.8 is not installed.
const Libunwind *libunwind() {
  static Libunwind functions;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  static bool available = false;
  pthread_once(&once, [] {
    DlopenFunction open_library = libc_dlopen();
    DlsymFunction lookup = libc_dlsym();
    void *library =
        open_library && lookup ? open_library("libunwind.so.8", RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!library) {
      log_line(LogLevel::info, "libunwind.so.8 not found: call sites from exported symbols only");
      return;
    }
#if defined(__x86_64__)
    find(library, lookup, "_Ux86_64_getcontext", functions.getcontext);
#endif
    find(library, lookup, FERRUM_SYMBOL_NAME(unw_init_local), functions.init_local);
    find(library, lookup, FERRUM_SYMBOL_NAME(unw_step), functions.step);
    find(library, lookup, FERRUM_SYMBOL_NAME(unw_get_reg), functions.get_reg);
    find(library, lookup, FERRUM_SYMBOL_NAME(unw_get_proc_name), functions.get_proc_name);
    find(library, lookup, FERRUM_SYMBOL_NAME(unw_get_proc_info), functions.get_proc_info);
    available =
        functions.init_local && functions.step && functions.get_reg && functions.get_proc_name;
#if defined(__x86_64__)
    available = available && functions.getcontext;
#endif
  });
  return available ? &functions : nullptr;
}

// Whether the symbol libunwind named for `address`, starting at `start`, is the function that
// contains it. libunwind takes the nearest symbol below the address (from .symtab when the
// module has one), whatever its size: when that is the dynamic symbol dladdr1 reports, its
// size decides; otherwise (a local symbol) no procedure of the unwind information may begin
// between the symbol and the address.
bool libunwind_symbol_covers(const Libunwind &unwind, unw_cursor_t &cursor,
                             const FrameModule &module, uintptr_t start, uintptr_t address) {
  if (start > address) return false;
  if (module.info.dli_saddr && reinterpret_cast<uintptr_t>(module.info.dli_saddr) == start)
    return dynamic_symbol_covers(module, address);
  unw_proc_info_t procedure{};
  if (!unwind.get_proc_info || unwind.get_proc_info(&cursor, &procedure) != 0) return false;
  return procedure.start_ip <= address && address < procedure.end_ip && start >= procedure.start_ip;
}

bool walk_with_libunwind(const char *skip_prefixes, char *out, size_t out_size) {
  const Libunwind *unwind = libunwind();
  if (!unwind) return false;
  unw_context_t context;
  unw_cursor_t cursor;
  if (unwind->getcontext(&context) != 0 || unwind->init_local(&cursor, &context) != 0) return false;
  for (int frame = 0; frame < kMaxFrames && unwind->step(&cursor) > 0; ++frame) {
    unw_word_t ip = 0;
    if (unwind->get_reg(&cursor, UNW_REG_IP, &ip) != 0) break;
    // A return address points after the call; one byte back lies inside the caller's call.
    const uintptr_t address = ip ? static_cast<uintptr_t>(ip) - 1 : 0;
    if (try_frame(address, skip_prefixes, out, out_size,
                  [&](const FrameModule &module, char *symbol, size_t size) {
                    char mangled[512];
                    unw_word_t offset = 0;
                    const char *name = nullptr;
                    if (unwind->get_proc_name(&cursor, mangled, sizeof mangled, &offset) == 0 &&
                        libunwind_symbol_covers(*unwind, cursor, module, ip - offset, address))
                      name = mangled;
                    else if (dynamic_symbol_covers(module, address))
                      name = module.info.dli_sname;
                    readable_symbol_name(name, symbol, size);
                  }))
      return true;
  }
  out[0] = '\0';
  return true;  // walked: no frame qualifies
}
#else
bool walk_with_libunwind(const char *, char *, size_t) {
  return false;
}
#endif

void walk_with_backtrace(const char *skip_prefixes, char *out, size_t out_size) {
  void *frames[kMaxFrames];
  const int count = backtrace(frames, kMaxFrames);
  for (int i = 1; i < count; ++i) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(frames[i]) - 1;
    if (try_frame(address, skip_prefixes, out, out_size,
                  [address](const FrameModule &module, char *symbol, size_t size) {
                    readable_symbol_name(
                        dynamic_symbol_covers(module, address) ? module.info.dli_sname : nullptr,
                        symbol, size);
                  }))
      return;
  }
  out[0] = '\0';
}

// Built-in skips, never a call site a person wrote: NVIDIA's CUDA libraries
// (cuda_libraries.hpp), the shim itself, the static runtime's functions inside the program,
// and the foreign-function layers through which Python calls them (libffi's call stubs, the
// ctypes and cffi modules).
constexpr const char *kSkippedModules[] = {"libferrum-replay", "libffi.", "_ctypes.",
                                           "_cffi_backend."};
constexpr const char *kSkippedSymbolPrefixes[] = {"__cuda", "cudart::", "libcudart"};

// cudaGraphInstantiate, cuGraphInstantiateWithFlags...: the API itself, inside a program
// that links the static runtime. A user function "cuda_capture" is not skipped.
bool is_cuda_api_name(const char *symbol) {
  const size_t skip = strncmp(symbol, "cuda", 4) == 0 ? 4 : strncmp(symbol, "cu", 2) == 0 ? 2 : 0;
  return skip && symbol[skip] >= 'A' && symbol[skip] <= 'Z';
}

}  // namespace

bool is_skipped_frame(const char *module, const char *symbol, const char *skip_prefixes) {
  const char *module_name = file_base_name(module);
  if (is_nvidia_library(module_name)) return true;
  for (const char *prefix : kSkippedModules)
    if (has_prefix(module_name, prefix, strlen(prefix))) return true;
  if (symbol && *symbol) {
    if (is_cuda_api_name(symbol)) return true;
    for (const char *prefix : kSkippedSymbolPrefixes)
      if (has_prefix(symbol, prefix, strlen(prefix))) return true;
  }
  for (const char *item = skip_prefixes; item && *item;) {
    const char *comma = strchr(item, ',');
    const size_t length = comma ? static_cast<size_t>(comma - item) : strlen(item);
    if (has_prefix(module_name, item, length) || (symbol && has_prefix(symbol, item, length)))
      return true;
    item = comma ? comma + 1 : item + length;
  }
  return false;
}

void capture_call_site(char *out, size_t out_size, const char *skip_prefixes) {
  if (out_size == 0) return;
  out[0] = '\0';
  // libunwind checks the addresses it reads through a pipe of its own (write, read): inside an
  // instantiation or a launch, neither of them a cancellation point (no_cancel.hpp).
  const common::NoCancel no_cancel;
  if (!walk_with_libunwind(skip_prefixes, out, out_size))
    walk_with_backtrace(skip_prefixes, out, out_size);
}

}  // namespace ferrum_replay::shim
