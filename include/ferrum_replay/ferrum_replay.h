/* ferrum-replay: naming CUDA graphs from a program that opts in.
 *
 * Nothing to link. The shim (libferrum-replay.so, preloaded) exports the function below; a
 * program looks it up at run time and works unchanged when the shim is not there:
 *
 *   #include <dlfcn.h>
 *   #include <ferrum_replay/ferrum_replay.h>
 *
 *   ferrum_replay_name_graph_exec_fn name_graph =
 *       (ferrum_replay_name_graph_exec_fn)dlsym(RTLD_DEFAULT, FERRUM_REPLAY_NAME_GRAPH_EXEC);
 *   if (name_graph) name_graph(exec, "decode batch 8");
 *
 * From Python (ctypes):
 *
 *   import ctypes
 *   name_graph = getattr(ctypes.CDLL(None), "ferrum_replay_name_graph_exec", None)
 *   if name_graph:
 *       name_graph(ctypes.c_void_p(exec_handle), b"decode batch 8")
 *
 * A naming scope needs no handle: every graph the calling thread instantiates between
 * ferrum_replay_push_graph_name("decode bs=8") and the matching ferrum_replay_pop_graph_name()
 * is named "decode bs=8" (C++: ferrum_replay::ScopedGraphName below; Python: the
 * ferrum_replay package, `with ferrum_replay.graph_name("decode bs=8"): ...`). That is what
 * names the graphs of a framework that instantiates them for you (torch.cuda.graph).
 */
#ifndef FERRUM_REPLAY_FERRUM_REPLAY_H
#define FERRUM_REPLAY_FERRUM_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The exported name, for dlsym. */
#define FERRUM_REPLAY_NAME_GRAPH_EXEC "ferrum_replay_name_graph_exec"

/* Names the executable graph `graph_exec` (a cudaGraphExec_t or CUgraphExec) `name`: its
 * ranges carry this name (through FERRUM_REPLAY_FORMAT) from the next launch on. The name is
 * copied; control bytes and malformed UTF-8 become '?', and it is cut at 127 bytes. Two
 * graphs the program names alike share the name. Call it after instantiating; the name
 * lasts until the graph is destroyed.
 * Returns 0 when the shim took the name; -EINVAL for a null handle or name (whatever the
 * shim's state); -ENOTSUP when the shim names nothing in this process: switched off
 * (FERRUM_REPLAY=off), or passing every launch through because no NVTX tool is attached, no
 * FERRUM_REPLAY_SUMMARY is asked for and FERRUM_REPLAY_GPU_TIME is off (`ferrum-replay run`
 * alone); -EAGAIN while the shim
 * is still starting (another thread's start has taken over 2 s, or the call comes from inside
 * it: an NVTX tool's initialisation), or when the call comes from a signal handler that
 * interrupted the shim on the same thread (inside a graph call, or another naming): the name is
 * not taken, and a later call may try again; -ENOSPC when the shim's registry is full. A
 * program that only names may ignore the result. */
int ferrum_replay_name_graph_exec(void *graph_exec, const char *name);

typedef int (*ferrum_replay_name_graph_exec_fn)(void *graph_exec, const char *name);

/* ---- A naming scope: names for the graphs a thread instantiates ----
 *
 * A per-thread stack of pending names. Every executable graph instantiated on the calling
 * thread while a name is pushed (through any route: cudaGraphInstantiate*, cuGraphInstantiate*,
 * cuGetProcAddress...) takes the innermost name, copied, made printable and cut as
 * ferrum_replay_name_graph_exec's names are. Precedence: the scope's name is the program's own
 * name, so it beats the names file and the call site; a later ferrum_replay_name_graph_exec
 * on that graph replaces it. Graphs instantiated in another thread are not affected, nor
 * graphs instantiated before the push (name those by handle). The stack holds
 * FERRUM_REPLAY_MAX_GRAPH_NAME_DEPTH names; deeper pushes are counted but carry no name of
 * their own (the innermost name that fit stays in effect).
 *
 * Every push, whatever it returned, is balanced by exactly one pop on the same thread.
 * Both are cheap (no lock, no system call but one page mapped at a thread's first push) and
 * never activate the shim: a program may push before it touches CUDA. */

#define FERRUM_REPLAY_PUSH_GRAPH_NAME "ferrum_replay_push_graph_name"
#define FERRUM_REPLAY_POP_GRAPH_NAME "ferrum_replay_pop_graph_name"
#define FERRUM_REPLAY_MAX_GRAPH_NAME_DEPTH 16

/* Pushes `name`. Returns 0; -EINVAL for a null name, -ENOSPC beyond
 * FERRUM_REPLAY_MAX_GRAPH_NAME_DEPTH (both still pushed a level, which carries the outer
 * name: pop it as any other). */
int ferrum_replay_push_graph_name(const char *name);
typedef int (*ferrum_replay_push_graph_name_fn)(const char *name);

/* Pops the innermost name. Returns 0, or -EINVAL when the thread has nothing pushed. */
int ferrum_replay_pop_graph_name(void);
typedef int (*ferrum_replay_pop_graph_name_fn)(void);

/* ---- GPU time per replay: the hand-off from the shim to an NVTX tool ----
 *
 * With GPU timing on (FERRUM_REPLAY_GPU_TIME=on; `ferrum-replay record` turns it on), the
 * shim brackets each timed replay with two driver events on the launch's stream and reads
 * them off the launch path once the GPU has passed them. A tool that wants those times (the
 * bundled recorder does) looks up FERRUM_REPLAY_SET_GPU_SINK_SIZED (a shim older than it:
 * FERRUM_REPLAY_SET_GPU_SINK) with dlsym(RTLD_DEFAULT, ...) and registers a sink; without the
 * shim the lookup finds nothing and the tool goes on without GPU times. These functions are
 * safe to call from any thread. */

#define FERRUM_REPLAY_SET_GPU_SINK "ferrum_replay_set_gpu_sink"
#define FERRUM_REPLAY_SET_GPU_SINK_SIZED "ferrum_replay_set_gpu_sink_sized"
#define FERRUM_REPLAY_GPU_FLUSH "ferrum_replay_gpu_flush"

/* One replay whose GPU work has completed. Times are CLOCK_MONOTONIC nanoseconds: the GPU's
 * event clock aligned to the CPU's, again every second or so while replays are read (see
 * align_error_ns); end_ns - start_ns is the replay's own pair of events. GPU time is
 * stream-ordered: from when the stream reached the replay to when its work completed.
 * The struct only grows at its end, and a sink gets an array of them: a sink built against an
 * older header must get its own stride (see ferrum_replay_set_gpu_sink_sized). */
typedef struct ferrum_replay_gpu_replay {
  uint32_t size;           /* this element's length, the fields it holds: the shim's sizeof,
                              or less for a sink that asked for less (the array's stride) */
  int32_t device;          /* CUDA device ordinal of the launch's context, -1 if unknown */
  uint64_t stream;         /* the launch's stream handle as passed (0: legacy NULL stream,
                              also CU_STREAM_LEGACY; 2: CU_STREAM_PER_THREAD, also what _ptsz
                              launches of NULL use) */
  const char *name;        /* the graph's range message (what the CPU range shows); valid
                              only during the sink call: copy it */
  uint32_t category;       /* the CPU range's NVTX category (the graph's ordinal) */
  uint64_t replay;         /* the replay number: the CPU range's payload */
  uint64_t start_ns;       /* the GPU began the replay */
  uint64_t end_ns;         /* the GPU finished it */
  uint64_t align_error_ns; /* bound of the alignment error of start_ns and end_ns */
  /* -- the first layout ends here (FERRUM_REPLAY_GPU_REPLAY_FIRST_SIZE bytes) -- */
  /* Which stream 0 or 2 it ran on: each context has its own legacy and per-thread default
   * streams, and each thread its own per-thread one (absent when `size` ends before these). */
  uint64_t context; /* the launch's CUcontext */
  uint32_t thread;  /* stream 2: the launching thread's id (gettid); 0 on any other stream */
} ferrum_replay_gpu_replay;

/* Called with completed replays, in batches, from a thread of the shim — or, when none runs
 * (no thread of the program that times launches lives), from the thread calling
 * ferrum_replay_gpu_flush or exiting; never the launching thread, never with a lock of the
 * program's held. Must not block, call CUDA, call ferrum_replay_gpu_flush or end the process
 * (exit() from a sink leaves the shim's launch summary unwritten, said in one line). It may
 * register another sink or unregister itself (ferrum_replay_set_gpu_sink_sized): the change
 * holds from the next batch. */
typedef void (*ferrum_replay_gpu_sink_fn)(const ferrum_replay_gpu_replay *replays, size_t count,
                                          void *context);

/* The first layout's size: the fields up to align_error_ns. */
#define FERRUM_REPLAY_GPU_REPLAY_FIRST_SIZE (offsetof(ferrum_replay_gpu_replay, align_error_ns) + 8)

/* Registers `sink` (NULL unregisters). One sink at a time; once it returns, the sink it
 * replaced is not called again (called from inside that sink: from its next batch). Returns 0,
 * -ENOTSUP when GPU timing is off in this process (the tool then has no GPU times to expect), or
 * -EDEADLK, the sink unchanged, from a signal handler that interrupted the shim's delivery of a
 * batch on its thread (the sink's lock held there). The sink gets the
 * first layout (FERRUM_REPLAY_GPU_REPLAY_FIRST_SIZE bytes, `size` says so), one replay per call
 * (count 1): a sink built before the struct grew steps by 64 bytes, one built against a grown
 * header without the sized way by its own sizeof, and one element reads right either way; a new
 * tool uses ferrum_replay_set_gpu_sink_sized. */
int ferrum_replay_set_gpu_sink(ferrum_replay_gpu_sink_fn sink, void *context);
typedef int (*ferrum_replay_set_gpu_sink_fn)(ferrum_replay_gpu_sink_fn sink, void *context);

/* The same, for a sink that knows `replay_size`, its own sizeof(ferrum_replay_gpu_replay):
 * each element is min(replay_size, the shim's own size) bytes long and says so in `size`.
 * Step through the array by replays[0].size, not by sizeof (an older shim's elements are
 * shorter), and read only the fields `size` covers. Returns -EINVAL when replay_size is below
 * the first layout's. */
int ferrum_replay_set_gpu_sink_sized(ferrum_replay_gpu_sink_fn sink, void *context,
                                     size_t replay_size);
typedef int (*ferrum_replay_set_gpu_sink_sized_fn)(ferrum_replay_gpu_sink_fn sink, void *context,
                                                   size_t replay_size);

/* What GPU timing did in this process so far. */
typedef struct ferrum_replay_gpu_status {
  uint32_t size;           /* sizeof(ferrum_replay_gpu_status) of the caller */
  uint64_t timed;          /* replays whose GPU time was delivered */
  uint64_t in_flight;      /* timed replays not delivered yet: the GPU has not finished them,
                              or the shim read them as their context ended and has not handed
                              them to the sink yet (the next flush, or the exit, does) */
  uint64_t not_timed;      /* replays not timed: pool exhausted, stream capturing, event
                              failure, sampled out, context destroyed while in flight, no
                              current context, launch failed, thread not registered, launch
                              left by a jump (siglongjmp), another thread's launch on the
                              same stream between its two events (stream shared), its
                              context beyond the 16 that have a pool */
  uint64_t sampled_out;    /* of not_timed: skipped by FERRUM_REPLAY_GPU_TIME_EVERY */
  uint64_t align_error_ns; /* the largest alignment error bound of any context */
} ferrum_replay_gpu_status;

/* Delivers, before returning, every replay whose GPU work has completed (to the sink) and
 * fills `status`. Never waits for the GPU; waits for the shim's own threads at most 2 s for
 * its lock and 2 s for a pass of its reader (what is still unread then is delivered later).
 * The recorder calls it when it writes its report.
 * Returns 0, or -ENOTSUP when GPU timing is off. */
int ferrum_replay_gpu_flush(ferrum_replay_gpu_status *status);
typedef int (*ferrum_replay_gpu_flush_fn)(ferrum_replay_gpu_status *status);

/* What an NVTX tool may answer the shim's range push with once it has taken its report (at
 * exit, while another thread still launches): the range is not in the report, and it is no
 * refusal either. The shim counts that launch as made after the tool's report, not as a
 * rejected push (its launch summary lists them per graph, so that a judge comparing launches
 * with ranges allows for exactly those), and issues its pop as for any push: the tool swallows
 * it. Our recorder answers so; it is no value of NVTX's, so a tool that does not know of it has
 * no reason to. */
#define FERRUM_REPLAY_PUSH_AFTER_REPORT (-18002)

/* ---- What tells the shim from anything else exporting these names ----
 *
 * Every copy of the shim exports this, and nothing else should: a program that carries its own
 * fallback definitions of the functions above (to link and run without the shim) is told from the
 * shim by it, by another copy of the shim and by a tool looking for the GPU-time hand-off. A copy
 * built before it is known by exporting ferrum_replay_name_graph_exec, cuGraphLaunch and dlsym
 * together. Returns a fixed text. */
#define FERRUM_REPLAY_SHIM_IDENTITY "ferrum_replay_shim_identity"
const char *ferrum_replay_shim_identity(void);

#ifdef __cplusplus
}

#include <dlfcn.h>

namespace ferrum_replay {

namespace detail {
/* dlsym's RTLD_DEFAULT (glibc declares it only with _GNU_SOURCE, which g++ always defines;
   its value is a null handle). */
inline void *default_scope() noexcept {
#ifdef RTLD_DEFAULT
  return RTLD_DEFAULT;
#else
  return nullptr;
#endif
}
}  // namespace detail

/* The naming scope for C++: every graph this thread instantiates while the object lives is
 * named `name`. Looks the shim's functions up once (dlsym(RTLD_DEFAULT, ...)) and does
 * nothing when the shim is not preloaded. Lives on the stack only, like nvtx3's
 * scoped_range: it cannot be copied, moved or allocated on the heap.
 *
 *   {
 *     ferrum_replay::ScopedGraphName scope("decode bs=8");
 *     cudaGraphInstantiate(&exec, graph, 0);  // named "decode bs=8"
 *   }
 */
class ScopedGraphName {
 public:
  explicit ScopedGraphName(const char *name) noexcept {
    const Functions &functions = shim_functions();
    if (!functions.push) return;
    functions.push(name);  // pushed whatever it returns: always popped
    pushed_ = true;
  }
  ~ScopedGraphName() {
    if (pushed_) shim_functions().pop();
  }

  ScopedGraphName(const ScopedGraphName &) = delete;
  ScopedGraphName &operator=(const ScopedGraphName &) = delete;
  ScopedGraphName(ScopedGraphName &&) = delete;
  ScopedGraphName &operator=(ScopedGraphName &&) = delete;
  static void *operator new(size_t) = delete;
  static void *operator new[](size_t) = delete;

 private:
  struct Functions {
    ferrum_replay_push_graph_name_fn push;
    ferrum_replay_pop_graph_name_fn pop;
  };
  /* Both or neither. */
  static const Functions &shim_functions() noexcept {
    static const Functions functions = [] {
      Functions found{reinterpret_cast<ferrum_replay_push_graph_name_fn>(
                          dlsym(detail::default_scope(), FERRUM_REPLAY_PUSH_GRAPH_NAME)),
                      reinterpret_cast<ferrum_replay_pop_graph_name_fn>(
                          dlsym(detail::default_scope(), FERRUM_REPLAY_POP_GRAPH_NAME))};
      if (!found.push || !found.pop) found = Functions{nullptr, nullptr};
      return found;
    }();
    return functions;
  }

  bool pushed_ = false;
};

}  // namespace ferrum_replay
#endif

#endif /* FERRUM_REPLAY_FERRUM_REPLAY_H */
