// Stand-in for NVIDIA's CUDA driver library, libcuda.so.1 (driver API 13.0), for machines
// without a GPU. Built as libcuda.so.1 (SONAME libcuda.so.1); it exports, unversioned like the
// real driver, only CUDA driver API names (see cuda_driver_standin.map) plus the int
// `ferrum_standin_driver_marker`, by which a program can tell it runs against the stand-in.
//
// Prototypes come from the real <cuda.h>/<cudaTypedefs.h>, compiled with
// __CUDA_API_VERSION_INTERNAL as NVIDIA builds its driver: the header then declares every
// exported name (legacy cuGraphInstantiate, cuGraphInstantiate_v2, cuGraphLaunch and
// cuGraphLaunch_ptsz, the 4-argument cuGetProcAddress and the 5-argument cuGetProcAddress_v2,
// cuCtxCreate .. cuCtxCreate_v4, ...) with its exact signature, and the compiler checks ours.
//
// What is faithful:
// - cuGetProcAddress/_v2 look symbols up in a table of {name, version it appeared in, legacy
//   function, per-thread-stream (_ptsz) function}. The entry with the highest version <= the
//   requested one wins (cuGraphInstantiate@10000 -> legacy 5-argument cuGraphInstantiate,
//   @11000 -> cuGraphInstantiate_v2, @12000 -> cuGraphInstantiateWithFlags; the self-query
//   "cuGetProcAddress" answers the 4-argument function below 12000, cuGetProcAddress_v2 from
//   12000 on). Unknown or empty name: CUDA_ERROR_NOT_FOUND, SYMBOL_NOT_FOUND; name known but
//   only from a later version: CUDA_ERROR_NOT_FOUND, VERSION_NOT_SUFFICIENT; *pfn is NULL on
//   failure; symbolStatus may be NULL. Flag CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (2)
//   answers the _ptsz variant where one exists (cuGraphLaunch, cuGraphUpload,
//   cuGraphInstantiateWithParams, cuStreamSynchronize), 0 and LEGACY_STREAM (1) the legacy one.
// - The pointers handed out are, by default, the driver's *internal* functions (static, not
//   exported), as the real driver's are; every exported function is a thin wrapper that calls
//   the same internal function, so a replay counts once whichever way it arrives.
// - cuGraphLaunch and cuGraphLaunch_ptsz are different functions (counted separately).
// - Graph exec handles are heap objects recycled through a LIFO free list: an instantiate right
//   after a cuGraphExecDestroy gets the destroyed handle's address back, as real drivers often
//   do. Launch, upload or destroy of a handle that is not live: CUDA_ERROR_INVALID_VALUE.
//   With FERRUM_STANDIN_NO_HANDLE_REUSE=1 every instantiation returns a handle value never
//   returned before (the objects behind them are still recycled: memory stays flat).
// - Calls other than cuDriverGetVersion, cuGetErrorName/String and cuGetProcAddress fail with
//   CUDA_ERROR_NOT_INITIALIZED before cuInit. Contexts are current per thread (cuCtxCreate,
//   cuCtxSetCurrent, primary context); creating streams, allocating, synchronizing and loading
//   a module need one.
// - Modules and libraries from PTX text, as the real driver JIT-compiles it:
//   cuModuleLoadData[Ex] (needs a current context) and cuLibraryLoadData (does not) make one
//   function, or kernel, per `.entry` the PTX defines (`.func`s and declarations are not
//   kernels), with the parameter layout its argument list declares (type sizes, .align,
//   arrays). The PTX must start with `.version` (at most 9.0, else
//   CUDA_ERROR_UNSUPPORTED_PTX_VERSION) and `.target`, with balanced braces, else
//   CUDA_ERROR_INVALID_PTX, the reason in the CU_JIT_ERROR_LOG_BUFFER option when given.
//   cuModuleGetFunction/cuLibraryGetKernel of an unknown name: CUDA_ERROR_NOT_FOUND.
//   cuFuncGetName/cuKernelGetName give the .entry name as written (mangled names stay mangled);
//   cuKernelGetFunction gives the kernel's function. Unloading invalidates the handles: the
//   name calls then return CUDA_ERROR_INVALID_VALUE.
// - Kernel nodes (cuGraphAddKernelNode, CUDA 10.0 ABI, and _v2, CUDA 12.0 ABI with kern and
//   ctx): a live func, else (func NULL) a live kern; non-zero grid and block, at most 1024
//   threads a block; arguments from kernelParams (one pointer per declared parameter) or extra
//   (CU_LAUNCH_PARAM_BUFFER_POINTER/_SIZE), not both — copied into the node, which owns them.
//   cuGraphKernelNodeGetParams_v2 returns func as added (NULL for a kern node, whose kern and
//   ctx it returns; kern and ctx are NULL when func was set) and kernelParams/extra pointing
//   into the node's copy; the legacy cuGraphKernelNodeGetParams (CUDA 10.0 ABI) returns a kern
//   node's function (what cuKernelGetFunction gives). Other node types: CUDA_ERROR_INVALID_VALUE.
// - cuGraphGetNodes: nodes == NULL gives the count in *numNodes; otherwise it fills
//   min(count, *numNodes) entries in the order the nodes were added, sets the rest of the array
//   to NULL and *numNodes to the number filled. cuGraphNodeGetType of a node of a destroyed
//   graph: CUDA_ERROR_INVALID_VALUE.
//
// What is simplified: one device (ordinal 0); nothing executes (memset and kernel nodes are
// validated and stored, never run; cuMemAlloc is malloc); streams are not validated by a launch;
// no context stack (cuCtxCreate makes the new context current, cuCtxDestroy of the current one
// leaves none); only the functions listed in the version script exist; the legacy 32-bit
// cuMemAlloc/cuMemFree are not provided; the only module image understood is PTX text (a cubin
// or fatbin, recognised by its magic number, gives CUDA_ERROR_NO_BINARY_FOR_GPU), of which only
// the directives above and the `.entry` signatures are read, and JIT options other than the
// log buffers are ignored; a kernel's function is the same in every context.
//
// Environment, read once, lazily at first use (never in a constructor):
//   FERRUM_STANDIN_PROC_EXPORTED=1   cuGetProcAddress returns the addresses of the exported,
//                                    interposable symbols as the dynamic linker resolves them
//                                    (a preloaded library's cuGraphLaunch, if there is one)
//                                    instead of the internal functions.
//   FERRUM_STANDIN_LAUNCH_RESULT=<n> every cuGraphLaunch/_ptsz returns CUresult n (after counting
//                                    the call, whatever the handle).
//   FERRUM_STANDIN_LAUNCH_THROW=1    every cuGraphLaunch/_ptsz throws std::runtime_error (after
//                                    counting), to test unwinding through an interposer.
//   FERRUM_STANDIN_LAUNCH_RAISE=<sig> every cuGraphLaunch/_ptsz raises signal number sig (after
//                                    counting, before returning), so that a handler can leave
//                                    the launch with siglongjmp (a watchdog pattern).
//   FERRUM_STANDIN_LAUNCH_SLEEP_US=<n> each cuGraphLaunch/_ptsz sleeps n microseconds, so ranges
//                                    around launches have a visible duration.
//   FERRUM_STANDIN_BENCH=1           benchmark fast path (bench/): cuGraphLaunch/_ptsz do nothing
//                                    but return CUDA_SUCCESS for a non-null handle — no counter
//                                    (a cache line every thread would write), no handle or init
//                                    check — so that the shim's added nanoseconds stand out
//                                    against the cheapest possible real call into libcuda.
//   FERRUM_STANDIN_TRACE=1           print each cuGetProcAddress query to stderr as
//                                    `ferrum-standin-driver: cuGetProcAddress symbol=<s>
//                                    version=<v> flags=<f> status=<0|1|2>` (the status is a
//                                    CUdriverProcAddressQueryResult; 3 marks an invalid call).
//   FERRUM_STANDIN_INSTANTIATE_LOG=<path>  at each successful instantiation, append one line
//                                    `instantiate=<n> nodes=<N> kernel_nodes=<K>
//                                    kernels=<name>,<name>,...` (n counts instantiations from 1;
//                                    the kernel nodes' names in the order they were added), so
//                                    that a test can compare a graph's content with its name.
//   FERRUM_STANDIN_NO_HANDLE_REUSE=1 graph exec handles are opaque values, one per
//                                    instantiation, never handed out again (as a driver that
//                                    numbers its handles would): ((serial << 20 | index) << 4),
//                                    serial counting instantiations from 1, index the recycled
//                                    object's. Up to 2^40 instantiations.
//   FERRUM_STANDIN_REPORT=<path>     at exit, append one line
//                                    `driver launches=<N> launches_ptsz=<M> instantiates=<K>
//                                    procaddress_queries=<Q>` (read at exit).
//   (the empty name prints as `symbol=`)

#include <cuda.h>
#include <cudaTypedefs.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

extern "C" {
__attribute__((visibility("default"))) extern const int ferrum_standin_driver_marker;
const int ferrum_standin_driver_marker = 1;
}

// The driver's objects behind the opaque handle types of <cuda.h>.
struct CUctx_st {
  CUdevice device;
};
struct CUstream_st {
  CUcontext ctx;
  unsigned int flags;
};
// A kernel as its PTX `.entry` declares it: the name (mangled names stay mangled) and the
// offset and size of each parameter, so that a kernel node can copy its arguments.
struct KernelSignature {
  std::string name;
  std::vector<std::pair<size_t, size_t>> params;  // {offset, size}
  size_t param_bytes = 0;
};
struct CUfunc_st {
  CUmodule module;  // the module it was loaded with, or nullptr for a library kernel's function
  CUkernel kernel;  // the library kernel it belongs to, or nullptr
  KernelSignature signature;
};
struct CUmod_st {
  CUcontext ctx;
  std::vector<std::unique_ptr<CUfunc_st>> functions;
};
struct CUkern_st {
  CUlibrary library;
  CUfunc_st function;  // what cuKernelGetFunction returns (one device, so one function)
};
struct CUlib_st {
  std::vector<std::unique_ptr<CUkern_st>> kernels;
};
// A kernel node's parameters, owned by the node as the real driver owns them: kernelParams
// (or extra) point into arg_bytes, extra into extra_list.
struct KernelNodeParams {
  CUDA_KERNEL_NODE_PARAMS_v2 params{};
  std::vector<unsigned char> arg_bytes;
  std::vector<void *> arg_pointers;
  size_t extra_size = 0;
  std::vector<void *> extra_list;
};
struct CUgraphNode_st {
  CUgraph owner;
  CUgraphNodeType type;
  CUDA_MEMSET_NODE_PARAMS memset;  // valid for CU_GRAPH_NODE_TYPE_MEMSET
  KernelNodeParams kernel;         // valid for CU_GRAPH_NODE_TYPE_KERNEL
};
struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};
struct CUgraphExec_st {
  std::atomic<bool> live;
  size_t node_count;
  CUgraphExec_st *next_free;
  size_t index;                            // position among all exec objects
  std::atomic<unsigned long long> serial;  // FERRUM_STANDIN_NO_HANDLE_REUSE: the live handle's
};

namespace {

// ---------------------------------------------------------------------------------------------
// Configuration and counters

struct Config {
  bool proc_exported = false;
  bool has_launch_result = false;
  CUresult launch_result = CUDA_SUCCESS;
  bool launch_throw = false;
  int launch_raise = 0;
  unsigned long sleep_us = 0;
  bool trace = false;
  bool bench = false;
  bool no_handle_reuse = false;
  const char *instantiate_log = nullptr;
};

bool env_flag(const char *name) {
  const char *v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

Config read_config() {
  Config c;
  c.proc_exported = env_flag("FERRUM_STANDIN_PROC_EXPORTED");
  if (const char *v = std::getenv("FERRUM_STANDIN_LAUNCH_RESULT"); v != nullptr && v[0] != '\0') {
    c.has_launch_result = true;
    c.launch_result = static_cast<CUresult>(std::strtol(v, nullptr, 0));
  }
  c.launch_throw = env_flag("FERRUM_STANDIN_LAUNCH_THROW");
  if (const char *v = std::getenv("FERRUM_STANDIN_LAUNCH_RAISE"); v != nullptr && v[0] != '\0') {
    c.launch_raise = static_cast<int>(std::strtol(v, nullptr, 0));
  }
  if (const char *v = std::getenv("FERRUM_STANDIN_LAUNCH_SLEEP_US"); v != nullptr) {
    c.sleep_us = std::strtoul(v, nullptr, 0);
  }
  c.trace = env_flag("FERRUM_STANDIN_TRACE");
  c.bench = env_flag("FERRUM_STANDIN_BENCH");
  c.no_handle_reuse = env_flag("FERRUM_STANDIN_NO_HANDLE_REUSE");
  if (const char *v = std::getenv("FERRUM_STANDIN_INSTANTIATE_LOG"); v != nullptr && v[0] != '\0') {
    c.instantiate_log = v;
  }
  return c;
}

const Config &config() {
  static const Config c = read_config();
  return c;
}

std::atomic<unsigned long long> g_launches{0};
std::atomic<unsigned long long> g_launches_ptsz{0};
std::atomic<unsigned long long> g_instantiates{0};
std::atomic<unsigned long long> g_queries{0};

__attribute__((destructor)) void write_report() {
  const char *path = std::getenv("FERRUM_STANDIN_REPORT");
  if (path == nullptr || path[0] == '\0') return;
  char line[256];
  const int n = std::snprintf(line, sizeof line,
                              "driver launches=%llu launches_ptsz=%llu instantiates=%llu "
                              "procaddress_queries=%llu\n",
                              g_launches.load(), g_launches_ptsz.load(), g_instantiates.load(),
                              g_queries.load());
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (n > 0) {
    // One write of a short line to an O_APPEND file: lines of concurrent processes don't mix.
    [[maybe_unused]] const ssize_t written = write(fd, line, static_cast<size_t>(n));
  }
  close(fd);
}

// ---------------------------------------------------------------------------------------------
// State

std::atomic<bool> g_initialized{false};
thread_local CUcontext t_current = nullptr;

struct State {
  std::mutex mutex;  // guards the members below and the exec pool's free list
  CUctx_st primary{0};
  int primary_refs = 0;
  std::unordered_set<CUcontext> contexts;  // created with cuCtxCreate
  std::unordered_set<CUstream> streams;
  std::unordered_set<CUgraph> graphs;
  std::unordered_set<CUgraphNode> nodes;  // the nodes of live graphs
  std::unordered_set<CUdeviceptr> allocations;
  std::unordered_set<CUmodule> modules;
  std::unordered_set<CUfunction> functions;  // of live modules and libraries
  std::unordered_set<CUlibrary> libraries;
  std::unordered_set<CUkernel> kernels;
};

// Created at first use and never destroyed, so that calls made while the process exits (from
// other libraries' destructors) still find it.
State &st() {
  static State *s = new State;
  return *s;
}

constexpr char kDeviceName[] = "ferrum-replay stand-in device";

bool initialized() {
  return g_initialized.load(std::memory_order_acquire);
}

bool context_valid_locked(CUcontext ctx) {
  return ctx == &st().primary || st().contexts.count(ctx) != 0;
}

// Graph exec handles: objects in chunks that are never freed, so a launch can check a handle
// without a lock; destroyed ones go on a LIFO free list and are handed out again first.
constexpr size_t kExecChunk = 1024;
constexpr size_t kMaxExecChunks = 1024;
std::atomic<CUgraphExec_st *> g_exec_chunks[kMaxExecChunks];
std::atomic<size_t> g_exec_chunk_count{0};
size_t g_exec_used_in_last_chunk = kExecChunk;  // under st().mutex
CUgraphExec_st *g_exec_free = nullptr;          // under st().mutex

// FERRUM_STANDIN_NO_HANDLE_REUSE: handles are ((serial << 20 | index) << 4), never reused.
constexpr unsigned kIndexBits = 20;    // kExecChunk * kMaxExecChunks objects
unsigned long long g_exec_serial = 0;  // under st().mutex

CUgraphExec_st *exec_object(size_t index) {
  const size_t chunk = index / kExecChunk;
  if (chunk >= g_exec_chunk_count.load(std::memory_order_acquire)) return nullptr;
  return &g_exec_chunks[chunk].load(std::memory_order_acquire)[index % kExecChunk];
}

// The object behind a handle, or null when the handle was never handed out.
CUgraphExec_st *exec_resolve(CUgraphExec h) {
  const auto p = reinterpret_cast<uintptr_t>(h);
  if (config().no_handle_reuse) {
    const uintptr_t code = p >> 4;
    CUgraphExec_st *e =
        (p & 15) == 0 ? exec_object(code & ((uintptr_t{1} << kIndexBits) - 1)) : nullptr;
    return e != nullptr && e->serial.load(std::memory_order_acquire) == (code >> kIndexBits)
               ? e
               : nullptr;
  }
  const size_t chunks = g_exec_chunk_count.load(std::memory_order_acquire);
  for (size_t i = 0; i < chunks; ++i) {
    const auto base = reinterpret_cast<uintptr_t>(g_exec_chunks[i].load(std::memory_order_acquire));
    if (p >= base && p < base + kExecChunk * sizeof(CUgraphExec_st) &&
        (p - base) % sizeof(CUgraphExec_st) == 0) {
      return h;
    }
  }
  return nullptr;
}

bool exec_live(CUgraphExec h) {
  const CUgraphExec_st *e = exec_resolve(h);
  return e != nullptr && e->live.load(std::memory_order_acquire);
}

// The handle that names `e` now (under st().mutex).
CUgraphExec exec_handle_locked(CUgraphExec_st *e) {
  if (!config().no_handle_reuse) return e;
  const unsigned long long serial = ++g_exec_serial;
  e->serial.store(serial, std::memory_order_release);
  return reinterpret_cast<CUgraphExec>(((uintptr_t{serial} << kIndexBits) | e->index) << 4);
}

// Under st().mutex.
CUgraphExec exec_take_locked() {
  if (g_exec_free != nullptr) {
    CUgraphExec e = g_exec_free;
    g_exec_free = e->next_free;
    return e;
  }
  if (g_exec_used_in_last_chunk == kExecChunk) {
    const size_t n = g_exec_chunk_count.load(std::memory_order_relaxed);
    if (n == kMaxExecChunks) return nullptr;
    auto *chunk = new CUgraphExec_st[kExecChunk]();
    g_exec_chunks[n].store(chunk, std::memory_order_release);
    g_exec_chunk_count.store(n + 1, std::memory_order_release);
    g_exec_used_in_last_chunk = 0;
  }
  const size_t n = g_exec_chunk_count.load(std::memory_order_relaxed);
  CUgraphExec e = &g_exec_chunks[n - 1].load(std::memory_order_relaxed)[g_exec_used_in_last_chunk];
  e->index = (n - 1) * kExecChunk + g_exec_used_in_last_chunk++;
  return e;
}

#define STANDIN_REQUIRE_INIT()                             \
  do {                                                     \
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Internal functions: what cuGetProcAddress hands out by default. noinline/noipa keep each one a
// function of its own, distinct from the exported wrapper that calls it.

#define INTERNAL static __attribute__((noinline, noipa))

INTERNAL CUresult i_cuGetErrorString(CUresult error, const char **pStr);
INTERNAL CUresult i_cuGetErrorName(CUresult error, const char **pStr);

struct ErrorText {
  CUresult code;
  const char *name;
  const char *text;
};
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain."},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT",
     "the launch timed out and was terminated"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText *find_error(CUresult error) {
  for (const ErrorText &e : kErrors) {
    if (e.code == error) return &e;
  }
  return nullptr;
}

INTERNAL CUresult i_cuGetErrorString(CUresult error, const char **pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText *e = find_error(error);
  *pStr = e != nullptr ? e->text : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

INTERNAL CUresult i_cuGetErrorName(CUresult error, const char **pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText *e = find_error(error);
  *pStr = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

INTERNAL CUresult i_cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  g_initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuDriverGetVersion(int *driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = CUDA_VERSION;  // 13000
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuDeviceGet(CUdevice *device, int ordinal) {
  STANDIN_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuDeviceGetCount(int *count) {
  STANDIN_REQUIRE_INIT();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = 1;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuDeviceGetName(char *name, int len, CUdevice dev) {
  STANDIN_REQUIRE_INIT();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", kDeviceName);
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  STANDIN_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(st().mutex);
  ++st().primary_refs;
  *pctx = &st().primary;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuDevicePrimaryCtxRelease(CUdevice dev) {
  STANDIN_REQUIRE_INIT();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --st().primary_refs;
  return CUDA_SUCCESS;
}

CUresult create_context(CUcontext *pctx, CUdevice dev) {
  STANDIN_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  auto *ctx = new CUctx_st{dev};
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    st().contexts.insert(ctx);
  }
  t_current = ctx;
  *pctx = ctx;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  (void)flags;
  return create_context(pctx, dev);
}

INTERNAL CUresult i_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                   unsigned int flags, CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  (void)flags;
  return create_context(pctx, dev);
}

INTERNAL CUresult i_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                   unsigned int flags, CUdevice dev) {
  (void)ctxCreateParams;
  (void)flags;
  return create_context(pctx, dev);
}

INTERNAL CUresult i_cuCtxDestroy(CUcontext ctx) {
  STANDIN_REQUIRE_INIT();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().contexts.erase(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (t_current == ctx) t_current = nullptr;
  delete ctx;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuCtxSetCurrent(CUcontext ctx) {
  STANDIN_REQUIRE_INIT();
  if (ctx != nullptr) {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (!context_valid_locked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  t_current = ctx;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuCtxGetCurrent(CUcontext *pctx) {
  STANDIN_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = t_current;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuCtxSynchronize() {
  STANDIN_REQUIRE_INIT();
  return t_current != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

INTERNAL CUresult i_cuCtxSynchronize_v2(CUcontext ctx) {
  STANDIN_REQUIRE_INIT();
  if (ctx == nullptr) ctx = t_current;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(st().mutex);
  return context_valid_locked(ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

INTERNAL CUresult i_cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  STANDIN_REQUIRE_INIT();
  if (phStream == nullptr || (Flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto *s = new CUstream_st{t_current, Flags};
  std::lock_guard<std::mutex> lock(st().mutex);
  st().streams.insert(s);
  *phStream = s;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuStreamDestroy(CUstream hStream) {
  STANDIN_REQUIRE_INIT();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().streams.erase(hStream) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete hStream;
  return CUDA_SUCCESS;
}

CUresult stream_synchronize(CUstream hStream) {
  STANDIN_REQUIRE_INIT();
  if (hStream == nullptr || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) {
    return t_current != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  }
  std::lock_guard<std::mutex> lock(st().mutex);
  return st().streams.count(hStream) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

INTERNAL CUresult i_cuStreamSynchronize(CUstream hStream) {
  return stream_synchronize(hStream);
}

INTERNAL CUresult i_cuStreamSynchronize_ptsz(CUstream hStream) {
  return stream_synchronize(hStream);
}

INTERNAL CUresult i_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  STANDIN_REQUIRE_INIT();
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  void *p = std::malloc(bytesize);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto d = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  std::lock_guard<std::mutex> lock(st().mutex);
  st().allocations.insert(d);
  *dptr = d;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuMemFree_v2(CUdeviceptr dptr) {
  STANDIN_REQUIRE_INIT();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().allocations.erase(dptr) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(reinterpret_cast<void *>(static_cast<uintptr_t>(dptr)));
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Modules and libraries. The only image format the stand-in understands is PTX text (which the
// real driver JIT-compiles): it reads the `.entry` declarations and makes one function (module)
// or kernel (library) of each, with the parameter layout its argument list declares. Bodies are
// checked for balanced braces only.

// The newest PTX ISA the CUDA 13.0 driver's JIT accepts.
constexpr int kMaxPtxVersion = 9 * 10 + 0;

bool ptx_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$' || c == '%' || c == '.';
}

// PTX identifiers: [a-zA-Z][a-zA-Z0-9_$]* or [_$%][a-zA-Z0-9_$]+.
bool ptx_identifier(const std::string &s) {
  if (s.empty()) return false;
  auto follow = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '$';
  };
  const char c0 = s[0];
  const bool letter = (c0 >= 'a' && c0 <= 'z') || (c0 >= 'A' && c0 <= 'Z');
  if (!letter && !((c0 == '_' || c0 == '$' || c0 == '%') && s.size() > 1)) return false;
  for (size_t i = 1; i < s.size(); ++i) {
    if (!follow(s[i])) return false;
  }
  return true;
}

// Splits PTX text into words (directives, identifiers, numbers) and single punctuation
// characters, dropping comments and string literals. False on an unterminated comment.
bool ptx_tokens(const char *text, std::vector<std::string> &out) {
  const char *p = text;
  while (*p != '\0') {
    const char c = *p;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      ++p;
    } else if (c == '/' && p[1] == '/') {
      while (*p != '\0' && *p != '\n') ++p;
    } else if (c == '/' && p[1] == '*') {
      const char *end = std::strstr(p + 2, "*/");
      if (end == nullptr) return false;
      p = end + 2;
    } else if (c == '"') {
      ++p;
      while (*p != '\0' && *p != '"') ++p;
      if (*p == '\0') return false;
      ++p;
      out.emplace_back("\"\"");
    } else if (ptx_word_char(c)) {
      const char *start = p;
      while (ptx_word_char(*p)) ++p;
      out.emplace_back(start, static_cast<size_t>(p - start));
    } else {
      out.emplace_back(1, c);
      ++p;
    }
  }
  return true;
}

size_t ptx_type_size(const std::string &t) {
  static const std::pair<const char *, size_t> kTypes[] = {
      {".u8", 1},   {".s8", 1},     {".b8", 1},         {".u16", 2},    {".s16", 2},
      {".b16", 2},  {".f16", 2},    {".u32", 4},        {".s32", 4},    {".b32", 4},
      {".f32", 4},  {".u64", 8},    {".s64", 8},        {".b64", 8},    {".f64", 8},
      {".pred", 1}, {".texref", 8}, {".samplerref", 8}, {".surfref", 8}};
  for (const auto &[name, size] : kTypes) {
    if (t == name) return size;
  }
  return 0;
}

bool parse_number(const std::string &s, size_t &out) {
  if (s.empty()) return false;
  char *end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (*end != '\0') return false;
  out = static_cast<size_t>(v);
  return true;
}

// One parameter declaration, e.g. `.param .u64 .ptr .global .align 16 p` or
// `.param .align 8 .b8 s[24]`, added to `sig` at its aligned offset.
bool parse_ptx_param(const std::vector<std::string> &t, KernelSignature &sig, std::string &error) {
  if (t.empty() || t[0] != ".param") {
    error = "kernel parameter without .param";
    return false;
  }
  size_t align = 0, size = 0, count = 1;
  bool named = false;
  for (size_t i = 1; i < t.size(); ++i) {
    if (t[i] == ".align") {
      if (i + 1 >= t.size() || !parse_number(t[i + 1], align) || align == 0 ||
          (align & (align - 1)) != 0) {
        error = "bad .align in a kernel parameter";
        return false;
      }
      ++i;
    } else if (t[i] == ".ptr" || t[i] == ".global" || t[i] == ".const" || t[i] == ".local" ||
               t[i] == ".shared") {
      // attributes of a pointer parameter
    } else if (size == 0 && ptx_type_size(t[i]) != 0) {
      size = ptx_type_size(t[i]);
    } else if (!named && size != 0 && ptx_identifier(t[i])) {
      named = true;
    } else if (named && t[i] == "[" && i + 2 < t.size() && t[i + 2] == "]") {
      if (!parse_number(t[i + 1], count) || count == 0) {
        error = "bad array size in a kernel parameter";
        return false;
      }
      i += 2;
    } else {
      error = "unexpected '" + t[i] + "' in a kernel parameter";
      return false;
    }
  }
  if (size == 0 || !named) {
    error = "kernel parameter without a type or a name";
    return false;
  }
  if (align < size) align = size;
  const size_t offset = (sig.param_bytes + align - 1) / align * align;
  sig.params.emplace_back(offset, size * count);
  sig.param_bytes = offset + size * count;
  return true;
}

// Parses a module image. CUDA_SUCCESS with the kernels it defines, or the driver's error for
// it with a message (for the JIT error log).
CUresult parse_image(const void *image, std::vector<KernelSignature> &kernels, std::string &error) {
  const auto *bytes = static_cast<const unsigned char *>(image);
  static constexpr unsigned char kElf[] = {0x7f, 'E', 'L', 'F'};
  static constexpr unsigned char kFatbin[] = {0x50, 0xed, 0x55, 0xba};      // fatbin data
  static constexpr unsigned char kFatbinWrap[] = {0xb1, 0x43, 0x62, 0x46};  // __fatBinC_Wrapper_t
  auto starts_with = [bytes](const unsigned char(&magic)[4]) {
    for (size_t i = 0; i < 4; ++i) {
      if (bytes[i] != magic[i]) return false;  // stops at a text image's NUL
    }
    return true;
  };
  if (starts_with(kElf) || starts_with(kFatbin) || starts_with(kFatbinWrap)) {
    error = "the stand-in runs no device code: only PTX images are accepted";
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  std::vector<std::string> t;
  if (!ptx_tokens(static_cast<const char *>(image), t)) {
    error = "unterminated comment or string";
    return CUDA_ERROR_INVALID_PTX;
  }
  auto invalid = [&](std::string message) {
    error = std::move(message);
    return CUDA_ERROR_INVALID_PTX;
  };
  // .version major.minor, then .target, before anything else.
  if (t.size() < 4 || t[0] != ".version") return invalid("missing .version directive");
  const std::string &v = t[1];
  const size_t dot = v.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 >= v.size()) return invalid("bad .version");
  const int version = std::atoi(v.substr(0, dot).c_str()) * 10 + std::atoi(v.c_str() + dot + 1);
  if (version > kMaxPtxVersion) {
    error = "PTX ISA version " + v + " is newer than this driver's JIT";
    return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  }
  if (t[2] != ".target") return invalid("missing .target directive");
  int depth = 0;
  for (size_t i = 2; i < t.size(); ++i) {
    if (t[i] == "{") {
      ++depth;
      continue;
    }
    if (t[i] == "}") {
      if (--depth < 0) return invalid("unbalanced '}'");
      continue;
    }
    if (depth > 0 || t[i] != ".entry") continue;
    if (++i >= t.size() || !ptx_identifier(t[i])) return invalid(".entry without a valid name");
    KernelSignature sig;
    sig.name = t[i++];
    if (i < t.size() && t[i] == "(") {
      std::vector<std::string> param;
      for (++i;; ++i) {
        if (i >= t.size()) return invalid("unterminated parameter list of " + sig.name);
        if (t[i] == "," || t[i] == ")") {
          if (!param.empty() && !parse_ptx_param(param, sig, error)) return CUDA_ERROR_INVALID_PTX;
          if (param.empty() && (t[i] == "," || !sig.params.empty())) {
            return invalid("empty parameter in " + sig.name);
          }
          param.clear();
          if (t[i] == ")") break;
        } else {
          param.push_back(t[i]);
        }
      }
      ++i;
    }
    // Performance directives (.maxntid 128, 1, 1 ...) up to the body, or `;` for a declaration.
    while (i < t.size() && t[i] != "{" && t[i] != ";") ++i;
    if (i >= t.size()) return invalid(".entry " + sig.name + " without a body");
    if (t[i] == ";") continue;  // a declaration defines nothing
    for (const KernelSignature &k : kernels) {
      if (k.name == sig.name) return invalid("duplicate .entry " + sig.name);
    }
    kernels.push_back(std::move(sig));
    --i;  // let the loop count the body's '{'
  }
  if (depth != 0) return invalid("unbalanced '{'");
  return CUDA_SUCCESS;
}

// JIT options of cuModuleLoadDataEx/cuLibraryLoadData: the stand-in honours only the log
// buffers, writing the parse error into the error log and nothing into the info log (the SIZE
// options are in/out: buffer size in, bytes written out).
void write_jit_logs(CUjit_option *options, void **values, unsigned int n,
                    const std::string &error) {
  char *error_log = nullptr, *info_log = nullptr;
  size_t error_size = 0, info_size = 0;
  for (unsigned int i = 0; i < n; ++i) {
    const auto as_size = [&] {
      return static_cast<size_t>(reinterpret_cast<uintptr_t>(values[i]));
    };
    switch (options[i]) {
      case CU_JIT_ERROR_LOG_BUFFER:
        error_log = static_cast<char *>(values[i]);
        break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        error_size = as_size();
        break;
      case CU_JIT_INFO_LOG_BUFFER:
        info_log = static_cast<char *>(values[i]);
        break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        info_size = as_size();
        break;
      default:
        break;
    }
  }
  size_t error_written = 0;
  if (error_log != nullptr && error_size > 0) {
    error_written = std::min(error.size(), error_size - 1);
    std::memcpy(error_log, error.data(), error_written);
    error_log[error_written] = '\0';
    if (error_written > 0) ++error_written;
  }
  if (info_log != nullptr && info_size > 0) info_log[0] = '\0';
  for (unsigned int i = 0; i < n; ++i) {
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      values[i] = reinterpret_cast<void *>(static_cast<uintptr_t>(error_written));
    } else if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) {
      values[i] = nullptr;
    }
  }
}

CUresult load_module(CUmodule *module, const void *image, unsigned int numOptions,
                     CUjit_option *options, void **optionValues) {
  STANDIN_REQUIRE_INIT();
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (numOptions > 0 && (options == nullptr || optionValues == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<KernelSignature> kernels;
  std::string error;
  const CUresult r = parse_image(image, kernels, error);
  if (numOptions > 0) write_jit_logs(options, optionValues, numOptions, error);
  if (r != CUDA_SUCCESS) return r;
  auto *m = new CUmod_st{t_current, {}};
  std::lock_guard<std::mutex> lock(st().mutex);
  for (KernelSignature &k : kernels) {
    m->functions.push_back(std::make_unique<CUfunc_st>(CUfunc_st{m, nullptr, std::move(k)}));
    st().functions.insert(m->functions.back().get());
  }
  st().modules.insert(m);
  *module = m;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuModuleLoadData(CUmodule *module, const void *image) {
  return load_module(module, image, 0, nullptr, nullptr);
}

INTERNAL CUresult i_cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                       CUjit_option *options, void **optionValues) {
  return load_module(module, image, numOptions, options, optionValues);
}

INTERNAL CUresult i_cuModuleUnload(CUmodule hmod) {
  STANDIN_REQUIRE_INIT();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().modules.erase(hmod) == 0) return CUDA_ERROR_INVALID_VALUE;
    for (const auto &f : hmod->functions) st().functions.erase(f.get());
  }
  delete hmod;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  STANDIN_REQUIRE_INIT();
  if (hfunc == nullptr || hmod == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().modules.count(hmod) == 0) return CUDA_ERROR_INVALID_VALUE;
  for (const auto &f : hmod->functions) {
    if (f->signature.name == name) {
      *hfunc = f.get();
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

INTERNAL CUresult i_cuFuncGetName(const char **name, CUfunction hfunc) {
  STANDIN_REQUIRE_INIT();
  if (name == nullptr || hfunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().functions.count(hfunc) == 0) return CUDA_ERROR_INVALID_VALUE;
  *name = hfunc->signature.name.c_str();
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuLibraryLoadData(CUlibrary *library, const void *code,
                                      CUjit_option *jitOptions, void **jitOptionsValues,
                                      unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                      void **libraryOptionValues, unsigned int numLibraryOptions) {
  STANDIN_REQUIRE_INIT();
  if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((numJitOptions > 0 && (jitOptions == nullptr || jitOptionsValues == nullptr)) ||
      (numLibraryOptions > 0 && (libraryOptions == nullptr || libraryOptionValues == nullptr))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned int i = 0; i < numLibraryOptions; ++i) {
    if (libraryOptions[i] < 0 || libraryOptions[i] >= CU_LIBRARY_NUM_OPTIONS) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  std::vector<KernelSignature> kernels;
  std::string error;
  const CUresult r = parse_image(code, kernels, error);
  if (numJitOptions > 0) write_jit_logs(jitOptions, jitOptionsValues, numJitOptions, error);
  if (r != CUDA_SUCCESS) return r;
  auto *lib = new CUlib_st;
  std::lock_guard<std::mutex> lock(st().mutex);
  for (KernelSignature &k : kernels) {
    auto kern = std::make_unique<CUkern_st>();
    kern->library = lib;
    kern->function = CUfunc_st{nullptr, kern.get(), std::move(k)};
    st().kernels.insert(kern.get());
    st().functions.insert(&kern->function);
    lib->kernels.push_back(std::move(kern));
  }
  st().libraries.insert(lib);
  *library = lib;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuLibraryUnload(CUlibrary library) {
  STANDIN_REQUIRE_INIT();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().libraries.erase(library) == 0) return CUDA_ERROR_INVALID_VALUE;
    for (const auto &k : library->kernels) {
      st().kernels.erase(k.get());
      st().functions.erase(&k->function);
    }
  }
  delete library;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
  STANDIN_REQUIRE_INIT();
  if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().libraries.count(library) == 0) return CUDA_ERROR_INVALID_HANDLE;
  for (const auto &k : library->kernels) {
    if (k->function.signature.name == name) {
      *pKernel = k.get();
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

INTERNAL CUresult i_cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
  STANDIN_REQUIRE_INIT();
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().kernels.count(kernel) == 0) return CUDA_ERROR_INVALID_HANDLE;
  *pFunc = &kernel->function;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuKernelGetName(const char **name, CUkernel hfunc) {
  STANDIN_REQUIRE_INIT();
  if (name == nullptr || hfunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().kernels.count(hfunc) == 0) return CUDA_ERROR_INVALID_VALUE;
  *name = hfunc->function.signature.name.c_str();
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
  STANDIN_REQUIRE_INIT();
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto *g = new CUgraph_st;
  std::lock_guard<std::mutex> lock(st().mutex);
  st().graphs.insert(g);
  *phGraph = g;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuGraphDestroy(CUgraph hGraph) {
  STANDIN_REQUIRE_INIT();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().graphs.erase(hGraph) == 0) return CUDA_ERROR_INVALID_VALUE;
    for (const auto &node : hGraph->nodes) st().nodes.erase(node.get());
  }
  delete hGraph;
  return CUDA_SUCCESS;
}

// Under st().mutex: the graph is live and every dependency is one of its nodes.
bool graph_and_dependencies_valid_locked(CUgraph g, const CUgraphNode *deps, size_t n) {
  if (st().graphs.count(g) == 0) return false;
  if (n > 0 && deps == nullptr) return false;
  for (size_t i = 0; i < n; ++i) {
    if (deps[i] == nullptr || deps[i]->owner != g) return false;
  }
  return true;
}

// Under st().mutex: validates a kernel node's parameters and copies them, with the argument
// values, into `out` (in place: `out` holds pointers into itself). The function is `func`, or
// `kern` when func is NULL; either must be live. The arguments come from kernelParams (one
// pointer per parameter the kernel's PTX declares) or from extra (CU_LAUNCH_PARAM_BUFFER_POINTER
// and _SIZE), not both, as cuGraphAddKernelNode documents.
CUresult copy_kernel_params_locked(const CUDA_KERNEL_NODE_PARAMS_v2 &p, KernelNodeParams &out) {
  const CUfunc_st *f = nullptr;
  if (p.func != nullptr) {
    if (st().functions.count(p.func) == 0) return CUDA_ERROR_INVALID_VALUE;
    f = p.func;
  } else if (p.kern != nullptr) {
    if (st().kernels.count(p.kern) == 0) return CUDA_ERROR_INVALID_VALUE;
    const CUcontext ctx = p.ctx != nullptr ? p.ctx : t_current;
    if (ctx == nullptr || !context_valid_locked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    f = &p.kern->function;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (p.gridDimX == 0 || p.gridDimY == 0 || p.gridDimZ == 0 || p.blockDimX == 0 ||
      p.blockDimY == 0 || p.blockDimZ == 0 ||
      static_cast<unsigned long long>(p.blockDimX) * p.blockDimY * p.blockDimZ > 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (p.kernelParams != nullptr && p.extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  const KernelSignature &sig = f->signature;
  out.params = p;
  out.params.kernelParams = nullptr;
  out.params.extra = nullptr;
  if (p.func != nullptr) {  // kern and ctx are ignored when func is set
    out.params.kern = nullptr;
    out.params.ctx = nullptr;
  }
  if (sig.params.empty()) return CUDA_SUCCESS;
  if (p.kernelParams != nullptr) {
    out.arg_bytes.assign(sig.param_bytes, 0);
    for (const auto &[offset, size] : sig.params) {
      if (p.kernelParams[out.arg_pointers.size()] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(out.arg_bytes.data() + offset, p.kernelParams[out.arg_pointers.size()], size);
      out.arg_pointers.push_back(out.arg_bytes.data() + offset);
    }
    out.params.kernelParams = out.arg_pointers.data();
    return CUDA_SUCCESS;
  }
  if (p.extra == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const void *buffer = nullptr;
  const size_t *buffer_size = nullptr;
  for (size_t i = 0; p.extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = p.extra[i + 1];
    } else if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      buffer_size = static_cast<const size_t *>(p.extra[i + 1]);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (buffer == nullptr || buffer_size == nullptr || *buffer_size < sig.param_bytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto *bytes = static_cast<const unsigned char *>(buffer);
  out.arg_bytes.assign(bytes, bytes + *buffer_size);
  out.extra_size = *buffer_size;
  out.extra_list = {CU_LAUNCH_PARAM_BUFFER_POINTER, out.arg_bytes.data(),
                    CU_LAUNCH_PARAM_BUFFER_SIZE, &out.extra_size, CU_LAUNCH_PARAM_END};
  out.params.extra = out.extra_list.data();
  return CUDA_SUCCESS;
}

CUresult add_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                  size_t numDependencies, CUgraphNodeType type,
                  const CUDA_MEMSET_NODE_PARAMS *memset,
                  const CUDA_KERNEL_NODE_PARAMS_v2 *kernel = nullptr) {
  STANDIN_REQUIRE_INIT();
  if (phGraphNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (!graph_and_dependencies_valid_locked(hGraph, dependencies, numDependencies)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto node = std::make_unique<CUgraphNode_st>();
  node->owner = hGraph;
  node->type = type;
  if (memset != nullptr) node->memset = *memset;
  if (kernel != nullptr) {
    if (const CUresult r = copy_kernel_params_locked(*kernel, node->kernel); r != CUDA_SUCCESS) {
      return r;
    }
  }
  *phGraphNode = node.get();
  st().nodes.insert(node.get());
  hGraph->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies, size_t numDependencies) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EMPTY,
                  nullptr);
}

INTERNAL CUresult i_cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                         CUcontext ctx) {
  STANDIN_REQUIRE_INIT();
  if (memsetParams == nullptr || memsetParams->dst == 0 || memsetParams->width == 0 ||
      memsetParams->height == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const unsigned es = memsetParams->elementSize;
  if (es != 1 && es != 2 && es != 4) return CUDA_ERROR_INVALID_VALUE;
  if (memsetParams->height > 1 && memsetParams->pitch < memsetParams->width * es) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (ctx == nullptr) ctx = t_current;
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (ctx == nullptr || !context_valid_locked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_MEMSET,
                  memsetParams);
}

INTERNAL CUresult i_cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  if (nodeParams == nullptr || nodeParams->func == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS_v2 p{};
  p.func = nodeParams->func;
  p.gridDimX = nodeParams->gridDimX;
  p.gridDimY = nodeParams->gridDimY;
  p.gridDimZ = nodeParams->gridDimZ;
  p.blockDimX = nodeParams->blockDimX;
  p.blockDimY = nodeParams->blockDimY;
  p.blockDimZ = nodeParams->blockDimZ;
  p.sharedMemBytes = nodeParams->sharedMemBytes;
  p.kernelParams = nodeParams->kernelParams;
  p.extra = nodeParams->extra;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_KERNEL,
                  nullptr, &p);
}

INTERNAL CUresult i_cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                            const CUgraphNode *dependencies, size_t numDependencies,
                                            const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
  if (nodeParams == nullptr || (nodeParams->func == nullptr && nodeParams->kern == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_KERNEL,
                  nullptr, nodeParams);
}

// Two-call protocol: nodes == NULL gives the count; otherwise the first min(count, *numNodes)
// nodes (in the order they were added), NULL in the remaining entries, and *numNodes set to
// the number filled.
INTERNAL CUresult i_cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
  STANDIN_REQUIRE_INIT();
  if (numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().graphs.count(hGraph) == 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t count = hGraph->nodes.size();
  if (nodes == nullptr) {
    *numNodes = count;
    return CUDA_SUCCESS;
  }
  const size_t filled = std::min(count, *numNodes);
  for (size_t i = 0; i < *numNodes; ++i) nodes[i] = i < filled ? hGraph->nodes[i].get() : nullptr;
  *numNodes = filled;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
  STANDIN_REQUIRE_INIT();
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().nodes.count(hNode) == 0) return CUDA_ERROR_INVALID_VALUE;
  *type = hNode->type;
  return CUDA_SUCCESS;
}

// Under st().mutex: the node's kernel parameters, or nullptr if it is not a live kernel node.
const CUDA_KERNEL_NODE_PARAMS_v2 *kernel_params_locked(CUgraphNode hNode) {
  if (st().nodes.count(hNode) == 0 || hNode->type != CU_GRAPH_NODE_TYPE_KERNEL) return nullptr;
  return &hNode->kernel.params;
}

// The CUDA 10.0 ABI: no kern field, so a node made from a CUkernel reports that kernel's
// function (what cuKernelGetFunction returns).
INTERNAL CUresult i_cuGraphKernelNodeGetParams(CUgraphNode hNode,
                                               CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  STANDIN_REQUIRE_INIT();
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  const CUDA_KERNEL_NODE_PARAMS_v2 *p = kernel_params_locked(hNode);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  nodeParams->func = p->func;
  if (p->func == nullptr && st().kernels.count(p->kern) != 0) nodeParams->func = &p->kern->function;
  nodeParams->gridDimX = p->gridDimX;
  nodeParams->gridDimY = p->gridDimY;
  nodeParams->gridDimZ = p->gridDimZ;
  nodeParams->blockDimX = p->blockDimX;
  nodeParams->blockDimY = p->blockDimY;
  nodeParams->blockDimZ = p->blockDimZ;
  nodeParams->sharedMemBytes = p->sharedMemBytes;
  nodeParams->kernelParams = p->kernelParams;
  nodeParams->extra = p->extra;
  return CUDA_SUCCESS;
}

// The CUDA 12.0 ABI: func as added (NULL for a node made from a CUkernel), kern and ctx.
INTERNAL CUresult i_cuGraphKernelNodeGetParams_v2(CUgraphNode hNode,
                                                  CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
  STANDIN_REQUIRE_INIT();
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  const CUDA_KERNEL_NODE_PARAMS_v2 *p = kernel_params_locked(hNode);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *nodeParams = *p;
  return CUDA_SUCCESS;
}

constexpr unsigned long long kKnownInstantiateFlags =
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;

// Under st().mutex: one line for FERRUM_STANDIN_INSTANTIATE_LOG,
// `instantiate=<ordinal> nodes=<N> kernel_nodes=<K> kernels=<name>,<name>,...` (kernels in node
// order, `kernels=` empty when there are none).
void log_instantiate_locked(unsigned long long ordinal, CUgraph g) {
  std::string kernels;
  size_t kernel_nodes = 0;
  for (const auto &node : g->nodes) {
    if (node->type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    const CUDA_KERNEL_NODE_PARAMS_v2 &p = node->kernel.params;
    const char *name = "?";
    if (p.func != nullptr && st().functions.count(p.func) != 0) {
      name = p.func->signature.name.c_str();
    } else if (p.func == nullptr && st().kernels.count(p.kern) != 0) {
      name = p.kern->function.signature.name.c_str();
    }
    kernels += (kernel_nodes++ == 0 ? "" : ",");
    kernels += name;
  }
  const std::string line =
      "instantiate=" + std::to_string(ordinal) + " nodes=" + std::to_string(g->nodes.size()) +
      " kernel_nodes=" + std::to_string(kernel_nodes) + " kernels=" + kernels + "\n";
  const int fd = open(config().instantiate_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t written = write(fd, line.data(), line.size());
  close(fd);
}

CUresult instantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
  STANDIN_REQUIRE_INIT();
  if (phGraphExec == nullptr || (flags & ~kKnownInstantiateFlags) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().graphs.count(hGraph) == 0) return CUDA_ERROR_INVALID_VALUE;
  CUgraphExec e = exec_take_locked();
  if (e == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  e->node_count = hGraph->nodes.size();
  e->next_free = nullptr;
  e->live.store(true, std::memory_order_release);
  *phGraphExec = exec_handle_locked(e);
  const unsigned long long ordinal = g_instantiates.fetch_add(1, std::memory_order_relaxed) + 1;
  if (config().instantiate_log != nullptr) log_instantiate_locked(ordinal, hGraph);
  return CUDA_SUCCESS;
}

// The legacy 5-argument form (cuGraphInstantiate, CUDA 10.0) and its CUDA 11.0 twin.
CUresult instantiate_with_log(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                              char *logBuffer, size_t bufferSize) {
  const CUresult r = instantiate(phGraphExec, hGraph, 0);
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return r;
}

INTERNAL CUresult i_cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer,
                                       size_t bufferSize) {
  return instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

INTERNAL CUresult i_cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                          CUgraphNode *phErrorNode, char *logBuffer,
                                          size_t bufferSize) {
  return instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

INTERNAL CUresult i_cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                unsigned long long flags) {
  return instantiate(phGraphExec, hGraph, flags);
}

CUresult instantiate_with_params(CUgraphExec *phGraphExec, CUgraph hGraph,
                                 CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = instantiate(phGraphExec, hGraph, params->flags);
  params->hErrNode_out = nullptr;
  params->result_out =
      r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}

INTERNAL CUresult i_cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                 CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
  return instantiate_with_params(phGraphExec, hGraph, params);
}

INTERNAL CUresult i_cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                      CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
  return instantiate_with_params(phGraphExec, hGraph, params);
}

CUresult upload(CUgraphExec hGraphExec) {
  STANDIN_REQUIRE_INIT();
  return exec_live(hGraphExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

INTERNAL CUresult i_cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  (void)hStream;
  return upload(hGraphExec);
}

INTERNAL CUresult i_cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  (void)hStream;
  return upload(hGraphExec);
}

CUresult launch(CUgraphExec hGraphExec, std::atomic<unsigned long long> &counter) {
  const Config &c = config();
  if (c.bench) return hGraphExec != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  counter.fetch_add(1, std::memory_order_relaxed);
  if (c.sleep_us != 0) std::this_thread::sleep_for(std::chrono::microseconds(c.sleep_us));
  if (c.launch_raise != 0) std::raise(c.launch_raise);
  if (c.launch_throw) {
    throw std::runtime_error("ferrum-replay stand-in driver: injected exception in cuGraphLaunch");
  }
  if (c.has_launch_result) return c.launch_result;
  STANDIN_REQUIRE_INIT();
  return exec_live(hGraphExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

INTERNAL CUresult i_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  (void)hStream;
  return launch(hGraphExec, g_launches);
}

INTERNAL CUresult i_cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  (void)hStream;
  return launch(hGraphExec, g_launches_ptsz);
}

INTERNAL CUresult i_cuGraphExecDestroy(CUgraphExec hGraphExec) {
  STANDIN_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(st().mutex);
  if (!exec_live(hGraphExec)) return CUDA_ERROR_INVALID_VALUE;
  CUgraphExec_st *e = exec_resolve(hGraphExec);
  e->live.store(false, std::memory_order_release);
  e->serial.store(0, std::memory_order_release);
  e->next_free = g_exec_free;
  g_exec_free = e;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult *status);

INTERNAL CUresult i_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags) {
  return i_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Exported functions: thin wrappers around the internal ones (names as the real driver exports).

extern "C" {

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
  return i_cuGetErrorString(error, pStr);
}
CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
  return i_cuGetErrorName(error, pStr);
}
CUresult CUDAAPI cuInit(unsigned int Flags) {
  return i_cuInit(Flags);
}
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
  return i_cuDriverGetVersion(driverVersion);
}
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  return i_cuDeviceGet(device, ordinal);
}
CUresult CUDAAPI cuDeviceGetCount(int *count) {
  return i_cuDeviceGetCount(count);
}
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
  return i_cuDeviceGetName(name, len, dev);
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  return i_cuDevicePrimaryCtxRetain(pctx, dev);
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  return i_cuDevicePrimaryCtxRelease(dev);
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return i_cuDevicePrimaryCtxRelease(dev);
}
CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  return i_cuCtxCreate(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  return i_cuCtxCreate(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev) {
  return i_cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev) {
  return i_cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev);
}
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) {
  return i_cuCtxDestroy(ctx);
}
CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  return i_cuCtxDestroy(ctx);
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  return i_cuCtxSetCurrent(ctx);
}
CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
  return i_cuCtxGetCurrent(pctx);
}
CUresult CUDAAPI cuCtxSynchronize(void) {
  return i_cuCtxSynchronize();
}
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  return i_cuCtxSynchronize_v2(ctx);
}
CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  return i_cuStreamCreate(phStream, Flags);
}
CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  return i_cuStreamDestroy(hStream);
}
CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  return i_cuStreamDestroy(hStream);
}
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  return i_cuStreamSynchronize(hStream);
}
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) {
  return i_cuStreamSynchronize_ptsz(hStream);
}
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  return i_cuMemAlloc_v2(dptr, bytesize);
}
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  return i_cuMemFree_v2(dptr);
}
CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
  return i_cuModuleLoadData(module, image);
}
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues) {
  return i_cuModuleLoadDataEx(module, image, numOptions, options, optionValues);
}
CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  return i_cuModuleUnload(hmod);
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  return i_cuModuleGetFunction(hfunc, hmod, name);
}
CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc) {
  return i_cuFuncGetName(name, hfunc);
}
CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                   void **jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                   unsigned int numLibraryOptions) {
  return i_cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions,
                             libraryOptions, libraryOptionValues, numLibraryOptions);
}
CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  return i_cuLibraryUnload(library);
}
CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
  return i_cuLibraryGetKernel(pKernel, library, name);
}
CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
  return i_cuKernelGetFunction(pFunc, kernel);
}
CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel hfunc) {
  return i_cuKernelGetName(name, hfunc);
}
CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
  return i_cuGraphCreate(phGraph, flags);
}
CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  return i_cuGraphDestroy(hGraph);
}
CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies, size_t numDependencies) {
  return i_cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies);
}
CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx) {
  return i_cuGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies, memsetParams,
                                ctx);
}
CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  return i_cuGraphAddKernelNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}
CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
  return i_cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}
CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
  return i_cuGraphGetNodes(hGraph, nodes, numNodes);
}
CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
  return i_cuGraphNodeGetType(hNode, type);
}
CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode,
                                            CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  return i_cuGraphKernelNodeGetParams(hNode, nodeParams);
}
CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode,
                                               CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
  return i_cuGraphKernelNodeGetParams_v2(hNode, nodeParams);
}
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                    CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize) {
  return i_cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer,
                                       size_t bufferSize) {
  return i_cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags) {
  return i_cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags);
}
CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
  return i_cuGraphInstantiateWithParams(phGraphExec, hGraph, instantiateParams);
}
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(
    CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
  return i_cuGraphInstantiateWithParams_ptsz(phGraphExec, hGraph, instantiateParams);
}
CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  return i_cuGraphUpload(hGraphExec, hStream);
}
CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return i_cuGraphUpload_ptsz(hGraphExec, hStream);
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return i_cuGraphLaunch(hGraphExec, hStream);
}
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return i_cuGraphLaunch_ptsz(hGraphExec, hStream);
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  return i_cuGraphExecDestroy(hGraphExec);
}
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags) {
  return i_cuGetProcAddress(symbol, pfn, cudaVersion, flags);
}
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus) {
  return i_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
}

}  // extern "C"

// ---------------------------------------------------------------------------------------------
// cuGetProcAddress

namespace {

struct ProcEntry {
  const char *name;
  int version;          // CUDA version that introduced this ABI of the symbol
  void *internal;       // legacy-stream variant
  void *internal_ptsz;  // per-thread-default-stream variant, or nullptr
  void *exported;       // the same functions as exported symbols
  void *exported_ptsz;
};

template <class Fn>
void *fn_addr(Fn *f) {
  return reinterpret_cast<void *>(f);
}

// Both the internal and the exported address of each function; the exported one is taken in
// -fPIC code without -Bsymbolic, so it comes from the GOT and honours interposition.
#define ENTRY(name, version, internal, exported) \
  { name, version, fn_addr(&internal), nullptr, fn_addr(&exported), nullptr }
#define ENTRY_PTSZ(name, version, internal, exported)                                 \
  {                                                                                   \
    name, version, fn_addr(&internal), fn_addr(&internal##_ptsz), fn_addr(&exported), \
        fn_addr(&exported##_ptsz)                                                     \
  }

const std::vector<ProcEntry> &proc_table() {
  // Built at first use; one row per ABI version of each function this stand-in implements.
  static const std::vector<ProcEntry> *table = new std::vector<ProcEntry>{
      ENTRY("cuGetErrorString", 6000, i_cuGetErrorString, cuGetErrorString),
      ENTRY("cuGetErrorName", 6000, i_cuGetErrorName, cuGetErrorName),
      ENTRY("cuInit", 2000, i_cuInit, cuInit),
      ENTRY("cuDriverGetVersion", 2020, i_cuDriverGetVersion, cuDriverGetVersion),
      ENTRY("cuDeviceGet", 2000, i_cuDeviceGet, cuDeviceGet),
      ENTRY("cuDeviceGetCount", 2000, i_cuDeviceGetCount, cuDeviceGetCount),
      ENTRY("cuDeviceGetName", 2000, i_cuDeviceGetName, cuDeviceGetName),
      ENTRY("cuDevicePrimaryCtxRetain", 7000, i_cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain),
      ENTRY("cuDevicePrimaryCtxRelease", 7000, i_cuDevicePrimaryCtxRelease,
            cuDevicePrimaryCtxRelease),
      ENTRY("cuDevicePrimaryCtxRelease", 11000, i_cuDevicePrimaryCtxRelease,
            cuDevicePrimaryCtxRelease_v2),
      ENTRY("cuCtxCreate", 2000, i_cuCtxCreate, cuCtxCreate),
      ENTRY("cuCtxCreate", 3020, i_cuCtxCreate, cuCtxCreate_v2),
      ENTRY("cuCtxCreate", 11040, i_cuCtxCreate_v3, cuCtxCreate_v3),
      ENTRY("cuCtxCreate", 12050, i_cuCtxCreate_v4, cuCtxCreate_v4),
      ENTRY("cuCtxDestroy", 2000, i_cuCtxDestroy, cuCtxDestroy),
      ENTRY("cuCtxDestroy", 4000, i_cuCtxDestroy, cuCtxDestroy_v2),
      ENTRY("cuCtxSetCurrent", 4000, i_cuCtxSetCurrent, cuCtxSetCurrent),
      ENTRY("cuCtxGetCurrent", 4000, i_cuCtxGetCurrent, cuCtxGetCurrent),
      ENTRY("cuCtxSynchronize", 2000, i_cuCtxSynchronize, cuCtxSynchronize),
      ENTRY("cuCtxSynchronize", 13000, i_cuCtxSynchronize_v2, cuCtxSynchronize_v2),
      ENTRY("cuStreamCreate", 2000, i_cuStreamCreate, cuStreamCreate),
      ENTRY("cuStreamDestroy", 2000, i_cuStreamDestroy, cuStreamDestroy),
      ENTRY("cuStreamDestroy", 4000, i_cuStreamDestroy, cuStreamDestroy_v2),
      ENTRY_PTSZ("cuStreamSynchronize", 2000, i_cuStreamSynchronize, cuStreamSynchronize),
      ENTRY("cuMemAlloc", 3020, i_cuMemAlloc_v2, cuMemAlloc_v2),
      ENTRY("cuMemFree", 3020, i_cuMemFree_v2, cuMemFree_v2),
      ENTRY("cuModuleLoadData", 2000, i_cuModuleLoadData, cuModuleLoadData),
      ENTRY("cuModuleLoadDataEx", 2010, i_cuModuleLoadDataEx, cuModuleLoadDataEx),
      ENTRY("cuModuleUnload", 2000, i_cuModuleUnload, cuModuleUnload),
      ENTRY("cuModuleGetFunction", 2000, i_cuModuleGetFunction, cuModuleGetFunction),
      ENTRY("cuFuncGetName", 12030, i_cuFuncGetName, cuFuncGetName),
      ENTRY("cuLibraryLoadData", 12000, i_cuLibraryLoadData, cuLibraryLoadData),
      ENTRY("cuLibraryUnload", 12000, i_cuLibraryUnload, cuLibraryUnload),
      ENTRY("cuLibraryGetKernel", 12000, i_cuLibraryGetKernel, cuLibraryGetKernel),
      ENTRY("cuKernelGetFunction", 12000, i_cuKernelGetFunction, cuKernelGetFunction),
      ENTRY("cuKernelGetName", 12030, i_cuKernelGetName, cuKernelGetName),
      ENTRY("cuGraphCreate", 10000, i_cuGraphCreate, cuGraphCreate),
      ENTRY("cuGraphDestroy", 10000, i_cuGraphDestroy, cuGraphDestroy),
      ENTRY("cuGraphAddEmptyNode", 10000, i_cuGraphAddEmptyNode, cuGraphAddEmptyNode),
      ENTRY("cuGraphAddMemsetNode", 10000, i_cuGraphAddMemsetNode, cuGraphAddMemsetNode),
      ENTRY("cuGraphAddKernelNode", 10000, i_cuGraphAddKernelNode, cuGraphAddKernelNode),
      ENTRY("cuGraphAddKernelNode", 12000, i_cuGraphAddKernelNode_v2, cuGraphAddKernelNode_v2),
      ENTRY("cuGraphGetNodes", 10000, i_cuGraphGetNodes, cuGraphGetNodes),
      ENTRY("cuGraphNodeGetType", 10000, i_cuGraphNodeGetType, cuGraphNodeGetType),
      ENTRY("cuGraphKernelNodeGetParams", 10000, i_cuGraphKernelNodeGetParams,
            cuGraphKernelNodeGetParams),
      ENTRY("cuGraphKernelNodeGetParams", 12000, i_cuGraphKernelNodeGetParams_v2,
            cuGraphKernelNodeGetParams_v2),
      ENTRY("cuGraphInstantiate", 10000, i_cuGraphInstantiate, cuGraphInstantiate),
      ENTRY("cuGraphInstantiate", 11000, i_cuGraphInstantiate_v2, cuGraphInstantiate_v2),
      ENTRY("cuGraphInstantiate", 12000, i_cuGraphInstantiateWithFlags,
            cuGraphInstantiateWithFlags),
      ENTRY("cuGraphInstantiateWithFlags", 11040, i_cuGraphInstantiateWithFlags,
            cuGraphInstantiateWithFlags),
      ENTRY_PTSZ("cuGraphInstantiateWithParams", 12000, i_cuGraphInstantiateWithParams,
                 cuGraphInstantiateWithParams),
      ENTRY_PTSZ("cuGraphUpload", 11010, i_cuGraphUpload, cuGraphUpload),
      ENTRY_PTSZ("cuGraphLaunch", 10000, i_cuGraphLaunch, cuGraphLaunch),
      ENTRY("cuGraphExecDestroy", 10000, i_cuGraphExecDestroy, cuGraphExecDestroy),
      ENTRY("cuGetProcAddress", 11030, i_cuGetProcAddress, cuGetProcAddress),
      ENTRY("cuGetProcAddress", 12000, i_cuGetProcAddress_v2, cuGetProcAddress_v2),
  };
  return *table;
}

void trace_query(const Config &c, const char *symbol, int cudaVersion, cuuint64_t flags,
                 int status) {
  if (!c.trace) return;
  std::fprintf(stderr,
               "ferrum-standin-driver: cuGetProcAddress symbol=%s version=%d flags=%llu "
               "status=%d\n",
               symbol != nullptr ? symbol : "(null)", cudaVersion,
               static_cast<unsigned long long>(flags), status);
}

INTERNAL CUresult i_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult *status) {
  g_queries.fetch_add(1, std::memory_order_relaxed);
  const Config &c = config();
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || cudaVersion < 0 || (flags & ~kKnownFlags) != 0) {
    trace_query(c, symbol, cudaVersion, flags, 3);
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pfn = nullptr;
  const ProcEntry *best = nullptr;
  bool name_known = false;
  for (const ProcEntry &e : proc_table()) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    name_known = true;
    if (e.version <= cudaVersion && (best == nullptr || e.version > best->version)) best = &e;
  }
  CUdriverProcAddressQueryResult result = CU_GET_PROC_ADDRESS_SUCCESS;
  if (!name_known) {
    result = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  } else if (best == nullptr) {
    result = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  }
  trace_query(c, symbol, cudaVersion, flags, result);
  if (status != nullptr) *status = result;
  if (result != CU_GET_PROC_ADDRESS_SUCCESS) return CUDA_ERROR_NOT_FOUND;
  const bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 &&
                    best->internal_ptsz != nullptr;
  if (c.proc_exported) {
    *pfn = ptsz ? best->exported_ptsz : best->exported;
  } else {
    *pfn = ptsz ? best->internal_ptsz : best->internal;
  }
  return CUDA_SUCCESS;
}

}  // namespace
