#!/usr/bin/env python3
"""launch_ctypes.py: launches CUDA graphs from Python through ctypes, as Python bindings do.

ctypes.CDLL("libcuda.so.1") is a dlopen(RTLD_LOCAL) and every attribute access a
dlsym(handle, name): a preloaded cuGraphLaunch is not what it finds.

Usage: python3 launch_ctypes.py [--graphs G] [--iters N]
                                [--stream created|null|legacy|ptsz] [--ptsz]
                                [--name-graphs P]
  --graphs G   graphs (each one empty node) to create and instantiate (default 2)
  --iters N    rounds; each round launches every graph once (default 10)
  --stream     created (cuStreamCreate, default), null (0), legacy (0x1), ptsz (0x2)
  --ptsz       call cuGraphLaunch_ptsz instead of cuGraphLaunch
  --name-graphs P  after instantiating, name graph i `P i` (from 0) with
               ferrum_replay_name_graph_exec, found with ctypes.CDLL(None) (dlopen(NULL): the
               global scope, where a preloaded shim is); silently skipped when absent

Output, as the C++ launch_* programs (see launch_harness.hpp):
  names: calls=<C> failed=<F>  or  names: absent   (only with --name-graphs)
  per_graph=<n>,<n>,...
  exceptions=0
  launches=<N> failed=<F> result=<last CUresult>
Exit status: 0 when every launch succeeded, 3 otherwise, 1 on a setup error.
"""

import argparse
import ctypes
import sys

STREAMS = {"null": 0, "legacy": 0x1, "ptsz": 0x2}


def name_graph_exec_function():
    """The shim's ferrum_replay_name_graph_exec if a loaded library exports it, else None: how
    a Python program names its graphs without depending on the shim."""
    try:
        fn = ctypes.CDLL(None).ferrum_replay_name_graph_exec
    except AttributeError:
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    fn.restype = ctypes.c_int
    return fn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=2)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--stream", choices=["created", "null", "legacy", "ptsz"], default="created")
    parser.add_argument("--ptsz", action="store_true")
    parser.add_argument("--name-graphs", metavar="P")
    args = parser.parse_args()

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    vp = ctypes.c_void_p

    def check(result: int, call: str) -> None:
        if result != 0:
            name = ctypes.c_char_p()
            cuda.cuGetErrorName(result, ctypes.byref(name))
            text = name.value.decode() if name.value else "unknown CUresult"
            print(f"error: {call} failed: {text} ({result})", file=sys.stderr)
            sys.exit(1)

    cuda.cuCtxCreate_v4.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_uint, ctypes.c_int]
    cuda.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_ulonglong]
    cuda.cuGraphAddEmptyNode.argtypes = [ctypes.POINTER(vp), vp, vp, ctypes.c_size_t]
    launch = cuda.cuGraphLaunch_ptsz if args.ptsz else cuda.cuGraphLaunch
    launch.argtypes = [vp, vp]
    for fn in ("cuStreamSynchronize", "cuStreamDestroy_v2", "cuGraphExecDestroy",
               "cuGraphDestroy", "cuCtxDestroy_v2"):
        getattr(cuda, fn).argtypes = [vp]

    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = vp()
    check(cuda.cuCtxCreate_v4(ctypes.byref(ctx), None, 0, dev.value), "cuCtxCreate_v4")
    stream = vp(STREAMS.get(args.stream, 0))
    if args.stream == "created":
        check(cuda.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")

    graphs, execs = [], []
    for _ in range(args.graphs):
        graph, node, exec_ = vp(), vp(), vp()
        check(cuda.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
        check(cuda.cuGraphAddEmptyNode(ctypes.byref(node), graph, None, 0), "cuGraphAddEmptyNode")
        check(cuda.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, 0),
              "cuGraphInstantiateWithFlags")
        graphs.append(graph)
        execs.append(exec_)

    names = None
    if args.name_graphs is not None:
        name_graph_exec = name_graph_exec_function()
        names = "names: absent"
        if name_graph_exec is not None:
            failures = sum(name_graph_exec(exec_, f"{args.name_graphs} {g}".encode()) != 0
                           for g, exec_ in enumerate(execs))
            names = f"names: calls={len(execs)} failed={failures}"

    per_graph = [0] * args.graphs
    launches = failed = result = 0
    for _ in range(args.iters):
        for g, exec_ in enumerate(execs):
            result = launch(exec_, stream)
            launches += 1
            per_graph[g] += 1
            if result != 0:
                failed += 1

    check(cuda.cuStreamSynchronize(stream), "cuStreamSynchronize")
    for exec_, graph in zip(execs, graphs):
        check(cuda.cuGraphExecDestroy(exec_), "cuGraphExecDestroy")
        check(cuda.cuGraphDestroy(graph), "cuGraphDestroy")
    if args.stream == "created":
        check(cuda.cuStreamDestroy_v2(stream), "cuStreamDestroy_v2")
    check(cuda.cuCtxDestroy_v2(ctx), "cuCtxDestroy_v2")

    if names is not None:
        print(names)
    print("per_graph=" + ",".join(str(n) for n in per_graph))
    print("exceptions=0")
    print(f"launches={launches} failed={failed} result={result}", flush=True)
    return 0 if failed == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
