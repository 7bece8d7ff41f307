"""The verdicts of scripts/gpu-smoke on what a case left in its folder (traces, logs, Nsight's
CSVs), one line each: `PASS what was seen` or `FAIL why (what was seen)`. Apart from the script
so that each can be tested without a GPU (tests/wrapper/test_workflow.py gpu_smoke_checks: a
check that cannot fail here would first fail on the one run lent a GPU; review RV2-7).

    python3 -I gpu_smoke_checks.py coverage DIR          GPU time of every named replay
    python3 -I gpu_smoke_checks.py untimed DIR           no GPU time with timing off
    python3 -I gpu_smoke_checks.py spin DIR EXPECTED_US  the spin graph's GPU time
    python3 -I gpu_smoke_checks.py nsys STATS_BASE DIR   against Nsight's projection
    python3 -I gpu_smoke_checks.py probe LINE            what `gpu_spin_graph --probe` said
    python3 -I gpu_smoke_checks.py logs DIR              the last lines of a case's logs

Every text that came from a program is shown by the one rule for values in messages
(docs/text-rules.md section 3: ferrum_replay_traces.printable)."""
import collections
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ferrum_replay_traces as traces  # noqa: E402

DOMAIN = "ferrum-replay"  # gpu-smoke leaves FERRUM_REPLAY_DOMAIN unset
SPIN_NAME = "gpu-smoke spin"  # tests/shim/coverage/gpu_spin_graph.cu names its graph so
SPIN_REPLAYS = 200  # the replays gpu-smoke asks of it


def _events(folder):
    """(trace's ferrumReplay block, its X events) of each trace.*.json in `folder`."""
    for path in sorted(glob.glob(glob.escape(folder) + "/trace.*.json")):
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
        yield (trace.get("ferrumReplay") or {},
               [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"])


def _gpu(event):
    return event.get("cat") == f"{DOMAIN},gpu"


def coverage(folder):
    """Each replay the GPU timed is one block on a GPU track, of a name the CPU ranges have,
    never two for one replay (args.replay, per process and name), at most as many per name as
    there are ranges, as many in all as the traces count timed, and at least 95 % of the
    ranges timed (the rest counted not timed or in flight at exit, which the line shows)."""
    ranges, blocks, seen = collections.Counter(), collections.Counter(), set()
    twice = timed = not_timed = in_flight = 0
    for meta, events in _events(folder):
        gpu = meta.get("gpu") or {}
        timed += gpu.get("timed", 0)
        not_timed += gpu.get("notTimed", 0)
        in_flight += gpu.get("inFlightAtExit", 0)
        for e in events:
            if e.get("cat") == DOMAIN:
                ranges[e.get("name")] += 1
            elif _gpu(e):
                blocks[e.get("name")] += 1
                key = (e.get("pid"), e.get("name"), (e.get("args") or {}).get("replay"))
                twice += key in seen
                seen.add(key)
    total, got = sum(ranges.values()), sum(blocks.values())
    over = {traces.printable(n, 60): (c, ranges[n]) for n, c in blocks.items() if c > ranges[n]}
    problems = []
    if not total:
        problems.append("no ranges")
    if over:
        problems.append(f"more GPU blocks than ranges (name: blocks, ranges): {over}")
    if twice:
        problems.append(f"{twice} replays timed twice")
    if got != timed:
        problems.append(f"{got} GPU blocks, the traces count {timed} timed")
    if got < 0.95 * total:
        problems.append(f"only {got} of {total} replays timed")
    said = (f"{got} of {total} replays timed, {not_timed} not timed, {in_flight} in flight at "
            f"exit, {len(blocks)} of {len(ranges)} names")
    return ("FAIL " + "; ".join(problems) + f" ({said})") if problems else f"PASS {said}"


def untimed(folder):
    """With FERRUM_REPLAY_GPU_TIME=off nothing is timed: no GPU block, none counted timed
    (`check` judges the ranges; a shim that timed anyway passed it: review RV3-7)."""
    blocks = timed = ranges = 0
    for meta, events in _events(folder):
        timed += (meta.get("gpu") or {}).get("timed", 0)
        blocks += sum(1 for e in events if _gpu(e))
        ranges += sum(1 for e in events if e.get("cat") == DOMAIN)
    if not ranges:
        return "FAIL no ranges"
    if blocks or timed:
        return f"FAIL {blocks} GPU blocks, {timed} counted timed, with timing off ({ranges} ranges)"
    return f"PASS {ranges} ranges, none timed"


def _spin_blocks(folder):
    spans, replays = [], set()
    for _, events in _events(folder):
        for e in events:
            if _gpu(e) and e.get("name") == SPIN_NAME:
                spans.append(float(e["dur"]))
                replays.add((e.get("pid"), (e.get("args") or {}).get("replay")))
    return spans, replays


def spin(folder, expected_us):
    """The spin graph's GPU time per replay within 5 % of the spin the kernel measured, from 190
    to 200 blocks, each of its own replay (one delivered twice is no pass)."""
    spans, replays = _spin_blocks(folder)
    if not spans or expected_us <= 0:
        return (f"FAIL no GPU time recorded for the graph ({len(spans)} GPU blocks, expected "
                f"{expected_us} us)")
    mean = sum(spans) / len(spans)
    error = abs(mean - expected_us) / expected_us
    counted = 0.95 * SPIN_REPLAYS <= len(spans) <= SPIN_REPLAYS and len(replays) == len(spans)
    verdict = "PASS" if error <= 0.05 and counted else "FAIL"
    return (f"{verdict} {len(spans)} replays timed ({len(replays)} distinct, "
            f"{int(0.95 * SPIN_REPLAYS)} to {SPIN_REPLAYS} wanted), mean GPU time {mean:.1f} us "
            f"against {expected_us:.1f} us spun ({error * 100:.1f} % off)")


def nsys(stats_base, folder):
    """Our mean GPU time of the spin graph (this folder's traces) within 5 % of Nsight's
    projection of its range (nvtx_gpu_proj_sum of another run: the spin lasts a time, not a
    number of cycles, so it is the same in both), over exactly SPIN_REPLAYS ranges there."""
    rows, problems = traces.nsys_rows(stats_base, DOMAIN)
    theirs = {name: (count, gpu_avg) for name, count, _, _, _, _, _, gpu_avg in rows}
    ours = [d * 1000 for d in _spin_blocks(folder)[0]]
    count, projected = theirs.get(SPIN_NAME, (0, None))
    if not projected or not ours:
        names = [traces.printable(n, 60) for n in sorted(theirs)[:5]]
        return (f"FAIL no comparison: Nsight's projection {projected}, ours {len(ours)} replays; "
                f"names in nsys: {names}; {traces.printable('; '.join(problems), 300)}")
    mean = sum(ours) / len(ours)
    error = abs(mean - projected) / projected
    ok = error <= 0.05 and count == SPIN_REPLAYS
    return (f"{'PASS' if ok else 'FAIL'} ours {mean / 1000:.1f} us, Nsight's projection "
            f"{projected / 1000:.1f} us ({error * 100:.1f} % apart) over {count} ranges "
            f"({SPIN_REPLAYS} wanted)")


def probe(line):
    """One line on what the test programs' CUDA runtime sees (`gpu_spin_graph --probe`)."""
    fields = dict(f.split("=", 1) for f in line.split(" ", 5) if "=" in f)
    if "runtime" not in fields or not fields["runtime"].isdigit():
        return f"the CUDA runtime's probe answered {traces.quoted(line)}"

    def version(v):
        v = int(v) if v.isdigit() else 0
        return f"{v // 1000}.{v % 1000 // 10}" if v else "none"
    driver, runtime = version(fields.get("driver", "")), version(fields["runtime"])
    devices, error = fields.get("devices", "0"), traces.printable(fields.get("error", "?"), 60)
    said = f"the driver supports CUDA {driver}, the test programs' runtime is CUDA {runtime}"
    kernel = traces.printable(fields.get("kernel", "?"), 60)
    if error == "cudaSuccess" and devices not in ("", "0"):
        seen = (f"{said}; it sees {traces.printable(devices, 10)} device(s), the first "
                f"{traces.quoted(fields.get('name', ''))}")
        if kernel != "cudaSuccess":
            return f"{seen}, where a tiny kernel failed ({kernel}): the cases will fail"
        return f"{seen}, and ran a tiny kernel there"
    if error == "cudaErrorInsufficientDriver" and driver != "none":
        return (f"{said}: the driver is too old for it (cudaErrorInsufficientDriver): the "
                "nvcc-built cases will fail")
    return (f"{said}; it sees no usable device ({error}: MIG without an instance, "
            "CUDA_VISIBLE_DEVICES, a driver that does not load?): the cases will fail")


def logs(folder, lines=6):
    """The last lines of each log of a failed case, indented under its verdict."""
    out = []
    for name in ("err.txt", "out.txt", "check.txt", "log.txt"):
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))  # the tail only: a log may be huge
                tail = f.read().splitlines()[-lines:]
        except OSError:
            continue
        if tail:
            out.append(f"      {name}:")
            out += [f"        {traces.printable(line, 240)}" for line in tail]
    return "\n".join(out)


def main(argv):
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "coverage" and len(rest) == 1:
        print(coverage(rest[0]))
    elif command == "untimed" and len(rest) == 1:
        print(untimed(rest[0]))
    elif command == "spin" and len(rest) == 2:
        try:
            expected = float(rest[1])
        except ValueError:
            expected = 0.0
        print(spin(rest[0], expected))
    elif command == "nsys" and len(rest) == 2:
        print(nsys(rest[0], rest[1]))
    elif command == "probe" and len(rest) == 1:
        print(probe(rest[0]))
    elif command == "logs" and len(rest) == 1:
        text = logs(rest[0])
        if text:
            print(text)
    else:
        print(f"usage: {__doc__.splitlines()[4].strip()} ...", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as error:  # noqa: BLE001 -- whatever a case left, one line, never a traceback
        # A trace that cannot be read or is not what it should be (not JSON, nested past
        # Python's recursion limit, fields of other kinds): a FAIL saying so.
        print(f"FAIL the check could not read the case's files ({type(error).__name__}: "
              f"{traces.printable(str(error), 200)})")
        sys.exit(0)
