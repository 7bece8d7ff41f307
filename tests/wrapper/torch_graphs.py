#!/usr/bin/env python3
"""torch_graphs.py: captures torch.cuda.CUDAGraph objects of a few sizes and replays each a
known number of times, for scripts/gpu-smoke (a GPU and PyTorch needed).

Warm-up runs on a side stream and capture follow the PyTorch documentation; the graphs are
first replayed in capture order, so the shim numbers them in that order.

Output (stdout):
  per_graph=<replays of graph 1>,<graph 2>,...
  replays=<total>
Exit status: 0; 1 when a replay computed a wrong result; 77 when PyTorch cannot be imported
or sees no GPU (a skip).
"""
import sys

SIZES = (1, 1 << 10, 1 << 16, 1 << 20)
REPLAYS = (3, 5, 7, 11)


def main():
    try:
        import torch
    except ImportError as error:
        print(f"torch not importable: {error}")
        return 77
    if not torch.cuda.is_available():
        print("torch sees no CUDA device")
        return 77
    graphs = []
    side = torch.cuda.Stream()
    for size in SIZES:
        x = torch.ones(size, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                y = x * 2 + 1
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = x * 2 + 1
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
    print("per_graph=" + ",".join(str(n) for n in REPLAYS))
    print(f"replays={sum(REPLAYS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
