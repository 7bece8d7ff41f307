#!/usr/bin/env python3
"""Writes a large trace in the recorder's format (recorder/trace_writer.hpp), for the
memory and speed tests of the trace readers.

    make_trace.py OUT --ranges N [--threads T] [--graphs G] [--pid P] [--origin-ns NS]
                  [--cpu-us US] [--gpu-us US] [--graph-us NAME=US]... [--name FORMAT]

N ranges of G graph names ("graph 1".."graph G"; --name FORMAT: FORMAT % the number, printf's) spread over T threads, each thread's in start
order; every range lasts --cpu-us (default 2) us, one every 3 us per thread. With --gpu-us, each
range also has its GPU replay (as the recorder writes GPU time: cat "ferrum-replay,gpu", a GPU
track per thread) lasting US, or the --graph-us of its name; and a gpu block. Prints nothing.
Each file is a run of its own, as the recorder's are: without --origin-ns, the recorder start
in its metadata is derived from OUT's absolute path (the readers count a run once, by host, pid
and start; give two files the same --origin-ns and --pid to make one a copy of the other's run).
"""
import argparse
import json
import os
import zlib


def default_origin_ns(path):
    return 1_700_000_000_000_000_000 + zlib.crc32(os.path.abspath(path).encode()) * 1000


def write(path, ranges, threads=4, graphs=8, pid=4242, origin_ns=None,
          host="generated", cpu_us=2.0, gpu_us=None, graph_us=None, name="graph %d"):
    graph_us = graph_us or {}
    origin_ns = default_origin_ns(path) if origin_ns is None else origin_ns
    per_thread = -(-ranges // threads)
    with open(path, "w", encoding="utf-8") as out:
        out.write('{"traceEvents":[\n')
        out.write(json.dumps({"ph": "M", "name": "process_name", "pid": pid, "tid": pid,
                              "args": {"name": "generated"}}, separators=(",", ":")))
        for t in range(threads):
            out.write(',\n{"ph":"M","name":"thread_name","pid":%d,"tid":%d,'
                      '"args":{"name":"worker %d"}}' % (pid, pid + 1 + t, t))
        left = ranges
        lines = []
        for t in range(threads):
            tid = pid + 1 + t
            for i in range(min(per_thread, left)):
                graph = json.dumps(name % (i % graphs + 1))
                lines.append(',\n{"ph":"X","name":%s,"cat":"ferrum-replay","ts":%d.%03d,'
                             '"dur":%.3f,"pid":%d,"tid":%d,"args":{"category":0,"depth":0}}'
                             % (graph, 3 * i, t, cpu_us, pid, tid))
                if gpu_us is not None:
                    lines.append(',\n{"ph":"X","name":%s,"cat":"ferrum-replay,gpu",'
                                 '"ts":%d.%03d,"dur":%.3f,"pid":%d,"tid":%d,'
                                 '"args":{"replay":%d,"category":0}}'
                                 % (graph, 3 * i + 1, t, graph_us.get(json.loads(graph), gpu_us), pid,
                                    0x40000000 + t, i + 1))
                if len(lines) >= 10000:
                    out.write("".join(lines))
                    lines = []
            left -= min(per_thread, left)
        out.write("".join(lines))
        meta = {"version": 1, "pid": pid, "ranges": ranges, "rejectedPushes": 0,
                "protocolErrors": {"popWithoutPush": 0, "popWrongDomain": 0, "openAtExit": 0},
                "domains": ["ferrum-replay"], "host": host,
                "clock": {"originMonotonicNs": 1000, "originRealtimeNs": origin_ns}}
        if gpu_us is not None:
            meta["gpu"] = {"timed": ranges, "inFlightAtExit": 0, "notTimed": 0,
                           "alignErrorNs": 100}
        out.write('\n],\n"displayTimeUnit":"ns",\n"ferrumReplay":'
                  + json.dumps(meta, separators=(",", ":")) + "}\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--ranges", type=int, required=True)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--graphs", type=int, default=8)
    parser.add_argument("--pid", type=int, default=4242)
    parser.add_argument("--origin-ns", type=int)
    parser.add_argument("--cpu-us", type=float, default=2.0)
    parser.add_argument("--gpu-us", type=float)
    parser.add_argument("--graph-us", action="append", default=[])
    parser.add_argument("--name", default="graph %d")
    args = parser.parse_args()
    graph_us = {k: float(v) for k, _, v in (g.rpartition("=") for g in args.graph_us)}
    write(args.out, args.ranges, args.threads, args.graphs, args.pid, args.origin_ns,
          cpu_us=args.cpu_us, gpu_us=args.gpu_us, graph_us=graph_us, name=args.name)


if __name__ == "__main__":
    main()
