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
//   cuGraphInstantiateWithParams, cuStreamSynchronize, cuStreamQuery, cuStreamGetCtx, the
//   capture functions, cuEventRecord, cuEventRecordWithFlags), 0 and LEGACY_STREAM (1) the
//   legacy one.
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
// - An asynchronous GPU, on virtual per-stream timelines of the real CLOCK_MONOTONIC clock:
//   cuGraphLaunch/_ptsz returns at once; the replay occupies its stream from max(now, the
//   stream's busy-until, its implicit dependencies) for the graph's simulated duration. That is
//   fixed at instantiation: the sum of its kernel nodes' costs (a kernel's cost is a
//   `.pragma "ferrum_cost_ns=N";` line in its PTX .entry body, else FERRUM_STANDIN_KERNEL_NS)
//   and of its child-graph nodes' (captured launches), 1000 ns for a graph with neither; or the
//   k-th value of FERRUM_STANDIN_GRAPH_NS for the k-th instantiation. A stream holds at most
//   FERRUM_STANDIN_LAUNCH_QUEUE unfinished replays: a launch beyond that sleeps until the oldest
//   is done (a full launch queue blocks the host, as on a GPU).
// - Streams: cuStreamCreate/WithPriority make a timeline each; NULL and CU_STREAM_LEGACY are
//   the current context's legacy default stream; CU_STREAM_PER_THREAD, and NULL passed to a
//   _ptsz function, the calling thread's per-thread default stream of the current context.
//   Implicit synchronisation: work on the legacy stream starts after all work queued so far on
//   the context's blocking streams (created without CU_STREAM_NON_BLOCKING, and per-thread
//   default streams), and work on a blocking stream after the legacy stream's; non-blocking
//   streams wait for nothing but themselves. cuStreamSynchronize/_ptsz sleeps until the work
//   queued on the stream is done, cuCtxSynchronize until every stream of the context is idle;
//   cuStreamQuery says whether it is. A launch, synchronize or query with a stream that is not
//   live, or whose context was destroyed: CUDA_ERROR_INVALID_HANDLE; a default stream without a
//   current context: CUDA_ERROR_INVALID_CONTEXT (CUDA_ERROR_CONTEXT_IS_DESTROYED if the current
//   context was destroyed by another thread).
// - Events (cuEventCreate with DEFAULT, BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS with
//   DISABLE_TIMING): a record stamps the time the stream's queued work ends (on the legacy
//   stream, with its implicit dependencies); cuEventQuery is CUDA_SUCCESS once the clock has
//   passed the stamp (and for a never-recorded event), else CUDA_ERROR_NOT_READY;
//   cuEventSynchronize sleeps until the stamp; cuEventElapsedTime/_v2 give the milliseconds
//   between stamps, CUDA_ERROR_NOT_READY if either is not complete, CUDA_ERROR_INVALID_HANDLE if
//   either was never recorded or has DISABLE_TIMING. An event belongs to the context current at
//   its creation; recording it on another context's stream: CUDA_ERROR_INVALID_HANDLE, as
//   cuEventRecord documents.
// - Stream capture (cuStreamBeginCapture, _v2, and _ptsz; cuStreamEndCapture, IsCapturing,
//   GetCaptureInfo/_v2/_v3, and _ptsz): a launch into a capturing stream runs nothing and
//   becomes a child-graph node (CU_GRAPH_NODE_TYPE_GRAPH, carrying the replay's duration); an
//   event record into it becomes an event record node, counted for FERRUM_STANDIN_REPORT, and
//   leaves the event as it was. cuStreamEndCapture returns that graph (nodes in capture order,
//   no edges). The legacy stream cannot capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
//   synchronizing or querying a capturing stream returns that error and invalidates the capture
//   (cuStreamEndCapture then gives NULL and CUDA_ERROR_STREAM_CAPTURE_INVALIDATED); ending a
//   capture that was not begun: CUDA_ERROR_INVALID_VALUE.
// - Contexts: a per-thread stack (cuCtxCreate and cuCtxPushCurrent push, cuCtxPopCurrent pops,
//   cuCtxSetCurrent replaces the top or, with NULL, pops). cuCtxDestroy pops the context if it
//   is current, and invalidates its streams and events: later calls with their handles return
//   CUDA_ERROR_INVALID_HANDLE. Contexts, streams and events are never freed (a destroyed
//   context's objects stay tombstones; a destroyed stream or event may be reused, as a real
//   driver's handle may), so a stale handle never reaches freed memory.
// - The primary context is retained and released by count; cuDevicePrimaryCtxGetState says it
//   is active while a reference is held. As cuda.h says, it is destroyed at its last release
//   (cuDevicePrimaryCtxRelease/_v2, which does not pop it off any thread's stack) and by
//   cuDevicePrimaryCtxReset/_v2 (which does not release it: the references held before the reset
//   may still be released, each a CUDA_SUCCESS that does nothing). Its streams and events die
//   then, as a destroyed context's; a thread that still has it current gets
//   CUDA_ERROR_CONTEXT_IS_DESTROYED from a launch; pushing it or setting it current is
//   CUDA_ERROR_INVALID_CONTEXT. The next retain makes it anew, with the same handle.
// - Green contexts (cuGreenCtxCreate, cuCtxFromGreenCtx, cuGreenCtxDestroy; CUDA 12.4): a
//   context of its own, not made current at creation, reached as a CUcontext only through
//   cuCtxFromGreenCtx (a handle distinct from the green context's); creating one retains the
//   device's primary context and destroying it releases that reference (cuda.h), possibly the
//   last. cuGreenCtxDestroy destroys the green context's context as cuCtxDestroy would (streams
//   and events die, popped if current to the caller) without calling cuCtxDestroy, which
//   refuses a green context's CUcontext (CUDA_ERROR_INVALID_CONTEXT). The resource descriptor
//   is not looked at (no cuDevResource* functions here); CU_GREEN_CTX_DEFAULT_STREAM is
//   required, as documented. cuda.h: "a green context can be current to only one thread at a
//   time": the stand-in remembers which thread has each green context current (the top of its
//   stack), and counts a cuCtxPushCurrent/cuCtxSetCurrent of one while another thread has it
//   current (green_cross_thread in the report); with FERRUM_STANDIN_GREEN_EXCLUSIVE=1 it
//   refuses that call with CUDA_ERROR_INVALID_CONTEXT, as a strict driver may. cuStreamGetCtx_v2
//   (CUDA 12.5) names the current green context for the NULL stream, as documented, with the
//   device's primary context. cuCtxGetApiVersion answers for a live context only
//   (CUDA_ERROR_CONTEXT_IS_DESTROYED for an ended one, CUDA_ERROR_INVALID_CONTEXT otherwise).
// - A C API: nothing is thrown into the caller (but with FERRUM_STANDIN_LAUNCH_THROW, below).
//   Where an allocation of the stand-in's own fails (a program under an address-space limit),
//   the call answers CUDA_ERROR_OUT_OF_MEMORY (STANDIN_OUT_OF_MEMORY below), as the real driver
//   does.
//
// What is simplified: one device (ordinal 0); nothing executes (memset and kernel nodes are
// validated and stored, never run; cuMemAlloc is malloc; a replay's duration is declared, not
// measured, and the nodes of a graph run one after another whatever its edges); no cross-stream
// waits but the legacy stream's implicit ones (no cuStreamWaitEvent); stream priorities are
// accepted and ignored; capture modes are accepted but not enforced (no cross-thread checks, no
// capture of the legacy stream's implicit dependencies); only the functions listed in the
// version script exist; the legacy 32-bit
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
//   FERRUM_STANDIN_DIRTY_ERRNO=1     every function leaves errno set to a value of its own
//                                    (standin_errno.hpp): which driver function ran last
//                                    before a program's call returned is then known. With 2,
//                                    every function but cuGraphLaunch/_ptsz, which leave it
//                                    alone (as a launch that makes no system call does).
//   FERRUM_STANDIN_LAUNCH_RAISE=<sig> every cuGraphLaunch/_ptsz raises signal number sig (after
//                                    counting, before returning), so that a handler can leave
//                                    the launch with siglongjmp (a watchdog pattern).
//   FERRUM_STANDIN_LAUNCH_RAISE_LOCKED=<sig>,<n> the n-th cuGraphLaunch/_ptsz of the process
//                                    raises signal number sig while it holds the driver's
//                                    lock (as a real driver may be interrupted anywhere inside
//                                    a call, its own locks held): a handler that calls exit()
//                                    then runs the exit handlers with every other thread's
//                                    driver call waiting for that lock.
//   FERRUM_STANDIN_KERNEL_NS=<n>     the cost of a kernel without a ferrum_cost_ns pragma
//                                    (default 20000 ns).
//   FERRUM_STANDIN_GRAPH_NS=<a,b,..> the k-th instantiation's replays take the k-th value (ns);
//                                    later instantiations keep their kernel-derived duration.
//   FERRUM_STANDIN_LAUNCH_QUEUE=<n>  unfinished replays a stream holds before a launch blocks
//                                    (default 1024; 1 makes every launch wait for the previous
//                                    replay, so that ranges around launches last a replay).
//   FERRUM_STANDIN_LAUNCH_CALL_NS=<n> a graph launch returns n ns after it queued its replay (a
//                                    real cuGraphLaunch spends microseconds of CPU), so that two
//                                    threads' launches on one stream meet.
//   FERRUM_STANDIN_NO_EVENTS=1       a driver without the event API: cuGetProcAddress does not
//                                    know the cuEvent* names; the exported functions return
//                                    CUDA_ERROR_NOT_SUPPORTED.
//   FERRUM_STANDIN_NO_STREAM_GET_CTX_V2=1  a CUDA 12.4 driver: green contexts, but no
//                                    cuStreamGetCtx_v2 (12.5): cuGetProcAddress does not know
//                                    it; the exported function returns CUDA_ERROR_NOT_SUPPORTED.
//   FERRUM_STANDIN_EVENT_CREATE_FAIL=1  cuEventCreate returns CUDA_ERROR_OUT_OF_MEMORY.
//   FERRUM_STANDIN_EVENT_QUERY_HANG_MS=N[,K]  every cuEventQuery (outside bench mode), or the
//                                    first K of the process, first waits N ms, not a
//                                    cancellation point, holding no lock of the stand-in's: a
//                                    driver call that does not come back (a hung GPU, a driver
//                                    stuck in its own wait), for the bounds a caller keeps on
//                                    whoever makes it.
//   FERRUM_STANDIN_DESTROY_WAIT_MS=N cuCtxDestroy/_v2 first waits N ms in a cancellation point
//                                    (a driver whose teardown waits for the context's work on a
//                                    condition variable or in poll): a deferred pthread_cancel
//                                    of the destroying thread unwinds out of the call there, the
//                                    context not destroyed. Without it, no driver call is a
//                                    cancellation point (sleep_until_ns).
//   FERRUM_STANDIN_BENCH=1           benchmark fast path (bench/): cuGraphLaunch/_ptsz do nothing
//                                    but return CUDA_SUCCESS for a non-null handle — no counter
//                                    (a cache line every thread would write), no handle or init
//                                    check, no timeline — so that the shim's added nanoseconds
//                                    stand out against the cheapest possible real call into
//                                    libcuda. The calls GPU timing makes per launch or per
//                                    reap take the same fast path: cuEventRecord/_ptsz and
//                                    cuEventRecordWithFlags/_ptsz check their arguments (non-null
//                                    event, known flags) and return, stamping nothing (no lock,
//                                    no timeline, no shared counter); cuEventQuery of a non-null
//                                    event is CUDA_SUCCESS (every event completes at once);
//                                    cuEventElapsedTime/_v2 give 0 ms for two non-null events;
//                                    cuStreamIsCapturing/_ptsz say CU_STREAM_CAPTURE_STATUS_NONE
//                                    (no stream can capture in this mode). cuCtxGetCurrent is a
//                                    thread-local read in every mode already. Event creation and
//                                    destruction, contexts and streams behave as without it.
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
//                                    procaddress_queries=<Q> captured_launches=<C>
//                                    captured_event_records=<E> events_created=<V>
//                                    event_queries=<Q> dead_context_calls=<D>
//                                    dead_event_calls=<X> green_cross_thread=<G>
//                                    events_destroyed=<Y>` (read at exit;
//                                    dead_context_calls counts cuCtxPushCurrent/cuCtxSetCurrent
//                                    given a destroyed context — created, green, or an ended
//                                    primary one; dead_event_calls counts event calls
//                                    (record, query, synchronize, elapsed time, destroy) given
//                                    an event destroyed or whose context ended, as far as a
//                                    handle not handed out again tells; launches count every
//                                    call, captured ones too; events_created counts every
//                                    cuEventCreate call, failed ones too, so that 0 proves
//                                    nobody asked for an event; event_queries every
//                                    cuEventQuery outside bench mode; events_destroyed every
//                                    cuEventDestroy that destroyed one; green_cross_thread: see
//                                    "Green contexts" above).
//   (the empty name prints as `symbol=`)

#include <cuda.h>
#include <cudaTypedefs.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "standin_errno.hpp"

extern "C" {
__attribute__((visibility("default"))) extern const int ferrum_standin_driver_marker;
const int ferrum_standin_driver_marker = 1;
}

// The driver's objects behind the opaque handle types of <cuda.h>.
struct CUstream_st;
// Contexts are never freed: cuCtxDestroy marks one destroyed (a tombstone), so that a handle a
// caller still holds stays safe to look at.
struct CUctx_st {
  CUdevice device;
  std::atomic<bool> destroyed{false};  // the primary context: while ended (made anew at retain)
  bool green = false;                  // a green context's (set before it is handed out)
  std::atomic<pid_t> holder{0};        // green: the thread that has it current, 0 when none
  CUstream_st *legacy = nullptr;  // its legacy default stream, made at first use (timeline lock)
};
// A green context: its context (what cuCtxFromGreenCtx gives). Never freed, as contexts.
struct CUgreenCtx_st {
  CUcontext ctx;
};
// A stream and its virtual timeline (all members under the timeline lock). Stream objects are
// never freed: a destroyed one goes on a free list (its address may be handed out again, as a
// real driver's may), one of a destroyed context stays a tombstone.
enum class StreamKind { kCreated, kLegacy, kPerThread };
struct CUstream_st {
  CUcontext ctx = nullptr;
  unsigned int flags = 0;
  int priority = 0;
  StreamKind kind = StreamKind::kCreated;
  std::thread::id owner{};  // kPerThread: the thread whose default stream it is
  bool alive = true;
  long long busy_until = 0;       // CLOCK_MONOTONIC ns at which its last queued work ends
  std::deque<long long> pending;  // end times of launches not yet finished (the launch queue)
  bool capturing = false;         // stream capture (cuStreamBeginCapture)
  bool capture_invalidated = false;
  unsigned long long capture_id = 0;
  CUgraph capture_graph = nullptr;
  CUgraphNode capture_last = nullptr;  // the last captured node: the capture's dependency
  CUstream_st *next_free = nullptr;
};
// An event: the CLOCK_MONOTONIC time its last record completes. Never freed, like streams.
struct CUevent_st {
  CUcontext ctx = nullptr;
  unsigned int flags = 0;
  bool alive = true;
  bool recorded = false;
  long long stamp = 0;
  CUevent_st *next_free = nullptr;
};
// A kernel as its PTX `.entry` declares it: the name (mangled names stay mangled) and the
// offset and size of each parameter, so that a kernel node can copy its arguments.
struct KernelSignature {
  std::string name;
  long long cost_ns = -1;  // `.pragma "ferrum_cost_ns=N";` in the body, else -1 (the default)
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
  long long sim_ns = 0;            // CU_GRAPH_NODE_TYPE_GRAPH (a captured launch): its duration
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
  std::atomic<long long> sim_ns;           // the simulated duration of one replay
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
  int launch_raise_locked = 0;                    // the signal, 0: none
  unsigned long long launch_raise_locked_at = 0;  // at the n-th launch
  long long kernel_ns = 20000;
  std::vector<long long> graph_ns;
  size_t launch_queue = 1024;
  long long launch_call_ns = 0;
  bool no_events = false;
  bool no_stream_get_ctx_v2 = false;
  bool event_create_fail = false;
  long long event_query_hang_ns = 0;
  unsigned long long event_query_hangs = ~0ull;  // how many queries wait (the first K)
  bool trace = false;
  bool bench = false;
  long long destroy_wait_ns = 0;
  bool no_handle_reuse = false;
  bool green_exclusive = false;
  int dirty_errno = 0;  // 0 off; 1 every function; 2 all but the graph launches
  const char *instantiate_log = nullptr;
};

bool env_flag(const char *name) {
  const char *v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

// Out of line: inlined into config(), its register saves ran on every call of every entry
// point (a dozen pushes and pops in front of a one-byte guard check), a cost no driver has.
__attribute__((noinline)) Config read_config() {
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
  if (const char *v = std::getenv("FERRUM_STANDIN_LAUNCH_RAISE_LOCKED"); v != nullptr) {
    char *end = nullptr;
    c.launch_raise_locked = static_cast<int>(std::strtol(v, &end, 0));
    c.launch_raise_locked_at = *end == ',' ? std::strtoull(end + 1, nullptr, 0) : 1;
  }
  if (const char *v = std::getenv("FERRUM_STANDIN_KERNEL_NS"); v != nullptr && v[0] != '\0') {
    c.kernel_ns = std::max(0LL, std::strtoll(v, nullptr, 0));
  }
  if (const char *v = std::getenv("FERRUM_STANDIN_GRAPH_NS"); v != nullptr) {
    for (const char *p = v; *p != '\0';) {
      char *end = nullptr;
      const long long n = std::strtoll(p, &end, 0);
      if (end == p) break;
      c.graph_ns.push_back(std::max(0LL, n));
      p = *end == ',' ? end + 1 : end;
      if (*end != ',') break;
    }
  }
  if (const char *v = std::getenv("FERRUM_STANDIN_LAUNCH_QUEUE"); v != nullptr && v[0] != '\0') {
    c.launch_queue = std::max(1UL, std::strtoul(v, nullptr, 0));
  }
  if (const char *v = std::getenv("FERRUM_STANDIN_LAUNCH_CALL_NS"); v != nullptr && v[0] != '\0') {
    c.launch_call_ns = std::max(0LL, std::strtoll(v, nullptr, 0));
  }
  if (const char *v = std::getenv("FERRUM_STANDIN_DESTROY_WAIT_MS"); v != nullptr && v[0] != '\0') {
    c.destroy_wait_ns = std::max(0LL, std::strtoll(v, nullptr, 0)) * 1000000LL;
  }
  c.no_events = env_flag("FERRUM_STANDIN_NO_EVENTS");
  c.no_stream_get_ctx_v2 = env_flag("FERRUM_STANDIN_NO_STREAM_GET_CTX_V2");
  c.event_create_fail = env_flag("FERRUM_STANDIN_EVENT_CREATE_FAIL");
  if (const char *v = std::getenv("FERRUM_STANDIN_EVENT_QUERY_HANG_MS"); v && v[0] != '\0') {
    char *end = nullptr;
    c.event_query_hang_ns = std::max(0LL, std::strtoll(v, &end, 0)) * 1000000LL;
    if (*end == ',') c.event_query_hangs = std::strtoull(end + 1, nullptr, 0);
  }
  c.trace = env_flag("FERRUM_STANDIN_TRACE");
  c.bench = env_flag("FERRUM_STANDIN_BENCH");
  c.no_handle_reuse = env_flag("FERRUM_STANDIN_NO_HANDLE_REUSE");
  c.green_exclusive = env_flag("FERRUM_STANDIN_GREEN_EXCLUSIVE");
  if (env_flag("FERRUM_STANDIN_DIRTY_ERRNO"))
    c.dirty_errno = std::strcmp(std::getenv("FERRUM_STANDIN_DIRTY_ERRNO"), "2") == 0 ? 2 : 1;
  if (const char *v = std::getenv("FERRUM_STANDIN_INSTANTIATE_LOG"); v != nullptr && v[0] != '\0') {
    c.instantiate_log = v;
  }
  return c;
}

// Never destroyed: a static with a destructor would be registered with __cxa_atexit at the
// first driver call, under the C library's lock of the exit list — which a fork child may find
// held for ever (F147's test forks while another thread unloads a library). No driver does that.
// Made in static storage, not on the heap: a first call may come from a signal handler
// (handler_launch), where an allocation is what TSan reports, on a stderr nobody reads.
const Config &config() {
  alignas(Config) static unsigned char storage[sizeof(Config)];
  static const Config &c = *new (storage) Config(read_config());
  return c;
}

std::atomic<unsigned long long> g_launches{0};
std::atomic<unsigned long long> g_launches_ptsz{0};
std::atomic<unsigned long long> g_launches_any{
    0};  // both kinds: FERRUM_STANDIN_LAUNCH_RAISE_LOCKED
std::atomic<unsigned long long> g_instantiates{0};
std::atomic<unsigned long long> g_queries{0};
std::atomic<unsigned long long> g_captured_launches{0};
std::atomic<unsigned long long> g_captured_event_records{0};
std::atomic<unsigned long long> g_events_created{0};
std::atomic<unsigned long long> g_event_queries{0};
std::atomic<unsigned long long> g_dead_context_calls{0};
std::atomic<unsigned long long> g_dead_event_calls{0};
std::atomic<unsigned long long> g_green_cross_thread{0};
std::atomic<unsigned long long> g_events_destroyed{0};

// The report's path, read when the driver is loaded and never later: at exit another thread of
// the program may be changing the environment (fault environment_changed_at_run_time), and a
// getenv then reads the array setenv frees — the stand-in would crash where a driver does not.
// A program that clears its environment before it loads the driver (the same test) has none.
char g_report_path[4096];

__attribute__((constructor)) void note_report_path() {
  const char *path = std::getenv("FERRUM_STANDIN_REPORT");
  if (path != nullptr) std::snprintf(g_report_path, sizeof g_report_path, "%s", path);
}

__attribute__((destructor)) void write_report() {
  const char *path = g_report_path;
  if (path[0] == '\0') return;
  char line[512];
  const int n = std::snprintf(
      line, sizeof line,
      "driver launches=%llu launches_ptsz=%llu instantiates=%llu "
      "procaddress_queries=%llu captured_launches=%llu "
      "captured_event_records=%llu events_created=%llu "
      "event_queries=%llu dead_context_calls=%llu dead_event_calls=%llu "
      "green_cross_thread=%llu events_destroyed=%llu\n",
      g_launches.load(), g_launches_ptsz.load(), g_instantiates.load(), g_queries.load(),
      g_captured_launches.load(), g_captured_event_records.load(), g_events_created.load(),
      g_event_queries.load(), g_dead_context_calls.load(), g_dead_event_calls.load(),
      g_green_cross_thread.load(), g_events_destroyed.load());
  // The tests' report, not the driver's: never a cancellation point (see sleep_until_ns).
  int cancel_state = 0;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    if (n > 0) {
      // One write of a short line to an O_APPEND file: lines of concurrent processes don't mix.
      [[maybe_unused]] const ssize_t written = write(fd, line, static_cast<size_t>(n));
    }
    close(fd);
  }
  pthread_setcancelstate(cancel_state, nullptr);
}

// ---------------------------------------------------------------------------------------------
// State

std::atomic<bool> g_initialized{false};
thread_local CUcontext t_current = nullptr;

struct State {
  std::mutex mutex;  // guards the members below and the exec pool's free list
  CUctx_st primary{0};
  int primary_refs = 0;
  int refs_reset = 0;  // references a reset ended: each may still be released, doing nothing
  std::unordered_set<CUcontext> contexts;        // created with cuCtxCreate
  std::unordered_set<CUcontext> green_contexts;  // the contexts of live green contexts
  std::unordered_set<CUgreenCtx> greens;         // live green contexts
  std::vector<CUgreenCtx> destroyed_greens;      // tombstones: never freed
  std::vector<CUcontext> destroyed_contexts;     // tombstones: never freed, still reachable
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
void install_fork_handlers();

State &st() {
  static State *s = [] {
    auto *created = new State;
    install_fork_handlers();
    return created;
  }();
  return *s;
}

constexpr char kDeviceName[] = "ferrum-replay stand-in device";

bool initialized() {
  return g_initialized.load(std::memory_order_acquire);
}

bool context_valid_locked(CUcontext ctx) {
  if (ctx == &st().primary) return !st().primary.destroyed.load(std::memory_order_acquire);
  return st().contexts.count(ctx) != 0 || st().green_contexts.count(ctx) != 0;
}

// A call given a context that no longer lives (FERRUM_STANDIN_REPORT: dead_context_calls).
void note_if_destroyed_locked(CUcontext ctx) {
  const std::vector<CUcontext> &dead = st().destroyed_contexts;
  if (std::find(dead.begin(), dead.end(), ctx) != dead.end() ||
      (ctx == &st().primary && st().primary.destroyed.load(std::memory_order_acquire)))
    g_dead_context_calls.fetch_add(1);
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

// Every internal function is a function-try-block ending in this: an allocation of ours that
// fails answers CUDA_ERROR_OUT_OF_MEMORY, as the real driver does, and never throws into a C
// caller (a program under an address-space limit, the shim's event pools).
#define STANDIN_OUT_OF_MEMORY        \
  catch (const std::bad_alloc &) {   \
    return CUDA_ERROR_OUT_OF_MEMORY; \
  }

// The first statement of every internal function: with FERRUM_STANDIN_DIRTY_ERRNO the function
// sets errno to its own value (standin_errno.hpp) — with 2, every function but the graph launches,
// which leave it alone. Set on entry, not on return: a destructor in every function cost each
// call about 1 ns (paired), the benchmark's baseline included, and so did a call of config()
// (out of line). Even this check keeps a function's arguments across the call it may make (about
// 0.5 ns): the calls on the benchmark's paths (the launches, event records, capture queries) make
// it after their benchmark fast path, and cuCtxGetCurrent last. The stand-in's functions set
// errno no other way; the two that call another set theirs again after it. g_dirty_errno: the
// mode once config() was read, -1 before.
std::atomic<int> g_dirty_errno{-1};
__attribute__((noinline, cold)) void dirty_errno_at_entry(const char *function) {
  const int mode = config().dirty_errno;
  g_dirty_errno.store(mode, std::memory_order_relaxed);
  if (mode == 0 || (mode == 2 && (std::strcmp(function, "i_cuGraphLaunch") == 0 ||
                                  std::strcmp(function, "i_cuGraphLaunch_ptsz") == 0)))
    return;
  errno = standin_errno_of(function);
}
#define STANDIN_DIRTY_ERRNO_AS(function)                                         \
  do {                                                                           \
    if (__builtin_expect(g_dirty_errno.load(std::memory_order_relaxed) != 0, 0)) \
      dirty_errno_at_entry(function);                                            \
  } while (0)
#define STANDIN_DIRTY_ERRNO() STANDIN_DIRTY_ERRNO_AS(__func__)

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

INTERNAL CUresult i_cuGetErrorString(CUresult error, const char **pStr) try {
  STANDIN_DIRTY_ERRNO();
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText *e = find_error(error);
  *pStr = e != nullptr ? e->text : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGetErrorName(CUresult error, const char **pStr) try {
  STANDIN_DIRTY_ERRNO();
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText *e = find_error(error);
  *pStr = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuInit(unsigned int Flags) try {
  STANDIN_DIRTY_ERRNO();
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  g_initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuDriverGetVersion(int *driverVersion) try {
  STANDIN_DIRTY_ERRNO();
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = CUDA_VERSION;  // 13000
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuDeviceGet(CUdevice *device, int ordinal) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuDeviceGetCount(int *count) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = 1;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuDeviceGetName(char *name, int len, CUdevice dev) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", kDeviceName);
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// The primary context's references (after the virtual GPU below: its end kills its streams and
// events).
CUcontext primary_retain();
CUresult primary_release();
void primary_reset();

INTERNAL CUresult i_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = primary_retain();
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuDevicePrimaryCtxRelease(CUdevice dev) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  return primary_release();
}
STANDIN_OUT_OF_MEMORY

// cuda.h: "Destroy all allocations and reset all state on the primary context"; it "does not
// release it" (a reference held before may be released afterwards).
INTERNAL CUresult i_cuDevicePrimaryCtxReset(CUdevice dev) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  primary_reset();
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// `active`: the primary context is retained (it is destroyed at its last release: a program asks
// this to know whether a release was the last). `flags`: 0 (no cuDevicePrimaryCtxSetFlags
// here).
INTERNAL CUresult i_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(st().mutex);
  *flags = 0;
  *active = st().primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// ---------------------------------------------------------------------------------------------
// The virtual GPU: per-stream timelines on CLOCK_MONOTONIC. A launch returns at once; its work
// occupies its stream from max(now, the stream's busy-until, implicit dependencies) for the
// graph's simulated duration. Events stamp the time their stream's prior work ends. All of it
// under one lock of its own, taken before st().mutex where both are needed (never the other way
// round), held only for bookkeeping: every wait sleeps with no lock held.

struct Timeline {
  std::mutex mutex;
  std::vector<CUstream_st *> streams;   // every stream object ever made (never freed)
  std::unordered_set<CUstream> known;   // the same, for validating a caller's handle
  std::unordered_set<CUevent> events;   // every event object ever made (never freed)
  CUstream_st *free_streams = nullptr;  // destroyed with cuStreamDestroy, to be reused
  CUevent_st *free_events = nullptr;    // destroyed with cuEventDestroy, to be reused
  unsigned long long capture_ids = 0;
};

Timeline &tl() {
  static Timeline *t = [] {
    auto *created = new Timeline;
    install_fork_handlers();
    return created;
  }();
  return *t;
}

// A fork while another thread holds a lock of the driver's (a GPU-timing thread querying
// events, say) would leave it locked forever in the child: both are held across fork, as the
// C library does its own locks, in their one order (the timeline's first).
void prepare_fork() {
  tl().mutex.lock();
  st().mutex.lock();
}
void after_fork() {
  st().mutex.unlock();
  tl().mutex.unlock();
}
void install_fork_handlers() {
  static const bool installed = pthread_atfork(prepare_fork, after_fork, after_fork) == 0;
  (void)installed;
}

long long now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Sleeps until CLOCK_MONOTONIC reaches `when` (ns); a signal handler that returns resumes it.
// No driver call is a POSIX cancellation point, and clock_nanosleep is one: the stand-in's waits
// run with cancellation disabled, so that a test of where a program's thread may be cancelled
// (reliability cancel_requests_pending) sees the shim's and the recorder's, not the stand-in's.
void sleep_until_ns(long long when) {
  int cancel_state = 0;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(when / 1000000000LL);
  ts.tv_nsec = static_cast<long>(when % 1000000000LL);
  while (now_ns() < when && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
  pthread_setcancelstate(cancel_state, nullptr);
}

// Contexts: the current one is the top of a per-thread stack (t_current), the rest below it.
constexpr int kMaxContextStack = 32;
thread_local CUcontext t_context_stack[kMaxContextStack];
thread_local int t_context_depth = 0;

// Every change of the calling thread's current context: a green context's holder follows it.
void make_current(CUcontext now) {
  const pid_t me = static_cast<pid_t>(syscall(SYS_gettid));
  const CUcontext before = t_current;
  if (before != nullptr && before != now && before->green) {
    pid_t mine = me;
    before->holder.compare_exchange_strong(mine, 0);
  }
  t_current = now;
  if (now != nullptr && now->green) now->holder.store(me);
}

// cuCtxPushCurrent/cuCtxSetCurrent of `ctx`: false when it is a green context another thread
// has current and the stand-in is strict (counted either way).
bool green_current_elsewhere_allowed(CUcontext ctx) {
  if (!ctx->green) return true;
  const pid_t holder = ctx->holder.load();
  if (holder == 0 || holder == static_cast<pid_t>(syscall(SYS_gettid))) return true;
  g_green_cross_thread.fetch_add(1);
  return !config().green_exclusive;
}

// Under tl().mutex: a new stream object, from the free list when there is one.
CUstream_st *stream_new_locked(CUcontext ctx, unsigned int flags, int priority, StreamKind kind) {
  CUstream_st *s = tl().free_streams;
  if (s != nullptr) {
    tl().free_streams = s->next_free;
    *s = CUstream_st();
  } else {
    s = new CUstream_st();
    tl().streams.push_back(s);
    tl().known.insert(s);
  }
  s->priority = priority;
  s->kind = kind;
  s->ctx = ctx;
  s->flags = flags;
  if (kind == StreamKind::kPerThread) s->owner = std::this_thread::get_id();
  return s;
}

// The calling thread's current context for a default stream, or the error that says why not.
CUresult current_context(CUcontext *out) {
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_current->destroyed.load(std::memory_order_acquire)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = t_current;
  return CUDA_SUCCESS;
}

// Under tl().mutex: the stream a handle names. NULL and CU_STREAM_LEGACY are the current
// context's legacy default stream, CU_STREAM_PER_THREAD (and NULL passed to a _ptsz function)
// the calling thread's per-thread default stream of the current context; any other handle must
// be a live stream of a live context (else CUDA_ERROR_INVALID_HANDLE).
CUresult stream_resolve_locked(CUstream h, bool ptsz, CUstream_st **out) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    CUcontext ctx = nullptr;
    if (const CUresult r = current_context(&ctx); r != CUDA_SUCCESS) return r;
    if (h == CU_STREAM_PER_THREAD || (h == nullptr && ptsz)) {
      thread_local CUcontext cached_ctx = nullptr;
      thread_local CUstream_st *cached = nullptr;
      if (cached_ctx != ctx || cached == nullptr || !cached->alive) {
        cached = nullptr;
        const std::thread::id me = std::this_thread::get_id();
        for (CUstream_st *s : tl().streams) {
          if (s->alive && s->kind == StreamKind::kPerThread && s->ctx == ctx && s->owner == me) {
            cached = s;
            break;
          }
        }
        if (cached == nullptr) cached = stream_new_locked(ctx, 0, 0, StreamKind::kPerThread);
        cached_ctx = ctx;
      }
      *out = cached;
      return CUDA_SUCCESS;
    }
    if (ctx->legacy == nullptr) ctx->legacy = stream_new_locked(ctx, 0, 0, StreamKind::kLegacy);
    *out = ctx->legacy;
    return CUDA_SUCCESS;
  }
  if (tl().known.count(h) == 0 || !h->alive || h->ctx->destroyed.load(std::memory_order_acquire)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *out = h;
  return CUDA_SUCCESS;
}

// Blocking streams wait for the legacy default stream and it for them; the per-thread default
// stream is a blocking stream (as CUDA documents).
bool stream_blocking(const CUstream_st *s) {
  return s->kind == StreamKind::kPerThread ||
         (s->kind == StreamKind::kCreated && (s->flags & CU_STREAM_NON_BLOCKING) == 0);
}

// Under tl().mutex: when work enqueued now on `s` can start. Legacy stream: after its own work
// and all work queued so far on the context's blocking streams; a blocking stream: after its
// own work and the legacy stream's; a non-blocking stream: after its own work.
long long stream_ready_at_locked(const CUstream_st *s, long long now) {
  long long t = std::max(now, s->busy_until);
  if (s->kind == StreamKind::kLegacy) {
    for (const CUstream_st *x : tl().streams) {
      if (x != s && x->alive && x->ctx == s->ctx && stream_blocking(x))
        t = std::max(t, x->busy_until);
    }
  } else if (stream_blocking(s) && s->ctx->legacy != nullptr) {
    t = std::max(t, s->ctx->legacy->busy_until);
  }
  return t;
}

// Under tl().mutex: the time every stream of `ctx` is idle.
long long context_idle_at_locked(CUcontext ctx) {
  long long t = 0;
  for (const CUstream_st *x : tl().streams) {
    if (x->alive && x->ctx == ctx) t = std::max(t, x->busy_until);
  }
  return t;
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
  // Pushed onto the calling thread's context stack, as cuCtxCreate does.
  if (t_current != nullptr && t_context_depth < kMaxContextStack) {
    t_context_stack[t_context_depth++] = t_current;
  }
  make_current(ctx);
  *pctx = ctx;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) try {
  STANDIN_DIRTY_ERRNO();
  (void)flags;
  return create_context(pctx, dev);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                   unsigned int flags, CUdevice dev) try {
  STANDIN_DIRTY_ERRNO();
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  (void)flags;
  return create_context(pctx, dev);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                   unsigned int flags, CUdevice dev) try {
  STANDIN_DIRTY_ERRNO();
  (void)ctxCreateParams;
  (void)flags;
  return create_context(pctx, dev);
}
STANDIN_OUT_OF_MEMORY

// Under tl().mutex: a context's end. Its streams and events die (tombstones, never reused: later
// calls with their handles return CUDA_ERROR_INVALID_HANDLE, and an event's count as
// dead_event_calls); the next legacy stream of a context made anew (the primary) is a new one.
void end_context_objects_locked(CUcontext ctx) {
  ctx->destroyed.store(true, std::memory_order_release);
  for (CUstream_st *s : tl().streams) {
    if (s->ctx == ctx) s->alive = false;
  }
  for (CUevent e : tl().events) {
    if (e->ctx == ctx) e->alive = false;
  }
  ctx->legacy = nullptr;
}

// Under tl().mutex and st().mutex (in that order): one reference of the primary context fewer;
// the last ends it.
CUresult primary_release_locked() {
  if (st().primary_refs == 0) {
    if (st().refs_reset == 0) return CUDA_ERROR_INVALID_CONTEXT;
    --st().refs_reset;  // held across a reset: released, nothing more (cuda.h)
    return CUDA_SUCCESS;
  }
  if (--st().primary_refs == 0) end_context_objects_locked(&st().primary);
  return CUDA_SUCCESS;
}

CUcontext primary_retain() {
  std::lock_guard<std::mutex> tlock(tl().mutex);
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().primary_refs++ == 0) st().primary.destroyed.store(false, std::memory_order_release);
  return &st().primary;
}

CUresult primary_release() {
  std::lock_guard<std::mutex> tlock(tl().mutex);
  std::lock_guard<std::mutex> lock(st().mutex);
  return primary_release_locked();
}

void primary_reset() {
  std::lock_guard<std::mutex> tlock(tl().mutex);
  std::lock_guard<std::mutex> lock(st().mutex);
  st().refs_reset += st().primary_refs;
  st().primary_refs = 0;
  end_context_objects_locked(&st().primary);
}

// The context becomes a tombstone (never freed); its streams and events die with it, and stay
// tombstones too, so later calls with their handles return CUDA_ERROR_INVALID_HANDLE. If it is
// current to the calling thread it is popped off the thread's stack.
INTERNAL CUresult i_cuCtxDestroy(CUcontext ctx) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (const long long wait = config().destroy_wait_ns; wait > 0) {
    // A cancellation point, unlike sleep_until_ns: a cancelled thread leaves from here.
    const timespec ts{static_cast<time_t>(wait / 1000000000LL),
                      static_cast<long>(wait % 1000000000LL)};
    nanosleep(&ts, nullptr);
  }
  {
    std::lock_guard<std::mutex> tlock(tl().mutex);
    {
      std::lock_guard<std::mutex> lock(st().mutex);
      if (st().contexts.erase(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
      st().destroyed_contexts.push_back(ctx);
    }
    end_context_objects_locked(ctx);
  }
  if (t_current == ctx)
    make_current(t_context_depth > 0 ? t_context_stack[--t_context_depth] : nullptr);
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// cuda.h: retains the device's primary context; does not make the green context current.
INTERNAL CUresult i_cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                     unsigned int flags) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  (void)desc;  // no cuDevResource* functions here to make one
  if (phCtx == nullptr || (flags & CU_GREEN_CTX_DEFAULT_STREAM) == 0 ||
      (flags & ~static_cast<unsigned>(CU_GREEN_CTX_DEFAULT_STREAM)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  auto made = std::make_unique<CUctx_st>(dev);
  made->green = true;
  auto green = std::make_unique<CUgreenCtx_st>(CUgreenCtx_st{made.get()});
  (void)primary_retain();
  std::lock_guard<std::mutex> lock(st().mutex);
  st().green_contexts.insert(made.get());
  st().greens.insert(green.get());
  made.release();
  *phCtx = green.release();
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (pContext == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().greens.count(hCtx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *pContext = hCtx->ctx;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// cuda.h: destroys the green context, "releasing the primary context of the device that this green
// context was created for" — as the real driver does, without calling the exported cuCtxDestroy
// or cuDevicePrimaryCtxRelease (an interposer sees only this call).
INTERNAL CUresult i_cuGreenCtxDestroy(CUgreenCtx hCtx) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> tlock(tl().mutex);
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().greens.erase(hCtx) == 0) {
      const std::vector<CUgreenCtx> &dead = st().destroyed_greens;
      return std::find(dead.begin(), dead.end(), hCtx) != dead.end()
                 ? CUDA_ERROR_CONTEXT_IS_DESTROYED
                 : CUDA_ERROR_INVALID_CONTEXT;
    }
    st().destroyed_greens.push_back(hCtx);
    ctx = hCtx->ctx;
    st().green_contexts.erase(ctx);
    st().destroyed_contexts.push_back(ctx);
    end_context_objects_locked(ctx);
    (void)primary_release_locked();
  }
  if (t_current == ctx)
    make_current(t_context_depth > 0 ? t_context_stack[--t_context_depth] : nullptr);
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxSetCurrent(CUcontext ctx) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (ctx != nullptr) {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (!context_valid_locked(ctx)) {
      note_if_destroyed_locked(ctx);
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (!green_current_elsewhere_allowed(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (ctx == nullptr) {  // NULL pops the stack (a no-op on an empty one), as documented
    make_current(t_context_depth > 0 ? t_context_stack[--t_context_depth] : nullptr);
  } else {
    make_current(ctx);  // replaces the top of the stack
  }
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxGetCurrent(CUcontext *pctx) try {
  STANDIN_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = t_current;
  STANDIN_DIRTY_ERRNO();  // last, with nothing left to keep: on GPU timing's every launch
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxPushCurrent_v2(CUcontext ctx) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (!context_valid_locked(ctx)) {
      note_if_destroyed_locked(ctx);
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (!green_current_elsewhere_allowed(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (t_current != nullptr) {
    if (t_context_depth == kMaxContextStack) return CUDA_ERROR_OUT_OF_MEMORY;
    t_context_stack[t_context_depth++] = t_current;
  }
  make_current(ctx);
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxPopCurrent_v2(CUcontext *pctx) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = t_current;
  make_current(t_context_depth > 0 ? t_context_stack[--t_context_depth] : nullptr);
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxGetDevice(CUdevice *device) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx = nullptr;
  if (const CUresult r = current_context(&ctx); r != CUDA_SUCCESS) return r;
  *device = ctx->device;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) try {
  STANDIN_DIRTY_ERRNO();
  if (ctx == nullptr) {
    const CUresult r = i_cuCtxGetDevice(device);
    STANDIN_DIRTY_ERRNO();  // this function's value, not the one it called
    return r;
  }
  STANDIN_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (!context_valid_locked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->device;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// Sleeps until every stream of the context is idle.
CUresult context_synchronize(CUcontext ctx) {
  long long idle_at = 0;
  {
    std::lock_guard<std::mutex> lock(tl().mutex);
    idle_at = context_idle_at_locked(ctx);
  }
  sleep_until_ns(idle_at);
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuCtxSynchronize() try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  CUcontext ctx = nullptr;
  if (const CUresult r = current_context(&ctx); r != CUDA_SUCCESS) return r;
  return context_synchronize(ctx);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuCtxSynchronize_v2(CUcontext ctx) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (ctx == nullptr) ctx = t_current;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (!context_valid_locked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  return context_synchronize(ctx);
}
STANDIN_OUT_OF_MEMORY

CUresult stream_create(CUstream *phStream, unsigned int flags, int priority) {
  STANDIN_REQUIRE_INIT();
  if (phStream == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUcontext ctx = nullptr;
  if (const CUresult r = current_context(&ctx); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(tl().mutex);
  *phStream = stream_new_locked(ctx, flags, priority, StreamKind::kCreated);
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuStreamCreate(CUstream *phStream, unsigned int Flags) try {
  STANDIN_DIRTY_ERRNO();
  return stream_create(phStream, Flags, 0);
}
STANDIN_OUT_OF_MEMORY

// One device whose priority range is [0, 0] (cuCtxGetStreamPriorityRange's answer on a device
// without priorities): any priority is clamped to 0, as the real driver clamps.
INTERNAL CUresult i_cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                               int priority) try {
  STANDIN_DIRTY_ERRNO();
  (void)priority;
  return stream_create(phStream, flags, 0);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuStreamDestroy(CUstream hStream) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (hStream == nullptr || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  std::lock_guard<std::mutex> lock(tl().mutex);
  CUstream_st *s = nullptr;
  if (const CUresult r = stream_resolve_locked(hStream, false, &s); r != CUDA_SUCCESS) return r;
  if (s->kind != StreamKind::kCreated) return CUDA_ERROR_INVALID_HANDLE;
  // Work still queued finishes on its own (as on a GPU); the object waits on the free list.
  s->alive = false;
  s->next_free = tl().free_streams;
  tl().free_streams = s;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// Sleeps until the work queued on the stream is done (legacy stream work queued after blocking
// streams' work started after it, so that is included). A capturing stream cannot be synchronized:
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture is invalidated, as the real driver does.
CUresult stream_synchronize(CUstream hStream, bool ptsz) {
  STANDIN_REQUIRE_INIT();
  long long idle_at = 0;
  {
    std::lock_guard<std::mutex> lock(tl().mutex);
    CUstream_st *s = nullptr;
    if (const CUresult r = stream_resolve_locked(hStream, ptsz, &s); r != CUDA_SUCCESS) return r;
    if (s->capturing) {
      s->capture_invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    idle_at = s->busy_until;
  }
  sleep_until_ns(idle_at);
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuStreamSynchronize(CUstream hStream) try {
  STANDIN_DIRTY_ERRNO();
  return stream_synchronize(hStream, false);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuStreamSynchronize_ptsz(CUstream hStream) try {
  STANDIN_DIRTY_ERRNO();
  return stream_synchronize(hStream, true);
}
STANDIN_OUT_OF_MEMORY

CUresult stream_query(CUstream hStream, bool ptsz) {
  STANDIN_REQUIRE_INIT();
  std::lock_guard<std::mutex> lock(tl().mutex);
  CUstream_st *s = nullptr;
  if (const CUresult r = stream_resolve_locked(hStream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->capturing) {
    s->capture_invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return s->busy_until <= now_ns() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

INTERNAL CUresult i_cuStreamQuery(CUstream hStream) try {
  STANDIN_DIRTY_ERRNO();
  return stream_query(hStream, false);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuStreamQuery_ptsz(CUstream hStream) try {
  STANDIN_DIRTY_ERRNO();
  return stream_query(hStream, true);
}
STANDIN_OUT_OF_MEMORY

CUresult stream_get_ctx(CUstream hStream, CUcontext *pctx, bool ptsz) {
  STANDIN_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(tl().mutex);
  CUstream_st *s = nullptr;
  if (const CUresult r = stream_resolve_locked(hStream, ptsz, &s); r != CUDA_SUCCESS) return r;
  *pctx = s->ctx;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuStreamGetCtx(CUstream hStream, CUcontext *pctx) try {
  STANDIN_DIRTY_ERRNO();
  return stream_get_ctx(hStream, pctx, false);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx) try {
  STANDIN_DIRTY_ERRNO();
  return stream_get_ctx(hStream, pctx, true);
}
STANDIN_OUT_OF_MEMORY

// CUDA 12.5. A stream of a green context names it, with the device's primary context (cuda.h);
// here only the special handles of a thread that has one current do (no cuGreenCtxStreamCreate).
// CU_STREAM_PER_THREAD with a green context current: CUDA_ERROR_INVALID_HANDLE, as documented.
CUresult stream_get_ctx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx, bool ptsz) {
  STANDIN_REQUIRE_INIT();
  if (pCtx == nullptr || pGreenCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx = nullptr;
  if (const CUresult r = stream_get_ctx(hStream, &ctx, ptsz); r != CUDA_SUCCESS) return r;
  *pGreenCtx = nullptr;
  *pCtx = ctx;
  if (!ctx->green) return CUDA_SUCCESS;
  if (hStream == CU_STREAM_PER_THREAD || (ptsz && hStream == nullptr))
    return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(st().mutex);
  for (CUgreenCtx green : st().greens)
    if (green->ctx == ctx) *pGreenCtx = green;
  *pCtx = &st().primary;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx,
                                      CUgreenCtx *pGreenCtx) try {
  STANDIN_DIRTY_ERRNO();
  if (config().no_stream_get_ctx_v2) return CUDA_ERROR_NOT_SUPPORTED;
  return stream_get_ctx_v2(hStream, pCtx, pGreenCtx, false);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx,
                                           CUgreenCtx *pGreenCtx) try {
  STANDIN_DIRTY_ERRNO();
  if (config().no_stream_get_ctx_v2) return CUDA_ERROR_NOT_SUPPORTED;
  return stream_get_ctx_v2(hStream, pCtx, pGreenCtx, true);
}
STANDIN_OUT_OF_MEMORY

// A question about the handle alone: a live context answers, an ended one says so.
INTERNAL CUresult i_cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) ctx = t_current;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (!context_valid_locked(ctx)) {
    const std::vector<CUcontext> &dead = st().destroyed_contexts;
    return std::find(dead.begin(), dead.end(), ctx) != dead.end() || ctx == &st().primary
               ? CUDA_ERROR_CONTEXT_IS_DESTROYED
               : CUDA_ERROR_INVALID_CONTEXT;
  }
  *version = 3020;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuMemFree_v2(CUdeviceptr dptr) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().allocations.erase(dptr) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(reinterpret_cast<void *>(static_cast<uintptr_t>(dptr)));
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

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
      const char *start = p++;
      while (*p != '\0' && *p != '"') ++p;
      if (*p == '\0') return false;
      ++p;
      out.emplace_back(start, static_cast<size_t>(p - start));  // with its quotes
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
  KernelSignature *body_of = nullptr;  // the kernel whose body the tokens are in
  for (size_t i = 2; i < t.size(); ++i) {
    if (t[i] == "{") {
      ++depth;
      continue;
    }
    if (t[i] == "}") {
      if (--depth < 0) return invalid("unbalanced '}'");
      if (depth == 0) body_of = nullptr;
      continue;
    }
    // The stand-in's cost declaration, `.pragma "ferrum_cost_ns=N";` in a kernel's body (a
    // pragma string the real JIT does not know, and ignores).
    static constexpr char kCost[] = "\"ferrum_cost_ns=";
    if (depth > 0 && body_of != nullptr && t[i] == ".pragma" && i + 1 < t.size() &&
        t[i + 1].rfind(kCost, 0) == 0) {
      const std::string value = t[i + 1].substr(sizeof kCost - 1, t[i + 1].size() - sizeof kCost);
      size_t n = 0;
      if (!parse_number(value, n)) return invalid("bad ferrum_cost_ns pragma in " + body_of->name);
      body_of->cost_ns = static_cast<long long>(n);
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
    body_of = &kernels.back();
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

INTERNAL CUresult i_cuModuleLoadData(CUmodule *module, const void *image) try {
  STANDIN_DIRTY_ERRNO();
  return load_module(module, image, 0, nullptr, nullptr);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                       CUjit_option *options, void **optionValues) try {
  STANDIN_DIRTY_ERRNO();
  return load_module(module, image, numOptions, options, optionValues);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuModuleUnload(CUmodule hmod) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().modules.erase(hmod) == 0) return CUDA_ERROR_INVALID_VALUE;
    for (const auto &f : hmod->functions) st().functions.erase(f.get());
  }
  delete hmod;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuFuncGetName(const char **name, CUfunction hfunc) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (name == nullptr || hfunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().functions.count(hfunc) == 0) return CUDA_ERROR_INVALID_VALUE;
  *name = hfunc->signature.name.c_str();
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuLibraryLoadData(CUlibrary *library, const void *code,
                                      CUjit_option *jitOptions, void **jitOptionsValues,
                                      unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                      void **libraryOptionValues,
                                      unsigned int numLibraryOptions) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuLibraryUnload(CUlibrary library) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().kernels.count(kernel) == 0) return CUDA_ERROR_INVALID_HANDLE;
  *pFunc = &kernel->function;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuKernelGetName(const char **name, CUkernel hfunc) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (name == nullptr || hfunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().kernels.count(hfunc) == 0) return CUDA_ERROR_INVALID_VALUE;
  *name = hfunc->function.signature.name.c_str();
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphCreate(CUgraph *phGraph, unsigned int flags) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto g = std::make_unique<CUgraph_st>();  // freed if the set has no room for it
  std::lock_guard<std::mutex> lock(st().mutex);
  st().graphs.insert(g.get());
  *phGraph = g.release();
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphDestroy(CUgraph hGraph) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().graphs.erase(hGraph) == 0) return CUDA_ERROR_INVALID_VALUE;
    for (const auto &node : hGraph->nodes) st().nodes.erase(node.get());
  }
  delete hGraph;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

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
  // Room first, published last: an allocation that fails (CUDA_ERROR_OUT_OF_MEMORY) leaves no
  // trace of the node, never a freed one in st().nodes.
  hGraph->nodes.reserve(hGraph->nodes.size() + 1);
  st().nodes.insert(node.get());
  *phGraphNode = node.get();
  hGraph->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies,
                                        size_t numDependencies) try {
  STANDIN_DIRTY_ERRNO();
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EMPTY,
                  nullptr);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                         CUcontext ctx) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                            const CUgraphNode *dependencies, size_t numDependencies,
                                            const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) try {
  STANDIN_DIRTY_ERRNO();
  if (nodeParams == nullptr || (nodeParams->func == nullptr && nodeParams->kern == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_KERNEL,
                  nullptr, nodeParams);
}
STANDIN_OUT_OF_MEMORY

// Two-call protocol: nodes == NULL gives the count; otherwise the first min(count, *numNodes)
// nodes (in the order they were added), NULL in the remaining entries, and *numNodes set to
// the number filled.
INTERNAL CUresult i_cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().nodes.count(hNode) == 0) return CUDA_ERROR_INVALID_VALUE;
  *type = hNode->type;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// Under st().mutex: the node's kernel parameters, or nullptr if it is not a live kernel node.
const CUDA_KERNEL_NODE_PARAMS_v2 *kernel_params_locked(CUgraphNode hNode) {
  if (st().nodes.count(hNode) == 0 || hNode->type != CU_GRAPH_NODE_TYPE_KERNEL) return nullptr;
  return &hNode->kernel.params;
}

// The CUDA 10.0 ABI: no kern field, so a node made from a CUkernel reports that kernel's
// function (what cuKernelGetFunction returns).
INTERNAL CUresult i_cuGraphKernelNodeGetParams(CUgraphNode hNode,
                                               CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

// The CUDA 12.0 ABI: func as added (NULL for a node made from a CUkernel), kern and ctx.
INTERNAL CUresult i_cuGraphKernelNodeGetParams_v2(CUgraphNode hNode,
                                                  CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_INIT();
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mutex);
  const CUDA_KERNEL_NODE_PARAMS_v2 *p = kernel_params_locked(hNode);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *nodeParams = *p;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

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

// Under st().mutex: a replay's simulated duration, the sum of its kernel nodes' costs (a
// kernel's `.pragma "ferrum_cost_ns=N";`, else FERRUM_STANDIN_KERNEL_NS) and of its captured
// launches' durations; 1000 ns for a graph with neither.
long long graph_sim_ns_locked(CUgraph g) {
  long long total = 0;
  bool timed = false;
  for (const auto &node : g->nodes) {
    if (node->type == CU_GRAPH_NODE_TYPE_GRAPH) {
      total += node->sim_ns;
      timed = true;
    } else if (node->type == CU_GRAPH_NODE_TYPE_KERNEL) {
      const CUDA_KERNEL_NODE_PARAMS_v2 &p = node->kernel.params;
      const CUfunc_st *f = nullptr;
      if (p.func != nullptr && st().functions.count(p.func) != 0) {
        f = p.func;
      } else if (p.func == nullptr && st().kernels.count(p.kern) != 0) {
        f = &p.kern->function;
      }
      total +=
          f != nullptr && f->signature.cost_ns >= 0 ? f->signature.cost_ns : config().kernel_ns;
      timed = true;
    }
  }
  return timed ? total : 1000;
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
  const unsigned long long ordinal = g_instantiates.fetch_add(1, std::memory_order_relaxed) + 1;
  const std::vector<long long> &overrides = config().graph_ns;
  e->sim_ns.store(
      ordinal <= overrides.size() ? overrides[ordinal - 1] : graph_sim_ns_locked(hGraph),
      std::memory_order_relaxed);
  e->live.store(true, std::memory_order_release);
  *phGraphExec = exec_handle_locked(e);
  if (config().instantiate_log != nullptr) log_instantiate_locked(ordinal, hGraph);
  return CUDA_SUCCESS;
}

// The legacy 5-argument form (cuGraphInstantiate, CUDA 10.0) and its CUDA 11.0 twin. Like the
// driver's, a diagnostic in the caller's log buffer where instantiation failed ("logBuffer:
// buffer to store diagnostic messages"), an empty one where it worked.
CUresult instantiate_with_log(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                              char *logBuffer, size_t bufferSize) {
  const CUresult r = instantiate(phGraphExec, hGraph, 0);
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0)
    std::snprintf(logBuffer, bufferSize, "%s",
                  r == CUDA_SUCCESS ? "" : "graph not instantiated: invalid graph or arguments");
  return r;
}

INTERNAL CUresult i_cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer,
                                       size_t bufferSize) try {
  STANDIN_DIRTY_ERRNO();
  return instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                          CUgraphNode *phErrorNode, char *logBuffer,
                                          size_t bufferSize) try {
  STANDIN_DIRTY_ERRNO();
  return instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                unsigned long long flags) try {
  STANDIN_DIRTY_ERRNO();
  return instantiate(phGraphExec, hGraph, flags);
}
STANDIN_OUT_OF_MEMORY

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
                                                 CUDA_GRAPH_INSTANTIATE_PARAMS *params) try {
  STANDIN_DIRTY_ERRNO();
  return instantiate_with_params(phGraphExec, hGraph, params);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                      CUDA_GRAPH_INSTANTIATE_PARAMS *params) try {
  STANDIN_DIRTY_ERRNO();
  return instantiate_with_params(phGraphExec, hGraph, params);
}
STANDIN_OUT_OF_MEMORY

CUresult upload(CUgraphExec hGraphExec) {
  STANDIN_REQUIRE_INIT();
  return exec_live(hGraphExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

INTERNAL CUresult i_cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) try {
  STANDIN_DIRTY_ERRNO();
  (void)hStream;
  return upload(hGraphExec);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) try {
  STANDIN_DIRTY_ERRNO();
  (void)hStream;
  return upload(hGraphExec);
}
STANDIN_OUT_OF_MEMORY

// Under tl().mutex (st().mutex taken inside): adds a node of `type` to the graph a stream is
// capturing into, after the capture's last node.
CUresult capture_add_node_locked(CUstream_st *s, CUgraphNodeType type, long long sim_ns) {
  std::lock_guard<std::mutex> lock(st().mutex);
  if (st().graphs.count(s->capture_graph) == 0) {  // destroyed under the capture
    s->capture_invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  auto node = std::make_unique<CUgraphNode_st>();
  node->owner = s->capture_graph;
  node->type = type;
  node->sim_ns = sim_ns;
  s->capture_graph->nodes.reserve(s->capture_graph->nodes.size() + 1);  // as in add_node
  st().nodes.insert(node.get());
  s->capture_last = node.get();
  s->capture_graph->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

// Enqueues a replay of `sim_ns` on the stream's timeline and returns at once, unless the
// stream already has FERRUM_STANDIN_LAUNCH_QUEUE replays pending: then it sleeps until the
// oldest is done (a full launch queue blocks the host, as on a GPU). Into a capturing stream,
// the replay is not run but captured as a child-graph node.
CUresult enqueue_replay(CUstream hStream, bool ptsz, long long sim_ns, unsigned long long nth) {
  const Config &c = config();
  const size_t depth = c.launch_queue;
  for (;;) {
    long long wait_until = 0;
    {
      std::lock_guard<std::mutex> lock(tl().mutex);
      if (c.launch_raise_locked != 0 && nth == c.launch_raise_locked_at) {
        nth = 0;  // once, also when the launch waits for room and takes the lock again
        std::raise(c.launch_raise_locked);
      }
      CUstream_st *s = nullptr;
      if (const CUresult r = stream_resolve_locked(hStream, ptsz, &s); r != CUDA_SUCCESS) return r;
      if (s->capturing) {
        if (s->capture_invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        g_captured_launches.fetch_add(1, std::memory_order_relaxed);
        return capture_add_node_locked(s, CU_GRAPH_NODE_TYPE_GRAPH, sim_ns);
      }
      const long long now = now_ns();
      while (!s->pending.empty() && s->pending.front() <= now) s->pending.pop_front();
      if (s->pending.size() < depth) {
        const long long done = stream_ready_at_locked(s, now) + sim_ns;
        s->pending.push_back(done);  // first: without room, the stream is left as it was
        s->busy_until = done;
        return CUDA_SUCCESS;
      }
      wait_until = s->pending.front();
    }
    sleep_until_ns(wait_until);
  }
}

CUresult launch(CUgraphExec hGraphExec, CUstream hStream, bool ptsz,
                std::atomic<unsigned long long> &counter) {
  const Config &c = config();
  // The benchmark's fast path: no counter, no timeline.
  if (c.bench) return hGraphExec != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  // After the benchmark's path (never dirty), which it would slow down (see STANDIN_DIRTY_ERRNO).
  STANDIN_DIRTY_ERRNO_AS(ptsz ? "i_cuGraphLaunch_ptsz" : "i_cuGraphLaunch");
  const unsigned long long nth = g_launches_any.fetch_add(1, std::memory_order_relaxed) + 1;
  counter.fetch_add(1, std::memory_order_relaxed);
  if (c.launch_raise != 0) std::raise(c.launch_raise);
  if (c.launch_throw) {
    throw std::runtime_error("ferrum-replay stand-in driver: injected exception in cuGraphLaunch");
  }
  if (c.has_launch_result) return c.launch_result;
  STANDIN_REQUIRE_INIT();
  const CUgraphExec_st *e = exec_resolve(hGraphExec);
  if (e == nullptr || !e->live.load(std::memory_order_acquire)) return CUDA_ERROR_INVALID_VALUE;
  const CUresult queued =
      enqueue_replay(hStream, ptsz, e->sim_ns.load(std::memory_order_relaxed), nth);
  if (c.launch_call_ns > 0) sleep_until_ns(now_ns() + c.launch_call_ns);
  return queued;
}

INTERNAL CUresult i_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) try {
  return launch(hGraphExec, hStream, false, g_launches);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) try {
  return launch(hGraphExec, hStream, true, g_launches_ptsz);
}
STANDIN_OUT_OF_MEMORY

// ---------------------------------------------------------------------------------------------
// Events. With FERRUM_STANDIN_NO_EVENTS=1 every event function returns CUDA_ERROR_NOT_SUPPORTED
// (and cuGetProcAddress does not know them): a driver without the API.

#define STANDIN_REQUIRE_EVENTS()                             \
  do {                                                       \
    if (config().no_events) return CUDA_ERROR_NOT_SUPPORTED; \
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;   \
  } while (0)

// Under tl().mutex: a live event of a live context. One the stand-in made that is not (destroyed,
// or its context ended) is counted: dead_event_calls.
bool event_live_locked(CUevent e) {
  if (e == nullptr || tl().events.count(e) == 0) return false;
  if (e->alive && !e->ctx->destroyed.load(std::memory_order_acquire)) return true;
  g_dead_event_calls.fetch_add(1, std::memory_order_relaxed);
  return false;
}

INTERNAL CUresult i_cuEventCreate(CUevent *phEvent, unsigned int Flags) try {
  STANDIN_DIRTY_ERRNO();
  g_events_created.fetch_add(1, std::memory_order_relaxed);
  STANDIN_REQUIRE_EVENTS();
  constexpr unsigned kKnown =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (phEvent == nullptr || (Flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  // An interprocess event must be created with CU_EVENT_DISABLE_TIMING.
  if ((Flags & CU_EVENT_INTERPROCESS) != 0 && (Flags & CU_EVENT_DISABLE_TIMING) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUcontext ctx = nullptr;
  if (const CUresult r = current_context(&ctx); r != CUDA_SUCCESS) return r;
  if (config().event_create_fail) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(tl().mutex);
  CUevent_st *e = tl().free_events;
  if (e != nullptr) {
    tl().free_events = e->next_free;
    *e = CUevent_st();
  } else {
    auto made = std::make_unique<CUevent_st>();
    tl().events.insert(made.get());
    e = made.release();
  }
  e->ctx = ctx;
  e->flags = Flags;
  *phEvent = e;
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// Stamps the event with the time the stream's work queued so far ends (for the legacy stream,
// with the blocking streams' work it implicitly waits for). Into a capturing stream: an event
// record node, counted (captured_event_records in FERRUM_STANDIN_REPORT); the event's own
// state is left as it was.
CUresult event_record(CUevent hEvent, CUstream hStream, unsigned int flags, bool ptsz,
                      const char *caller) {
  // The benchmark's fast path: the arguments checked, nothing stamped, no lock.
  if (config().bench) {
    if ((flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return hEvent != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  }
  STANDIN_DIRTY_ERRNO_AS(caller);  // after the benchmark's path, as in launch()
  STANDIN_REQUIRE_EVENTS();
  if ((flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(tl().mutex);
  if (!event_live_locked(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st *s = nullptr;
  if (const CUresult r = stream_resolve_locked(hStream, ptsz, &s); r != CUDA_SUCCESS) return r;
  // "hEvent and hStream must be from the same context otherwise CUDA_ERROR_INVALID_HANDLE".
  if (s->ctx != hEvent->ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capturing) {
    if (s->capture_invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    g_captured_event_records.fetch_add(1, std::memory_order_relaxed);
    return capture_add_node_locked(s, CU_GRAPH_NODE_TYPE_EVENT_RECORD, 0);
  }
  // CU_EVENT_RECORD_EXTERNAL is meaningful only in capture.
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const long long stamp = stream_ready_at_locked(s, now_ns());
  s->busy_until = stamp;  // the legacy stream's record waits for the blocking streams
  hEvent->recorded = true;
  hEvent->stamp = stamp;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuEventRecord(CUevent hEvent, CUstream hStream) try {
  return event_record(hEvent, hStream, 0, false, __func__);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) try {
  return event_record(hEvent, hStream, 0, true, __func__);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuEventRecordWithFlags(CUevent hEvent, CUstream hStream,
                                           unsigned int flags) try {
  return event_record(hEvent, hStream, flags, false, __func__);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                unsigned int flags) try {
  return event_record(hEvent, hStream, flags, true, __func__);
}
STANDIN_OUT_OF_MEMORY

// The event's completion time: 0 for a never-recorded event (complete, as documented).
CUresult event_stamp(CUevent hEvent, long long *stamp) {
  std::lock_guard<std::mutex> lock(tl().mutex);
  if (!event_live_locked(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  *stamp = hEvent->recorded ? hEvent->stamp : 0;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuEventQuery(CUevent hEvent) try {
  if (config().bench) return hEvent != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_EVENTS();
  const unsigned long long query = g_event_queries.fetch_add(1, std::memory_order_relaxed);
  if (const long long hang = config().event_query_hang_ns;
      hang > 0 && query < config().event_query_hangs)
    sleep_until_ns(now_ns() + hang);
  long long stamp = 0;
  if (const CUresult r = event_stamp(hEvent, &stamp); r != CUDA_SUCCESS) return r;
  return now_ns() >= stamp ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuEventSynchronize(CUevent hEvent) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_EVENTS();
  long long stamp = 0;
  if (const CUresult r = event_stamp(hEvent, &stamp); r != CUDA_SUCCESS) return r;
  sleep_until_ns(stamp);
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) try {
  STANDIN_DIRTY_ERRNO();
  if (config().bench) {  // every event completed at once, at the same time
    if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (hStart == nullptr || hEnd == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *pMilliseconds = 0.0f;
    return CUDA_SUCCESS;
  }
  STANDIN_REQUIRE_EVENTS();
  if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(tl().mutex);
  if (!event_live_locked(hStart) || !event_live_locked(hEnd)) return CUDA_ERROR_INVALID_HANDLE;
  for (const CUevent_st *e : {hStart, hEnd}) {
    if (!e->recorded || (e->flags & CU_EVENT_DISABLE_TIMING) != 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  const long long now = now_ns();
  if (hStart->stamp > now || hEnd->stamp > now) return CUDA_ERROR_NOT_READY;
  *pMilliseconds = static_cast<float>(static_cast<double>(hEnd->stamp - hStart->stamp) / 1e6);
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuEventDestroy(CUevent hEvent) try {
  STANDIN_DIRTY_ERRNO();
  STANDIN_REQUIRE_EVENTS();
  std::lock_guard<std::mutex> lock(tl().mutex);
  if (!event_live_locked(hEvent)) return CUDA_ERROR_INVALID_HANDLE;
  hEvent->alive = false;
  hEvent->next_free = tl().free_events;
  tl().free_events = hEvent;
  g_events_destroyed.fetch_add(1);
  return CUDA_SUCCESS;
}
STANDIN_OUT_OF_MEMORY

// ---------------------------------------------------------------------------------------------
// Stream capture: while a stream captures, graph launches and event records into it are not run
// but become nodes (a child-graph node carrying the replay's duration, an event record node) of
// the graph cuStreamEndCapture returns. The legacy default stream cannot capture.

CUresult begin_capture(CUstream hStream, CUstreamCaptureMode mode, bool ptsz) {
  STANDIN_REQUIRE_INIT();
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(tl().mutex);
  CUstream_st *s = nullptr;
  if (const CUresult r = stream_resolve_locked(hStream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->kind == StreamKind::kLegacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  auto made = std::make_unique<CUgraph_st>();
  {
    std::lock_guard<std::mutex> glock(st().mutex);
    st().graphs.insert(made.get());
  }
  CUgraph g = made.release();
  s->capturing = true;
  s->capture_invalidated = false;
  s->capture_id = ++tl().capture_ids;
  s->capture_graph = g;
  s->capture_last = nullptr;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuStreamBeginCapture(CUstream hStream) try {
  STANDIN_DIRTY_ERRNO();
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamBeginCapture_ptsz(CUstream hStream) try {
  STANDIN_DIRTY_ERRNO();
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) try {
  STANDIN_DIRTY_ERRNO();
  return begin_capture(hStream, mode, false);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) try {
  STANDIN_DIRTY_ERRNO();
  return begin_capture(hStream, mode, true);
}
STANDIN_OUT_OF_MEMORY

// The captured graph, or (capture invalidated) NULL and CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
// A stream that is not capturing: CUDA_ERROR_INVALID_VALUE (cuStreamEndCapture's documented
// errors have no better one).
CUresult end_capture(CUstream hStream, CUgraph *phGraph, bool ptsz) {
  STANDIN_REQUIRE_INIT();
  if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(tl().mutex);
  CUstream_st *s = nullptr;
  if (const CUresult r = stream_resolve_locked(hStream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (!s->capturing) return CUDA_ERROR_INVALID_VALUE;
  CUgraph g = s->capture_graph;
  s->capturing = false;
  s->capture_graph = nullptr;
  s->capture_last = nullptr;
  if (s->capture_invalidated) {
    s->capture_invalidated = false;
    *phGraph = nullptr;
    std::lock_guard<std::mutex> glock(st().mutex);
    if (st().graphs.erase(g) != 0) {
      for (const auto &node : g->nodes) st().nodes.erase(node.get());
      delete g;
    }
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *phGraph = g;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) try {
  STANDIN_DIRTY_ERRNO();
  return end_capture(hStream, phGraph, false);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) try {
  STANDIN_DIRTY_ERRNO();
  return end_capture(hStream, phGraph, true);
}
STANDIN_OUT_OF_MEMORY

// Under tl().mutex.
CUstreamCaptureStatus capture_status_locked(const CUstream_st *s) {
  if (!s->capturing) return CU_STREAM_CAPTURE_STATUS_NONE;
  return s->capture_invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

CUresult is_capturing(CUstream hStream, CUstreamCaptureStatus *status, bool ptsz,
                      const char *caller) {
  if (config().bench) {  // the benchmark's fast path: no stream captures
    if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  STANDIN_DIRTY_ERRNO_AS(caller);  // after the benchmark's path, as in launch()
  STANDIN_REQUIRE_INIT();
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(tl().mutex);
  CUstream_st *s = nullptr;
  if (const CUresult r = stream_resolve_locked(hStream, ptsz, &s); r != CUDA_SUCCESS) return r;
  *status = capture_status_locked(s);
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *status) try {
  return is_capturing(hStream, status, false, __func__);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *status) try {
  return is_capturing(hStream, status, true, __func__);
}
STANDIN_OUT_OF_MEMORY

// Every version of cuStreamGetCaptureInfo: the status; while capturing, the capture's id, graph
// and dependency set (the last captured node, or none), edge data NULL (all edges default).
CUresult capture_info(CUstream hStream, bool ptsz, CUstreamCaptureStatus *status, cuuint64_t *id,
                      CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
                      size_t *num_deps) {
  STANDIN_REQUIRE_INIT();
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(tl().mutex);
  CUstream_st *s = nullptr;
  if (const CUresult r = stream_resolve_locked(hStream, ptsz, &s); r != CUDA_SUCCESS) return r;
  *status = capture_status_locked(s);
  if (*status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;
  if (id != nullptr) *id = s->capture_id;
  if (graph != nullptr) *graph = s->capture_graph;
  if (deps != nullptr) *deps = s->capture_last != nullptr ? &s->capture_last : nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (num_deps != nullptr) *num_deps = s->capture_last != nullptr ? 1 : 0;
  return CUDA_SUCCESS;
}

INTERNAL CUresult i_cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *status,
                                           cuuint64_t *id) try {
  STANDIN_DIRTY_ERRNO();
  return capture_info(hStream, false, status, id, nullptr, nullptr, nullptr, nullptr);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *status,
                                                cuuint64_t *id) try {
  STANDIN_DIRTY_ERRNO();
  return capture_info(hStream, true, status, id, nullptr, nullptr, nullptr, nullptr);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *status,
                                              cuuint64_t *id, CUgraph *graph,
                                              const CUgraphNode **deps, size_t *num_deps) try {
  STANDIN_DIRTY_ERRNO();
  return capture_info(hStream, false, status, id, graph, deps, nullptr, num_deps);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *status,
                                                   cuuint64_t *id, CUgraph *graph,
                                                   const CUgraphNode **deps, size_t *num_deps) try {
  STANDIN_DIRTY_ERRNO();
  return capture_info(hStream, true, status, id, graph, deps, nullptr, num_deps);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *status,
                                              cuuint64_t *id, CUgraph *graph,
                                              const CUgraphNode **deps,
                                              const CUgraphEdgeData **edges, size_t *num_deps) try {
  STANDIN_DIRTY_ERRNO();
  return capture_info(hStream, false, status, id, graph, deps, edges, num_deps);
}
STANDIN_OUT_OF_MEMORY
INTERNAL CUresult i_cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *status,
                                                   cuuint64_t *id, CUgraph *graph,
                                                   const CUgraphNode **deps,
                                                   const CUgraphEdgeData **edges,
                                                   size_t *num_deps) try {
  STANDIN_DIRTY_ERRNO();
  return capture_info(hStream, true, status, id, graph, deps, edges, num_deps);
}
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGraphExecDestroy(CUgraphExec hGraphExec) try {
  STANDIN_DIRTY_ERRNO();
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
STANDIN_OUT_OF_MEMORY

INTERNAL CUresult i_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags, CUdriverProcAddressQueryResult *status);

INTERNAL CUresult i_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags) try {
  STANDIN_DIRTY_ERRNO();
  const CUresult r = i_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
  STANDIN_DIRTY_ERRNO();  // this function's value, not the one it called
  return r;
}
STANDIN_OUT_OF_MEMORY

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
CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  return i_cuDevicePrimaryCtxGetState(dev, flags, active);
}
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  return i_cuDevicePrimaryCtxReset(dev);
}
CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return i_cuDevicePrimaryCtxReset(dev);
}
CUresult CUDAAPI cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                  unsigned int flags) {
  return i_cuGreenCtxCreate(phCtx, desc, dev, flags);
}
CUresult CUDAAPI cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx) {
  return i_cuCtxFromGreenCtx(pContext, hCtx);
}
CUresult CUDAAPI cuGreenCtxDestroy(CUgreenCtx hCtx) {
  return i_cuGreenCtxDestroy(hCtx);
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
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  return i_cuCtxPushCurrent_v2(ctx);
}
CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  return i_cuCtxPushCurrent_v2(ctx);
}
CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) {
  return i_cuCtxPopCurrent_v2(pctx);
}
CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx) {
  return i_cuCtxPopCurrent_v2(pctx);
}
CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
  return i_cuCtxGetDevice(device);
}
CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
  return i_cuCtxGetDevice_v2(device, ctx);
}
CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
  return i_cuStreamCreateWithPriority(phStream, flags, priority);
}
CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  return i_cuStreamQuery(hStream);
}
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream) {
  return i_cuStreamQuery_ptsz(hStream);
}
CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
  return i_cuStreamGetCtx(hStream, pctx);
}
CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx) {
  return i_cuStreamGetCtx_ptsz(hStream, pctx);
}
CUresult CUDAAPI cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx) {
  return i_cuStreamGetCtx_v2(hStream, pCtx, pGreenCtx);
}
CUresult CUDAAPI cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx) {
  return i_cuStreamGetCtx_v2_ptsz(hStream, pCtx, pGreenCtx);
}
CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
  return i_cuCtxGetApiVersion(ctx, version);
}
CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  return i_cuEventCreate(phEvent, Flags);
}
CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  return i_cuEventRecord(hEvent, hStream);
}
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  return i_cuEventRecord_ptsz(hEvent, hStream);
}
CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return i_cuEventRecordWithFlags(hEvent, hStream, flags);
}
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return i_cuEventRecordWithFlags_ptsz(hEvent, hStream, flags);
}
CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  return i_cuEventQuery(hEvent);
}
CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  return i_cuEventSynchronize(hEvent);
}
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  return i_cuEventElapsedTime(pMilliseconds, hStart, hEnd);
}
CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  return i_cuEventElapsedTime(pMilliseconds, hStart, hEnd);
}
CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
  return i_cuEventDestroy(hEvent);
}
CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  return i_cuEventDestroy(hEvent);
}
CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream) {
  return i_cuStreamBeginCapture(hStream);
}
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream) {
  return i_cuStreamBeginCapture_ptsz(hStream);
}
CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return i_cuStreamBeginCapture_v2(hStream, mode);
}
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return i_cuStreamBeginCapture_v2_ptsz(hStream, mode);
}
CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  return i_cuStreamEndCapture(hStream, phGraph);
}
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
  return i_cuStreamEndCapture_ptsz(hStream, phGraph);
}
CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  return i_cuStreamIsCapturing(hStream, captureStatus);
}
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  return i_cuStreamIsCapturing_ptsz(hStream, captureStatus);
}
CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out) {
  return i_cuStreamGetCaptureInfo(hStream, captureStatus_out, id_out);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                             CUstreamCaptureStatus *captureStatus_out,
                                             cuuint64_t *id_out) {
  return i_cuStreamGetCaptureInfo_ptsz(hStream, captureStatus_out, id_out);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream,
                                           CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out,
                                           size_t *numDependencies_out) {
  return i_cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, graph_out,
                                     dependencies_out, numDependencies_out);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out,
                                                size_t *numDependencies_out) {
  return i_cuStreamGetCaptureInfo_v2_ptsz(hStream, captureStatus_out, id_out, graph_out,
                                          dependencies_out, numDependencies_out);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream,
                                           CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out,
                                           const CUgraphEdgeData **edgeData_out,
                                           size_t *numDependencies_out) {
  return i_cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, graph_out,
                                     dependencies_out, edgeData_out, numDependencies_out);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out,
                                                const CUgraphEdgeData **edgeData_out,
                                                size_t *numDependencies_out) {
  return i_cuStreamGetCaptureInfo_v3_ptsz(hStream, captureStatus_out, id_out, graph_out,
                                          dependencies_out, edgeData_out, numDependencies_out);
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

// The functions <cuda.h> does not declare (most _ptsz variants, the legacy ABIs) are checked
// against the prototypes of cudaTypedefs.h, whose PFN names carry the version of each ABI.
static_assert(std::is_same_v<decltype(&cuCtxPushCurrent), PFN_cuCtxPushCurrent_v2000>);
static_assert(std::is_same_v<decltype(&cuCtxPushCurrent_v2), PFN_cuCtxPushCurrent_v4000>);
static_assert(std::is_same_v<decltype(&cuCtxPopCurrent), PFN_cuCtxPopCurrent_v2000>);
static_assert(std::is_same_v<decltype(&cuCtxPopCurrent_v2), PFN_cuCtxPopCurrent_v4000>);
static_assert(std::is_same_v<decltype(&cuCtxGetDevice), PFN_cuCtxGetDevice_v2000>);
static_assert(std::is_same_v<decltype(&cuCtxGetDevice_v2), PFN_cuCtxGetDevice_v13000>);
static_assert(
    std::is_same_v<decltype(&cuStreamCreateWithPriority), PFN_cuStreamCreateWithPriority_v5050>);
static_assert(std::is_same_v<decltype(&cuStreamQuery), PFN_cuStreamQuery_v2000>);
static_assert(std::is_same_v<decltype(&cuStreamQuery_ptsz), PFN_cuStreamQuery_v7000_ptsz>);
static_assert(std::is_same_v<decltype(&cuStreamGetCtx), PFN_cuStreamGetCtx_v9020>);
static_assert(std::is_same_v<decltype(&cuStreamGetCtx_ptsz), PFN_cuStreamGetCtx_v9020_ptsz>);
static_assert(std::is_same_v<decltype(&cuStreamGetCtx_v2), PFN_cuStreamGetCtx_v12050>);
static_assert(std::is_same_v<decltype(&cuCtxGetApiVersion), PFN_cuCtxGetApiVersion_v3020>);
static_assert(std::is_same_v<decltype(&cuEventCreate), PFN_cuEventCreate_v2000>);
static_assert(std::is_same_v<decltype(&cuEventRecord), PFN_cuEventRecord_v2000>);
static_assert(std::is_same_v<decltype(&cuEventRecord_ptsz), PFN_cuEventRecord_v7000_ptsz>);
static_assert(std::is_same_v<decltype(&cuEventRecordWithFlags), PFN_cuEventRecordWithFlags_v11010>);
static_assert(
    std::is_same_v<decltype(&cuEventRecordWithFlags_ptsz), PFN_cuEventRecordWithFlags_v11010_ptsz>);
static_assert(std::is_same_v<decltype(&cuEventQuery), PFN_cuEventQuery_v2000>);
static_assert(std::is_same_v<decltype(&cuEventSynchronize), PFN_cuEventSynchronize_v2000>);
static_assert(std::is_same_v<decltype(&cuEventElapsedTime), PFN_cuEventElapsedTime_v2000>);
static_assert(std::is_same_v<decltype(&cuEventElapsedTime_v2), PFN_cuEventElapsedTime_v12080>);
static_assert(std::is_same_v<decltype(&cuEventDestroy), PFN_cuEventDestroy_v2000>);
static_assert(std::is_same_v<decltype(&cuEventDestroy_v2), PFN_cuEventDestroy_v4000>);
static_assert(std::is_same_v<decltype(&cuStreamBeginCapture), PFN_cuStreamBeginCapture_v10000>);
static_assert(
    std::is_same_v<decltype(&cuStreamBeginCapture_ptsz), PFN_cuStreamBeginCapture_v10000_ptsz>);
static_assert(std::is_same_v<decltype(&cuStreamBeginCapture_v2), PFN_cuStreamBeginCapture_v10010>);
static_assert(
    std::is_same_v<decltype(&cuStreamBeginCapture_v2_ptsz), PFN_cuStreamBeginCapture_v10010_ptsz>);
static_assert(std::is_same_v<decltype(&cuStreamEndCapture), PFN_cuStreamEndCapture_v10000>);
static_assert(
    std::is_same_v<decltype(&cuDevicePrimaryCtxReset), PFN_cuDevicePrimaryCtxReset_v7000>);
static_assert(
    std::is_same_v<decltype(&cuDevicePrimaryCtxReset_v2), PFN_cuDevicePrimaryCtxReset_v11000>);
static_assert(std::is_same_v<decltype(&cuGreenCtxCreate), PFN_cuGreenCtxCreate_v12040>);
static_assert(std::is_same_v<decltype(&cuCtxFromGreenCtx), PFN_cuCtxFromGreenCtx_v12040>);
static_assert(std::is_same_v<decltype(&cuGreenCtxDestroy), PFN_cuGreenCtxDestroy_v12040>);
static_assert(
    std::is_same_v<decltype(&cuStreamEndCapture_ptsz), PFN_cuStreamEndCapture_v10000_ptsz>);
static_assert(std::is_same_v<decltype(&cuStreamIsCapturing), PFN_cuStreamIsCapturing_v10000>);
static_assert(
    std::is_same_v<decltype(&cuStreamIsCapturing_ptsz), PFN_cuStreamIsCapturing_v10000_ptsz>);
static_assert(std::is_same_v<decltype(&cuStreamGetCaptureInfo), PFN_cuStreamGetCaptureInfo_v10010>);
static_assert(
    std::is_same_v<decltype(&cuStreamGetCaptureInfo_ptsz), PFN_cuStreamGetCaptureInfo_v10010_ptsz>);
static_assert(
    std::is_same_v<decltype(&cuStreamGetCaptureInfo_v2), PFN_cuStreamGetCaptureInfo_v11030>);
static_assert(std::is_same_v<decltype(&cuStreamGetCaptureInfo_v2_ptsz),
                             PFN_cuStreamGetCaptureInfo_v11030_ptsz>);
static_assert(
    std::is_same_v<decltype(&cuStreamGetCaptureInfo_v3), PFN_cuStreamGetCaptureInfo_v12030>);
static_assert(std::is_same_v<decltype(&cuStreamGetCaptureInfo_v3_ptsz),
                             PFN_cuStreamGetCaptureInfo_v12030_ptsz>);

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
      ENTRY("cuDevicePrimaryCtxGetState", 7000, i_cuDevicePrimaryCtxGetState,
            cuDevicePrimaryCtxGetState),
      ENTRY("cuDevicePrimaryCtxReset", 7000, i_cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset),
      ENTRY("cuDevicePrimaryCtxReset", 11000, i_cuDevicePrimaryCtxReset,
            cuDevicePrimaryCtxReset_v2),
      ENTRY("cuGreenCtxCreate", 12040, i_cuGreenCtxCreate, cuGreenCtxCreate),
      ENTRY("cuCtxFromGreenCtx", 12040, i_cuCtxFromGreenCtx, cuCtxFromGreenCtx),
      ENTRY("cuGreenCtxDestroy", 12040, i_cuGreenCtxDestroy, cuGreenCtxDestroy),
      ENTRY("cuCtxCreate", 2000, i_cuCtxCreate, cuCtxCreate),
      ENTRY("cuCtxCreate", 3020, i_cuCtxCreate, cuCtxCreate_v2),
      ENTRY("cuCtxCreate", 11040, i_cuCtxCreate_v3, cuCtxCreate_v3),
      ENTRY("cuCtxCreate", 12050, i_cuCtxCreate_v4, cuCtxCreate_v4),
      ENTRY("cuCtxDestroy", 2000, i_cuCtxDestroy, cuCtxDestroy),
      ENTRY("cuCtxDestroy", 4000, i_cuCtxDestroy, cuCtxDestroy_v2),
      ENTRY("cuCtxSetCurrent", 4000, i_cuCtxSetCurrent, cuCtxSetCurrent),
      ENTRY("cuCtxGetCurrent", 4000, i_cuCtxGetCurrent, cuCtxGetCurrent),
      ENTRY("cuCtxPushCurrent", 2000, i_cuCtxPushCurrent_v2, cuCtxPushCurrent),
      ENTRY("cuCtxPushCurrent", 4000, i_cuCtxPushCurrent_v2, cuCtxPushCurrent_v2),
      ENTRY("cuCtxPopCurrent", 2000, i_cuCtxPopCurrent_v2, cuCtxPopCurrent),
      ENTRY("cuCtxPopCurrent", 4000, i_cuCtxPopCurrent_v2, cuCtxPopCurrent_v2),
      ENTRY("cuCtxGetDevice", 2000, i_cuCtxGetDevice, cuCtxGetDevice),
      ENTRY("cuCtxGetDevice", 13000, i_cuCtxGetDevice_v2, cuCtxGetDevice_v2),
      ENTRY("cuCtxSynchronize", 2000, i_cuCtxSynchronize, cuCtxSynchronize),
      ENTRY("cuCtxSynchronize", 13000, i_cuCtxSynchronize_v2, cuCtxSynchronize_v2),
      ENTRY("cuStreamCreate", 2000, i_cuStreamCreate, cuStreamCreate),
      ENTRY("cuStreamDestroy", 2000, i_cuStreamDestroy, cuStreamDestroy),
      ENTRY("cuStreamDestroy", 4000, i_cuStreamDestroy, cuStreamDestroy_v2),
      ENTRY_PTSZ("cuStreamSynchronize", 2000, i_cuStreamSynchronize, cuStreamSynchronize),
      ENTRY("cuStreamCreateWithPriority", 5050, i_cuStreamCreateWithPriority,
            cuStreamCreateWithPriority),
      ENTRY("cuStreamQuery", 2000, i_cuStreamQuery, cuStreamQuery),
      ENTRY_PTSZ("cuStreamQuery", 7000, i_cuStreamQuery, cuStreamQuery),
      ENTRY_PTSZ("cuStreamGetCtx", 9020, i_cuStreamGetCtx, cuStreamGetCtx),
      ENTRY_PTSZ("cuStreamGetCtx", 12050, i_cuStreamGetCtx_v2, cuStreamGetCtx_v2),
      ENTRY("cuCtxGetApiVersion", 3020, i_cuCtxGetApiVersion, cuCtxGetApiVersion),
      ENTRY_PTSZ("cuStreamBeginCapture", 10000, i_cuStreamBeginCapture, cuStreamBeginCapture),
      ENTRY_PTSZ("cuStreamBeginCapture", 10010, i_cuStreamBeginCapture_v2, cuStreamBeginCapture_v2),
      ENTRY_PTSZ("cuStreamEndCapture", 10000, i_cuStreamEndCapture, cuStreamEndCapture),
      ENTRY_PTSZ("cuStreamIsCapturing", 10000, i_cuStreamIsCapturing, cuStreamIsCapturing),
      ENTRY_PTSZ("cuStreamGetCaptureInfo", 10010, i_cuStreamGetCaptureInfo, cuStreamGetCaptureInfo),
      ENTRY_PTSZ("cuStreamGetCaptureInfo", 11030, i_cuStreamGetCaptureInfo_v2,
                 cuStreamGetCaptureInfo_v2),
      ENTRY_PTSZ("cuStreamGetCaptureInfo", 12030, i_cuStreamGetCaptureInfo_v3,
                 cuStreamGetCaptureInfo_v3),
      // The event API (hidden with FERRUM_STANDIN_NO_EVENTS=1: names beginning "cuEvent").
      ENTRY("cuEventCreate", 2000, i_cuEventCreate, cuEventCreate),
      ENTRY("cuEventRecord", 2000, i_cuEventRecord, cuEventRecord),
      ENTRY_PTSZ("cuEventRecord", 7000, i_cuEventRecord, cuEventRecord),
      ENTRY_PTSZ("cuEventRecordWithFlags", 11010, i_cuEventRecordWithFlags, cuEventRecordWithFlags),
      ENTRY("cuEventQuery", 2000, i_cuEventQuery, cuEventQuery),
      ENTRY("cuEventSynchronize", 2000, i_cuEventSynchronize, cuEventSynchronize),
      ENTRY("cuEventElapsedTime", 2000, i_cuEventElapsedTime, cuEventElapsedTime),
      ENTRY("cuEventElapsedTime", 12080, i_cuEventElapsedTime, cuEventElapsedTime_v2),
      ENTRY("cuEventDestroy", 2000, i_cuEventDestroy, cuEventDestroy),
      ENTRY("cuEventDestroy", 4000, i_cuEventDestroy, cuEventDestroy_v2),
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
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *status) try {
  STANDIN_DIRTY_ERRNO();
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
    if (c.no_events && std::strncmp(symbol, "cuEvent", 7) == 0) break;  // a driver without them
    if (c.no_stream_get_ctx_v2 && e.version >= 12050 && std::strcmp(symbol, "cuStreamGetCtx") == 0)
      continue;  // a 12.4 driver: only the first version
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
STANDIN_OUT_OF_MEMORY

}  // namespace
