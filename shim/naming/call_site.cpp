#include "naming/call_site.hpp"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "held_here.hpp"
#include "loader_error.hpp"
#include "naming/elf_symbols.hpp"
#include "naming/symbol_names.hpp"
#include "no_cancel.hpp"
#include "resolve/cuda_libraries.hpp"
#include "resolve/libc_symbols.hpp"
#include "resolve/real_functions.hpp"
#include "support/loading_process.hpp"
#include "text_rules.hpp"

namespace ferrum_replay::shim {
namespace {

constexpr int kMaxFrames = 64;

bool has_prefix(const char *text, const char *prefix, size_t prefix_length) {
  return prefix_length && strncmp(text, prefix, prefix_length) == 0;
}

}  // namespace

namespace {

// ---- the symbolization cache, by return address and module ----

// The file of the module a frame is in: the loader's name for it, or for the program itself
// (whose loader name is empty, and whose dli_fname is argv[0] as given: relative to a directory
// it may have left) the file the kernel ran. The loader's name may name another file by now (a
// relative path after a chdir, a library replaced on disk): symtab_function_name reads it only
// when it carries the loaded module's build ID, where the module has one.
const char *module_file(const link_map *module) {
  return module->l_name && module->l_name[0] ? module->l_name : "/proc/self/exe";
}

// Which module an address was named in: where it is mapped and what it is — its build ID, or
// without one its file: name, device, inode, size and time of change. A module unloaded
// (dlclose) and another loaded at its addresses must not find the first one's names (F40),
// nor a plugin rebuilt in place and loaded again; the same module loaded again has the same
// names.
struct ModuleIdentity {
  uintptr_t start;
  uint64_t key;
};

constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ULL;

uint64_t fnv1a(const void *data, size_t size, uint64_t hash) {
  const auto *bytes = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
  return hash;
}

ModuleIdentity identity_of(const Dl_info &info, const link_map *map, const BuildId &id) {
  ModuleIdentity identity{};
  identity.start = reinterpret_cast<uintptr_t>(info.dli_fbase);
  if (id.size) {
    identity.key = fnv1a(id.bytes, id.size, kFnvBasis);
    return identity;
  }
  identity.key = fnv1a(info.dli_fname, info.dli_fname ? strlen(info.dli_fname) : 0, ~kFnvBasis);
  struct stat file {};
  if (stat(module_file(map), &file) == 0) {
    const uint64_t facts[] = {file.st_dev, file.st_ino, static_cast<uint64_t>(file.st_size),
                              static_cast<uint64_t>(file.st_mtim.tv_sec),
                              static_cast<uint64_t>(file.st_mtim.tv_nsec)};
    identity.key = fnv1a(facts, sizeof facts, identity.key);
  }
  return identity;
}

struct CachedSite {
  uintptr_t address;
  ModuleIdentity module;
  char site[128];
};
constexpr size_t kCacheSize = 1024;  // distinct instantiation sites of a process: a handful
// Allocated on first use (under the cache mutex): .bss would cost every process at start-up.
CachedSite *g_cache = nullptr;
bool g_cache_suspect = false;  // see cache_is_ours
// Taken through lock_ours (held_here.hpp): counted as held by this thread, so that a signal
// handler's graph call that interrupted a walk here never waits for it (launch_range.cpp).
pthread_mutex_t g_cache_mutex = PTHREAD_MUTEX_INITIALIZER;

bool ensure_cache() {
  if (!g_cache) g_cache = static_cast<CachedSite *>(calloc(kCacheSize, sizeof(CachedSite)));
  if (g_cache && g_cache_suspect) memset(g_cache, 0, kCacheSize * sizeof(CachedSite));
  g_cache_suspect = false;
  return g_cache != nullptr;
}

// The process whose cache mutex and entries these are: 0 none yet, -PID being made PID's.
std::atomic<int> g_cache_owner{0};

// Makes the cache this process's. A child — of fork() or of a clone that runs no fork handlers
// (_Fork, a raw clone) — has only the thread that made it: a thread of the parent's that held
// the mutex at that moment is not there to give it back, and the child's first walk waited for
// it for ever. The first walk of each process makes the mutex afresh and drops the entries (that
// thread may have left one half written). No fork handler: registering one takes the loader's
// fork lock from inside a graph call. False when another thread of this process is at it and did
// not finish within the bound: that walk goes without the cache.
bool cache_is_ours() {
  const int self = getpid();
  for (int spin = 0; spin < 10000; ++spin) {
    int owner = g_cache_owner.load(std::memory_order_acquire);
    if (owner == self) return true;
    if (owner != -self &&
        g_cache_owner.compare_exchange_strong(owner, -self, std::memory_order_acq_rel)) {
      pthread_mutex_init(&g_cache_mutex, nullptr);
      g_cache_suspect = true;  // emptied at its first use, under the new mutex
      g_cache_owner.store(self, std::memory_order_release);
      return true;
    }
    sched_yield();
  }
  return false;
}

bool same_module(const ModuleIdentity &a, const ModuleIdentity &b) {
  return a.start == b.start && a.key == b.key;
}

bool cached_site(uintptr_t address, const ModuleIdentity &module, char *out, size_t out_size) {
  common::lock_ours(&g_cache_mutex);
  bool found = false;
  if (ensure_cache())
    for (size_t i = address % kCacheSize, probes = 0; probes < kCacheSize;
         ++probes, i = (i + 1) % kCacheSize) {
      if (g_cache[i].address == 0) break;
      if (g_cache[i].address == address) {
        found = same_module(g_cache[i].module, module);
        if (found) common::printable_copy(g_cache[i].site, out, out_size);
        break;
      }
    }
  common::unlock_ours(&g_cache_mutex);
  return found;
}

// Remembers (or replaces: another module at the address now) the site of an address. A full
// cache (modules loaded and unloaded at ever new addresses) starts afresh.
void remember_site(uintptr_t address, const ModuleIdentity &module, const char *site) {
  common::lock_ours(&g_cache_mutex);
  if (ensure_cache()) {
    size_t slot = kCacheSize;
    for (size_t i = address % kCacheSize, probes = 0; probes < kCacheSize;
         ++probes, i = (i + 1) % kCacheSize)
      if (g_cache[i].address == 0 || g_cache[i].address == address) {
        slot = i;
        break;
      }
    if (slot == kCacheSize) {
      memset(g_cache, 0, kCacheSize * sizeof(CachedSite));
      slot = address % kCacheSize;
    }
    g_cache[slot].address = address;
    g_cache[slot].module = module;
    common::printable_copy(site, g_cache[slot].site, sizeof g_cache[slot].site);
  }
  common::unlock_ours(&g_cache_mutex);
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
  link_map *map = nullptr;  // the loader's entry for the module
  BuildId id;               // its build ID, read from memory (elf_symbols.hpp)
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

// The Python interpreter: libpython, or the executable it is linked into ("python",
// "python3", "python3.11", "python3.13t"). Reached from below (through ctypes or cffi, whose
// layers are skipped), the call site is the program's Python code, which the C stack cannot
// name: every graph a Python program made through ctypes was named after CPython's call
// dispatcher, `_PyObject_MakeTpCall` (review PY-4).
bool is_python_interpreter(const char *module) {
  const char *name = file_base_name(module);
  if (strncmp(name, "libpython", 9) == 0) return true;
  if (strncmp(name, "python", 6) != 0) return false;
  for (const char *c = name + 6; *c; ++c)
    if (!((*c >= '0' && *c <= '9') || *c == '.' || *c == 't' || *c == 'd')) return false;
  return true;
}

// The main executable, by its own file: dladdr names it after argv[0], which a program sets as
// it likes (a statically linked python3.11 run as "worker" kept CPython's names, a C++ program
// run as "python3" lost its own, review TD-4). Its file as the kernel knows it, without the
// " (deleted)" an upgrade under a running job leaves (TE-1); `argv0` where that is the dynamic
// loader (a program run as `ld-linux-x86-64.so.2 PROGRAM`, whose argv[0] the loader makes the
// program's path: TE-2) or /proc cannot tell. Asked once per process (a readlink a frame cost a
// fifth of an instantiation's time, TE-3); a fork child runs the same file.
bool main_executable_is_python(const char *argv0) {
  static std::atomic<int> known{0};  // 0: not asked yet; 1: Python; 2: not
  if (const int answer = known.load(std::memory_order_relaxed)) return answer == 1;
  char path[4096];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof path - 1);
  const char *file = argv0;
  if (length > 0) {
    path[length] = '\0';
    constexpr char kDeleted[] = " (deleted)";
    constexpr size_t kDeletedLength = sizeof kDeleted - 1;
    if (static_cast<size_t>(length) > kDeletedLength &&
        strcmp(path + length - kDeletedLength, kDeleted) == 0)
      path[length - kDeletedLength] = '\0';
    if (strncmp(file_base_name(path), "ld-", 3) != 0) file = path;
  }
  const bool python = is_python_interpreter(file);
  known.store(python ? 1 : 2, std::memory_order_relaxed);
  return python;
}

enum class Frame { skipped, named, python_code };

// Decides a frame: `symbol_of` names it (expensive, only called when the module is not
// skipped and the address is not cached). `named`: `out` holds the site.
template <typename SymbolOf>
Frame try_frame(uintptr_t address, const char *skip_prefixes, bool use_cache, char *out,
                size_t out_size, SymbolOf &&symbol_of) {
  FrameModule frame;
  Dl_info &info = frame.info;
  void *symbol_entry = nullptr;
  if (!address ||
      !dladdr1(reinterpret_cast<void *>(address), &info, &symbol_entry, RTLD_DL_SYMENT) ||
      !info.dli_fname)
    return Frame::skipped;
  frame.symbol = static_cast<const ElfW(Sym) *>(symbol_entry);
  if (is_own_address(reinterpret_cast<void *>(address))) return Frame::skipped;
  if (is_skipped_frame(info.dli_fname, "", skip_prefixes)) return Frame::skipped;
  Dl_info same{};
  if (!dladdr1(reinterpret_cast<void *>(address), &same, reinterpret_cast<void **>(&frame.map),
               RTLD_DL_LINKMAP) ||
      !frame.map)
    return Frame::skipped;
  if (frame.map->l_name && frame.map->l_name[0] ? is_python_interpreter(info.dli_fname)
                                                : main_executable_is_python(info.dli_fname))
    return Frame::python_code;
  frame.id = loaded_build_id(info.dli_fbase, frame.map->l_addr);
  const ModuleIdentity module = identity_of(info, frame.map, frame.id);
  if (use_cache && cached_site(address, module, out, out_size))
    return out[0] ? Frame::named : Frame::skipped;
  char symbol[256];
  symbol_of(frame, symbol, sizeof symbol);
  if (is_skipped_frame(info.dli_fname, symbol, skip_prefixes)) {
    if (use_cache) remember_site(address, module, "");  // skipped: remember that too
    return Frame::skipped;
  }
  if (symbol[0])
    common::printable_copy(symbol, out, out_size);
  else
    module_and_offset(info, address, out, out_size);
  if (use_cache) remember_site(address, module, out);
  return Frame::named;
}

// Set once a walk has run in this process or an ancestor: the unwinder is loaded.
std::atomic<bool> g_walked{false};

// glibc's backtrace() loads the unwinder (libgcc_s.so.1) with dlopen at its first call in a
// process that has none loaded (a C program, Python through ctypes: the real driver links no C++
// runtime). Adding a library takes the loader's write lock, which fork() does not reset: a fork
// child whose parent had another thread in dl_iterate_phdr, or loading or unloading a library,
// waited for ever at its first instantiation (F155). So in a fork child (loading_process.hpp)
// the first walk is made only where the unwinder is there already — the probe loads nothing and
// takes only the loader's main lock, which fork() resets; with none, the graph has no call site.
bool may_walk() {
  if (g_walked.load(std::memory_order_acquire) || in_loading_process()) return true;
  const DlopenFunction open = libc_dlopen();  // not through the shim's own dlopen hook
  const DlcloseFunction close = libc_dlclose();
  if (!open || !close) return false;
  const common::LoaderErrorCleared loader_error;  // loader_error.hpp: absent is an answer
  void *const unwinder = open("libgcc_s.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!unwinder) return false;
  close(unwinder);  // the reference the probe took; the library stays
  return true;
}

// Walks the stack with glibc's backtrace() (the C++ unwinder, reading the unwind tables; no
// descriptor of its own) and names a frame by the dynamic symbol that covers it, else by the
// module's full symbol table (elf_symbols.hpp: local functions), else module+offset.
void walk_stack(const char *skip_prefixes, char *out, size_t out_size) {
  out[0] = '\0';
  if (!may_walk()) return;
  // Inside a lock of ours on this thread (a signal handler's walk that interrupted one), the
  // cache's mutex may be the one held: the walk goes without the cache.
  const bool use_cache = !common::inside_our_lock() && cache_is_ours();
  void *frames[kMaxFrames];
  const int count = backtrace(frames, kMaxFrames);
  g_walked.store(true, std::memory_order_release);
  for (int i = 1; i < count; ++i) {
    // A return address points after the call; one byte back lies inside the caller's call.
    const uintptr_t address = reinterpret_cast<uintptr_t>(frames[i]) - 1;
    const Frame frame =
        try_frame(address, skip_prefixes, use_cache, out, out_size,
                  [address](const FrameModule &module, char *symbol, size_t size) {
                    const char *name = nullptr;
                    char local[256];
                    if (dynamic_symbol_covers(module, address))
                      name = module.info.dli_sname;
                    else if (symtab_function_name(module_file(module.map), module.id,
                                                  module.map->l_addr, address, local, sizeof local))
                      name = local;
                    readable_symbol_name(name, symbol, size);
                  });
    if (frame == Frame::named) return;
    if (frame == Frame::python_code) break;  // the graph's own number names it
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
  // FERRUM_REPLAY_SITE_SKIP: items between commas, blanks around each not part of it
  // (`at::cuda::, libtorch_cuda` skipped nothing after the space), an empty item none (`a,,b`
  // skipped every frame).
  for (const char *item = skip_prefixes; item && *item;) {
    const char *comma = strchr(item, ',');
    const char *end = comma ? comma : item + strlen(item);
    while (item < end && (*item == ' ' || *item == '\t')) ++item;
    while (end > item && (end[-1] == ' ' || end[-1] == '\t')) --end;
    const size_t length = static_cast<size_t>(end - item);
    if (length != 0 &&
        (has_prefix(module_name, item, length) || (symbol && has_prefix(symbol, item, length))))
      return true;
    if (!comma) break;
    item = comma + 1;
  }
  return false;
}

void capture_call_site(char *out, size_t out_size, const char *skip_prefixes) {
  if (out_size == 0) return;
  out[0] = '\0';
  // Reading a module's symbol table opens, reads and closes its file: inside an instantiation
  // or a launch, neither of them a cancellation point (no_cancel.hpp).
  const common::NoCancel no_cancel;
  walk_stack(skip_prefixes, out, out_size);
}

}  // namespace ferrum_replay::shim
