#!/usr/bin/env python3
"""Naming CUDA graphs from Python with the ferrum_replay package, with or without ferrum-replay
preloaded.

Both forms: a naming scope (every graph this thread instantiates inside the `with` block is
named; what fits frameworks that instantiate for you, such as torch.cuda.graph) and a name
by handle after instantiation. Without the shim both are no-ops and the program runs
unchanged. Here the graphs are made through the driver API with ctypes; with a framework,
pass its graph object (torch.cuda.CUDAGraph) or the executable graph's handle to name().

    pip install .   (from the repository root; or run from a checkout, which finds python/)
    ferrum-replay record -- python3 examples/name_graphs_ctypes.py [REPLAYS]
"""
import ctypes
import os
import sys

try:
    import ferrum_replay
except ImportError:  # not installed: the package in this checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ferrum_replay

vp = ctypes.c_void_p


def check(result, what):
    if result != 0:
        sys.exit(f"{what} failed with CUresult {result}")


def open_driver():
    """The CUDA driver through ctypes, initialised, with device 0's primary context current."""
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(vp), ctypes.c_int]
    cuda.cuCtxSetCurrent.argtypes = [vp]
    cuda.cuGraphCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
    cuda.cuGraphAddEmptyNode.argtypes = [ctypes.POINTER(vp), vp, vp, ctypes.c_size_t]
    cuda.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_ulonglong]
    cuda.cuGraphLaunch.argtypes = [vp, vp]
    for function in ("cuGraphExecDestroy", "cuGraphDestroy"):
        getattr(cuda, function).argtypes = [vp]
    check(cuda.cuInit(0), "cuInit")
    context = vp()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    return cuda


def instantiate(cuda):
    """A graph of one empty node, instantiated: (graph, exec), each a c_void_p."""
    graph, node, exec_ = vp(), vp(), vp()
    check(cuda.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
    check(cuda.cuGraphAddEmptyNode(ctypes.byref(node), graph, None, 0), "cuGraphAddEmptyNode")
    check(cuda.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, 0), "instantiate")
    return graph, exec_


def main():
    replays = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cuda = open_driver()
    with ferrum_replay.graph_name("embedding lookup"):  # by scope: no handle needed
        embedding = instantiate(cuda)
    sampler = instantiate(cuda)
    ferrum_replay.name(sampler[1], "sampler")  # by handle (an int or ctypes pointer)
    execs = [embedding, sampler]

    for _ in range(replays):
        for _, exec_ in execs:
            check(cuda.cuGraphLaunch(exec_, None), "cuGraphLaunch")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    for graph, exec_ in execs:
        cuda.cuGraphExecDestroy(exec_)
        cuda.cuGraphDestroy(graph)
    print(f"named={'yes' if ferrum_replay.available() else 'no'} "
          f"launches={replays * len(execs)}")


if __name__ == "__main__":
    main()
