#!/usr/bin/env python3
"""Naming CUDA graphs from Python with ctypes, with or without ferrum-replay preloaded.

The program looks ferrum_replay_name_graph_exec up in the process (ctypes.CDLL(None) is
dlsym(RTLD_DEFAULT)); when the shim is not preloaded the lookup fails and the program runs
unchanged. Here the graphs are made through the driver API with ctypes; with a framework,
pass the executable graph's handle (a cudaGraphExec_t / CUgraphExec) the same way.

    LD_PRELOAD=libferrum-replay.so python3 name_graphs_ctypes.py [REPLAYS]
"""
import ctypes
import sys

vp = ctypes.c_void_p


def name_graph_function():
    """The shim's naming function, or None when the shim is not loaded."""
    function = getattr(ctypes.CDLL(None), "ferrum_replay_name_graph_exec", None)
    if function is not None:
        function.argtypes = [vp, ctypes.c_char_p]
        function.restype = ctypes.c_int
    return function


def main():
    replays = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(vp), ctypes.c_int]
    cuda.cuCtxSetCurrent.argtypes = [vp]
    cuda.cuGraphCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
    cuda.cuGraphAddEmptyNode.argtypes = [ctypes.POINTER(vp), vp, vp, ctypes.c_size_t]
    cuda.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_ulonglong]
    cuda.cuGraphLaunch.argtypes = [vp, vp]
    for function in ("cuGraphExecDestroy", "cuGraphDestroy", "cuCtxSynchronize"):
        getattr(cuda, function).argtypes = [vp] if function != "cuCtxSynchronize" else []

    def check(result, what):
        if result != 0:
            sys.exit(f"{what} failed with CUresult {result}")

    check(cuda.cuInit(0), "cuInit")
    context = vp()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    name_graph = name_graph_function()
    execs = []
    for name in (b"embedding lookup", b"sampler"):
        graph, node, exec_ = vp(), vp(), vp()
        check(cuda.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
        check(cuda.cuGraphAddEmptyNode(ctypes.byref(node), graph, None, 0), "cuGraphAddEmptyNode")
        check(cuda.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, 0), "instantiate")
        if name_graph is not None:
            check(name_graph(exec_, name), "ferrum_replay_name_graph_exec")
        execs.append((graph, exec_))

    for _ in range(replays):
        for _, exec_ in execs:
            check(cuda.cuGraphLaunch(exec_, None), "cuGraphLaunch")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    for graph, exec_ in execs:
        cuda.cuGraphExecDestroy(exec_)
        cuda.cuGraphDestroy(graph)
    print(f"named={'yes' if name_graph else 'no'} launches={replays * len(execs)}")


if __name__ == "__main__":
    main()
