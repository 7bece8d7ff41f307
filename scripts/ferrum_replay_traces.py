#!/usr/bin/env python3
"""ferrum_replay_traces.py: what `ferrum-replay` and `ci-smoke-profile` do with traces and
reports once a program has run. Standard library only; installed beside the libraries.

    summary [--domain D] [--by-process] TRACE...
        the recorder's per-range table, over saved traces (one or many processes)
    merge -o OUT TRACE...
        one Chrome/Perfetto trace from per-process (per-rank) traces: one process track each,
        pids kept distinct, processes named by rank and file, time stamps aligned
    written --since STAMP PATTERN
        the trace files matching a recorder output pattern written after STAMP was
    nsys-table --domain D --stats-base BASE REPORT
        our domain's rows of `nsys stats` nvtx_sum / nvtx_gpu_proj_sum CSV files
    check [options] TRACE...
        the CI smoke verdict (see `check --help`): one line, exit 0 (pass) or 1 (fail)

Trace format: shim/recorder/trace_writer.hpp. Exit status 2: unreadable input or bad usage.
"""
import argparse
import collections
import csv
import fnmatch
import glob
import json
import tempfile
import math
import os
import re
import shlex
import socket
import sys

DEFAULT_DOMAIN = os.environ.get("FERRUM_REPLAY_DOMAIN") or "ferrum-replay"


class InputError(Exception):
    """A file we were given cannot be used; the message names it."""


# ---- reading traces ----

def load_trace(path):
    try:
        with open(path, encoding="utf-8") as handle:
            trace = json.load(handle)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: not valid JSON: {error}") from error
    except RecursionError as error:
        raise InputError(f"{path}: JSON nested too deeply for a trace") from error
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise InputError(f"{path}: no traceEvents list: not a Chrome trace-event file")
    validate_trace(path, trace)
    return trace


def _is_number(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and abs(value) < 1e18)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2 ** 63


def validate_trace(path, trace):
    """Refuses, with one line naming the file and the event, a trace whose fields have types
    the readers do not expect (a hand-edited or foreign file), instead of a traceback."""
    meta_value = trace.get("ferrumReplay")
    if meta_value is not None:
        if not isinstance(meta_value, dict):
            raise InputError(f"{path}: ferrumReplay is not an object")
        for key, value in meta_value.items():
            if isinstance(value, float) and not _is_number(value):
                raise InputError(f"{path}: ferrumReplay.{key} is not a finite number")
            if isinstance(value, int) and not isinstance(value, bool) and not _is_int(value):
                raise InputError(f"{path}: ferrumReplay.{key} is out of range")
        for key in ("pid", "ranges", "rejectedPushes"):
            if key in meta_value and not _is_int(meta_value[key]):
                raise InputError(f"{path}: ferrumReplay.{key} is not an integer")
        rank = meta_value.get("rank")
        if rank is not None and not (isinstance(rank, dict) and
                                     all(isinstance(v, (str, type(None))) or _is_int(v)
                                         for v in rank.values())):
            raise InputError(f"{path}: ferrumReplay.rank is not a {{variable, value}} object")
        errors = meta_value.get("protocolErrors", {})
        if not isinstance(errors, dict) or not all(_is_int(v) for v in errors.values()):
            raise InputError(f"{path}: ferrumReplay.protocolErrors is not a table of counts")
    for index, event in enumerate(trace["traceEvents"]):
        if not isinstance(event, dict) or event.get("ph") not in ("X", "M"):
            continue
        for key in ("name", "cat"):
            if key in event and not isinstance(event[key], str):
                raise InputError(f"{path}: event {index}: {key} is not text")
        for key in ("ts", "dur"):
            if key in event and not _is_number(event[key]):
                raise InputError(f"{path}: event {index}: {key} is not a finite number")
        for key in ("pid", "tid"):
            if key in event and not _is_int(event[key]):
                raise InputError(f"{path}: event {index}: {key} is not an integer")
        if "args" in event and not isinstance(event["args"], dict):
            raise InputError(f"{path}: event {index}: args is not an object")


def meta(trace):
    value = trace.get("ferrumReplay")
    return value if isinstance(value, dict) else {}


def ranges(trace, domain=None):
    return [e for e in trace["traceEvents"]
            if isinstance(e, dict) and e.get("ph") == "X"
            and (domain is None or e.get("cat") == domain)]


def _ns(value):
    # ts/dur are microseconds with three decimals: integer nanoseconds keep touching ranges
    # from looking overlapped after float rounding.
    return round(float(value) * 1000)


def nesting_problems(trace):
    """X events of one (pid, tid) that overlap without one containing the other."""
    by_thread = collections.defaultdict(list)
    for event in ranges(trace):
        start = _ns(event.get("ts", 0))
        by_thread[(event.get("pid"), event.get("tid"))].append(
            (start, start + _ns(event.get("dur", 0)), event))
    problems = []
    for (pid, tid), events in by_thread.items():
        events.sort(key=lambda item: (item[0], -item[1]))
        open_ranges = []
        for start, end, event in events:
            while open_ranges and open_ranges[-1][1] <= start:
                open_ranges.pop()
            if open_ranges and end > open_ranges[-1][1]:
                problems.append(f"pid {pid} tid {tid}: {event.get('cat')}/{event.get('name')} "
                                f"at {event.get('ts')} us overlaps its enclosing range")
                continue
            open_ranges.append((start, end, event))
    return problems


def process_label(trace, path):
    m = meta(trace)
    rank = m.get("rank") if isinstance(m.get("rank"), dict) else None
    pid = m.get("pid")
    name = None
    for e in trace["traceEvents"]:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name":
            name = (e.get("args") or {}).get("name")
            break
    parts = []
    if rank:
        kind = "local rank" if rank.get("variable") == "LOCAL_RANK" else "rank"
        parts.append(f"{kind} {rank.get('value')}")
    if name:
        parts.append(str(name))
    if pid is not None:
        parts.append(f"pid {pid}")
    if m.get("host") and m.get("host") != socket.gethostname():
        parts.append(f"on {m['host']}")
    label = " ".join(parts[:1]) + (f" ({', '.join(parts[1:])})" if len(parts) > 1 else "")
    return label or os.path.basename(path)


# ---- summary ----

class Stats:
    __slots__ = ("count", "total", "low", "high")

    def __init__(self):
        self.count, self.total, self.low, self.high = 0, 0, None, 0

    def add(self, dur_ns):
        self.count += 1
        self.total += dur_ns
        self.low = dur_ns if self.low is None else min(self.low, dur_ns)
        self.high = max(self.high, dur_ns)

    @property
    def mean(self):
        return self.total / self.count if self.count else 0.0


def pid_labels(trace, path):
    """{pid: label}: a merged trace names its processes in process_name events; a recorder
    trace is one process, named from its ferrumReplay object."""
    if "merged" in meta(trace):
        return {e.get("pid"): str((e.get("args") or {}).get("name"))
                for e in trace["traceEvents"]
                if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name"}
    label = process_label(trace, path)
    return {e.get("pid"): label for e in trace["traceEvents"] if isinstance(e, dict)}


def processes(traces):
    """Distinct processes over all traces: (host, pid) of recorder traces, or the pids a
    merged trace holds."""
    seen = set()
    for index, (_, trace) in enumerate(traces):
        m = meta(trace)
        if "merged" in m:
            seen.update((index, e.get("pid")) for e in ranges(trace))
        else:
            seen.add((m.get("host"), m.get("pid")))
    return len(seen)


def aggregate(traces, domain=None, by_process=False):
    """{(process label or "", domain, name): Stats}"""
    table = collections.defaultdict(Stats)
    for path, trace in traces:
        labels = pid_labels(trace, path) if by_process else None
        for e in ranges(trace, domain):
            label = labels.get(e.get("pid"), str(e.get("pid"))) if by_process else ""
            table[(label, str(e.get("cat")), str(e.get("name")))].add(_ns(e.get("dur", 0)))
    return table


def totals(traces):
    """Sums of the recorders' own counters over every trace."""
    out = {"ranges": 0, "rejectedPushes": 0, "popWithoutPush": 0, "popWrongDomain": 0,
           "openAtExit": 0, "without_summary": 0}
    for _, trace in traces:
        m = meta(trace)
        if not m:
            out["without_summary"] += 1
            continue
        out["ranges"] += int(m.get("ranges", 0))
        out["rejectedPushes"] += int(m.get("rejectedPushes", 0))
        for key, value in (m.get("protocolErrors") or {}).items():
            out[key] = out.get(key, 0) + int(value)
    return out


def printable(text):
    text = "".join("?" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)
    return text or '""'


def format_table(table, by_process):
    header = (["process"] if by_process else []) + [
        "domain", "range", "count", "total ms", "mean us", "min us", "max us"]
    rows = [header]
    for key in sorted(table, key=lambda k: (k[0], k[1], k[2])):
        s = table[key]
        rows.append(([printable(key[0])] if by_process else []) + [
            printable(key[1]), printable(key[2]), str(s.count), f"{s.total / 1e6:.3f}",
            f"{s.mean / 1e3:.3f}", f"{(s.low or 0) / 1e3:.3f}", f"{s.high / 1e3:.3f}"])
    text_cols = len(header) - 4  # left-aligned: process?, domain, range, count
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for r in rows:
        cells = [r[i].ljust(widths[i] + 3) for i in range(text_cols)]
        cells += [r[i].rjust(widths[i] + (0 if i == text_cols else 4))
                  for i in range(text_cols, len(header))]
        lines.append("".join(cells).rstrip())
    return lines


def errors_line(t):
    parts = [f"{t[k]} {text}" for k, text in (("popWithoutPush", "pop without push"),
                                              ("popWrongDomain", "popped in wrong domain"),
                                              ("openAtExit", "open at exit")) if t.get(k)]
    return "protocol errors: " + (", ".join(parts) if parts else "none")


def cmd_summary(args):
    traces = [(path, load_trace(path)) for path in args.traces]
    table = aggregate(traces, args.domain, args.by_process)
    t = totals(traces)
    n = sum(s.count for s in table.values())
    where = f" in domain {args.domain}" if args.domain else ""
    count = processes(traces)
    print(f"ferrum-replay summary: {n} ranges{where} in {len(traces)} "
          f"trace{'s' if len(traces) != 1 else ''} ({count} process{'es' if count != 1 else ''})")
    if table:
        print("\n".join(format_table(table, args.by_process)))
    print(errors_line(t))
    if t["rejectedPushes"]:
        print(f"rejected pushes: {t['rejectedPushes']}")
    for path, trace in traces:
        problems = nesting_problems(trace)
        if problems:
            print(f"{path}: ranges do not nest: {problems[0]}"
                  + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return 0


# ---- merge ----

def expand_output(pattern, pid=None):
    """%p, %h, %q{VAR}, %% as the recorder and nsys expand them; anything else stays. %p is
    the pid of the ferrum-replay wrapper that started us (FERRUM_REPLAY_PID), else ours."""
    if pid is None:
        pid = os.environ.get("FERRUM_REPLAY_PID") or os.getpid()
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c != "%" or i + 1 == len(pattern):
            out.append(c)
            i += 1
            continue
        spec = pattern[i + 1]
        if spec == "p":
            out.append(str(pid))
            i += 2
        elif spec == "h":
            out.append(socket.gethostname())
            i += 2
        elif spec == "%":
            out.append("%")
            i += 2
        elif spec == "q" and pattern[i + 2:i + 3] == "{" and "}" in pattern[i + 3:]:
            close = pattern.index("}", i + 3)
            out.append(os.environ.get(pattern[i + 3:close], ""))
            i = close + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def alignment(traces):
    """Shift in microseconds to add to each trace's ts, and how the traces were aligned.

    ts is relative to each recorder's start. On one host the monotonic origins share a clock
    (exact); across hosts the wall-clock origins are used (as good as the hosts' clock sync).
    """
    clocks = [(meta(t).get("clock") or {}) for _, t in traces]
    hosts = {meta(t).get("host") for _, t in traces}
    if all(c.get("originMonotonicNs") is not None for c in clocks) and len(hosts) == 1:
        key, how = "originMonotonicNs", "monotonic clock (one host)"
    elif all(c.get("originRealtimeNs") for c in clocks):
        key, how = "originRealtimeNs", "wall clock (several hosts)"
    else:
        return [0.0] * len(traces), "not aligned: a trace has no clock origin (older recorder)"
    origins = [int(c[key]) for c in clocks]
    base = min(origins)
    return [(o - base) / 1000.0 for o in origins], how


def cmd_merge(args):
    traces = [(path, load_trace(path)) for path in args.traces]
    shifts, how = alignment(traces)
    used_pids = set()
    events, merged = [], []
    for index, ((path, trace), shift) in enumerate(zip(traces, shifts)):
        m = meta(trace)
        original = {e.get("pid") for e in trace["traceEvents"]
                    if isinstance(e, dict) and "pid" in e}
        pid_map = {}
        for pid in sorted(original, key=str):
            new = pid
            if not isinstance(new, int) or new in used_pids:
                new = 1_000_000 + index * 1000 + len(pid_map)
                while new in used_pids:
                    new += 1
            pid_map[pid] = new
            used_pids.add(new)
        label = f"{process_label(trace, path)} · {os.path.basename(path)}"
        rank = (m.get("rank") or {}).get("value") if isinstance(m.get("rank"), dict) else None
        for pid in pid_map.values():
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": label}})
            sort_index = int(rank) if rank is not None and str(rank).isdigit() else 100000 + index
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                           "args": {"sort_index": sort_index}})
        for e in trace["traceEvents"]:
            if not isinstance(e, dict):
                continue
            if e.get("ph") == "M" and e.get("name") == "process_name":
                continue  # replaced by the label above
            e = dict(e)
            if "pid" in e:
                e["pid"] = pid_map.get(e["pid"], e["pid"])
            if e.get("ph") == "X" and "ts" in e:
                e["ts"] = round(float(e["ts"]) + shift, 3)
            events.append(e)
        merged.append({"file": os.path.abspath(path), "pid": m.get("pid"),
                       "mergedPid": pid_map.get(m.get("pid")), "host": m.get("host"),
                       "rank": m.get("rank"), "shiftUs": round(shift, 3)})
    t = totals(traces)
    domains = sorted({d for _, tr in traces for d in (meta(tr).get("domains") or [])})
    document = {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "ferrumReplay": {
            "version": 1, "ranges": t["ranges"], "rejectedPushes": t["rejectedPushes"],
            "protocolErrors": {k: t[k] for k in ("popWithoutPush", "popWrongDomain",
                                                 "openAtExit")},
            "domains": domains, "alignment": how, "merged": merged,
        },
    }
    out = os.path.abspath(expand_output(args.output))
    tmp = None
    try:
        # A fresh, unpredictable temporary beside the output (O_EXCL, never through a link
        # someone planted), made 0644 less the umask, then renamed over the output.
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(out) + ".", suffix=".tmp",
                                   dir=os.path.dirname(out))
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o644 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, separators=(",", ":"))
            handle.write("\n")
        os.replace(tmp, out)
    except OSError as error:
        try:
            if tmp:
                os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"{out}: cannot write: {error.strerror or error}") from error
    n = sum(len(ranges(tr)) for _, tr in traces)
    print(f"ferrum-replay: merged {len(traces)} traces ({n} ranges, {len(used_pids)} processes; "
          f"aligned by {how}) into {out}", file=sys.stderr)
    return 0


# ---- written ----

def pattern_glob(pattern):
    """A recorder output pattern as a glob: %p is any pid, the rest expands as the recorder
    would. A pattern ending in '/' is a directory holding default-named traces."""
    if pattern.endswith("/"):
        return [glob.escape(pattern) + "ferrum-replay.*json"]
    parts, i = [], 0
    while i < len(pattern):
        if pattern.startswith("%p", i):
            parts.append("*")
            i += 2
            continue
        j = pattern.find("%p", i)
        j = len(pattern) if j < 0 else j
        parts.append(glob.escape(expand_output(pattern[i:j])))
        i = j
    text = "".join(parts)
    if "*" in text:
        return [text]
    # A fixed name gets ".<pid>" inserted when siblings share it (exit_report.cpp).
    root, ext = os.path.splitext(text)
    return [text, f"{root}.[0-9]*{ext}"]


def cmd_written(args):
    since = os.stat(args.since).st_mtime_ns
    found = set()
    for g in pattern_glob(args.pattern):
        for path in glob.glob(g):
            try:
                st = os.stat(path)
            except OSError:
                continue
            # Time stamps are coarse (a kernel tick): a trace written within a tick before
            # the stamp is listed too. Listing is informational; nothing is deleted.
            if st.st_mtime_ns >= since and path.endswith(".json") and not path.endswith(".tmp"):
                found.add(path)
    for path in sorted(found):
        print(path)
    return 0


# ---- nsys stats ----

def _col(row, *names):
    lowered = {(k or "").strip().lower(): v for k, v in row.items()}
    for n in names:
        if n.lower() in lowered:
            return lowered[n.lower()]
    return None


def _read_csv(path):
    with open(path, newline="", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    # Some versions print a title line before the header: start at the header row.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Range" in line and "," in line:
            return list(csv.DictReader(lines[i:]))
    return []


def _domain_rows(rows, domain):
    """{range name: row} for our domain: nsys writes a range as "domain:name" (":name" for
    the default domain), or has a Domain column in some reports."""
    out = {}
    for row in rows:
        name = _col(row, "Range", "NVTX Range", "Name")
        if name is None:
            continue
        name = name.strip()
        dom = _col(row, "Domain")
        if dom is not None:
            if dom.strip() == domain:
                out[name] = row
        elif name.startswith(domain + ":"):
            out[name[len(domain) + 1:]] = row
    return out


def nsys_rows(stats_base, domain):
    """([(range, count, total_ns, avg_ns, min_ns, max_ns, gpu_total_ns, gpu_avg_ns)], problems)"""
    def find(report):
        hits = sorted(glob.glob(glob.escape(stats_base) + f"_{report}*.csv"))
        return hits[0] if hits else None

    problems = []
    sum_file = find("nvtx_sum")
    if not sum_file:
        return [], [f"no nvtx_sum output ({stats_base}_nvtx_sum.csv): did nsys stats run?"]
    base = _domain_rows(_read_csv(sum_file), domain)
    proj_file = find("nvtx_gpu_proj_sum")
    proj = _domain_rows(_read_csv(proj_file), domain) if proj_file else {}
    if not proj_file:
        problems.append("no nvtx_gpu_proj_sum output: GPU times not shown")

    def num(row, *names):
        value = _col(row, *names) if row else None
        try:
            return float(str(value).replace(",", "")) if value not in (None, "") else None
        except ValueError:
            return None

    rows = []
    for name, row in sorted(base.items()):
        p = proj.get(name)
        rows.append((name, int(num(row, "Instances", "Count") or 0),
                     num(row, "Total Time (ns)", "Total Time"), num(row, "Avg (ns)", "Average"),
                     num(row, "Min (ns)", "Minimum"), num(row, "Max (ns)", "Maximum"),
                     num(p, "Total Proj Time (ns)"), num(p, "Proj Avg (ns)")))
    return rows, problems


def cmd_nsys_table(args):
    rows, problems = nsys_rows(args.stats_base, args.domain)
    print(f"ferrum-replay: Nsight Systems report {args.report}", file=sys.stderr)
    for problem in problems:
        print(f"ferrum-replay: note: {problem}", file=sys.stderr)
    if not rows:
        print(f"ferrum-replay: WARNING: the report holds no range of domain '{args.domain}': the "
              "shim was not active in the profiled process(es). Check that nsys's -t includes "
              "nvtx, that the program launches CUDA graphs, and, for programs that fork before "
              "exec, add --trace-fork-before-exec=true.", file=sys.stderr)
        return 1

    def ms(v):
        return "-" if v is None else f"{v / 1e6:.3f}"

    def us(v):
        return "-" if v is None else f"{v / 1e3:.3f}"

    table = [["domain", "range", "count", "total ms", "mean us", "min us", "max us",
              "gpu total ms", "gpu mean us"]]
    for name, count, total, avg, low, high, gtotal, gavg in rows:
        table.append([args.domain, printable(name), str(count), ms(total), us(avg), us(low),
                      us(high), ms(gtotal), us(gavg)])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        line = "".join(r[i].ljust(widths[i] + 3) for i in range(3))
        line += "".join(r[i].rjust(widths[i] + (0 if i == 3 else 4)) for i in range(3, len(r)))
        print(line.rstrip(), file=sys.stderr)
    return 0


# ---- check (CI smoke) ----

def parse_expectations(path):
    """[(pattern, min_count, max_mean_ms or None, line number)] from lines
    `name-pattern min-count [max-mean-ms]`; shell-like quoting for names with spaces; '#'
    starts a comment."""
    out = []
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from error
    for number, line in enumerate(lines, 1):
        try:
            words = shlex.split(line, comments=True)
        except ValueError as error:
            raise InputError(f"{path}:{number}: {error}") from error
        if not words:
            continue
        if len(words) not in (2, 3):
            raise InputError(f"{path}:{number}: expected 'name-pattern min-count "
                             f"[max-mean-ms]' (quote a name with spaces), got {line.strip()!r}")
        try:
            minimum = int(words[1])
            max_mean = float(words[2]) if len(words) == 3 else None
            if minimum < 0 or (max_mean is not None and max_mean < 0):
                raise ValueError
        except ValueError:
            raise InputError(f"{path}:{number}: min-count must be an integer >= 0 and "
                             f"max-mean-ms a number >= 0 in {line.strip()!r}") from None
        out.append((words[0], minimum, max_mean, number))
    return out


SUMMARY_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(.*?)\s*$")


def read_launch_summaries(paths):
    """{graph name: Counter(launches, failed, rejected)} summed over the shim's exit summaries
    (FERRUM_REPLAY_SUMMARY, shim/exit_summary.hpp): after a header line
    "graph launches failed rejected name", one row per graph,
    "  <ordinal> <launches> <failed> <rejected> <name>", where name is the range's message.
    Rows written as "<name> launches=N failed=N rejected=N" are read too."""
    graphs = collections.defaultdict(collections.Counter)
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError as error:
            raise InputError(f"{path}: cannot read: {error.strerror or error}") from error
        in_table = False
        for line in lines:
            words = line.split()
            if words[:4] == ["graph", "launches", "failed", "rejected"]:
                in_table = True
                continue
            row = SUMMARY_ROW.match(line) if in_table else None
            if row:
                counts = graphs[row[5]]
                counts["launches"] += int(row[2])
                counts["failed"] += int(row[3])
                counts["rejected"] += int(row[4])
                continue
            values = dict(re.findall(r"\b(launches|failed|rejected)=(\d+)", line))
            if "launches" in values and not line.lstrip().startswith("#"):
                name = line.split(" launches=", 1)[0].strip()
                for key, value in values.items():
                    graphs[name][key] += int(value)
    return graphs


def cmd_check(args):
    domain = args.domain
    failures, notes = [], []
    traces = [(path, load_trace(path)) for path in args.traces]
    counts = collections.defaultdict(Stats)  # name -> Stats (ms from durations)
    if args.nsys_stats:
        rows, problems = nsys_rows(args.nsys_stats, domain)
        notes += problems
        for name, count, total, *_ in rows:
            s = counts[name]
            s.count += count
            s.total += int(total or 0)
        n_processes = None
    else:
        if not traces and not args.allow_no_ranges:
            failures.append("no trace was written (the recorder never started: the workload "
                            "made no CUDA call under the shim, or its environment dropped "
                            "LD_PRELOAD / NVTX_INJECTION64_PATH)")
        for path, trace in traces:
            for e in ranges(trace, domain):
                counts[str(e.get("name"))].add(_ns(e.get("dur", 0)))
        n_processes = len(traces)
        t = totals(traces)
        if t["without_summary"]:
            failures.append(f"{t['without_summary']} trace(s) without the recorder's summary")
        errs = {k: t[k] for k in ("popWithoutPush", "popWrongDomain", "openAtExit") if t[k]}
        if errs:
            failures.append("unbalanced ranges: " + errors_line(t)[len("protocol errors: "):])
        for path, trace in traces:
            problems = nesting_problems(trace)
            if problems:
                failures.append(f"ranges do not nest in {os.path.basename(path)}: {problems[0]}")
                break
    total_ranges = sum(s.count for s in counts.values())
    if total_ranges == 0 and not args.allow_no_ranges and (traces or args.nsys_stats):
        failures.append(f"no range of domain '{domain}' was recorded: the workload launched no "
                        "CUDA graph, or the shim was not preloaded into it")

    # Every intercepted launch has its range: the shim's own count, when it wrote one.
    summaries = read_launch_summaries(args.launch_summary)
    if summaries:
        rejected_by_tool = sum(int(meta(tr).get("rejectedPushes", 0)) for _, tr in traces)
        missing = []
        for name, c in sorted(summaries.items()):
            expected = c["launches"] - c["rejected"]
            got = counts[name].count if name in counts else 0
            if name and got != expected:
                missing.append(f"{name}: {c['launches']} launches, {got} ranges")
        launches = sum(c["launches"] for c in summaries.values())
        rejected = sum(c["rejected"] for c in summaries.values())
        if any(not name for name in summaries):  # names not given: compare totals only
            if total_ranges + rejected != launches:
                missing.append(f"{launches} launches, {total_ranges} ranges")
        if missing:
            failures.append("launches without their range: " + "; ".join(missing[:4])
                            + (f" (and {len(missing) - 4} more)" if len(missing) > 4 else ""))
        elif rejected != rejected_by_tool and not args.nsys_stats:
            notes.append(f"the shim counted {rejected} rejected pushes, the recorder "
                         f"{rejected_by_tool}")
        launch_note = f"the shim's {launches} launches all have their range"
    else:
        launch_note = "launch count not cross-checked (the shim wrote no FERRUM_REPLAY_SUMMARY)"

    expectations = parse_expectations(args.expect) if args.expect else []
    for pattern, minimum, max_mean, number in expectations:
        matched = [s for name, s in counts.items() if fnmatch.fnmatchcase(name, pattern)]
        n = sum(s.count for s in matched)
        total = sum(s.total for s in matched)
        if n < minimum:
            failures.append(f"expectation line {number}: {n} ranges match '{pattern}', "
                            f"expected at least {minimum}")
        elif max_mean is not None and n and total / n / 1e6 > max_mean:
            failures.append(f"expectation line {number}: ranges matching '{pattern}' take "
                            f"{total / n / 1e6:.3f} ms on average, more than {max_mean:g} ms")

    for name, expected in args.expect_range:
        got = counts[name].count if name in counts else 0
        if got != expected:
            failures.append(f"'{name}': {got} ranges, expected {expected}")
    if args.expect_total is not None and total_ranges != args.expect_total:
        failures.append(f"{total_ranges} ranges, expected {args.expect_total}")
    if args.expect_counts is not None:
        got = sorted(s.count for s in counts.values())
        if got != sorted(args.expect_counts):
            failures.append(f"ranges per graph {got}, expected {sorted(args.expect_counts)} "
                            "(the replays the program made)")

    if failures:
        extra = f" (and {len(failures) - 1} more problem{'s' if len(failures) > 2 else ''})"
        print(f"{args.prog}: FAIL: {failures[0]}" + (extra if len(failures) > 1 else ""))
        for failure in failures[1:]:
            print(f"{args.prog}:   also: {failure}", file=sys.stderr)
        return 1
    where = f" in {n_processes} process{'es' if n_processes != 1 else ''}" \
        if n_processes is not None else " (Nsight Systems report)"
    balanced = ", balanced" if not args.nsys_stats else ""
    met = f"; {len(expectations)} expectation{'s' if len(expectations) != 1 else ''} met" \
        if expectations else ""
    print(f"{args.prog}: OK: {total_ranges} ranges of {len(counts)} "
          f"graph{'s' if len(counts) != 1 else ''}{where}{balanced}; {launch_note}{met}")
    for note in notes:
        print(f"{args.prog}: note: {note}", file=sys.stderr)
    return 0


def _name_count(text):
    name, sep, count = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=COUNT, got {text!r}")
    try:
        return name, int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"COUNT must be an integer in {text!r}") from None


def _counts(text):
    try:
        return [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N,N,... got {text!r}") from None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ferrum_replay_traces.py",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("summary", help="per-range table of saved traces")
    p.add_argument("--domain", help="only this domain ('global' = NVTX's default)")
    p.add_argument("--by-process", action="store_true", help="one row per process and range")
    p.add_argument("traces", nargs="+", metavar="TRACE")
    p.set_defaults(run=cmd_summary)

    p = sub.add_parser("merge", help="one trace from several")
    p.add_argument("-o", "--output", required=True, help="output (%%p, %%h, %%q{VAR} expanded)")
    p.add_argument("traces", nargs="+", metavar="TRACE")
    p.set_defaults(run=cmd_merge)

    p = sub.add_parser("written", help="traces written since a stamp file")
    p.add_argument("--since", required=True)
    p.add_argument("pattern")
    p.set_defaults(run=cmd_written)

    p = sub.add_parser("nsys-table", help="our rows of nsys stats CSV output")
    p.add_argument("--domain", default=DEFAULT_DOMAIN)
    p.add_argument("--stats-base", required=True)
    p.add_argument("report")
    p.set_defaults(run=cmd_nsys_table)

    p = sub.add_parser("check", help="CI smoke verdict")
    p.add_argument("--prog", default="ci-smoke-profile", help=argparse.SUPPRESS)
    p.add_argument("--domain", default=DEFAULT_DOMAIN)
    p.add_argument("--expect", metavar="FILE",
                   help="lines 'name-pattern min-count [max-mean-ms]' (globs, # comments)")
    p.add_argument("--expect-range", action="append", default=[], type=_name_count,
                   metavar="NAME=COUNT", help="exactly COUNT ranges named NAME")
    p.add_argument("--expect-total", type=int, metavar="N", help="exactly N ranges")
    p.add_argument("--expect-counts", type=_counts, metavar="N,N,...",
                   help="the ranges per name, in any order, are exactly these counts")
    p.add_argument("--launch-summary", action="append", default=[], metavar="FILE",
                   help="the shim's exit summary (FERRUM_REPLAY_SUMMARY); repeatable")
    p.add_argument("--nsys-stats", metavar="BASE",
                   help="check nsys stats CSV output (BASE_nvtx_sum.csv) instead of traces")
    p.add_argument("--allow-no-ranges", action="store_true")
    p.add_argument("traces", nargs="*", metavar="TRACE")
    p.set_defaults(run=cmd_check)

    args = parser.parse_args(argv)
    try:
        try:
            return args.run(args)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError,
                RecursionError) as error:  # a value validate_trace() let through
            raise InputError(f"a trace holds a value of an unexpected kind ({type(error).__name__}: "
                             f"{error})") from error
    except InputError as error:
        prog = getattr(args, "prog", "ferrum-replay")
        if args.command == "check":
            print(f"{prog}: FAIL: {error}")
            return 1
        print(f"ferrum-replay: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(1)
