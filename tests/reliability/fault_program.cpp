// fault_program: the programs of the fault-injection matrix (tests/reliability/test_faults.py).
// Not linked against libcuda: the driver is dlopen'ed (when a mode needs it) and every launch
// goes through a pointer from dlsym — the shim's own export for RTLD_DEFAULT lookups, the
// shim's wrapper for lookups on the driver's handle.
//
// Usage: fault_program MODE [--launches N] [--threads T] [--own-bytes B] [--limit-first 0|1]
//                           [--how setuid|chroot|descriptors]
//   no-driver      libcuda is never loaded. Looks up cuGraphLaunch, cuGraphLaunch_ptsz,
//                  cudaGraphLaunch, cuGraphInstantiateWithFlags, cuGraphExecDestroy and
//                  ferrum_replay_name_graph_exec with dlsym(RTLD_DEFAULT) (found: the shim's
//                  exports) and calls each with a made-up handle. Prints `<name>=<result>`
//                  (or `<name>=absent`) per function.
//   late-driver    launches once through dlsym(RTLD_DEFAULT, "cuGraphLaunch") before libcuda is
//                  loaded (prints first_launch=<result>), then dlopens the driver, sets up a
//                  graph and launches N times through the same pointer.
//   fork-in-launch a worker thread launches in a loop (make each launch slow: long replays
//                  with FERRUM_STANDIN_GRAPH_NS and FERRUM_STANDIN_LAUNCH_QUEUE=1, so that each
//                  launch waits for the previous replay); meanwhile the main thread forks. The
//                  child launches N times on its own and exits normally; the parent waits for it,
//                  then stops the worker. Prints child_pid=, child_status=, child_launches=,
//                  worker_launches=.
//   fork-during-activation
//                  a worker thread loads the driver and makes the process's first graph call,
//                  whose activation of the shim the test slows down: `--how slow-tool`, an NVTX
//                  tool whose initialisation sleeps; `--how stderr-full`, stderr a full pipe that
//                  nobody reads, on which the shim's warning about a bad setting waits. Once the
//                  tool's initialisation has begun (FERRUM_TEST_TOOL_STARTED), else 300 ms in,
//                  the main thread forks: the child loads the driver and launches N times on
//                  its own, then exits. The parent waits for it at most 20 s (then kills it).
//                  Prints child_ms= (the child's wall time), child_launches=, child_failed=,
//                  child_status= (`hung` when killed).
//   launch-during-activation
//                  a worker thread loads the driver and makes the process's first graph call,
//                  whose activation an NVTX tool slow to initialise (FERRUM_TEST_TOOL_SLEEP_MS)
//                  holds up; once that has begun (FERRUM_TEST_TOOL_STARTED, else 300 ms in),
//                  the main thread loads the driver (dlsym of the driver's
//                  functions, a graph instantiated) and launches N times. Prints main_load_ms=,
//                  main_first_ms= (its first launch), main_ms= (all N), main_launches=,
//                  main_failed=; then waits for the worker and launches N more times through the
//                  same pointer: after_launches=, after_failed=.
//   fork-while-naming
//                  a worker thread instantiates (names: the call-site walk) and destroys graphs
//                  in a loop, loading and unloading the library `--how PATH` each time (an
//                  unload empties the walk's cache, under its lock: the lock is held longer),
//                  while the main thread forks N times; each child instantiates a
//                  graph of its own (its first walk), launches it once and exits. The parent
//                  waits for each at most 2 s (then kills it). Prints forks=, hung= (children
//                  killed), failed= (children that did not exit 0).
//   fork-while-loader-busy
//                  never launches itself: a worker thread walks the loaded objects without end
//                  (dl_iterate_phdr, which holds the loader's write lock for the walk; C++
//                  exception unwinding does the same), while the main thread forks N times; each
//                  child makes the process's first graph call (the shim's activation), launches
//                  once and exits. The parent waits for each at most 2 s. Prints forks=, hung=,
//                  failed=. `--how walk-reopen`: each child then also opens the loaded driver
//                  again (dlopen) and closes that handle. `--how reopen`: the parent
//                  launches once first, its worker opens and closes the loaded driver without
//                  end instead of walking, and each child re-opens it as walk-reopen's do.
//                  FERRUM_TEST_LOOKUP_DEFAULT=1 (any mode): functions looked up in the global
//                  scope first.
//   jump-inside-loader-walk
//                  never touches CUDA: a worker thread loads and unloads the library `--how PATH`
//                  without end (dlopen takes the loader's main lock, then its write lock), while
//                  the main thread, inside dl_iterate_phdr (the write lock held), makes the
//                  process's first non-local jump: a guarded probe — sigsetjmp, a signal,
//                  siglongjmp back from the handler — as a sampler's crash protection does.
//                  Prints jumped=1. A hang (killed by the caller's timeout) is the failure.
//   fork-while-exit-list-busy
//                  never launches itself: registers 20,000 exit handlers, then a worker thread
//                  runs the C library's __cxa_finalize for a library that has none without end
//                  (what each dlclose does: it scans the exit list holding the list's lock),
//                  while the main thread forks N times; each child makes the process's first
//                  graph call and first launch, and exits with _exit. The parent waits for each
//                  at most 2 s. Prints forks=, hung=, failed=.
//   fork-while-locale-busy
//                  never launches itself: a worker thread is inside setlocale() (it holds the C
//                  library's locale lock) for as long as the program runs its children: the
//                  locale it loads, under `--how DIR` (LOCPATH), is a FIFO that nobody opens for
//                  writing meanwhile. The main thread forks N times; each child makes the process's
//                  first graph call and first launch, and exits with exit() (its exit handlers
//                  write the launch summary and the trace). The parent waits for each at most 2 s.
//                  Prints forks=, hung=, failed=.
//   fork-children  launches N times, forks a child that exits without launching, launches N
//                  times more, then forks a child that launches 3 times. Prints
//                  idle_child=<pid>, busy_child=<pid>.
//   clone-child    launches N times, then makes a child with a raw clone system call (no fork
//                  handlers run: what _Fork() and glibc's clone() do too). The child waits
//                  200 ms, instantiates a graph of its own, launches it N times (--launches) and
//                  calls exit(0); the parent launches N more meanwhile, then waits for it.
//                  `--how idle`: the child calls exit(0) at once, allocating nothing (a child
//                  of a process with other threads — GPU timing's reaper — may not: a lock
//                  of the allocator's may be held by a thread it does not have).
//                  Prints child=<pid>, child_status=.
//   env-churn      `--how before`: clearenv() before the first graph call; `--how after`: one
//                  launch, then clearenv(). Then a thread sets new variables without end (each
//                  setenv of a new name reallocates the array getenv walks; a clearenv() every
//                  20,000), while the main thread launches N times and exits with it running.
//   chdir-before-exit
//                  N launches, then chdir: `--how deleted` into a directory it makes and then
//                  removes, else into the directory `--how` names; then exit(0).
//   library-destructor-launch
//                  N launches, then exit: the library it links (last_flush.c) launches once
//                  more from its ELF destructor. Prints launches=, last_library=<the loader's
//                  name of libferrum-replay-last.so, or none>, then destructor_launch=0.
//                  `--how DIR`: moves into DIR before its first launch.
//   dlclose-shim   not preloaded: dlopens the shim ($FERRUM_SHIM, RTLD_LOCAL), pushes and pops a
//                  graph name on a worker thread, dlcloses the shim, then lets the worker exit.
//                  Prints dlclose=<result>, joined=1.
//   exit-from-worker  T threads launch in a loop; thread 0 calls exit(0) after N launches while
//                  the others are launching.
//   underscore-exit   N launches, then _exit(0).
//   sigterm        installs a SIGTERM handler that calls exit(42), prints `ready` and launches
//                  until the signal comes (at most 60 s, then exit 1).
//   sigterm-at-exit  the same handler; launches N times, prints `exiting` and returns from main:
//                  a SIGTERM sent then lands while the exit hooks write the trace.
//   exit-during-first-launch
//                  a second thread makes the process's first launch, which creates the running
//                  marker (FERRUM_REPLAY_RUNNING_DIR); while it is in the middle of that
//                  (held 50 ms in the shim's fstat of the new marker, by this program's fstat64),
//                  the main thread calls exit(0). Prints `held=1` first.
//   small-stack    N launches (the process's first among them) on a thread whose stack is the
//                  smallest POSIX allows (PTHREAD_STACK_MIN), as some thread pools make them.
//   exit-small-stack
//                  N launches, then 40 lines of its own to stdout (buffered: not yet written),
//                  then exit() where little stack is left. `--how thread`: exit(3) on a thread
//                  with a 32 KiB stack; `--how altstack`: exit(7) in a SIGTERM handler on a
//                  16 KiB alternate stack the program malloc'ed (no guard page: what runs off it
//                  overwrites the heap below); `--how guarded`: the same on an alternate stack
//                  with a guard page below; `--how main`: returns 0 from main (run it under a
//                  small RLIMIT_STACK); `--how fiber`: exit(3) from a fiber (makecontext) on a
//                  16 KiB guarded stack, on a thread of 8 MiB mapped after it (so the frame lies
//                  above the thread's own stack); `--how fiber-main`: the same on the main
//                  thread (run it with no RLIMIT_STACK); `--how autodisarm`: exit(7) in a
//                  handler on a 16 KiB guarded alternate stack with SS_AUTODISARM (the kernel
//                  then reports none inside the handler), on a thread made after it;
//                  `--how no-thread`: exit(3) on a 128 KiB thread of a process that may make no
//                  more threads (a seccomp filter: clone3 ENOSYS, clone EAGAIN).
//   size-limit     run with a small file size limit (RLIMIT_FSIZE): N launches, then, with
//                  --own-bytes B > 0, a SIGXFSZ handler that writes `SIGXFSZ handled` to stdout
//                  and B bytes written to own.bin in the working directory in 4 KiB writes, which
//                  stop at the first failure (prints own_write_error=<errno>, 0 if all written).
//                  Returns normally, so the shim and the recorder write their files at exit.
//   memory-limit   limits its address space (RLIMIT_AS) to what it has mapped now plus B bytes
//                  (--own-bytes) — after its first launch, or with --limit-first 1 before its
//                  graph's instantiation — then launches N times in all,
//                  instantiates 32 more graphs, launches each twice and destroys it, and returns
//                  normally. The memory the shim and the recorder still want (chunks, tables,
//                  names, the trace at exit) is then not to be had. Its errno is set to a mark
//                  before each of those calls and compared after: prints `limited=<bytes>`
//                  first, then the calls that changed it, `errno_changed_launch=<launches>
//                  errno_changed_other=<instantiates and destroys>`, the first of each as
//                  `errno_first_launch=<call>:<errno>`, `errno_first_other=...`. (The stand-in's
//                  own calls leave errno alone, except that its launch allocates, and malloc may
//                  leave ENOMEM behind when it recovers from a failed mapping: a launch's errno is
//                  then the real call's.)
//   rename-without-memory
//                  launches its graph once, limits its address space (RLIMIT_AS) to what it has
//                  mapped now plus B bytes (--own-bytes), names the graph `step I` for I = 0..N-1
//                  (ferrum_replay_name_graph_exec), launches it once more, lifts the limit and
//                  returns normally. Prints `taken=<calls that returned 0> refused=<the others>
//                  refused_with=<the first other result, 0 if none> last_taken=<I of the last
//                  call that returned 0, -1 if none>`.
//   launch-refused-graph
//                  instantiates 4096 graphs (the shim's registry fills its first chunk of
//                  records), limits its address space to what it has mapped plus B bytes, and
//                  instantiates one more (no chunk to be had for its record). Then launches the
//                  first graph N times and the last one N times, five times over, and prints the
//                  best time of each per launch and the mmap calls made during their launches:
//                  `registered_ns= refused_ns= registered_maps= refused_maps=`. Then destroys
//                  one graph (room may have come back) and launches the last one N times:
//                  `maps_after_destroy=`; lifts the limit, waits 1.2 s (longer than a refusal
//                  holds) and launches the last one once: `launches=<launches of the last
//                  graph in all>`.
//   errno-passes   for FERRUM_STANDIN_DIRTY_ERRNO=1 (every function of the stand-in leaves errno
//                  set to its own value: standin_errno.hpp): instantiates 8 graphs, launches each
//                  N times (--launches), destroys them and its context; after each call its errno
//                  must be the value of the driver function it called — the real call's, passed
//                  through, not one left by a driver call the shim made on its own afterwards
//                  (GPU timing's end event, a graph's content at instantiation, its pool). With
//                  FERRUM_STANDIN_DIRTY_ERRNO=2 (launches leave errno alone) a launch must leave
//                  the value the program set before it (nor one of GPU timing's start). Prints
//                  `errno_calls=<calls> errno_wrong=<calls after which errno was another value>`,
//                  the first of those as `errno_first=<call>:<errno>:<expected>`.
//   heap-exhausted uses NVTX itself: one range on the main thread; then a second thread limits
//                  the address space (RLIMIT_AS) to what is mapped, takes every block the heap
//                  can still give (a program that has used up its memory) and makes its first
//                  NVTX calls: N ranges (nvtxRangePushA) each with a mark (nvtxMarkW); it gives
//                  the blocks back and ends, and the program returns normally. No driver.
//                  Prints `limited=<bytes>`, then `heap_taken=1 ranges=<N>`.
//   exit-without-memory  N launches; then limits the address space (RLIMIT_AS) to what is mapped,
//                  takes every block the heap can still give and returns normally without giving
//                  them back: the exit hooks find no memory. Prints `launches=` first, then
//                  `limited=<bytes>` and `heap_taken=1`.
//   no-sockets     N launches; then a seccomp filter makes socket() fail with EPERM (a sandbox
//                  that allows no sockets) and the program returns normally: the exit hooks
//                  cannot take the output lock. Prints `launches=` first, then `sockets=0`.
//   exit-in-handler  uses NVTX itself: one range on the main thread; then a second thread arms
//                  this program's mmap (below) and makes its first NVTX call. The recorder
//                  registers the thread under its lock and maps memory there; the armed mmap
//                  raises SIGUSR1 on that thread, whose handler calls exit(0) — as a SIGTERM
//                  handler that calls exit() may land anywhere. Prints `armed=1` first. No driver.
//   fork-in-handler  as exit-in-handler, but the handler calls fork() (a crash reporter's or
//                  a supervisor's handler may): the child _exits at once, or with `--how
//                  continue` returns from the handler, goes on and exits normally (prints
//                  `child=1`); the parent waits for it, prints `forked=1` and returns 0.
//   fork-in-handler-shim  the same inside the shim: one launch, then N instantiations of one
//                  graph with this program's mmap armed: the shim's registry grows its tables
//                  under its lock, where the armed mmap raises SIGUSR1 and the handler forks.
//                  Prints `armed=1`, then `instantiated=N raised=1`.
//   exit-in-handler-timed  the same inside the shim, with GPU timing on (FERRUM_REPLAY_GPU_TIME):
//                  one launch on the main thread; then a second thread instantiates a graph of its
//                  own and launches it, this program's pthread_setspecific armed: the shim
//                  registers the thread for GPU timing under a lock of its own (when the context
//                  is made current there), and there the armed call raises SIGUSR1, whose handler
//                  calls exit(0). Prints `armed=1` first.
//   stderr-unreopenable  loads the driver, then makes the host's stderr impossible to reopen
//                  through /proc as --how says, then instantiates a second graph (a log line
//                  written after that step), launches it N times and returns normally (the
//                  summary and the recorder's table are written at exit):
//                    setuid       drops to uid and gid 65534 (a program that drops privileges: a
//                                 pipe of another user, and /proc/self no longer its own)
//                    chroot       chroot(".") (the working directory: an empty one, no /proc)
//                    descriptors  RLIMIT_NOFILE lowered to 64 and every descriptor taken
//                  With --launch-first 1, one launch before the step (not counted in
//                  `launches=`): the process's first, which makes its running marker.
//                  Prints `unreopenable=<how>`, or `unreopenable=skip errno=<e>` when the step
//                  is not allowed (not root), then `launches= failed=` and
//                  `stderr_blocking=<0|1>`: whether descriptor 2's description is still
//                  blocking after the launches (F_GETFL).
//   exit-in-handler-pool  the same inside the shim's GPU engine (its mutex held while a second
//                  context's event pool is mapped at its first instantiation); an atexit handler
//                  registered first destroys that context and prints `destroyed=<CUresult>`.
// Every mode except no-driver, heap-exhausted and exit-in-handler(-timed, -pool) prints
// `launches=<N> failed=<F>` for what it completed before its ending (exit-from-worker and sigterm
// print it only from their exit path, on stderr). Exit status: as the mode says, else 0; 1 on
// set-up errors.

#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <locale.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../support/address_space.hpp"
#include "../support/standin/standin_errno.hpp"
#include "../support/tools/dirty_libc.h"

// exit-during-first-launch: 1 armed, 2 while the shim's fstat of its running marker is held.
std::atomic<int> g_hold_marker{0};

// Interposes libc's for the shim (this executable exports it): holds the one call on the new
// running marker for 50 ms when armed, so that the main thread's exit() comes while the marker
// is being made. Every other call passes straight on.
extern "C" int fstat64(int fd, struct stat64 *st) {
  using Fn = int (*)(int, struct stat64 *);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "fstat64"));
  if (g_hold_marker.load() == 1) {
    char link[64], target[4096];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    const char suffix[] = ".running";
    if (n >= static_cast<ssize_t>(sizeof suffix) &&
        std::memcmp(target + n - (sizeof suffix - 1), suffix, sizeof suffix - 1) == 0) {
      int armed = 1;
      if (g_hold_marker.compare_exchange_strong(armed, 2)) usleep(50 * 1000);
    }
  }
  const int result = real(fd, st);
  dirty_libc_after(result == 0);
  return result;
}

// exit-in-handler: the thread whose next mmap raises SIGUSR1 (whoever calls it: the recorder).
thread_local bool t_raise_at_mmap = false;
// launch-refused-graph: every mmap64 call of the process (the shim's mappings among them).
std::atomic<unsigned long> g_mmap_calls{0};

// The definition of `name` after this program's (libc's), looked up once into `*resolved`. No
// function-local static guard and no instrumentation: ThreadSanitizer's runtime calls an
// interposed pthread_setspecific while it sets up a new thread, before it could track either.
template <typename Fn>
__attribute__((no_sanitize("thread"), always_inline)) inline Fn next_definition(Fn *resolved,
                                                                                const char *name) {
  Fn real = __atomic_load_n(resolved, __ATOMIC_ACQUIRE);
  if (!real) {
    real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
    __atomic_store_n(resolved, real, __ATOMIC_RELEASE);
  }
  return real;
}

// exit-in-handler-timed: the thread whose next pthread_setspecific raises SIGUSR1 (the shim's).
thread_local bool t_raise_at_setspecific = false;

// Interposes libc's for the shim (this executable exports it); see exit-in-handler-timed. Not
// instrumented: ThreadSanitizer's runtime calls it while it sets up a new thread.
extern "C" __attribute__((no_sanitize("thread"))) int pthread_setspecific(pthread_key_t key,
                                                                          const void *value) {
  using Fn = int (*)(pthread_key_t, const void *);
  static Fn resolved;
  const Fn real = next_definition(&resolved, "pthread_setspecific");
  if (t_raise_at_setspecific) {
    t_raise_at_setspecific = false;
    raise(SIGUSR1);
  }
  const int result = real(key, value);
  dirty_libc_after(result == 0);
  return result;
}

// Interposes libc's for the recorder (this executable exports it; the recorder, built with
// 64-bit file offsets, calls mmap64); see exit-in-handler.
extern "C" __attribute__((no_sanitize("thread"))) void *mmap64(void *address, size_t length,
                                                               int protection, int flags, int fd,
                                                               off64_t offset) {
  using Fn = void *(*)(void *, size_t, int, int, int, off64_t);
  static Fn resolved;
  const Fn real = next_definition(&resolved, "mmap64");
  g_mmap_calls.fetch_add(1, std::memory_order_relaxed);
  if (t_raise_at_mmap) {
    t_raise_at_mmap = false;
    raise(SIGUSR1);
  }
  void *mapping = real(address, length, protection, flags, fd, offset);
  dirty_libc_after(mapping != MAP_FAILED);
  return mapping;
}

extern "C" void __cxa_finalize(void *);  // the C library's, run by every dlclose

namespace {

using LaunchFn = CUresult (*)(CUgraphExec, CUstream);

struct Driver {
  void *handle = nullptr;
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*deviceGet)(CUdevice *, int) = nullptr;
  CUresult (*ctxCreate)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice) = nullptr;
  CUresult (*ctxSetCurrent)(CUcontext) = nullptr;
  CUresult (*graphCreate)(CUgraph *, unsigned) = nullptr;
  CUresult (*graphAddEmptyNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t) = nullptr;
  CUresult (*graphInstantiate)(CUgraphExec *, CUgraph, unsigned long long) = nullptr;
  CUresult (*graphExecDestroy)(CUgraphExec) = nullptr;
  LaunchFn launch = nullptr;
  CUcontext ctx = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
};

[[noreturn]] void die(const char *what) {
  std::fprintf(stderr, "fault_program: %s\n", what);
  std::exit(1);
}

// FERRUM_TEST_LOOKUP_DEFAULT=1: each function is looked up in the global scope first (what a
// program linked with -lcuda calls: under the shim, its exports of the hooked functions), then
// in the driver's handle (where the driver was loaded RTLD_LOCAL, the global scope has none).
template <typename T>
void lookup(void *handle, const char *name, T &out) {
  const char *global = std::getenv("FERRUM_TEST_LOOKUP_DEFAULT");
  out = global && *global == '1' ? reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name)) : nullptr;
  if (!out) out = reinterpret_cast<T>(dlsym(handle, name));
  if (!out) die((std::string("no ") + name + " in the driver").c_str());
}

// Loads libcuda.so.1, creates a context and one graph exec.
void *open_driver() {
  // FERRUM_TEST_DRIVER_LOCAL=1: loaded privately, as a framework may: the shim's lookups of
  // the driver's functions by RTLD_NEXT then miss, and it opens the driver by its path.
  const char *local = std::getenv("FERRUM_TEST_DRIVER_LOCAL");
  void *handle =
      dlopen("libcuda.so.1", RTLD_NOW | (local && *local == '1' ? RTLD_LOCAL : RTLD_GLOBAL));
  if (!handle) die(dlerror());
  return handle;
}

// Looks the driver's functions up in `handle` and makes a context and one graph (and, unless
// `instantiate` is false, its executable graph: d.exec).
Driver set_up_driver(void *handle, bool instantiate = true) {
  Driver d;
  d.handle = handle;
  lookup(d.handle, "cuInit", d.init);
  lookup(d.handle, "cuDeviceGet", d.deviceGet);
  lookup(d.handle, "cuCtxCreate_v4", d.ctxCreate);
  lookup(d.handle, "cuCtxSetCurrent", d.ctxSetCurrent);
  lookup(d.handle, "cuGraphCreate", d.graphCreate);
  lookup(d.handle, "cuGraphAddEmptyNode", d.graphAddEmptyNode);
  lookup(d.handle, "cuGraphInstantiateWithFlags", d.graphInstantiate);
  lookup(d.handle, "cuGraphExecDestroy", d.graphExecDestroy);
  lookup(d.handle, "cuGraphLaunch", d.launch);
  CUdevice device = 0;
  CUgraphNode node = nullptr;
  if (d.init(0) != CUDA_SUCCESS || d.deviceGet(&device, 0) != CUDA_SUCCESS ||
      d.ctxCreate(&d.ctx, nullptr, 0, device) != CUDA_SUCCESS ||
      d.graphCreate(&d.graph, 0) != CUDA_SUCCESS ||
      d.graphAddEmptyNode(&node, d.graph, nullptr, 0) != CUDA_SUCCESS ||
      (instantiate && d.graphInstantiate(&d.exec, d.graph, 0) != CUDA_SUCCESS))
    die("driver set-up failed");
  return d;
}

Driver load_driver() {
  return set_up_driver(open_driver());
}

struct Counts {
  std::atomic<unsigned long long> launches{0}, failed{0};
};

void launch_once(const Driver &d, Counts &c) {
  const CUresult r = d.launch(d.exec, nullptr);
  c.launches.fetch_add(1);
  if (r != CUDA_SUCCESS) c.failed.fetch_add(1);
}

void print_counts(const Counts &c, FILE *to) {
  std::fprintf(to, "launches=%llu failed=%llu\n", c.launches.load(), c.failed.load());
  std::fflush(to);
}

int no_driver() {
  const auto fake = reinterpret_cast<CUgraphExec>(0x1000);
  // The loader's error state after each call: the shim's lookups of the missing driver fail
  // inside it, and must leave nothing for the program's dlerror() (loader_error.hpp).
  unsigned long loader_errors = 0;
  std::string first_loader_error;
  const auto loader_check = [&](const char *after) {
    if (const char *message = dlerror(); message && loader_errors++ == 0)
      first_loader_error = std::string(after) + ": " + message;
  };
  const auto report = [](const char *name, void *fn) {
    if (!fn) std::printf("%s=absent\n", name);
    return fn;
  };
  if (auto fn = reinterpret_cast<LaunchFn>(
          report("cuGraphLaunch", dlsym(RTLD_DEFAULT, "cuGraphLaunch")))) {
    std::printf("cuGraphLaunch=%d\n", fn(fake, nullptr));
    loader_check("cuGraphLaunch");
  }
  if (auto fn = reinterpret_cast<LaunchFn>(
          report("cuGraphLaunch_ptsz", dlsym(RTLD_DEFAULT, "cuGraphLaunch_ptsz")))) {
    std::printf("cuGraphLaunch_ptsz=%d\n", fn(fake, nullptr));
    loader_check("cuGraphLaunch_ptsz");
  }
  using RtLaunch = int (*)(void *, void *);
  if (auto fn = reinterpret_cast<RtLaunch>(
          report("cudaGraphLaunch", dlsym(RTLD_DEFAULT, "cudaGraphLaunch")))) {
    std::printf("cudaGraphLaunch=%d\n", fn(reinterpret_cast<void *>(fake), nullptr));
    loader_check("cudaGraphLaunch");
  }
  using Instantiate = CUresult (*)(CUgraphExec *, CUgraph, unsigned long long);
  if (auto fn = reinterpret_cast<Instantiate>(report(
          "cuGraphInstantiateWithFlags", dlsym(RTLD_DEFAULT, "cuGraphInstantiateWithFlags")))) {
    CUgraphExec exec = nullptr;
    std::printf("cuGraphInstantiateWithFlags=%d\n",
                fn(&exec, reinterpret_cast<CUgraph>(0x2000), 0));
    loader_check("cuGraphInstantiateWithFlags");
  }
  using Destroy = CUresult (*)(CUgraphExec);
  if (auto fn = reinterpret_cast<Destroy>(
          report("cuGraphExecDestroy", dlsym(RTLD_DEFAULT, "cuGraphExecDestroy")))) {
    std::printf("cuGraphExecDestroy=%d\n", fn(fake));
    loader_check("cuGraphExecDestroy");
  }
  using Name = int (*)(void *, const char *);
  if (auto fn = reinterpret_cast<Name>(report(
          "ferrum_replay_name_graph_exec", dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec")))) {
    std::printf("ferrum_replay_name_graph_exec=%d\n", fn(reinterpret_cast<void *>(fake), "x"));
    loader_check("ferrum_replay_name_graph_exec");
  }
  std::printf("loader_errors=%lu\n", loader_errors);
  if (loader_errors) std::printf("loader_first=%s\n", first_loader_error.c_str());
  return 0;
}

int late_driver(long n) {
  const auto early = reinterpret_cast<LaunchFn>(dlsym(RTLD_DEFAULT, "cuGraphLaunch"));
  if (!early) die("cuGraphLaunch not found with RTLD_DEFAULT (is the shim preloaded?)");
  std::printf("first_launch=%d\n", early(reinterpret_cast<CUgraphExec>(0x1000), nullptr));
  Driver d = load_driver();
  d.launch = early;  // the pointer taken before the driver existed
  Counts c;
  for (long i = 0; i < n; ++i) launch_once(d, c);
  print_counts(c, stdout);
  return c.failed.load() == 0 ? 0 : 3;
}

int fork_in_launch(long n) {
  Driver d = load_driver();
  Counts worker;
  std::atomic<bool> stop{false}, started{false};
  std::thread t([&] {
    d.ctxSetCurrent(d.ctx);
    while (!stop.load()) {
      started.store(true);
      launch_once(d, worker);
    }
  });
  while (!started.load()) std::this_thread::yield();
  // With a launch queue of one and long replays the worker spends nearly all its time inside a
  // launch, waiting for the previous replay to finish.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const pid_t child = fork();
  if (child < 0) die("fork failed");
  if (child == 0) {
    Counts mine;
    for (long i = 0; i < n; ++i) launch_once(d, mine);
    std::printf("child_launches=%llu child_failed=%llu\n", mine.launches.load(),
                mine.failed.load());
    std::fflush(stdout);
    std::exit(mine.failed.load() == 0 ? 0 : 3);
  }
  int status = 0;
  waitpid(child, &status, 0);
  stop.store(true);
  t.join();
  std::printf("child_pid=%d\nchild_status=%d\nworker_launches=%llu\n", child,
              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
              worker.launches.load());
  print_counts(worker, stdout);
  return 0;
}

// For a child about to be killed as hung: for each of its threads (a fork child has one unless
// it started more: review RF-7), the system call it sleeps in, from /proc (its number and
// arguments; "-1 ..." for a thread stopped outside one, "running"), and the mapping that holds
// the first argument, a futex's address for a lock. Read before the kill, printed after it
// (print_where_it_waited) on stdout: this program's stderr may be a full pipe
// (fork-during-activation's stderr-full). A hint to whose lock it was (the C library's, the
// shim's; an anonymous one may be a sanitizer's allocator, or anybody's heap), not proof.
struct WhereItWaits {
  std::string threads;  // "thread TID: syscall ...; its first argument in: ..." per line
};

// One thread's line (`task` is /proc/PID/task/TID).
std::string where_thread_waits(const std::string &task, const char *tid) {
  char call[256] = "", mapping[512] = "";
  if (FILE *f = std::fopen((task + "/syscall").c_str(), "r")) {
    if (!std::fgets(call, sizeof call, f)) call[0] = '\0';
    std::fclose(f);
  }
  call[std::strcspn(call, "\n")] = '\0';
  long long number = -1;
  unsigned long long first = 0;
  if (std::sscanf(call, "%lld %llx", &number, &first) == 2 && number >= 0) {
    if (FILE *f = std::fopen((task + "/maps").c_str(), "r")) {
      char line[512];
      while (std::fgets(line, sizeof line, f)) {
        unsigned long long begin = 0, end = 0;
        if (std::sscanf(line, "%llx-%llx", &begin, &end) == 2 && begin <= first && first < end) {
          line[std::strcspn(line, "\n")] = '\0';
          std::snprintf(mapping, sizeof mapping, "%s", line);
          break;
        }
      }
      std::fclose(f);
    }
  }
  return std::string("thread ") + tid + ": syscall " + (call[0] ? call : "(unreadable)") +
         "; its first argument in: " + (mapping[0] ? mapping : "(no mapping)");
}

WhereItWaits where_it_waits(pid_t child) {
  WhereItWaits where;
  const std::string tasks = "/proc/" + std::to_string(child) + "/task";
  if (DIR *dir = opendir(tasks.c_str())) {
    unsigned shown = 0;
    while (dirent *entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      if (++shown > 16) {  // a bound: the lines are a hint, not a dump
        where.threads += "  (more threads)\n";
        break;
      }
      where.threads += "  " + where_thread_waits(tasks + "/" + entry->d_name, entry->d_name) + "\n";
    }
    closedir(dir);
  }
  return where;
}

void print_where_it_waited(pid_t child, const WhereItWaits &where) {
  std::printf(
      "hung child %d:\n%s", static_cast<int>(child),
      where.threads.empty() ? "  (its threads could not be read)\n" : where.threads.c_str());
  std::fflush(stdout);
}

// Waits for `child` at most `bound_ms` (then kills it): its exit status, 128+N for a signal,
// -1 when it had to be killed.
int wait_at_most(pid_t child, int bound_ms) {
  int status = 0;
  for (int waited = 0; waited < bound_ms; waited += 5) {
    if (waitpid(child, &status, WNOHANG) == child)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const WhereItWaits where = where_it_waits(child);
  // One more look after the reading of /proc, which takes a while under load: a child that
  // ended meanwhile is not hung (review RG-8).
  if (waitpid(child, &status, WNOHANG) == child)
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  kill(child, SIGKILL);
  // A child that ended on its own between that look and the kill was not hung (review RV3-9):
  // only our SIGKILL's end counts — and a status that could not be read is no end at all
  // (RV4-7).
  const bool reaped = waitpid(child, &status, 0) == child;
  if (reaped && (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL))
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  print_where_it_waited(child, where);
  return -1;
}

// Until the worker's start of the shim is under way: the NVTX tool's initialisation has begun
// (FERRUM_TEST_TOOL_STARTED, the file the failing tool makes; at most 30 s), else 300 ms (a
// fixed head start, which a loaded machine can outrun).
void wait_for_tool_start() {
  if (const char *started = std::getenv("FERRUM_TEST_TOOL_STARTED")) {
    for (int i = 0; i < 3000 && access(started, F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

int fork_during_activation(long n, const std::string &how) {
  if (how == "stderr-full") {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0 || dup2(pipe_fds[1], 2) < 0) die("pipe");
    fcntl(2, F_SETFL, O_NONBLOCK);
    char junk[4096];
    std::memset(junk, 'x', sizeof junk);
    while (write(2, junk, sizeof junk) > 0) {
    }
    fcntl(2, F_SETFL, 0);  // full, blocking, and its reader never reads
  }
  std::thread first([] {
    Driver d = load_driver();
    Counts c;
    launch_once(d, c);
  });
  wait_for_tool_start();
  const pid_t child = fork();
  if (child < 0) die("fork failed");
  if (child == 0) {
    const auto start = std::chrono::steady_clock::now();
    Driver d = load_driver();
    Counts mine;
    for (long i = 0; i < n; ++i) launch_once(d, mine);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    std::printf("child_ms=%lld\nchild_launches=%llu\nchild_failed=%llu\n",
                static_cast<long long>(ms), mine.launches.load(), mine.failed.load());
    std::fflush(stdout);
    _exit(mine.failed.load() == 0 ? 0 : 3);
  }
  const int status = wait_at_most(child, 20000);
  if (status < 0)
    std::printf("child_status=hung\n");
  else
    std::printf("child_status=%d\n", status);
  std::fflush(stdout);
  first.join();
  return 0;
}

int launch_during_activation(long n) {
  std::thread first([] {
    Driver d = load_driver();
    Counts c;
    launch_once(d, c);
  });
  wait_for_tool_start();
  const auto start = std::chrono::steady_clock::now();
  auto ms_since = [&start] {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - start)
                                      .count());
  };
  Driver d = load_driver();
  const long long loaded_ms = ms_since();
  Counts mine;
  long long first_ms = -1;
  for (long i = 0; i < n; ++i) {
    launch_once(d, mine);
    if (i == 0) first_ms = ms_since() - loaded_ms;
  }
  std::printf(
      "main_load_ms=%lld\nmain_first_ms=%lld\nmain_ms=%lld\nmain_launches=%llu\n"
      "main_failed=%llu\n",
      loaded_ms, first_ms, ms_since() - loaded_ms, mine.launches.load(), mine.failed.load());
  std::fflush(stdout);
  first.join();
  Counts after;
  for (long i = 0; i < n; ++i) launch_once(d, after);
  std::printf("after_launches=%llu\nafter_failed=%llu\n", after.launches.load(),
              after.failed.load());
  return 0;
}

// Forks n children, each running child() and exiting with its answer (0: it worked); waits for
// each at most 2 s (then kills it). Prints forks=, hung= (children killed), failed=.
// With ChildEnd::exit each child ends with exit() (its exit handlers run: the shim's summary,
// the recorder's trace), else with _exit.
enum class ChildEnd { underscore_exit, exit };

template <typename Child>
void fork_and_tally(long n, Child child, ChildEnd end = ChildEnd::underscore_exit) {
  long hung = 0, failed = 0;
  for (long i = 0; i < n; ++i) {
    std::fflush(nullptr);  // a child's exit() flushes its copy of what is buffered
    const pid_t pid = fork();
    if (pid < 0) die("fork failed");
    if (pid == 0) {
      const int code = child() ? 0 : 3;
      if (end == ChildEnd::exit) std::exit(code);
      _exit(code);
    }
    const int status = wait_at_most(pid, 2000);
    if (status < 0)
      ++hung;
    else if (status != 0)
      ++failed;
  }
  std::printf("forks=%ld\nhung=%ld\nfailed=%ld\n", n, hung, failed);
}

int fork_while_naming(long n, const std::string &unloadable) {
  Driver d = load_driver();
  CUresult (*graph_exec_destroy)(CUgraphExec) = nullptr;
  lookup(d.handle, "cuGraphExecDestroy", graph_exec_destroy);
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  if (d.graphCreate(&graph, 0) != CUDA_SUCCESS ||
      d.graphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS)
    die("graph set-up failed");
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    d.ctxSetCurrent(d.ctx);
    while (!stop.load()) {
      void *library = dlopen(unloadable.c_str(), RTLD_NOW | RTLD_LOCAL);
      CUgraphExec exec = nullptr;
      if (d.graphInstantiate(&exec, graph, 0) == CUDA_SUCCESS) graph_exec_destroy(exec);
      if (library) dlclose(library);
    }
  });
  fork_and_tally(n, [&] {
    d.ctxSetCurrent(d.ctx);
    CUgraphExec exec = nullptr;
    return d.graphInstantiate(&exec, graph, 0) == CUDA_SUCCESS &&
           d.launch(exec, nullptr) == CUDA_SUCCESS;
  });
  stop.store(true);
  worker.join();
  return 0;
}

// A fork child's first graph call and first launch, on the driver its parent loaded.
bool first_launch(void *driver) {
  Driver d = set_up_driver(driver);
  Counts c;
  launch_once(d, c);
  return c.failed == 0;
}

// What a child does after its first launch: nothing more, or open the driver (already loaded:
// a plugin's or a runtime's own dlopen of it) and close that handle again (which unloads
// nothing: the parent's handle holds it). Neither takes the loader's write lock in glibc.
enum class ChildThen { nothing, reopens_driver };

bool reopen_loaded_driver() {
  void *again = dlopen("libcuda.so.1", RTLD_NOW);
  return again && dlclose(again) == 0;
}

// The driver is loaded here (a child's own dlopen of a library not loaded yet would wait on the
// loader's lock, and under TSan so does one of a library already loaded: its interceptor walks
// the loaded objects) but, unless `parent_launches`, nothing of it is looked up or called before
// the fork: the shim activates in each child. A worker thread runs `busy` without end while the
// main thread forks n times; each child makes its first graph call and launch (fork_and_tally),
// then `then`.
template <typename Busy>
void fork_while_busy(long n, Busy busy, ChildThen then = ChildThen::nothing,
                     bool parent_launches = false) {
  void *driver = open_driver();
  if (parent_launches) {
    Driver d = set_up_driver(driver);
    Counts c;
    launch_once(d, c);
  }
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    while (!stop.load()) busy();
  });
  usleep(20000);
  fork_and_tally(n, [driver, then] {
    if (!first_launch(driver)) return false;
    return then != ChildThen::reopens_driver || reopen_loaded_driver();
  });
  stop.store(true);
  worker.join();
}

int walk_slowly(dl_phdr_info *, size_t, void *) {
  usleep(200);  // the walk (and the lock it holds) lasts a while
  return 0;
}

// `how`: walk (default): the worker walks the loaded objects; walk-reopen: the same, and each
// child then re-opens and closes the loaded driver; reopen: the parent launches first, then its
// worker re-opens and closes the loaded driver without end (no loader write lock in glibc:
// any holder is ours), and each child re-opens it too.
int fork_while_loader_busy(long n, const std::string &how) {
  if (how == "reopen")
    fork_while_busy(
        n, [] { (void)reopen_loaded_driver(); }, ChildThen::reopens_driver, true);
  else
    fork_while_busy(
        n, [] { dl_iterate_phdr(walk_slowly, nullptr); },
        how == "walk-reopen" ? ChildThen::reopens_driver : ChildThen::nothing);
  return 0;
}

// jump-inside-loader-walk (above).
sigjmp_buf g_probe_jump;
void jump_back(int) {
  siglongjmp(g_probe_jump, 1);
}

int probe_inside_walk(dl_phdr_info *, size_t, void *jumped) {
  if (sigsetjmp(g_probe_jump, 1) == 0) {
    usleep(20000);  // the worker is now waiting for this walk's lock, holding the main one
    raise(SIGUSR1);
  } else {
    *static_cast<int *>(jumped) = 1;
  }
  return 1;
}

int jump_inside_loader_walk(const std::string &library) {
  signal(SIGUSR1, jump_back);
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    while (!stop.load())
      if (void *handle = dlopen(library.c_str(), RTLD_NOW)) dlclose(handle);
  });
  usleep(5000);
  int jumped = 0;
  dl_iterate_phdr(probe_inside_walk, &jumped);
  stop.store(true);
  worker.join();
  std::printf("jumped=%d\n", jumped);
  return 0;
}

void nothing_at_exit() {}

char g_not_a_library;  // a "library handle" that no exit handler was registered with

int fork_while_exit_list_busy(long n) {
  // A long exit list: each scan of it holds its lock for a while.
  for (int i = 0; i < 20000; ++i)
    if (atexit(nothing_at_exit) != 0) die("atexit failed");
  // What dlclose does for the library it unloads, without the loader's own locks (which a
  // child's first dlopen, of the NVTX tool, would wait for: another matter).
  fork_while_busy(n, [] { __cxa_finalize(&g_not_a_library); });
  return 0;
}

// A thread inside setlocale() holds the C library's locale lock for writing while it loads the
// locale's files; here for as long as this program likes: the locale `xx_XX` under `dir`
// (LOCPATH) is a FIFO, whose open() waits for a writer, and there is none until the children
// are done. Each child forked meanwhile makes its first graph call and launch and ends with
// exit(): its launch summary, trace and running marker go where the test points them (a
// missing directory: a message with the error's text). Prints forks=, hung=, failed=.
int fork_while_locale_busy(long n, const std::string &dir) {
  const std::string locale_dir = dir + "/xx_XX";
  // The first of a locale's files that glibc opens (it loads the categories last to first).
  const std::string fifo = locale_dir + "/LC_IDENTIFICATION";
  if (mkdir(locale_dir.c_str(), 0700) != 0 || mkfifo(fifo.c_str(), 0600) != 0)
    die("cannot make the FIFO locale");
  if (setenv("LOCPATH", dir.c_str(), 1) != 0) die("setenv failed");
  void *driver = open_driver();
  std::atomic<long> holder_tid{0};
  std::atomic<bool> holder_done{false};
  std::thread holder([&] {
    holder_tid.store(syscall(SYS_gettid));
    setlocale(LC_ALL, "xx_XX");
    holder_done.store(true);
  });
  // setlocale takes the lock before it opens a file, and lets it go only after the FIFO's
  // open() returns: once the thread is in an openat system call, the lock is held until this
  // program opens the FIFO for writing. (Where the kernel does not show it: 300 ms.)
  while (holder_tid.load() == 0) usleep(1000);
  const std::string in_call = "/proc/self/task/" + std::to_string(holder_tid.load()) + "/syscall";
  const std::string openat = std::to_string(SYS_openat) + " ";
  bool seen = false;
  for (int waited = 0; !seen && waited < 10000; ++waited) {
    char text[64] = "";
    if (FILE *file = std::fopen(in_call.c_str(), "r")) {
      seen = std::fgets(text, sizeof text, file) &&
             std::strncmp(text, openat.c_str(), openat.size()) == 0;
      std::fclose(file);
    } else {
      usleep(300000);
      break;
    }
    if (!seen) usleep(1000);
  }
  fork_and_tally(
      n, [driver] { return first_launch(driver); }, ChildEnd::exit);
  // A writer that comes and goes: setlocale's open() returns, the file is no locale, the lock
  // is let go.
  while (!holder_done.load()) {
    const int writer = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (writer >= 0) close(writer);
    usleep(1000);
  }
  holder.join();
  return 0;
}

int fork_children(long n) {
  Driver d = load_driver();
  Counts c;
  for (long i = 0; i < n; ++i) launch_once(d, c);
  std::fflush(stdout);
  const pid_t idle = fork();
  if (idle < 0) die("fork failed");
  if (idle == 0) std::exit(0);  // a CPU-only worker of a launcher: launches nothing
  waitpid(idle, nullptr, 0);
  for (long i = 0; i < n; ++i) launch_once(d, c);
  const pid_t busy = fork();
  if (busy < 0) die("fork failed");
  if (busy == 0) {
    Counts mine;
    for (int i = 0; i < 3; ++i) launch_once(d, mine);
    std::exit(0);
  }
  waitpid(busy, nullptr, 0);
  std::printf("idle_child=%d\nbusy_child=%d\n", idle, busy);
  print_counts(c, stdout);
  return 0;
}

int clone_child(long n, bool idle) {
  Driver d = load_driver();
  Counts c;
  for (long i = 0; i < n; ++i) launch_once(d, c);
  std::fflush(stdout);
  const pid_t child = static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0));
  if (child < 0) die("clone failed");
  if (child == 0 && idle) std::exit(0);
  if (child == 0) {
    // Later than the parent's own launches below: a run of ours spilled into the parent's
    // file would land on the parent's.
    usleep(200 * 1000);
    CUgraph graph;
    CUgraphNode node;
    CUgraphExec exec;
    if (d.graphCreate(&graph, 0) != CUDA_SUCCESS ||
        d.graphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS ||
        d.graphInstantiate(&exec, graph, 0) != CUDA_SUCCESS)
      std::exit(3);
    for (long i = 0; i < n; ++i) d.launch(exec, nullptr);
    std::exit(0);
  }
  for (long i = 0; i < n; ++i) launch_once(d, c);
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("child=%d\nchild_status=%d\n", child,
              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  print_counts(c, stdout);
  return 0;
}

// n launches, vfork(), the child's exec fails and it calls exit(127) — the classic slip (a
// vfork child may only exec or _exit) — in the memory it shares with this process; n more.
int vfork_exit(long n) {
  Driver d = load_driver();
  Counts c;
  for (long i = 0; i < n; ++i) launch_once(d, c);
  std::fflush(stdout);
  const pid_t child = vfork();
  if (child == 0) {
    execl("/nonexistent/program", "program", static_cast<char *>(nullptr));
    std::exit(127);
  }
  if (child < 0) die("vfork failed");
  int status = 0;
  waitpid(child, &status, 0);
  for (long i = 0; i < n; ++i) launch_once(d, c);
  std::printf("child=%d\nchild_status=%d\n", child,
              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  print_counts(c, stdout);
  return 0;
}

int exit_from_worker(long n, int threads) {
  Driver d = load_driver();
  static Counts counts;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&d, n, t] {
      d.ctxSetCurrent(d.ctx);
      for (long i = 0;; ++i) {
        if (t == 0 && i == n) {
          print_counts(counts, stderr);
          std::exit(0);  // the others are still launching
        }
        launch_once(d, counts);
      }
    });
  }
  for (std::thread &t : pool) t.join();  // never returns: thread 0 exits the process
  return 1;
}

void on_sigxfsz(int) {
  static const char line[] = "SIGXFSZ handled\n";
  const ssize_t ignored = write(1, line, sizeof line - 1);
  (void)ignored;
}

int size_limit(long n, long own_bytes) {
  Driver d = load_driver();
  Counts c;
  for (long i = 0; i < n; ++i) launch_once(d, c);
  if (own_bytes > 0) {
    struct sigaction action {};
    action.sa_handler = on_sigxfsz;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGXFSZ, &action, nullptr) != 0) die("cannot handle SIGXFSZ");
    FILE *own = std::fopen("own.bin", "wb");
    if (!own) die("cannot create own.bin");
    static char block[4096];
    int error = 0;
    for (long written = 0; written < own_bytes && error == 0; written += sizeof block)
      if (write(fileno(own), block, sizeof block) < 0) error = errno;
    std::fclose(own);
    std::printf("own_write_error=%d\n", error);
  }
  print_counts(c, stdout);
  return 0;
}

// Limits the address space to what is mapped now plus `margin` bytes (address_space.hpp).
void limit_address_space(long margin) {
  if (!limit_address_space_to_now(static_cast<unsigned long>(margin)))
    die("cannot limit the address space (RLIMIT_AS)");
  rlimit limit{};
  getrlimit(RLIMIT_AS, &limit);
  std::printf("limited=%lu\n", static_cast<unsigned long>(limit.rlim_cur));
}

int rename_without_memory(long n, long margin) {
  Driver d = load_driver();
  using NameFn = int (*)(CUgraphExec, const char *);
  const auto name = reinterpret_cast<NameFn>(dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec"));
  if (!name) die("no ferrum_replay_name_graph_exec (run it under the shim)");
  if (d.launch(d.exec, nullptr) != CUDA_SUCCESS) die("launch failed");
  limit_address_space(margin);
  long taken = 0, refused = 0, last_taken = -1;
  int refused_with = 0;
  for (long i = 0; i < n; ++i) {
    char text[32];
    std::snprintf(text, sizeof text, "step %ld", i);
    const int result = name(d.exec, text);
    if (result == 0) {
      ++taken;
      last_taken = i;
    } else if (refused++ == 0) {
      refused_with = result;
    }
  }
  if (d.launch(d.exec, nullptr) != CUDA_SUCCESS) die("launch failed");
  // Lifted before exit: the launch summary, written at exit, is what the test reads.
  if (!unlimit_address_space()) die("cannot lift the address-space limit");
  std::printf("taken=%ld refused=%ld refused_with=%d last_taken=%ld\n", taken, refused,
              refused_with, last_taken);
  return 0;
}

// The best time per launch of `exec` over five runs of `n` launches, and the mmap calls made
// during all of them.
std::pair<double, unsigned long> time_launches(const Driver &d, CUgraphExec exec, long n) {
  double best = 1e300;
  const unsigned long maps = g_mmap_calls.load();
  for (int run = 0; run < 5; ++run) {
    timespec start{}, end{};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < n; ++i)
      if (d.launch(exec, nullptr) != CUDA_SUCCESS) die("launch failed");
    clock_gettime(CLOCK_MONOTONIC, &end);
    const double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    best = std::min(best, ns / static_cast<double>(n));
  }
  return {best, g_mmap_calls.load() - maps};
}

int launch_refused_graph(long n, long margin) {
  Driver d = load_driver();
  std::vector<CUgraphExec> execs(4095);
  for (CUgraphExec &exec : execs)
    if (d.graphInstantiate(&exec, d.graph, 0) != CUDA_SUCCESS) die("instantiate failed");
  limit_address_space(margin);
  CUgraphExec refused = nullptr;
  if (d.graphInstantiate(&refused, d.graph, 0) != CUDA_SUCCESS) die("instantiate failed");
  const auto [registered_ns, registered_maps] = time_launches(d, d.exec, n);
  const auto [refused_ns, refused_maps] = time_launches(d, refused, n);
  std::printf("registered_ns=%.1f refused_ns=%.1f registered_maps=%lu refused_maps=%lu\n",
              registered_ns, refused_ns, registered_maps, refused_maps);
  if (d.graphExecDestroy(execs.back()) != CUDA_SUCCESS) die("destroy failed");
  const unsigned long maps = g_mmap_calls.load();
  for (long i = 0; i < n; ++i)
    if (d.launch(refused, nullptr) != CUDA_SUCCESS) die("launch failed");
  std::printf("maps_after_destroy=%lu\n", g_mmap_calls.load() - maps);
  // Memory back from outside the registry (nothing it could see changed): a refusal holds
  // for a bounded time only, then the next launch registers the graph.
  if (!unlimit_address_space()) die("cannot lift the address-space limit");
  const timespec hold{1, 200 * 1000 * 1000};
  nanosleep(&hold, nullptr);
  if (d.launch(refused, nullptr) != CUDA_SUCCESS) die("launch failed");
  std::printf("launches=%ld\n", 5 * n + n + 1);
  return 0;
}

// The program's errno across its calls: set to a mark no call makes before each, compared after;
// launches counted apart from the other calls.
struct ErrnoWatch {
  static constexpr int kMark = 4242;
  unsigned long launches = 0, others = 0;
  char first_launch[96] = "", first_other[96] = "";
  template <typename Call>
  auto operator()(const char *what, Call &&call) {
    errno = kMark;
    auto result = call();
    if (errno != kMark) {
      const bool launch = std::strncmp(what, "cuGraphLaunch", 13) == 0;
      if ((launch ? launches : others)++ == 0)
        std::snprintf(launch ? first_launch : first_other, sizeof first_launch, "%s:%d", what,
                      errno);
    }
    return result;
  }
};

// Each call's errno against the value its driver function leaves (FERRUM_STANDIN_DIRTY_ERRNO).
// The program's calls, and the driver calls the shim makes on its own, tell apart.
static_assert(standin_errnos_distinct("i_cuGraphInstantiateWithFlags", "i_cuGraphLaunch",
                                      "i_cuGraphExecDestroy", "i_cuCtxDestroy", "i_cuEventCreate",
                                      "i_cuEventRecord", "i_cuEventQuery", "i_cuEventDestroy_v2",
                                      "i_cuEventElapsedTime_v2", "i_cuCtxGetCurrent",
                                      "i_cuCtxGetDevice", "i_cuStreamIsCapturing",
                                      "i_cuGraphGetNodes", "i_cuGraphNodeGetType"));
int errno_passes(long n) {
  // The loader's error state after each call, as the POSIX idiom reads it (`dlerror(); p =
  // dlsym(h, name); if (dlerror()) fail;`): none, whatever failed inside the shim's own loader
  // calls (a tool that is not there, the exit library missing, a lookup the driver opened
  // privately cannot answer).
  unsigned long loader_wrong = 0;
  char first_loader[256] = "";
  const auto loader_check = [&](const char *what) {
    if (const char *message = dlerror(); message && loader_wrong++ == 0)
      std::snprintf(first_loader, sizeof first_loader, "%s: %s", what, message);
  };
  // The program's first lookups of graph functions: the shim starts in the first (activation:
  // settings, the NVTX tool's start), and wraps the launch. The C library's dlsym leaves errno
  // as it was; through the shim it must too.
  void *const driver = open_driver();
  // FERRUM_TEST_EXPORTED=1: every function looked up in the global scope, where the graph
  // functions are the shim's own exports (what a program linked against libcuda calls): each
  // resolves its real function at its first call.
  const char *exported = std::getenv("FERRUM_TEST_EXPORTED");
  void *const handle = exported && *exported == '1' ? RTLD_DEFAULT : driver;
  (void)dlerror();
  unsigned long lookups_wrong = 0;
  char first_lookup[96] = "";
  for (const char *name : {"cuGraphLaunch", "cuGraphInstantiateWithFlags", "cuGraphExecDestroy",
                           "cuCtxDestroy_v2", "cuGraphLaunch_ptsz"}) {
    errno = ErrnoWatch::kMark;
    if (!dlsym(handle, name)) die(name);
    if (errno != ErrnoWatch::kMark && lookups_wrong++ == 0)
      std::snprintf(first_lookup, sizeof first_lookup, "dlsym %s:%d", name, errno);
    loader_check(name);
  }
  Driver d = set_up_driver(handle, false);
  loader_check("driver set-up");
  CUresult (*ctx_destroy)(CUcontext) = nullptr;
  lookup(d.handle, "cuCtxDestroy_v2", ctx_destroy);
  // FERRUM_STANDIN_DIRTY_ERRNO=2: the launches leave errno alone, so the program's own value set
  // before each launch must still be there after it.
  const char *dirty = std::getenv("FERRUM_STANDIN_DIRTY_ERRNO");
  const bool launch_clean = dirty && std::strcmp(dirty, "2") == 0;
  constexpr int kProgramsOwn = ErrnoWatch::kMark;  // the program's own value, as memory-limit's
  unsigned long calls = 0, wrong = 0;
  char first[128] = "";
  const auto check = [&](const char *what, const char *internal) {
    ++calls;
    const int expected = launch_clean && std::strcmp(internal, "i_cuGraphLaunch") == 0
                             ? kProgramsOwn
                             : standin_errno_of(internal);
    if (errno != expected && wrong++ == 0)
      std::snprintf(first, sizeof first, "%s:%d:%d", what, errno, expected);
    loader_check(what);
  };
  // The shim's own API, looked up as a program does (absent without the shim): a naming scope
  // around the instantiations (a thread's first push maps its page), names given by handle.
  using PushName = int (*)(const char *);
  using PopName = int (*)();
  using NameExec = int (*)(void *, const char *);
  const auto push_name =
      reinterpret_cast<PushName>(dlsym(RTLD_DEFAULT, "ferrum_replay_push_graph_name"));
  const auto pop_name =
      reinterpret_cast<PopName>(dlsym(RTLD_DEFAULT, "ferrum_replay_pop_graph_name"));
  const auto name_exec =
      reinterpret_cast<NameExec>(dlsym(RTLD_DEFAULT, "ferrum_replay_name_graph_exec"));
  (void)dlerror();  // their lookups' own failure, without the shim, is the program's
  unsigned long api_calls = 0, api_wrong = 0;
  char api_first[96] = "";
  const auto api = [&](const char *what, auto &&call) {
    errno = kProgramsOwn;
    call();
    ++api_calls;
    if (errno != kProgramsOwn && api_wrong++ == 0)
      std::snprintf(api_first, sizeof api_first, "%s:%d", what, errno);
    loader_check(what);
  };
  if (push_name) api("ferrum_replay_push_graph_name", [&] { push_name("errno scope"); });
  CUgraphExec execs[8] = {};
  for (CUgraphExec &exec : execs) {
    errno = 0;
    if (d.graphInstantiate(&exec, d.graph, 0) != CUDA_SUCCESS) die("instantiate failed");
    check("cuGraphInstantiateWithFlags", "i_cuGraphInstantiateWithFlags");
  }
  if (pop_name) api("ferrum_replay_pop_graph_name", [&] { pop_name(); });
  if (name_exec)
    for (CUgraphExec exec : execs)
      api("ferrum_replay_name_graph_exec", [&] { name_exec(exec, "errno graph"); });
  for (long i = 0; i < n; ++i)
    for (CUgraphExec exec : execs) {
      errno = kProgramsOwn;
      if (d.launch(exec, nullptr) != CUDA_SUCCESS) die("launch failed");
      check("cuGraphLaunch", "i_cuGraphLaunch");
    }
  for (CUgraphExec exec : execs) {
    errno = 0;
    d.graphExecDestroy(exec);
    check("cuGraphExecDestroy", "i_cuGraphExecDestroy");
  }
  errno = 0;
  ctx_destroy(d.ctx);
  check("cuCtxDestroy_v2", "i_cuCtxDestroy");
  std::printf("errno_calls=%lu errno_wrong=%lu\n", calls + 5, wrong + lookups_wrong);
  if (lookups_wrong || wrong) std::printf("errno_first=%s\n", lookups_wrong ? first_lookup : first);
  std::printf("api_calls=%lu api_wrong=%lu\n", api_calls, api_wrong);
  if (api_wrong) std::printf("api_first=%s\n", api_first);
  std::printf("loader_wrong=%lu\n", loader_wrong);
  if (loader_wrong) std::printf("loader_first=%s\n", first_loader);
  return 0;
}

int memory_limit(long n, long margin, bool limit_first) {
  // Limited first: before the graph's instantiation (the shim's tables, GPU timing's pools), as
  // a program already short of memory. The shim has started already, at the program's first
  // lookup in the driver (set_up_driver's dlsym calls): limited before those, the shim's start
  // (settings, NVTX and its tool) left the stand-in too little for its launches at 256 KiB.
  Driver d = set_up_driver(open_driver(), !limit_first);
  Counts c;
  ErrnoWatch watch;
  if (limit_first) {
    limit_address_space(margin);
    if (watch("cuGraphInstantiate", [&] { return d.graphInstantiate(&d.exec, d.graph, 0); }) !=
        CUDA_SUCCESS)
      die("instantiate failed");
  }
  for (long i = 0; i < n; ++i) {
    watch("cuGraphLaunch", [&] {
      launch_once(d, c);
      return 0;
    });
    if (i == 0 && !limit_first) limit_address_space(margin);
  }
  // New graphs under the limit: registered (names, call sites), launched, destroyed.
  for (int g = 0; g < 32; ++g) {
    CUgraphExec exec = nullptr;
    if (watch("cuGraphInstantiate", [&] { return d.graphInstantiate(&exec, d.graph, 0); }) !=
        CUDA_SUCCESS)
      die("instantiate failed");
    for (int k = 0; k < 2; ++k) {
      const CUresult r = watch("cuGraphLaunch (new)", [&] { return d.launch(exec, nullptr); });
      c.launches.fetch_add(1);
      if (r != CUDA_SUCCESS) c.failed.fetch_add(1);
    }
    watch("cuGraphExecDestroy", [&] { return d.graphExecDestroy(exec); });
  }
  std::printf("errno_changed_launch=%lu\nerrno_changed_other=%lu\n", watch.launches, watch.others);
  if (watch.launches) std::printf("errno_first_launch=%s\n", watch.first_launch);
  if (watch.others) std::printf("errno_first_other=%s\n", watch.first_other);
  print_counts(c, stdout);
  return 0;
}

void exit_now(int) {
  std::exit(0);
}

// One range on the main thread (NVTX and the recorder set up there); then `handler` for SIGUSR1
// and a second thread whose first NVTX call, registered under the recorder's lock with its memory
// mapped there, raises it from the armed mmap.
void raise_in_first_nvtx_call(void (*handler)(int)) {
  nvtxRangePushA("main");
  nvtxRangePop();
  signal(SIGUSR1, handler);
  std::printf("armed=1\n");
  std::fflush(stdout);
  std::thread([] {
    t_raise_at_mmap = true;
    nvtxRangePushA("worker");
    nvtxRangePop();
  }).join();
}

int exit_in_handler() {
  raise_in_first_nvtx_call(exit_now);
  return 3;  // never reached: the handler exits
}

// fork-in-handler(-shim): the handler forks, as a crash reporter's or a supervisor's may. The
// child ends at once with _exit, or with --how continue returns from the handler and goes on
// (prints `child=1`; the interrupted call finishes there); the parent waits for it and goes on.
bool g_child_continues = false;

void fork_now(int) {
  const pid_t child = fork();
  if (child == 0) {
    if (!g_child_continues) _exit(0);
    const char line[] = "child=1\n";
    (void)!write(1, line, sizeof line - 1);
    return;
  }
  if (child > 0) {
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  const char line[] = "forked=1\n";
  (void)!write(1, line, sizeof line - 1);
}

int fork_in_handler(const std::string &how) {
  g_child_continues = how == "continue";
  raise_in_first_nvtx_call(fork_now);
  return 0;
}

int fork_in_handler_shim(long n, const std::string &how) {
  g_child_continues = how == "continue";
  Driver d = load_driver();
  Counts counts;
  launch_once(d, counts);  // the shim activated, its registry made
  signal(SIGUSR1, fork_now);
  std::printf("armed=1\n");
  std::fflush(stdout);
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  if (d.graphCreate(&graph, 0) != CUDA_SUCCESS ||
      d.graphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS)
    die("driver set-up failed");
  t_raise_at_mmap = true;  // the registry grows its tables (mmap) under its lock
  for (long i = 0; i < n; ++i) {
    CUgraphExec exec = nullptr;
    if (d.graphInstantiate(&exec, graph, 0) != CUDA_SUCCESS) die("instantiate failed");
  }
  std::printf("instantiated=%ld raised=%d\n", n, t_raise_at_mmap ? 0 : 1);
  return 0;
}

int exit_in_handler_timed() {
  Driver d = load_driver();
  Counts counts;
  launch_once(d, counts);  // the shim activated, GPU timing set up, the main thread registered
  signal(SIGUSR1, exit_now);
  std::printf("armed=1\n");
  std::fflush(stdout);
  std::thread([&] {
    CUgraph graph = nullptr;
    CUgraphNode node = nullptr;
    CUgraphExec exec = nullptr;
    // Making the context current is where the shim registers the thread for GPU timing (or, at
    // the latest, its first timed launch).
    t_raise_at_setspecific = true;
    if (d.ctxSetCurrent(d.ctx) != CUDA_SUCCESS || d.graphCreate(&graph, 0) != CUDA_SUCCESS ||
        d.graphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS ||
        d.graphInstantiate(&exec, graph, 0) != CUDA_SUCCESS)
      die("driver set-up failed");
    d.launch(exec, nullptr);
  }).join();
  return 3;  // never reached: the handler exits
}

// exit-in-handler-pool: the same inside the shim's GPU engine, its mutex held: a second
// context's first instantiation makes that context's event pool, mapped under the engine's
// mutex, and there the armed mmap raises SIGUSR1, whose handler calls exit(0). An atexit handler
// the program registered first destroys that context, as a runtime's teardown does, and prints
// `destroyed=<CUresult>`: its context hook must not wait for the mutex this very thread holds.
CUcontext g_second_context = nullptr;
CUresult (*g_context_destroy)(CUcontext) = nullptr;

void destroy_second_context() {
  if (!g_second_context) return;
  const CUresult result = g_context_destroy(g_second_context);
  char line[32];
  const int n = std::snprintf(line, sizeof line, "destroyed=%d\n", static_cast<int>(result));
  (void)!write(1, line, static_cast<size_t>(n));
}

int exit_in_handler_pool() {
  Driver d = load_driver();
  lookup(d.handle, "cuCtxDestroy_v2", g_context_destroy);
  std::atexit(destroy_second_context);  // before the shim's exit hook: it runs after it
  Counts counts;
  launch_once(d, counts);  // the shim activated, GPU timing set up, the first context's pool
  signal(SIGUSR1, exit_now);
  CUdevice device = 0;
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  CUgraphExec exec = nullptr;
  if (d.deviceGet(&device, 0) != CUDA_SUCCESS ||
      d.ctxCreate(&g_second_context, nullptr, 0, device) != CUDA_SUCCESS ||
      d.graphCreate(&graph, 0) != CUDA_SUCCESS ||
      d.graphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS)
    die("driver set-up failed");
  std::printf("armed=1\n");
  std::fflush(stdout);
  t_raise_at_mmap = true;
  d.graphInstantiate(&exec, graph, 0);
  return 3;  // never reached: the handler exits
}

int heap_exhausted(long n) {
  // The program's own NVTX, initialised on the main thread (with a tool: the tool attached).
  nvtxRangePushA("main");
  nvtxRangePop();
  unsigned long long ranges = 0;
  bool any = false;
  std::thread worker([&] {
    limit_address_space(0);
    HeapHoard taken;
    any = taken.took_any();
    for (long i = 0; i < n; ++i) {
      nvtxRangePushA("worker");
      nvtxMarkW(L"worker mark \u00e9");
      nvtxRangePop();
      ++ranges;
    }
  });
  worker.join();
  std::printf("heap_taken=%d ranges=%llu\n", any ? 1 : 0, ranges);
  return 0;
}

// Makes `filter` this process's seccomp filter (and its threads' to come): a sandbox's rules.
void install_seccomp(sock_filter *filter, size_t count) {
  sock_fprog program{static_cast<unsigned short>(count), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
    die("seccomp");
}

// Loads the driver, launches `n` times and prints the counts.
void launch_and_print(long n) {
  Driver d = load_driver();
  Counts c;
  for (long i = 0; i < n; ++i) launch_once(d, c);
  print_counts(c, stdout);
}

// A thread that changes the environment for as long as the process lives: new names (each
// setenv of one reallocates, and so frees, the array getenv walks), and every 20,000 names a
// clearenv() (which frees it outright).
void churn_environment() {
  char name[32];
  for (unsigned long i = 0;; ++i) {
    if (i % 20000 == 0) clearenv();
    std::snprintf(name, sizeof name, "CHURN_%lu", i);
    setenv(name, "1", 1);
  }
}

int env_churn(long n, const std::string &how) {
  // `before`: the environment is cleared before the process's first graph call (so before the
  // shim reads its settings); `after`: after the first launch (before the exit hooks expand
  // their patterns and the recorder's first spill reads TMPDIR).
  if (how == "before") clearenv();
  Driver d = load_driver();
  Counts c;
  if (how == "after") {
    launch_once(d, c);
    clearenv();
  }
  std::thread(churn_environment).detach();
  while (static_cast<long>(c.launches.load()) < n) launch_once(d, c);
  print_counts(c, stdout);
  return 0;  // exit() with the churn still running
}

// A program that changes its working directory after its first launches, as daemons (to "/"),
// test fixtures and build tools do: `--how deleted` into a directory of its own that it then
// removes (a temporary directory cleaned up before exit), else into the directory `how` names.
int chdir_before_exit(long n, const std::string &how) {
  launch_and_print(n);
  if (how == "deleted") {
    char made[] = "/tmp/fault-cwd-XXXXXX";
    if (!mkdtemp(made) || chdir(made) != 0 || rmdir(made) != 0) die("no directory to leave");
  } else if (chdir(how.c_str()) != 0) {
    die("chdir failed");
  }
  return 0;
}

extern "C" void last_flush_arm(int (*launch)(void *, void *), void *exec);  // last_flush.c

// The name the loader gave each loaded libferrum-replay-last.so (none: `none`).
int print_last_library(dl_phdr_info *info, size_t, void *found) {
  const char *name = info->dlpi_name ? info->dlpi_name : "";
  const size_t length = strlen(name), suffix = strlen("libferrum-replay-last.so");
  if (length >= suffix && strcmp(name + length - suffix, "libferrum-replay-last.so") == 0) {
    printf("last_library=%s\n", name);
    *static_cast<bool *>(found) = true;
  }
  return 0;
}

// N launches; the library last_flush.c makes one more from its destructor at exit. `--how DIR`:
// first moves into DIR (before the first launch); then names the exit library loaded, if any.
int library_destructor_launch(long n, const std::string &how) {
  if (how != "descriptors" && chdir(how.c_str()) != 0) die("chdir failed");
  Driver d = load_driver();
  Counts c;
  for (long i = 0; i < n; ++i) launch_once(d, c);
  print_counts(c, stdout);
  bool found = false;
  dl_iterate_phdr(print_last_library, &found);
  if (!found) printf("last_library=none\n");
  last_flush_arm(reinterpret_cast<int (*)(void *, void *)>(d.launch), d.exec);
  return 0;
}

// The shim loaded with dlopen (to call its naming API) rather than preloaded, then dlclose'd.
int dlclose_shim() {
  const char *path = std::getenv("FERRUM_SHIM");
  if (!path) die("FERRUM_SHIM is not set");
  void *shim = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!shim) die(dlerror());
  using PushFn = int (*)(const char *);
  using PopFn = int (*)();
  auto push = reinterpret_cast<PushFn>(dlsym(shim, "ferrum_replay_push_graph_name"));
  auto pop = reinterpret_cast<PopFn>(dlsym(shim, "ferrum_replay_pop_graph_name"));
  if (!push || !pop) die("no naming scope in the shim");
  std::atomic<int> step{0};
  std::thread worker([&] {
    push("decode");
    pop();
    step.store(1);
    while (step.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // returns: the thread's exit runs the destructors of its pthread keys
  });
  while (step.load() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("dlclose=%d\n", dlclose(shim));
  std::fflush(stdout);
  step.store(2);
  worker.join();
  std::printf("joined=1\n");
  return 0;
}

int no_sockets(long n) {
  launch_and_print(n);
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  install_seccomp(filter, sizeof filter / sizeof filter[0]);
  if (socket(AF_UNIX, SOCK_STREAM, 0) >= 0 || errno != EPERM) die("socket() still works");
  std::printf("sockets=0\n");
  return 0;
}

int exit_without_memory(long n) {
  launch_and_print(n);
  limit_address_space(0);
  static HeapHoard *kept = new HeapHoard;  // never given back: the exit finds no memory
  std::printf("heap_taken=%d\n", kept->took_any() ? 1 : 0);
  return 0;
}

int underscore_exit(long n) {
  launch_and_print(n);
  _exit(0);
}

Counts g_sigterm_counts;
void on_sigterm(int) {
  // What real programs do (Python's default handlers, many servers): exit from the handler.
  std::exit(42);
}

int sigterm() {
  Driver d = load_driver();
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  std::printf("ready\n");
  std::fflush(stdout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) launch_once(d, g_sigterm_counts);
  return 1;
}

int sigterm_at_exit(long n) {
  Driver d = load_driver();
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  for (long i = 0; i < n; ++i) launch_once(d, g_sigterm_counts);
  std::printf("exiting\n");
  std::fflush(stdout);
  return 0;
}

int exit_during_first_launch() {
  Driver d = load_driver();
  g_hold_marker.store(1);
  std::thread([&d] {
    d.ctxSetCurrent(d.ctx);
    Counts c;
    launch_once(d, c);
  }).detach();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (g_hold_marker.load() != 2) {
    if (std::chrono::steady_clock::now() > deadline) die("the first launch made no marker");
    usleep(100);
  }
  std::printf("held=1\n");
  std::fflush(stdout);
  std::exit(0);  // while the other thread is making the marker
}

struct SmallStackWork {
  Driver *d;
  long n;
  Counts counts;
};

void *small_stack_thread(void *arg) {
  auto *work = static_cast<SmallStackWork *>(arg);
  work->d->ctxSetCurrent(work->d->ctx);
  for (long i = 0; i < work->n; ++i) launch_once(*work->d, work->counts);
  return nullptr;
}

int small_stack(long n) {
  Driver d = load_driver();
  SmallStackWork work{&d, n, {}};
  pthread_attr_t attributes;
  pthread_t thread;
  if (pthread_attr_init(&attributes) != 0 ||
      pthread_attr_setstacksize(&attributes, PTHREAD_STACK_MIN) != 0 ||
      pthread_create(&thread, &attributes, small_stack_thread, &work) != 0)
    die("cannot start a thread with the smallest stack");
  pthread_join(thread, nullptr);
  print_counts(work.counts, stdout);
  return 0;
}

void exit_seven(int) {
  std::exit(7);
}

void *exit_three(void *) {
  std::exit(3);
}

// A 16 KiB stack with a guard page below it, mapped here.
char *guarded_stack(size_t size) {
  const long page = sysconf(_SC_PAGESIZE);
  void *area =
      mmap(nullptr, page + size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED || mprotect(area, page, PROT_NONE) != 0) die("mmap");
  return static_cast<char *>(area) + page;
}

constexpr size_t kSmallStack = 16384;
char *g_small_stack = nullptr;
ucontext_t g_outside, g_fiber;

void exit_three_now() {
  std::exit(3);
}

void *run_fiber(void *) {
  getcontext(&g_fiber);
  g_fiber.uc_stack.ss_sp = g_small_stack;
  g_fiber.uc_stack.ss_size = kSmallStack;
  g_fiber.uc_link = &g_outside;
  makecontext(&g_fiber, exit_three_now, 0);
  swapcontext(&g_outside, &g_fiber);
  return nullptr;
}

void *exit_on_disarmed_stack(void *) {
#ifndef SS_AUTODISARM
#define SS_AUTODISARM (1U << 31)
#endif
  stack_t alternate{};
  alternate.ss_sp = g_small_stack;
  alternate.ss_size = kSmallStack;
  alternate.ss_flags = SS_AUTODISARM;
  struct sigaction action {};
  action.sa_handler = exit_seven;
  action.sa_flags = SA_ONSTACK;
  if (sigaltstack(&alternate, nullptr) != 0 || sigaction(SIGTERM, &action, nullptr) != 0)
    die("cannot set up the alternate stack");
  raise(SIGTERM);
  return nullptr;
}

void *exit_without_more_threads(void *) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAGAIN),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  install_seccomp(filter, sizeof filter / sizeof filter[0]);
  std::exit(3);
}

void run_on_thread(void *(*function)(void *), size_t stack_bytes) {
  pthread_attr_t attributes;
  pthread_t thread;
  if (pthread_attr_init(&attributes) != 0 ||
      pthread_attr_setstacksize(&attributes, stack_bytes) != 0 ||
      pthread_create(&thread, &attributes, function, nullptr) != 0)
    die("cannot start a thread");
  pthread_join(thread, nullptr);
}

int exit_small_stack(long n, const std::string &how) {
  {
    Driver d = load_driver();
    Counts c;
    for (long i = 0; i < n; ++i) launch_once(d, c);
  }
  for (int i = 0; i < 40; ++i)
    std::printf("line %02d of the program's own buffered output ......\n", i);
  if (how == "main") return 0;
  // Each of the others exits the process where it says: the returns are not reached.
  if (how == "thread") run_on_thread(exit_three, 32768);
  if (how == "no-thread") run_on_thread(exit_without_more_threads, 128 * 1024);
  if (how == "fiber" || how == "fiber-main" || how == "autodisarm") {
    g_small_stack = guarded_stack(kSmallStack);  // before the thread: above its stack
    if (how == "fiber-main") run_fiber(nullptr);
    run_on_thread(how == "fiber" ? run_fiber : exit_on_disarmed_stack, 8 << 20);
    return 1;
  }
  if (how == "thread" || how == "no-thread") return 1;
  constexpr size_t kAlternate = 16384;
  stack_t alternate{};
  alternate.ss_size = kAlternate;
  if (how == "altstack") {
    alternate.ss_sp = std::malloc(kAlternate);
  } else if (how == "guarded") {
    alternate.ss_sp = guarded_stack(kAlternate);
  } else {
    die(("unknown --how " + how).c_str());
  }
  struct sigaction action {};
  action.sa_handler = exit_seven;
  action.sa_flags = SA_ONSTACK;
  if (!alternate.ss_sp || sigaltstack(&alternate, nullptr) != 0 ||
      sigaction(SIGTERM, &action, nullptr) != 0)
    die("cannot set up the alternate stack");
  raise(SIGTERM);
  return 1;  // not reached
}

// 0, or the errno of the step that makes descriptor 2 impossible to reopen through /proc.
int make_stderr_unreopenable(const std::string &how) {
  if (how == "setuid") return setgid(65534) != 0 || setuid(65534) != 0 ? errno : 0;
  if (how == "chroot") return chroot(".") != 0 || chdir("/") != 0 ? errno : 0;
  if (how == "descriptors") {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = 64;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return errno;
    while (open("/dev/null", O_RDONLY) >= 0) {
    }
    return errno == EMFILE ? 0 : errno;
  }
  die(("unknown --how " + how).c_str());
}

int stderr_unreopenable(long n, const std::string &how, bool launch_first) {
  Driver d = load_driver();
  Counts first;
  if (launch_first) launch_once(d, first);  // the process's first launch: its running marker
  if (const int error = make_stderr_unreopenable(how)) {
    std::printf("unreopenable=skip errno=%d\n", error);
    return 0;
  }
  std::printf("unreopenable=%s\n", how.c_str());
  // A second graph, instantiated now: its registration is a log line written after the step.
  CUgraph graph = nullptr;
  CUgraphNode node = nullptr;
  if (d.graphCreate(&graph, 0) != CUDA_SUCCESS ||
      d.graphAddEmptyNode(&node, graph, nullptr, 0) != CUDA_SUCCESS ||
      d.graphInstantiate(&d.exec, graph, 0) != CUDA_SUCCESS)
    die("second graph failed");
  Counts c;
  for (long i = 0; i < n; ++i) launch_once(d, c);
  print_counts(c, stdout);
  const int flags = fcntl(2, F_GETFL);
  std::printf("stderr_blocking=%d\n", flags >= 0 && (flags & O_NONBLOCK) == 0 ? 1 : 0);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) die("usage: fault_program MODE [--launches N] [--threads T]");
  const std::string mode = argv[1];
  long n = 100;
  int threads = 4;
  long own_bytes = 0;
  bool limit_first = false;
  std::string how = "descriptors";
  bool launch_first = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--launches") == 0) n = std::strtol(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--own-bytes") == 0) own_bytes = std::strtol(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--limit-first") == 0) limit_first = std::atoi(argv[i + 1]) != 0;
    if (std::strcmp(argv[i], "--how") == 0) how = argv[i + 1];
    if (std::strcmp(argv[i], "--launch-first") == 0) launch_first = std::atoi(argv[i + 1]) != 0;
  }
  if (mode == "no-driver") return no_driver();
  if (mode == "errno-passes") return errno_passes(n);
  if (mode == "late-driver") return late_driver(n);
  if (mode == "fork-in-launch") return fork_in_launch(n);
  if (mode == "fork-during-activation") return fork_during_activation(n, how);
  if (mode == "launch-during-activation") return launch_during_activation(n);
  if (mode == "fork-while-naming") return fork_while_naming(n, how);
  if (mode == "fork-while-loader-busy") return fork_while_loader_busy(n, how);
  if (mode == "fork-while-exit-list-busy") return fork_while_exit_list_busy(n);
  if (mode == "fork-while-locale-busy") return fork_while_locale_busy(n, how);
  if (mode == "jump-inside-loader-walk") return jump_inside_loader_walk(how);
  if (mode == "fork-children") return fork_children(n);
  if (mode == "clone-child") return clone_child(n, how == "idle");
  if (mode == "vfork-exit") return vfork_exit(n);
  if (mode == "exit-from-worker") return exit_from_worker(n, threads);
  if (mode == "underscore-exit") return underscore_exit(n);
  if (mode == "size-limit") return size_limit(n, own_bytes);
  if (mode == "memory-limit") return memory_limit(n, own_bytes, limit_first);
  if (mode == "rename-without-memory") return rename_without_memory(n, own_bytes);
  if (mode == "launch-refused-graph") return launch_refused_graph(n, own_bytes);
  if (mode == "heap-exhausted") return heap_exhausted(n);
  if (mode == "exit-in-handler") return exit_in_handler();
  if (mode == "fork-in-handler") return fork_in_handler(how);
  if (mode == "fork-in-handler-shim") return fork_in_handler_shim(n, how);
  if (mode == "exit-in-handler-timed") return exit_in_handler_timed();
  if (mode == "exit-in-handler-pool") return exit_in_handler_pool();
  if (mode == "exit-without-memory") return exit_without_memory(n);
  if (mode == "no-sockets") return no_sockets(n);
  if (mode == "sigterm") return sigterm();
  if (mode == "sigterm-at-exit") return sigterm_at_exit(n);
  if (mode == "exit-during-first-launch") return exit_during_first_launch();
  if (mode == "small-stack") return small_stack(n);
  if (mode == "exit-small-stack") return exit_small_stack(n, how);
  if (mode == "chdir-before-exit") return chdir_before_exit(n, how);
  if (mode == "library-destructor-launch") return library_destructor_launch(n, how);
  if (mode == "dlclose-shim") return dlclose_shim();
  if (mode == "env-churn") return env_churn(n, how);
  if (mode == "stderr-unreopenable") return stderr_unreopenable(n, how, launch_first);
  die(("unknown mode " + mode).c_str());
}
