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
 * (torch.cuda.CUDAGraph does not expose its cudaGraphExec_t; names files and call-site
 * names cover PyTorch, see docs/naming.md.)
 */
#ifndef FERRUM_REPLAY_FERRUM_REPLAY_H
#define FERRUM_REPLAY_FERRUM_REPLAY_H

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
 * Returns 0 on success (also when the shim is switched off with FERRUM_REPLAY=off),
 * -EINVAL for a null handle or name, -ENOSPC when the shim's registry is full. */
int ferrum_replay_name_graph_exec(void *graph_exec, const char *name);

typedef int (*ferrum_replay_name_graph_exec_fn)(void *graph_exec, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* FERRUM_REPLAY_FERRUM_REPLAY_H */
