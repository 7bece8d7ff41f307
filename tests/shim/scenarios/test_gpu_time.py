"""Issue 12 end to end: GPU time per replay, measured by the preloaded shim against the stand-in
driver's asynchronous GPU (its replays take FERRUM_STANDIN_GRAPH_NS each), as the user sees it:
the recorder trace's GPU events and tracks, the shim's FERRUM_REPLAY_SUMMARY GPU columns, and
its stderr lines. docs/gpu-time.md describes the behaviour."""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_check  # noqa: E402
from harness import (expect, expect_balanced, expect_one_range_per_launch, main,  # noqa: E402
                     path_of, run)

GRAPHS, ITERS = 3, 21
LAUNCHES = GRAPHS * ITERS
# The k-th instantiation's simulated duration: graph 0, 1, 2 of every launch program.
GRAPH_NS = (200_000, 350_000, 500_000)
TOLERANCE_NS = 2_000
ON = {"FERRUM_REPLAY_GPU_TIME": "on", "FERRUM_STANDIN_GRAPH_NS": ",".join(map(str, GRAPH_NS))}
CREATED = r"GPU 0 · stream 0x[0-9a-f]+"
LEGACY = r"GPU 0 · stream 0 \(legacy default\)"
PER_THREAD = r"GPU 0 · stream 0x2 \(per-thread default of thread \d+\)"


def launch(program_variable, *extra, env=None, **kwargs):
    argv = [path_of(program_variable), "--graphs", str(GRAPHS), "--iters", str(ITERS), *extra]
    return run(argv, env={**ON, **(env or {})}, **kwargs)


def graph_names(run_):
    """The CPU range names of graph 0, 1, 2: each round launches them in that order."""
    names = []
    for r in sorted(run_.ranges(), key=lambda r: float(r["ts"])):
        if r["name"] not in names:
            names.append(r["name"])
    expect(len(names) == GRAPHS, f"range names {names}, expected {GRAPHS}", run_)
    return names


def expect_all_timed(run_, track, report_key="launches", launches=LAUNCHES):
    """Every replay timed: one GPU event per CPU range, of the graph's simulated duration, on one
    GPU track named for the stream, with the CPU range's name and replay number, placed after
    the CPU range's start (the first one inside its range), within the alignment's bound."""
    expect(run_.returncode == 0 and run_.stderr == "", "program failed or printed", run_)
    expect(run_.report.get(report_key) == launches, f"stand-in driver saw {run_.report}", run_)
    expect_one_range_per_launch(run_, launches)
    expect_balanced(run_)
    meta = gpu_check.gpu_meta(run_.trace)
    expect(meta is not None, "the trace has no ferrumReplay.gpu block", run_)
    expect(meta["timed"] == launches and meta["notTimed"] == 0 and meta["inFlightAtExit"] == 0,
           f"ferrumReplay.gpu {meta}, expected all {launches} timed", run_)
    error_ns = meta["alignErrorNs"]
    expect(0 < error_ns < 1_000_000, f"alignment error bound {error_ns} ns", run_)
    gpu = run_.trace and gpu_check.trace_check.gpu_replays(run_.trace)
    expect(len(gpu) == launches, f"{len(gpu)} GPU events for {launches} launches", run_)
    tracks = gpu_check.track_names(run_.trace)
    on = {tracks.get((e["pid"], e["tid"])) for e in gpu}
    expect(len(on) == 1 and re.fullmatch(track, next(iter(on)) or ""),
           f"GPU events on tracks {on}, expected one matching {track!r}", run_)
    cpu_tids = {r["tid"] for r in run_.ranges()}
    expect(not cpu_tids & {e["tid"] for e in gpu}, "a GPU event on a CPU thread's track", run_)
    for index, name in enumerate(graph_names(run_)):
        events = [e for e in gpu if e["name"] == name]
        cpu = {r["args"]["payload"]: r for r in run_.ranges(name=name)}
        expect(len(events) == ITERS * launches // LAUNCHES,
               f"{name!r}: {len(events)} GPU events", run_)
        for event in events:
            expect(event["cat"] == "ferrum-replay,gpu", f"GPU event category {event['cat']}", run_)
            took = gpu_check.ns(event["dur"])
            # Stream-ordered: a replay that finds its stream idle also counts the moment between
            # the start event's record and the launch, inside its CPU range.
            idle = gpu_check.ns(cpu[event["args"]["replay"]]["dur"])
            expect(GRAPH_NS[index] - TOLERANCE_NS <= took <= GRAPH_NS[index] + TOLERANCE_NS + idle,
                   f"{name!r} replay {event['args']['replay']}: GPU {took} ns, the stand-in "
                   f"simulated {GRAPH_NS[index]} ns (its launch took {idle} ns)", run_)
        replays = sorted(e["args"]["replay"] for e in events)
        expect(replays == sorted(cpu), f"{name!r}: GPU replay numbers {replays[:5]}... differ "
               f"from the CPU ranges' payloads {sorted(cpu)[:5]}...", run_)
        for event in events:
            start = cpu[event["args"]["replay"]]
            expect(gpu_check.ns(event["ts"]) >= gpu_check.ns(start["ts"]) - error_ns,
                   f"{name!r} replay {event['args']['replay']} starts on the GPU "
                   f"{gpu_check.ns(start['ts']) - gpu_check.ns(event['ts'])} ns before its "
                   f"launch (bound {error_ns} ns)", run_)
    # The very first replay finds its stream idle: it starts on the GPU during its launch.
    first_cpu = min(run_.ranges(), key=lambda r: float(r["ts"]))
    first_gpu = min(gpu, key=lambda e: float(e["ts"]))
    begin, end = gpu_check.ns(first_cpu["ts"]), gpu_check.ns(first_cpu["ts"]) + gpu_check.ns(
        first_cpu["dur"])
    at = gpu_check.ns(first_gpu["ts"])
    expect(begin - error_ns <= at <= end + error_ns,
           f"first replay starts on the GPU at {at - begin} ns after its launch began, which "
           f"took {end - begin} ns (bound {error_ns} ns)", run_)


def timed_runtime():
    """cudaGraphLaunch of the shared runtime on a created stream."""
    expect_all_timed(launch("LAUNCH_RUNTIME"), CREATED)


def timed_driver():
    """cuGraphLaunch by name, on a created stream and on the legacy NULL stream (0 and 0x1)."""
    expect_all_timed(launch("LAUNCH_DRIVER"), CREATED)
    expect_all_timed(launch("LAUNCH_DRIVER", "--stream", "null"), LEGACY)
    expect_all_timed(launch("LAUNCH_DRIVER", "--stream", "legacy"), LEGACY)


def timed_ptsz():
    """_ptsz launches of NULL go to the per-thread default stream: their track says so."""
    expect_all_timed(launch("LAUNCH_DRIVER_PTSZ", "--stream", "null"), PER_THREAD,
                     "launches_ptsz")
    expect_all_timed(launch("LAUNCH_RUNTIME_PTSZ", "--stream", "null"), PER_THREAD,
                     "launches_ptsz")
    expect_all_timed(launch("LAUNCH_RUNTIME", "--stream", "ptsz"), PER_THREAD, "launches_ptsz")
    expect_all_timed(launch("LAUNCH_DRIVER_PTSZ"), CREATED, "launches_ptsz")


def timed_procaddress():
    """Launches through pointers from cuGetProcAddress (legacy and per-thread) and from the
    runtime's cudaGetDriverEntryPoint."""
    expect_all_timed(launch("LAUNCH_PROCADDRESS", "--flags", "0"), CREATED)
    # (a created stream: with --stream null this program synchronises the legacy stream, not
    # the per-thread one it launched on, and destroys its context with replays in flight)
    expect_all_timed(launch("LAUNCH_PROCADDRESS", "--flags", "2"), CREATED, "launches_ptsz")
    expect_all_timed(launch("LAUNCH_ENTRY_POINT", "--flags", "0"), CREATED)


def timed_static_runtime():
    """A program with the runtime linked in statically (it reaches the driver by
    cuGetProcAddress)."""
    expect_all_timed(launch("LAUNCH_STATIC_RUNTIME"), CREATED)
    expect_all_timed(launch("LAUNCH_STATIC_RUNTIME", "--stream", "ptsz"), PER_THREAD,
                     "launches_ptsz")


def expect_untimed(run_, launches=LAUNCHES):
    """Timing off: no event ever asked of the driver, no GPU block in the trace."""
    expect(run_.report.get("events_created") == 0,
           f"the stand-in saw {run_.report.get('events_created')} cuEventCreate calls", run_)
    if run_.trace is not None:
        expect(gpu_check.gpu_meta(run_.trace) is None and
               not gpu_check.trace_check.gpu_replays(run_.trace),
               "GPU data in the trace with timing off", run_)
        expect_one_range_per_launch(run_, launches)


def threads_of(argv, env, masks=None):
    """Runs argv with slow launches and reads the names of its threads while it runs; `masks`
    (a dict), when given, gets each thread name's blocked-signal mask (SigBlk, as an int)."""
    import subprocess
    import tempfile
    import time
    import harness
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRUM_", "NVTX_"))}
    child_env.update(LD_LIBRARY_PATH=path_of("STANDIN_DIR"), LD_PRELOAD=path_of("FERRUM_SHIM"),
                     **env)
    harness.preload_first(child_env)
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(argv, env=child_env, stdout=out, stderr=out)
        names = set()
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            try:
                for task in os.listdir(f"/proc/{process.pid}/task"):
                    with open(f"/proc/{process.pid}/task/{task}/comm") as comm:
                        name = comm.read().strip()
                    names.add(name)
                    if masks is not None:
                        with open(f"/proc/{process.pid}/task/{task}/status") as status:
                            for line in status:
                                if line.startswith("SigBlk:"):
                                    masks[name] = int(line.split()[1], 16)
            except OSError:
                pass
            time.sleep(0.01)
        process.kill()
        process.wait()
    return names


def off_by_default():
    """Timing off (the default, and =off): the shim creates no event and starts no thread, and
    the program's output is exactly what it is without the shim."""
    for env in ({}, {"FERRUM_REPLAY_GPU_TIME": "off"}):
        for program in ("LAUNCH_DRIVER", "LAUNCH_RUNTIME"):
            argv = [path_of(program), "--graphs", str(GRAPHS), "--iters", str(ITERS)]
            expect_untimed(run(argv, env=env))
            bare = run(argv, preload=False, record=False, env=env)
            shimmed = run(argv, record=False, env=env)
            expect_untimed(shimmed)
            for field in ("returncode", "stdout", "stderr"):
                expect(getattr(bare, field) == getattr(shimmed, field),
                       f"{program} {env}: {field} differs with the shim", shimmed)
    # Threads, seen from outside while the program runs (each launch waits for the previous
    # replay, 20 ms): the reaper "ferrum-gpu" only where timing is on.
    argv = [path_of("LAUNCH_DRIVER"), "--graphs", "1", "--iters", "20"]
    slow = {"FERRUM_STANDIN_GRAPH_NS": "20000000", "FERRUM_STANDIN_LAUNCH_QUEUE": "1"}
    off = threads_of(argv, slow)
    masks = {}
    on = threads_of(argv, {**slow, "FERRUM_REPLAY_GPU_TIME": "on"}, masks)
    expect("ferrum-gpu" in on, f"timing on, yet no reaper thread among {on}")
    # The reaper leaves every signal to the program's threads.
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGCHLD, signal.SIGALRM):
        expect(masks.get("ferrum-gpu", 0) >> (number - 1) & 1,
               f"the reaper does not block {signal.Signals(number).name}: "
               f"SigBlk {masks.get('ferrum-gpu', 0):#x}")
    off.discard("python3")  # the child between fork and exec
    expect(off == {"launch_driver"}, f"timing off, yet threads {off}")


def bad_settings():
    """A garbage FERRUM_REPLAY_GPU_TIME: one quoted warning, timing off. A bad
    FERRUM_REPLAY_GPU_TIME_EVERY: one warning, every replay timed."""
    garbage = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_GPU_TIME": "garbage"})
    lines = garbage.stderr.splitlines()
    expect(len(lines) == 1 and "FERRUM_REPLAY_GPU_TIME='garbage' is invalid" in lines[0],
           "expected one line about FERRUM_REPLAY_GPU_TIME", garbage)
    expect(garbage.returncode == 0, "program failed", garbage)
    expect_untimed(garbage)
    for value in ("0", "x3", "-1", "1000001"):
        bad = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_GPU_TIME_EVERY": value})
        lines = bad.stderr.splitlines()
        expect(len(lines) == 1 and f"FERRUM_REPLAY_GPU_TIME_EVERY='{value}' is invalid" in lines[0],
               "expected one line about FERRUM_REPLAY_GPU_TIME_EVERY", bad)
        expect(len(gpu_check.trace_check.gpu_replays(bad.trace)) == LAUNCHES,
               "a bad FERRUM_REPLAY_GPU_TIME_EVERY did not fall back to every replay", bad)


def every_third():
    """FERRUM_REPLAY_GPU_TIME_EVERY=3: exactly every third replay of each graph is timed."""
    run_ = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_GPU_TIME_EVERY": "3",
                                        "FERRUM_REPLAY_SUMMARY": "stderr"})
    expect(run_.returncode == 0, "program failed", run_)
    gpu = gpu_check.trace_check.gpu_replays(run_.trace)
    expect(len(gpu) == LAUNCHES // 3, f"{len(gpu)} GPU events, expected {LAUNCHES // 3}", run_)
    for name in graph_names(run_):
        replays = sorted(e["args"]["replay"] for e in gpu if e["name"] == name)
        cpu = sorted(r["args"]["payload"] for r in run_.ranges(name=name))
        # the 1st, 4th, 7th ... replay of each graph
        expect(len(replays) == ITERS // 3 and replays == cpu[::3],
               f"{name!r}: timed replays {replays} of {cpu}", run_)
        expect(all(b - a == 3 for a, b in zip(replays, replays[1:])),
               f"{name!r}: timed replays {replays} are not every third", run_)
    [summary] = gpu_check.summaries(run_.stderr)
    expect(summary.gpu["timed"] == LAUNCHES // 3 and
           summary.gpu["why"] == {"sampled out": LAUNCHES - LAUNCHES // 3},
           f"summary GPU line {summary.gpu}", run_)


def driver_without_events():
    """A driver without the event API, and one whose cuEventCreate fails: launches, result codes
    and ranges as without timing; one line saying why with FERRUM_REPLAY_LOG=error, silence
    without it."""
    for broken in ({"FERRUM_STANDIN_NO_EVENTS": "1"}, {"FERRUM_STANDIN_EVENT_CREATE_FAIL": "1"}):
        for result in ({}, {"FERRUM_STANDIN_LAUNCH_RESULT": "719"}):
            env = {**broken, **result}
            bare = launch("LAUNCH_DRIVER", preload=False, env=env)
            quiet = launch("LAUNCH_DRIVER", env=env)
            expect(quiet.returncode == bare.returncode and quiet.stdout == bare.stdout and
                   quiet.stderr == "", f"{env}: outcome or output changed", quiet)
            expect(quiet.report.get("launches") == LAUNCHES, "launches lost", quiet)
            expect_one_range_per_launch(quiet, LAUNCHES)
            expect_balanced(quiet)
            expect(not gpu_check.trace_check.gpu_replays(quiet.trace), "GPU events", quiet)
            told = launch("LAUNCH_DRIVER", env={**env, "FERRUM_REPLAY_LOG": "error"})
            lines = told.stderr.splitlines()
            expect(len(lines) == 1 and lines[0].startswith("ferrum-replay") and
                   "GPU timing" in lines[0] and "not timed" in lines[0],
                   f"{env}: expected one line saying why timing is off", told)
            expect(told.returncode == bare.returncode and told.stdout == bare.stdout,
                   "outcome changed", told)
            expect_one_range_per_launch(told, LAUNCHES)


def summary_without_tool():
    """No NVTX tool at all: FERRUM_REPLAY_SUMMARY=stderr still tells GPU time per graph (the
    simulated durations) and closes with the GPU line."""
    run_ = launch("LAUNCH_DRIVER", "--launch-times", record=False,
                  env={"FERRUM_REPLAY_SUMMARY": "stderr"})
    expect(run_.returncode == 0, "program failed", run_)
    [summary] = gpu_check.summaries(run_.stderr)
    expect(summary.header_columns and summary.header_columns[4:6] == ["gpu", "n"],
           f"no GPU columns in {summary.header_columns}", run_)
    expect(len(summary.rows) == GRAPHS, f"rows {summary.rows}", run_)
    # The wall time inside each graph's launch calls, which hold both of a replay's enqueues.
    inside = [int(n) for n in re.search(r"^launch_ns=(.*)$", run_.stdout, re.M)[1].split(",")]
    for row, simulated, called in zip(sorted(summary.rows, key=lambda r: int(r["graph"])),
                                      GRAPH_NS, inside):
        expect(int(row["gpu n"]) == ITERS, f"row {row}: gpu n", run_)
        # A replay that found its stream run dry (the first; any after its thread was preempted
        # longer than the work queued, on a loaded machine) also counts the gap between its start
        # event and its launch, both inside its launch call; the others queued behind one
        # another and read their own time. So the gaps of a graph's replays fit in the time
        # spent in its launch calls (about 100 us here, unloaded: another graph's replay of 350
        # or 500 us charged to one of them would not).
        total, longest = float(row["gpu tot ms"]) * 1e6, float(row["max us"]) * 1000
        gaps = total - ITERS * simulated
        expect(abs(float(row["min us"]) * 1000 - simulated) <= TOLERANCE_NS,
               f"row {row}: min us is not the simulated {simulated} ns", run_)
        expect(-ITERS * TOLERANCE_NS <= gaps <= called + ITERS * TOLERANCE_NS and
               longest - simulated <= called + TOLERANCE_NS,
               f"row {row}: beyond the simulated {simulated} ns by more than the {called} ns "
               "spent in its launch calls", run_)
        # Printed to 1 ns (mean) and 1 us (total).
        expect(abs(float(row["mean us"]) * 1000 * ITERS - total) <= 1000,
               f"row {row}: mean is not total / {ITERS}", run_)
        # A log-bucket histogram: within 6.25 %; p99 of 21 replays is the slowest.
        expect(abs(float(row["p50 us"]) * 1000 - simulated) <= simulated * 0.0625,
               f"row {row}: p50 us is not near the simulated {simulated} ns", run_)
        expect(float(row["p50 us"]) <= float(row["p99 us"]) <= float(row["max us"]) * 1.0625,
               f"row {row}: p99 us out of order", run_)
    expect(summary.gpu == {"timed": LAUNCHES, "not_timed": 0, "in_flight": 0, "why": {},
                           "align_ns": summary.gpu["align_ns"]},
           f"GPU line {summary.gpu}", run_)
    # Timing off: the same summary without GPU columns or GPU line.
    off = launch("LAUNCH_DRIVER", record=False, env={"FERRUM_REPLAY_SUMMARY": "stderr",
                                                     "FERRUM_REPLAY_GPU_TIME": "off"})
    [plain] = gpu_check.summaries(off.stderr)
    expect(plain.gpu is None and "gpu" not in plain.header_columns and "GPU" not in off.stderr,
           "GPU columns with timing off", off)


SCENARIOS = {f.__name__: f for f in (
    timed_runtime, timed_driver, timed_ptsz, timed_procaddress, timed_static_runtime,
    off_by_default, bad_settings, every_third, driver_without_events, summary_without_tool)}

if __name__ == "__main__":
    main(SCENARIOS)
