#!/usr/bin/env python3
"""Reads and checks the Chrome trace-event JSON that libferrum-replay-recorder.so writes.

Importable (the preload test suites use it) and a command-line tool:

    trace_check.py TRACE [--domain D] [--expect NAME=COUNT ...] [--expect-total N]
                   [--no-protocol-errors] [--summary]

--expect and --expect-total count complete ranges ("X" events), in domain D when given (the
domain is the event's "cat"; NVTX's default domain is "global"). Ranges must always nest per
thread. Marks ("i" events) and start/end ranges ("b"/"e" pairs, one id per range, the two halves
possibly on different threads) are not ranges: marks() and start_end_ranges() read them, and
every "b" must have exactly one "e" of the same id, name and cat, not earlier. Exit status 0 when every expectation holds, otherwise 1 with one line per failure
(2 when the trace cannot be read). Standard library only.
"""
import argparse
import collections
import json
import sys


class TraceError(Exception):
    """The file is not a recorder trace."""


def load(path):
    """The parsed trace (a dict). Raises TraceError if it is not JSON or has no traceEvents."""
    try:
        with open(path, encoding="utf-8") as handle:
            trace = json.load(handle)
    except OSError as error:
        raise TraceError(f"{path}: cannot read: {error.strerror or error}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise TraceError(f"{path}: not valid JSON: {error}") from error
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError(f"{path}: no traceEvents list: not a Chrome trace-event file")
    return trace


def is_gpu(event):
    """A GPU replay (cat "DOMAIN,gpu", on a GPU track; recorder/trace_writer.hpp): GPU time,
    not an NVTX range. The one place that tells them apart: ranges() leaves them out, so no
    range count or nesting check ever sees one; gpu_replays() lists them."""
    return str(event.get("cat", "")).endswith(",gpu")


def ranges(trace, domain=None, name=None):
    """Complete ("X") events of NVTX ranges (not GPU replays), optionally only those of one
    domain and/or one name."""
    return [event for event in trace["traceEvents"]
            if event.get("ph") == "X" and not is_gpu(event)
            and (domain is None or event.get("cat") == domain)
            and (name is None or event.get("name") == name)]


def gpu_replays(trace, name=None):
    """The GPU replays ("X" events of GPU tracks), optionally only those of one name."""
    return [event for event in trace["traceEvents"]
            if event.get("ph") == "X" and is_gpu(event)
            and (name is None or event.get("name") == name)]


def marks(trace, domain=None, name=None):
    """Instant events ("i") of NVTX marks, optionally only those of one domain and/or name."""
    return [event for event in trace["traceEvents"]
            if event.get("ph") == "i"
            and (domain is None or event.get("cat") == domain)
            and (name is None or event.get("name") == name)]


def start_end_ranges(trace):
    """(pairs, problems): the start/end ranges as (begin, end) event pairs, matched by pid, cat
    and id; problems (strings) for an "e" without its "b", a "b" without its "e", a second
    half of either kind, a name that differs between the halves, or an end before its begin."""
    begins, ends, problems = {}, {}, []
    for event in trace["traceEvents"]:
        ph = event.get("ph")
        if ph not in ("b", "e"):
            continue
        key = (event.get("pid"), event.get("cat"), event.get("id"))
        table = begins if ph == "b" else ends
        if key in table:
            problems.append(f"a second '{ph}' for id {key}")
            continue
        table[key] = event
    pairs = []
    for key, begin in begins.items():
        end = ends.pop(key, None)
        if end is None:
            problems.append(f"'b' without 'e': {key} {begin.get('name')}")
            continue
        if end.get("name") != begin.get("name"):
            problems.append(f"id {key}: 'b' named {begin.get('name')!r}, 'e' {end.get('name')!r}")
        if _ns(end["ts"]) < _ns(begin["ts"]):
            problems.append(f"id {key}: ends before it begins")
        pairs.append((begin, end))
    problems.extend(f"'e' without 'b': {key}" for key in ends)
    return pairs, problems


def _ns(value):
    # ts/dur are microseconds with three decimals: compare in integer nanoseconds so that float
    # rounding never turns touching ranges into overlapping ones.
    return round(float(value) * 1000)


def check_nesting(trace):
    """Problems (strings) for X events on the same pid/tid that overlap without one containing
    the other. Empty list when everything nests."""
    by_thread = collections.defaultdict(list)
    for event in ranges(trace):
        start = _ns(event["ts"])
        by_thread[(event.get("pid"), event.get("tid"))].append(
            (start, start + _ns(event.get("dur", 0)), event))
    problems = []
    for (pid, tid), events in sorted(by_thread.items(), key=lambda item: str(item[0])):
        events.sort(key=lambda item: (item[0], -item[1]))
        open_ranges = []  # enclosing ranges, innermost last
        for start, end, event in events:
            while open_ranges and open_ranges[-1][1] <= start:
                open_ranges.pop()
            if open_ranges and end > open_ranges[-1][1]:
                outer = open_ranges[-1][2]
                problems.append(
                    f"pid {pid} tid {tid}: {event.get('cat')}/{event.get('name')} "
                    f"[{event['ts']}, +{event.get('dur')}] partially overlaps "
                    f"{outer.get('cat')}/{outer.get('name')} [{outer['ts']}, +{outer.get('dur')}]")
                continue
            open_ranges.append((start, end, event))
    return problems


def counts_by_name(trace, domain=None):
    """{name: number of complete ranges} in one domain (all domains when None)."""
    return dict(collections.Counter(event.get("name") for event in ranges(trace, domain=domain)))


def counts_by_domain_and_name(trace):
    """{(domain, name): count} over every complete range."""
    return dict(collections.Counter(
        (event.get("cat"), event.get("name")) for event in ranges(trace)))


def mark_counts(trace):
    """{(domain, name): count} over every mark."""
    return dict(collections.Counter((event.get("cat"), event.get("name"))
                                    for event in marks(trace)))


def start_end_counts(trace):
    """{(domain, name): count} over every complete start/end range."""
    return dict(collections.Counter((begin.get("cat"), begin.get("name"))
                                    for begin, _ in start_end_ranges(trace)[0]))


def protocol_errors(trace):
    """The recorder's own account, the "ferrumReplay" object: version, pid, ranges, marks,
    startEndRanges, rejectedPushes, protocolErrors {popWithoutPush, popWrongDomain, openAtExit,
    endUnknownId, startOpenAtExit}, domains."""
    summary = trace.get("ferrumReplay")
    if not isinstance(summary, dict):
        raise TraceError("no ferrumReplay object: not written by the ferrum-replay recorder")
    return summary


def _parse_expectation(text):
    name, sep, count = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=COUNT, got {text!r}")
    try:
        return name, int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"COUNT must be an integer in {text!r}") from None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--domain", help="count only ranges of this domain ('global' = default)")
    parser.add_argument("--expect", action="append", default=[], type=_parse_expectation,
                        metavar="NAME=COUNT", help="exactly COUNT ranges named NAME")
    parser.add_argument("--expect-total", type=int, metavar="N", help="exactly N ranges")
    parser.add_argument("--no-protocol-errors", action="store_true",
                        help="no pop without push, pop in wrong domain or range open at exit")
    parser.add_argument("--summary", action="store_true", help="print counts by (domain, name)")
    args = parser.parse_args(argv)

    try:
        trace = load(args.trace)
    except TraceError as error:
        print(f"trace_check: {error}", file=sys.stderr)
        return 2

    failures = [f"ranges do not nest: {problem}" for problem in check_nesting(trace)]
    failures += [f"start/end ranges: {problem}" for problem in start_end_ranges(trace)[1]]
    where = f" in domain {args.domain}" if args.domain is not None else ""
    counts = counts_by_name(trace, args.domain)
    for name, expected in args.expect:
        actual = counts.get(name, 0)
        if actual != expected:
            failures.append(f"{name}{where}: {actual} ranges, expected {expected}")
    if args.expect_total is not None:
        actual = sum(counts.values())
        if actual != args.expect_total:
            failures.append(f"total{where}: {actual} ranges, expected {args.expect_total}")
    if args.no_protocol_errors:
        try:
            errors = protocol_errors(trace).get("protocolErrors", {})
        except TraceError as error:
            failures.append(str(error))
        else:
            for key, value in sorted(errors.items()):
                if value:
                    failures.append(f"protocol error {key}: {value}")

    if args.summary:
        for (domain, name), count in sorted(counts_by_domain_and_name(trace).items(),
                                            key=lambda item: (str(item[0][0]), str(item[0][1]))):
            if args.domain is None or domain == args.domain:
                print(f"{domain}\t{name}\t{count}")
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
