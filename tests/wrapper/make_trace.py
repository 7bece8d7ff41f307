#!/usr/bin/env python3
"""Writes a large trace in the recorder's format (recorder/trace_writer.hpp), for the
memory and speed tests of the trace readers.

    make_trace.py OUT --ranges N [--threads T] [--graphs G] [--pid P] [--origin-ns NS]

N ranges of G graph names spread over T threads, each thread's in start order; every range
lasts 2 us, one every 3 us per thread. Prints nothing; exit 0.
"""
import argparse
import json


def write(path, ranges, threads=4, graphs=8, pid=4242, origin_ns=1_700_000_000_000_000_000,
          host="generated"):
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
                lines.append(',\n{"ph":"X","name":"graph %d","cat":"ferrum-replay","ts":%d.%03d,'
                             '"dur":2.000,"pid":%d,"tid":%d,"args":{"category":0,"depth":0}}'
                             % (i % graphs + 1, 3 * i, t, pid, tid))
                if len(lines) >= 10000:
                    out.write("".join(lines))
                    lines = []
            left -= min(per_thread, left)
        out.write("".join(lines))
        meta = {"version": 1, "pid": pid, "ranges": ranges, "rejectedPushes": 0,
                "protocolErrors": {"popWithoutPush": 0, "popWrongDomain": 0, "openAtExit": 0},
                "domains": ["ferrum-replay"], "host": host,
                "clock": {"originMonotonicNs": 1000, "originRealtimeNs": origin_ns}}
        out.write('\n],\n"displayTimeUnit":"ns",\n"ferrumReplay":'
                  + json.dumps(meta, separators=(",", ":")) + "}\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--ranges", type=int, required=True)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--graphs", type=int, default=8)
    parser.add_argument("--pid", type=int, default=4242)
    parser.add_argument("--origin-ns", type=int, default=1_700_000_000_000_000_000)
    args = parser.parse_args()
    write(args.out, args.ranges, args.threads, args.graphs, args.pid, args.origin_ns)


if __name__ == "__main__":
    main()
