#!/usr/bin/env python3
"""torch_graphs.py: captures torch.cuda.CUDAGraph objects of a few sizes and replays each a
known number of times, for scripts/gpu-smoke (a GPU and PyTorch needed).

Warm-up runs on a side stream and capture follow the PyTorch documentation; the graphs are
first replayed in capture order, so the shim numbers them in that order.

With --names, the graphs are named with the ferrum_replay package (python/, on PYTHONPATH):
the first two by a naming scope around torch.cuda.graph (`scope size N`), the others by handle
after capture (`handle size N`, through CUDAGraph.raw_cuda_graph_exec(); by scope where this
PyTorch lacks it, and the output says so).

Output (stdout):
  names=<name>:<replays>;...    (with --names: what the trace must show)
  handle_names=raw_cuda_graph_exec|unavailable   (with --names)
  per_graph=<replays of graph 1>,<graph 2>,...
  replays=<total>
Exit status: 0; 1 when a replay computed a wrong result; 77 when PyTorch cannot be imported
or sees no GPU (a skip).
"""
import contextlib
import sys

SIZES = (1, 1 << 10, 1 << 16, 1 << 20)
REPLAYS = (3, 5, 7, 11)


def main():
    names = sys.argv[1:] == ["--names"]
    try:
        import torch
    except ImportError as error:
        print(f"torch not importable: {error}")
        return 77
    if not torch.cuda.is_available():
        print("torch sees no CUDA device")
        return 77
    if names:
        import ferrum_replay
        by_handle = hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec")
    graphs, expected = [], []
    side = torch.cuda.Stream()
    for index, size in enumerate(SIZES):
        x = torch.ones(size, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                y = x * 2 + 1
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        scope = contextlib.nullcontext()
        if names and (index < 2 or not by_handle):
            scope = ferrum_replay.graph_name(f"scope size {size}")
            expected.append(f"scope size {size}")
        # The scope first: torch.cuda.graph instantiates when its block exits, inside it.
        with scope, torch.cuda.graph(graph):
            y = x * 2 + 1
        if names and index >= 2 and by_handle:
            if not ferrum_replay.name(graph, f"handle size {size}"):
                print("ferrum_replay.name() was refused (is the shim preloaded?)")
                return 1
            expected.append(f"handle size {size}")
        graphs.append((graph, x, y))
    torch.cuda.synchronize()
    for (graph, x, y), times in zip(graphs, REPLAYS):
        x.fill_(float(times))
        for _ in range(times):
            graph.replay()
        torch.cuda.synchronize()
        if not bool((y == 2 * times + 1).all()):
            print(f"wrong result after replaying the graph of size {x.numel()}")
            return 1
    if names:
        print("names=" + ";".join(f"{n}:{r}" for n, r in zip(expected, REPLAYS)))
        print("handle_names=" + ("raw_cuda_graph_exec" if by_handle else "unavailable"))
    print("per_graph=" + ",".join(str(n) for n in REPLAYS))
    print(f"replays={sum(REPLAYS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
