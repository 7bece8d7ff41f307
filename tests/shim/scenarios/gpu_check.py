"""What a user sees of GPU time per replay (docs/gpu-time.md), read back for the GPU-timing
tests (test_gpu_time.py here, tests/reliability/test_gpu_time.py): the shim's exit summary
(FERRUM_REPLAY_SUMMARY) and the recorder trace's GPU events and tracks."""
import re

import harness  # noqa: F401  (puts tests/support/tools on the path)
import trace_check  # noqa: E402

GPU_LINE = re.compile(r"^  GPU time: (\d+) replays timed, (\d+) not timed, (\d+) in flight at exit"
                      r"(?: \(([^)]*)\))?; clock aligned within (\d+) ns; p50/p99 within 6\.25 %$")
HEADER = re.compile(r"^ferrum-replay launch summary: (\d+) graphs, (\d+) launches, (\d+) failed, "
                    r"(\d+) rejected pushes \(pid (\d+)(?:, started [0-9a-f+-]+)?"
                    r"(?:, session [A-Za-z0-9._-]+@\d+)?\)$")
GPU_COLUMNS = ("graph", "launches", "failed", "rejected", "gpu n", "gpu tot ms", "mean us",
               "min us", "p50 us", "p99 us", "max us")


class Summary:
    """One process's launch summary: pid, rows (dicts by column, plus "name"), gpu (the closing
    GPU line: timed, not_timed, in_flight, align_ns, why {reason: count}) or None."""

    def __init__(self, pid):
        self.pid = pid
        self.header_columns = None
        self.rows = []
        self.gpu = None


def summaries(text):
    """Every launch summary in text (stderr), in order."""
    found = []
    for line in text.splitlines():
        match = HEADER.match(line)
        if match:
            found.append(Summary(int(match[5])))
            continue
        if not found:
            continue
        current = found[-1]
        gpu = GPU_LINE.match(line)
        if gpu:
            why = {}
            for part in filter(None, (gpu[4] or "").split(", ")):
                count, reason = part.split(" ", 1)
                why[reason] = int(count)
            current.gpu = {"timed": int(gpu[1]), "not_timed": int(gpu[2]),
                           "in_flight": int(gpu[3]), "why": why, "align_ns": int(gpu[5])}
            continue
        if current.header_columns is None and line.strip().startswith("graph"):
            current.header_columns = line.split()
            continue
        fields = line.split()
        if (current.header_columns and len(fields) > len(GPU_COLUMNS)
                and fields[0].isdigit() and "gpu" in current.header_columns):
            row = dict(zip(GPU_COLUMNS, fields))
            row["name"] = " ".join(fields[len(GPU_COLUMNS):])
            current.rows.append(row)
    return found


def track_names(trace):
    """{(pid, tid): name} of the trace's thread_name metadata."""
    return {(e.get("pid"), e.get("tid")): e.get("args", {}).get("name")
            for e in trace["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "thread_name"}


def gpu_meta(trace):
    return trace.get("ferrumReplay", {}).get("gpu")


def ns(value_us):
    return round(float(value_us) * 1000)
