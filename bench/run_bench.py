#!/usr/bin/env python3
"""ferrum-replay's benchmark suite: one table, every figure against a baseline measured in
the same run. Run it through scripts/bench (which builds first); meson runs it too
(`meson test --suite bench` for the smoke run, `ninja benchmark` for the full one).

    run_bench.py [--build-dir DIR] [--rounds R] [--smoke] [--markdown FILE]
    run_bench.py --recorder-exit [--build-dir DIR] [--smoke]   (that one row alone, seconds)

What it runs, each in its own processes (a preload cannot be added to a running process):

  launch      bench/ferrum-bench-launch (Google Benchmark) in six configurations — no preload
              (the baseline), libferrum-replay.so with no NVTX tool, with the recorder, with
              FERRUM_REPLAY=off, the naive interposer (bench/naive_interposer.c) with no tool
              and with the recorder — interleaved round by round, so that drift on a shared
              machine hits every configuration alike. Each figure is the median, over the
              rounds, of (configuration's median − baseline's median in the same round); the ±
              is half the range of those per-round differences. Times are thread CPU time per
              launch: with 8 threads on fewer cores, wall time would measure the scheduler.
              Against the stand-in driver with FERRUM_STANDIN_BENCH=1: its launch does nothing
              but return, so the baseline is the cheapest real call into libcuda.so.1.
  GPU timing  three more configurations in the same rounds: no preload running each route's
              launch between two direct cuEventRecord calls (the baseline: the calls the shim
              makes by hand), and the shim with FERRUM_REPLAY_GPU_TIME=on — no tool, and with
              the recorder — running the bare launch. Both loops launch in batches of 512 and,
              between batches, timer paused, let the shim's reaper refill its event pool
              (ferrum_replay_gpu_flush), so that every replay is timed, which each row checks.
              The stand-in's event calls take its fast path too (each costs a minimal call).
  start-up    bench/ferrum-bench-spawn: /bin/true and `python3 -c pass`, spawned in pairs
              without/with the preload; medians, and the median of the pairs' ratios and
              differences (the vs-baseline column). An empty preloaded library
              (bench/empty_preload.c) gives the floor any preload pays; the target row pairs
              the shim against it directly (4000 pairs of /bin/true, --baseline). The shim
              is linked into fewer segments than the toolchain's default (shim/meson.build),
              which the empty library is not: a second row pairs the shim against the same
              empty library linked like it, to show the shim's code and data apart.
  side effects  bench/ferrum-bench-probe without/with the preload (threads, descriptors,
              environment, libraries mapped, stderr), and, where strace exists, every file
              /bin/true and python3 open and every thread they create.
  memory      ferrum-bench-launch --rss: resident size and minor page faults after 10 thousand
              and after 10 million launches (shim, no tool); with the recorder, its memory per
              event (resident, and in its unnamed spill file), and the time its exit report
              takes (trace file size / time), beside the disk's own limit: the same number of
              bytes written right after into a fresh file of the same directory with plain
              1 MiB write() calls and no fsync, as the recorder writes (median of 3); with GPU
              timing on, resident size after 10 thousand and after 1 million timed replays.
              --recorder-exit measures only that row (and the exit of a process without the
              recorder it is measured against).

Exit status: 0 when every row was measured (targets missed or not: timings never fail this),
1 when something could not run.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# ---------------------------------------------------------------------------------------------
# Where things are

def locate(args):
    build = os.path.abspath(args.build_dir) if args.build_dir else None

    def path(var, *rel):
        value = os.environ.get(var)
        if value:
            return value
        if build is None:
            sys.exit(f"run_bench: set {var} or pass --build-dir")
        return os.path.join(build, *rel)

    paths = {
        "launch": path("FERRUM_BENCH_LAUNCH", "bench", "ferrum-bench-launch"),
        "naive": path("FERRUM_BENCH_NAIVE", "bench", "libferrum-bench-naive.so"),
        "empty": path("FERRUM_BENCH_EMPTY", "bench", "libferrum-bench-empty.so"),
        "empty_shim_layout": path("FERRUM_BENCH_EMPTY_SHIM_LAYOUT", "bench",
                                  "libferrum-bench-empty-shim-layout.so"),
        "spawn": path("FERRUM_BENCH_SPAWN", "bench", "ferrum-bench-spawn"),
        "probe": path("FERRUM_BENCH_PROBE", "bench", "ferrum-bench-probe"),
        "shim": path("FERRUM_SHIM", "shim", "libferrum-replay.so"),
        "recorder": path("FERRUM_RECORDER_LIB", "recorder", "libferrum-replay-recorder.so"),
        "standin": path("STANDIN_DIR", "tests", "support", "standin"),
    }
    for name, p in paths.items():
        if not os.path.exists(p):
            sys.exit(f"run_bench: {name} not found at {p} (build first: scripts/build)")
    return paths


def clean_environment(paths):
    """Our environment without anything that would change what is measured."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "NVTX_INJECTION64_PATH") and not k.startswith("FERRUM_")}
    env["LD_LIBRARY_PATH"] = paths["standin"] + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["FERRUM_STANDIN_BENCH"] = "1"
    return env


def run(cmd, env, what, timeout=600):
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"run_bench: {what} timed out after {timeout} s")
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        sys.exit(f"run_bench: {what} failed (exit {p.returncode}): {' '.join(cmd)}")
    return p


def keyvalues(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

# ---------------------------------------------------------------------------------------------
# Launch cost: Google Benchmark in six configurations, interleaved

CONFIGS = ["baseline", "shim", "shim_active", "shim_off", "shim_recorder", "naive",
           "naive_recorder", "gpu_baseline", "shim_gpu", "shim_gpu_recorder"]
CONFIG_LABEL = {
    "baseline": "no preload",
    "shim": "shim, no tool",
    # No tool, but FERRUM_REPLAY_SUMMARY set: the shim keeps its registry and counters, so the
    # whole launch path runs (NVTX's calls find no tool). The scaling rows use it: with no
    # tool and no summary the shim passes launches straight through.
    "shim_active": "shim, no tool, summary on",
    "shim_off": "shim, FERRUM_REPLAY=off",
    "shim_recorder": "shim + recorder",
    "naive": "naive, no tool",
    "naive_recorder": "naive + recorder",
    # GPU timing (FERRUM_REPLAY_GPU_TIME=on). Benchmarks batched:ROUTE (the bare launch) and,
    # in gpu_baseline, events:ROUTE (the launch between two direct cuEventRecord calls).
    "gpu_baseline": "no preload, launch between two cuEventRecord calls",
    "shim_gpu": "shim + GPU timing, no tool",
    "shim_gpu_recorder": "shim + GPU timing + recorder",
}
# The benchmark set (launch_bench.cpp --ferrum-set) of each configuration: "all" unless named.
CONFIG_SET = {"gpu_baseline": "timed-baseline", "shim_gpu": "timed",
              "shim_gpu_recorder": "timed"}
TIMED_BATCH_FLUSH = 512  # ferrum-bench-launch --ferrum-flush-every for the timed memory row


def config_env(config, paths, env, tmpdir):
    env = dict(env)
    if config.startswith("shim"):
        env["LD_PRELOAD"] = paths["shim"]
    elif config.startswith("naive"):
        env["LD_PRELOAD"] = paths["naive"]
    if config == "shim_off":
        env["FERRUM_REPLAY"] = "off"
    if config == "shim_active":
        env["FERRUM_REPLAY_SUMMARY"] = os.path.join(tmpdir, "summary.%p.txt")
    if config.startswith("shim_gpu"):
        env["FERRUM_REPLAY_GPU_TIME"] = "on"
    if config.endswith("recorder"):
        env["NVTX_INJECTION64_PATH"] = paths["recorder"]
        env["FERRUM_RECORD_OUT"] = os.path.join(tmpdir, "launch.%p.json")
        env["FERRUM_RECORD_TABLE"] = "0"
        # Room for every route's ranges in memory: with GPU timing a launch records two events
        # (its range and its replay's GPU time), and at the default budget (24 MiB, about 390,000
        # events) the third route of that set began to spill, reading 30-40 ns more than the
        # other two for a reason that is not its route. Spilling is measured apart
        # (docs/performance.md).
        env["FERRUM_RECORD_MEMORY"] = "256M"
    return env


def run_launch_config(config, paths, env, tmpdir, opts):
    cmd = [paths["launch"], "--benchmark_format=json",
           f"--benchmark_repetitions={opts['repetitions']}"]
    if config in CONFIG_SET:
        cmd.append(f"--ferrum-set={CONFIG_SET[config]}")
    if config.endswith("recorder"):
        # The recorder keeps every range in memory until exit: fixed, bounded iterations, and
        # only the three routes (the scaling rows are about the shim's own data structures).
        if config not in CONFIG_SET:
            cmd.append("--ferrum-set=launch")
        cmd += [f"--ferrum-iterations={opts['recorder_iterations']}",
                f"--ferrum-warmup={opts['recorder_warmup']}"]
    else:
        cmd += [f"--benchmark_min_time={opts['min_time']}",
                f"--benchmark_min_warmup_time={opts['warmup_time']}"]
    p = run(cmd, config_env(config, paths, env, tmpdir), f"ferrum-bench-launch ({config})")
    for leftover in os.listdir(tmpdir):
        os.unlink(os.path.join(tmpdir, leftover))
    data = json.loads(p.stdout)
    times = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        name = re.sub(r"/iterations:\d+", "", b["run_name"])
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        times.setdefault(name, []).append(b["cpu_time"] * scale)
        if "timed_fraction" in b:  # the timed sets: replays timed / launches
            times.setdefault(name + "#timed", []).append(b["timed_fraction"])
    return times, data.get("context", {})


def measure_launches(paths, env, tmpdir, opts, progress):
    """{config: {benchmark: [median of each round]}} and Google Benchmark's context."""
    per_round = {c: {} for c in CONFIGS}
    context = {}
    for r in range(opts["rounds"]):
        order = CONFIGS if r % 2 == 0 else list(reversed(CONFIGS))
        for config in order:
            progress(f"launch round {r + 1}/{opts['rounds']}: {CONFIG_LABEL[config]}")
            times, ctx = run_launch_config(config, paths, env, tmpdir, opts)
            context = context or ctx
            for name, values in times.items():
                # The timed fraction: the worst repetition's (a row holds only when all were).
                value = min(values) if name.endswith("#timed") else statistics.median(values)
                per_round[config].setdefault(name, []).append(value)
    return per_round, context

# ---------------------------------------------------------------------------------------------
# Start-up, side effects, memory

def measure_startup(paths, env, program, count, warmup, preload=None, baseline=None):
    """Without (or with the baseline library) / with the preload, in pairs."""
    p = run([paths["spawn"]] + ([f"--baseline={baseline}"] if baseline else [])
            + [preload or paths["shim"], str(count), str(warmup)] + program, env,
            f"ferrum-bench-spawn {program[0]}")
    kv = keyvalues(p.stdout)
    return (int(kv["median_without_ns"]) / 1e6, int(kv["median_with_ns"]) / 1e6,
            float(kv["median_pair_ratio"]), int(kv["median_pair_diff_ns"]) / 1e3)


def probe(paths, env, preload):
    env = dict(env)
    # Settings a CUDA process would complain about: a non-CUDA one must not even read them.
    env["FERRUM_REPLAY"] = "bogus"
    env["FERRUM_REPLAY_LOG"] = "debug"
    if preload:
        env["LD_PRELOAD"] = preload
    p = run([paths["probe"]], env, "ferrum-bench-probe")
    threads, fds, environment, libs = None, [], [], set()
    for line in p.stdout.splitlines():
        key, _, value = line.partition("=")
        if key == "threads":
            threads = int(value)
        elif key == "fd":
            fds.append(value)
        elif key == "env" and not value.startswith("LD_PRELOAD="):
            environment.append(value)
        elif key == "lib":
            libs.add(value)
    return {"threads": threads, "fds": sorted(fds), "env": environment, "libs": libs,
            "stderr": p.stderr}


def strace_opens(env, program, preload, tmpdir):
    """Files opened and threads created by `program`, from strace; None without strace."""
    strace = shutil.which("strace")
    if not strace:
        return None
    out = os.path.join(tmpdir, "strace.txt")
    cmd = [strace, "-f", "-qq", "-o", out, "-e", "trace=open,openat,clone,clone3"]
    if preload:
        cmd += ["-E", f"LD_PRELOAD={preload}"]
    p = subprocess.run(cmd + program, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0 or not os.path.exists(out):
        return None
    files, clones = set(), 0
    with open(out) as f:
        for line in f:
            m = re.search(r'open(?:at)?\((?:AT_FDCWD, )?"([^"]*)"', line)
            if m and not re.search(r"= -1 ", line):
                files.add(m.group(1))
            elif re.match(r"\d+\s+clone3?\(", line):
                clones += 1
    os.unlink(out)
    return {"files": files, "clones": clones}


def measure_rss(paths, env, tmpdir, first, total, preload, recorder, summary=False,
                gpu_time=False):
    env = dict(env)
    if preload:
        env["LD_PRELOAD"] = preload
    extra = []
    if gpu_time:  # every replay timed: the pool refilled every TIMED_BATCH_FLUSH launches
        env["FERRUM_REPLAY_GPU_TIME"] = "on"
        extra = [f"--ferrum-flush-every={TIMED_BATCH_FLUSH}"]
    if summary:  # the shim active with no tool: its registry and counters at work
        env["FERRUM_REPLAY_SUMMARY"] = os.path.join(tmpdir, "rss-summary.%p.txt")
    trace = None
    if recorder:
        trace = os.path.join(tmpdir, "rss-trace.json")
        env["NVTX_INJECTION64_PATH"] = paths["recorder"]
        env["FERRUM_RECORD_OUT"] = trace
        env["FERRUM_RECORD_TABLE"] = "0"
    p = subprocess.Popen([paths["launch"], f"--rss={first},{total}"] + extra, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=600)
    exited = time.monotonic_ns()  # CLOCK_MONOTONIC, the clock the child printed
    if p.returncode != 0:
        sys.stderr.write(err)
        sys.exit(f"run_bench: ferrum-bench-launch --rss failed (exit {p.returncode})")
    kv = keyvalues(out)
    result = {
        "rss_first": int(kv[f"rss_kib_at_{first}"]),
        "rss_total": int(kv[f"rss_kib_at_{total}"]),
        "faults_between": int(kv["minor_faults_between"]),
        "unnamed_bytes": int(kv["unnamed_file_bytes"]),
        "exit_s": (exited - int(kv["end_monotonic_ns"])) / 1e9,
    }
    if gpu_time:
        result["timed"] = int(kv.get("timed", 0))
        result["not_timed"] = int(kv.get("not_timed", 0))
    if trace:
        result["trace_bytes"] = os.path.getsize(trace)
        with open(trace, "rb") as f:
            f.seek(max(0, result["trace_bytes"] - 4096))
            m = re.search(rb'"ranges":(\d+)', f.read())
        result["ranges"] = int(m.group(1)) if m else None
        os.unlink(trace)
        result["disk_s"] = statistics.median(
            disk_write_seconds(tmpdir, result["trace_bytes"]) for _ in range(3))
    return result


def disk_write_seconds(directory, size, block=1 << 20):
    """Seconds to write `size` bytes into a fresh file of `directory` with plain write() calls of
    `block` bytes and no fsync, as the recorder writes its trace: the disk's own limit."""
    data = memoryview(b"\x5a" * block)
    path = os.path.join(directory, "disk-limit.tmp")
    started = time.monotonic_ns()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        left = size
        while left > 0:
            left -= os.write(fd, data[:min(left, block)])
    finally:
        os.close(fd)
    elapsed = time.monotonic_ns() - started
    os.unlink(path)
    return elapsed / 1e9

# ---------------------------------------------------------------------------------------------
# The table

ROUTES = [("runtime", "runtime symbol (cudaGraphLaunch)"),
          ("driver", "driver symbol (cuGraphLaunch)"),
          ("procaddress", "cuGetProcAddress trampoline")]
ONE = "/1/0"
MANY = "/10000/0"
T1 = "/1/0/threads:1"
T8 = "/1/0/threads:8"
T8_SHARED = "/1/1/threads:8"
GRAPHS_IN_PROCESS = 10_000  # ferrum-bench-launch instantiates this many at start
EXPECTED_ROWS = 26 + 5 + 7 + 8 + 5  # launch (and floor), scaling, GPU timing, non-CUDA process, memory
GPU_TIMING_TARGET_NS = 50.0
STARTUP_TARGET_RATIO = 1.01  # /bin/true: the shim over an empty preloaded library (issue 14)
TIMED_FRACTION_MIN = 0.99  # a GPU-timing row measures timed replays, or it does not hold


class Table:
    def __init__(self):
        self.rows = []
        self.verdicts = []

    def section(self, title):
        self.rows.append(("section", title))

    def row(self, what, measured, baseline, versus, target="", verdict=None):
        if verdict is not None:
            self.verdicts.append((what, verdict))
        self.rows.append(("row", (what, measured, baseline, versus, target,
                                  "" if verdict is None else ("PASS" if verdict else "MISS"))))

    def render(self):
        header = ("row", "measured", "baseline (same run)", "vs baseline", "target", "")
        cells = [header] + [r[1] for r in self.rows if r[0] == "row"]
        widths = [max(len(c[i]) for c in cells) for i in range(len(header))]

        def line(cells_):
            return "| " + " | ".join(c.ljust(w) for c, w in zip(cells_, widths)) + " |"

        out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        for kind, content in self.rows:
            if kind == "section":
                out.append(line((f"**{content}**",) + ("",) * (len(header) - 1)))
            else:
                out.append(line(content))
        return "\n".join(out)


def ns(v):
    return f"{v:.1f} ns"


def build_table(launch, startup, effects, memory, opts):
    per_round = launch
    t = Table()

    def med(config, bench):
        return statistics.median(per_round[config][bench])

    def added(config, bench, reference="baseline", reference_bench=None):
        """Median over rounds of (config − reference) and half the range of the differences."""
        ref = per_round[reference][reference_bench or bench]
        diffs = [a - b for a, b in zip(per_round[config][bench], ref)]
        return statistics.median(diffs), (max(diffs) - min(diffs)) / 2

    def fmt_added(value_spread):
        value, spread = value_spread
        return f"{value:+.1f} ± {spread:.1f} ns"

    def ratio(a, b):
        return a / b if b > 0.05 else float("inf")

    def fmt_ratio(r):
        return "∞ (shim ≈ 0)" if r == float("inf") else f"{r:.2f}×"

    t.section("Launch: CPU ns per launch, added over the same call without preload")
    t.row("direct call into the stand-in driver (cuGetProcAddress pointer, no preload)",
          ns(med("baseline", "procaddress" + ONE)), "", "", "", None)
    for route, label in ROUTES:
        bench = route + ONE
        base = med("baseline", bench)
        for config, target, limit in (("shim", "≤ 5 ns", 5.0), ("shim_active", "", None),
                                      ("shim_off", "≤ 2 ns", 2.0),
                                      ("shim_recorder", "≤ 50 ns", 50.0),
                                      ("naive", "", None), ("naive_recorder", "", None)):
            name = f"{label}: {CONFIG_LABEL[config]}"
            if config.startswith("naive") and route == "procaddress":
                t.row(name, "not intercepted", ns(base), "—", "", None)
                continue
            a = added(config, bench)
            t.row(name, ns(med(config, bench)), ns(base), fmt_added(a), target,
                  None if limit is None else a[0] <= limit)
        if route != "procaddress":
            ours, naive = added("shim", bench)[0], added("naive", bench)[0]
            r = ratio(naive, ours)
            t.row(f"{label}: naive's added cost ÷ ours, no tool", f"+{naive:.1f} ns naive",
                  f"+{ours:.1f} ns ours", fmt_ratio(r), "≥ 3×", r >= 3.0)
            ours, naive = added("shim_recorder", bench)[0], added("naive_recorder", bench)[0]
            r = ratio(naive, ours)
            t.row(f"{label}: naive's added cost ÷ ours, recorder", f"+{naive:.1f} ns naive",
                  f"+{ours:.1f} ns ours", fmt_ratio(r), "", None)

    # What recording a range costs on this machine before the shim or the recorder do anything:
    # why the recorder rows cannot go below it (docs/performance.md, "The recorder's floor").
    stamps, event = med("baseline", "floor:timestamps"), med("baseline", "floor:event")
    t.row("recorder's floor: two timestamp reads (recorder/clock.hpp), no preload", ns(stamps),
          "", "", "", None)
    t.row("recorder's floor: one range appended to fresh memory (ThreadBuffer, 16 B packed), no preload",
          ns(event), "", "", "", None)
    t.row("  together: the least a recorded range costs here", ns(stamps + event), "",
          "", "", None)

    t.section("Scaling (cuGetProcAddress trampoline, shim active: no tool, summary on; "
              "added ns per launch)")
    one, many = (added("shim_active", "procaddress" + ONE),
                 added("shim_active", "procaddress" + MANY))
    r = ratio(many[0], one[0])
    t.row("10,000 live graphs round-robin vs 1 graph", fmt_added(many), fmt_added(one),
          fmt_ratio(r), "≤ 1.2×", r <= 1.2)
    t.row("  total per launch, 10,000 vs 1 graph, without preload",
          ns(med("baseline", "procaddress" + MANY)), ns(med("baseline", "procaddress" + ONE)),
          fmt_ratio(ratio(med("baseline", "procaddress" + MANY),
                          med("baseline", "procaddress" + ONE))), "", None)
    one, eight = (added("shim_active", "procaddress" + T1),
                  added("shim_active", "procaddress" + T8))
    r = ratio(eight[0], one[0])
    shared = added("shim_active", "procaddress" + T8_SHARED)
    r_shared = ratio(shared[0], one[0])
    t.row("8 threads launching one shared graph vs 1 thread, CPU per launch", fmt_added(shared),
          fmt_added(one), fmt_ratio(r_shared), "≤ 1.5×", r_shared <= 1.5)
    t.row("  8 threads at once (own graph each) vs 1 thread", fmt_added(eight),
          fmt_added(one), fmt_ratio(r), "≤ 1.5×", r <= 1.5)
    t.row("  total per launch, 8 threads vs 1, without preload",
          ns(med("baseline", "procaddress" + T8)), ns(med("baseline", "procaddress" + T1)),
          fmt_ratio(ratio(med("baseline", "procaddress" + T8),
                          med("baseline", "procaddress" + T1))), "", None)

    t.section("GPU timing (FERRUM_REPLAY_GPU_TIME=on): CPU ns per launch added over the same "
              "launch between two direct cuEventRecord calls, no preload")
    t.row("two cuEventRecord calls themselves (driver symbol, no preload)",
          ns(med("gpu_baseline", "events:driver")), ns(med("gpu_baseline", "batched:driver")),
          fmt_added(added("gpu_baseline", "events:driver", "gpu_baseline", "batched:driver")),
          "", None)
    for route, label in ROUTES:
        for config, target in (("shim_gpu", True), ("shim_gpu_recorder", False)):
            bench = "batched:" + route
            a = added(config, bench, "gpu_baseline", "events:" + route)
            timed = min(per_round[config].get(bench + "#timed", [0.0]))
            ok = a[0] <= GPU_TIMING_TARGET_NS and timed >= TIMED_FRACTION_MIN
            t.row(f"{label}: {CONFIG_LABEL[config]}",
                  f"{ns(med(config, bench))}, {timed * 100:.0f} % timed",
                  ns(med("gpu_baseline", "events:" + route)), fmt_added(a),
                  f"≤ {GPU_TIMING_TARGET_NS:.0f} ns, ≥ {TIMED_FRACTION_MIN * 100:.0f} % timed"
                  if target else "", ok if target else None)

    t.section("A process that never uses CUDA")
    # The target: what the shim costs over the floor any preloaded library pays, the two
    # spawned in pairs (the same conditions). The rows against no preload show the absolutes.
    for label, (without, with_, pair_ratio, pair_diff_us), target in (
            ("start-up of /bin/true, shim vs an empty preloaded library (same run)",
             startup["true_vs_empty"], STARTUP_TARGET_RATIO),
            ("  the shim vs an empty library with the shim's segment layout",
             startup["true_vs_same_layout"], None),
            ("  start-up, /bin/true, shim vs no preload", startup["true"], None),
            ("  floor: an empty preloaded library vs no preload, /bin/true", startup["empty"],
             None),
            ("start-up, python3 -c pass, shim vs no preload", startup["python"], None)):
        t.row(label + " (median of spawns)", f"{with_:.3f} ms", f"{without:.3f} ms",
              f"{pair_ratio:.3f}× ({pair_diff_us:+.1f} µs)",
              f"≤ {target:.2f}×" if target else "", pair_ratio <= target if target else None)
    w, wo = effects["with"], effects["without"]
    added_libs = sorted(w["libs"] - wo["libs"])
    expected_libs = [os.path.realpath(effects["shim"])]
    same = (w["threads"] == wo["threads"] and w["fds"] == wo["fds"] and w["env"] == wo["env"]
            and [os.path.realpath(x) for x in added_libs] == expected_libs and not w["stderr"])
    t.row("threads, descriptors, environment, libraries, stderr (probe)",
          f"{w['threads']} thread, {len(w['fds'])} fds, env {'same' if w['env'] == wo['env'] else 'CHANGED'}, "
          f"+{', '.join(os.path.basename(x) for x in added_libs) or 'nothing'}, "
          f"stderr {'empty' if not w['stderr'] else 'NOT empty'}",
          f"{wo['threads']} thread, {len(wo['fds'])} fds", "no change" if same else "CHANGED",
          "no change", same)
    for label, key in (("/bin/true", "true"), ("python3 -c pass", "python")):
        traced = effects.get("strace_" + key)
        if traced is None:
            t.row(f"files opened, threads created: {label} (strace)", "strace unavailable", "",
                  "", "", None)
            continue
        w, wo = traced
        extra = sorted(w["files"] - wo["files"])
        ok = ([os.path.realpath(x) for x in extra] == expected_libs and w["clones"] == wo["clones"])
        t.row(f"files opened, threads created: {label} (strace)",
              f"{len(w['files'])} files, {w['clones']} threads",
              f"{len(wo['files'])} files, {wo['clones']} threads",
              "+" + (", ".join(os.path.basename(x) for x in extra) or "nothing"),
              "only the shim itself", ok)

    t.section("Memory")
    m = memory["shim"]
    growth = m["rss_total"] - m["rss_first"]
    t.row(f"resident size after {opts['rss_total']:,} launches vs {opts['rss_first']:,} "
          "(shim active: summary on, no tool)", f"{m['rss_total']} KiB", f"{m['rss_first']} KiB",
          f"{growth:+d} KiB, {m['faults_between']} page faults", "+0", growth <= 0 and
          m["faults_between"] == 0)
    b = memory["baseline"]
    extra = m["rss_total"] - b["rss_total"]
    t.row(f"  resident size with the shim vs without ({GRAPHS_IN_PROCESS:,} live graphs)",
          f"{m['rss_total']} KiB", f"{b['rss_total']} KiB",
          f"{extra:+d} KiB ({extra * 1024 / GRAPHS_IN_PROCESS:.0f} B per graph)", "", None)
    g = memory["gpu"]
    growth = g["rss_total"] - g["rss_first"]
    launches = opts["rss_gpu_total"]
    timed = g["timed"] / launches if launches else 0.0
    t.row(f"resident size after {launches:,} timed replays vs {opts['rss_first']:,} "
          "(shim + GPU timing, no tool)", f"{g['rss_total']} KiB, {timed * 100:.0f} % timed",
          f"{g['rss_first']} KiB", f"{growth:+d} KiB, {g['faults_between']} page faults", "+0",
          growth <= 0 and timed >= TIMED_FRACTION_MIN)
    r = memory["recorder"]
    events = opts["recorder_events"] - opts["rss_first"]
    per_event = (r["rss_total"] - r["rss_first"]) * 1024 / events
    spilled = r["unnamed_bytes"] / opts["recorder_events"]
    t.row(f"recorder: memory per range ({events:,} ranges)", f"{per_event:.0f} B resident",
          f"{spilled:.0f} B reserved in its spill file", "", "", None)
    recorder_exit_row(t, memory, opts)
    return t


def recorder_exit_row(t, memory, opts):
    r = memory["recorder"]
    ranges = r["ranges"] or opts["recorder_events"]
    exit_s = max(r["exit_s"] - memory["shim"]["exit_s"], 1e-9)  # minus a process without it
    rate = r["trace_bytes"] / exit_s
    disk = r["trace_bytes"] / max(r["disk_s"], 1e-9)
    t.row(f"recorder: trace written at exit ({ranges:,} ranges)",
          f"{rate / 1e6:.0f} MB/s, {ranges / exit_s / 1e6:.2f} M ranges/s",
          f"disk {disk / 1e6:.0f} MB/s (the same bytes, 1 MiB writes, same directory)",
          f"{rate / disk * 100:.0f} % of the disk's; {exit_s * 1000:.0f} ms, "
          f"{r['trace_bytes'] / ranges:.0f} B/range", "≥ 1 GB/s or the disk's",
          rate >= min(1e9, disk))


# ---------------------------------------------------------------------------------------------

class OneLineParser(argparse.ArgumentParser):
    """A usage error in one line (exit 2), before anything is measured."""

    def error(self, message):
        self.exit(2, f"run_bench.py: {message} (see --help)\n")


def rounds_count(text):
    """--rounds: a whole number of 1 or more. 0 was taken for "not given" (the default ran) and a
    negative count measured a minute of start-up and memory rows, then died with a KeyError."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1 round is measured")
    return value


def main():
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir")
    ap.add_argument("--rounds", type=rounds_count, metavar="R",
                    help="rounds of every launch configuration (at least 1; default 5, --smoke 1)")
    ap.add_argument("--smoke", action="store_true",
                    help="a few seconds: checks the suite runs and prints every row")
    ap.add_argument("--markdown", help="also write the table (and its header) to this file")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    ap.add_argument("--recorder-exit", action="store_true",
                    help="only the row of the recorder's exit report (trace MB/s beside the disk's)")
    args = ap.parse_args()
    paths = locate(args)
    env = clean_environment(paths)

    if args.smoke:
        opts = dict(rounds=1, repetitions=1, min_time=0.002, warmup_time=0.001,
                    recorder_iterations=2000, recorder_warmup=200, spawn_count=5,
                    startup_target_count=5, spawn_warmup=1, python_count=2, rss_first=10_000,
                    rss_total=100_000, recorder_events=100_000, rss_gpu_total=100_000)
    else:
        opts = dict(rounds=5, repetitions=3, min_time=0.05, warmup_time=0.02,
                    recorder_iterations=30_000, recorder_warmup=10_000, spawn_count=400,
                    startup_target_count=4000, spawn_warmup=20, python_count=40,
                    rss_first=10_000, rss_total=10_000_000, recorder_events=1_000_000,
                    rss_gpu_total=1_000_000)
    if args.rounds is not None:
        opts["rounds"] = args.rounds

    def progress(text):
        if not args.quiet:
            sys.stderr.write(f"run_bench: {text}\n")
            sys.stderr.flush()

    if args.recorder_exit:
        return recorder_exit_only(paths, env, opts, progress)

    started = time.monotonic()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ferrum-bench.") as tmpdir:
        launch, context = measure_launches(paths, env, tmpdir, opts, progress)
        progress("start-up: /bin/true, the shim against an empty preloaded library")
        startup = {"true_vs_empty": measure_startup(paths, env, ["/bin/true"],
                                                    opts["startup_target_count"],
                                                    opts["spawn_warmup"],
                                                    baseline=paths["empty"])}
        progress("start-up: /bin/true, the shim against an empty library linked the same way")
        startup["true_vs_same_layout"] = measure_startup(
            paths, env, ["/bin/true"], opts["startup_target_count"], opts["spawn_warmup"],
            baseline=paths["empty_shim_layout"])
        progress("start-up: /bin/true")
        startup["true"] = measure_startup(paths, env, ["/bin/true"], opts["spawn_count"],
                                          opts["spawn_warmup"])
        progress("start-up: /bin/true with an empty preloaded library")
        startup["empty"] = measure_startup(paths, env, ["/bin/true"], opts["spawn_count"],
                                           opts["spawn_warmup"], paths["empty"])
        progress("start-up: python3 -c pass")
        startup["python"] = measure_startup(paths, env, [sys.executable, "-c", "pass"],
                                            opts["python_count"], opts["spawn_warmup"])
        progress("side effects in a process that never uses CUDA")
        effects = {"shim": paths["shim"], "without": probe(paths, env, None),
                   "with": probe(paths, env, paths["shim"])}
        for key, program in (("true", ["/bin/true"]), ("python", [sys.executable, "-c", "pass"])):
            a = strace_opens(env, program, None, tmpdir)
            b = strace_opens(env, program, paths["shim"], tmpdir)
            effects["strace_" + key] = (b, a) if a is not None and b is not None else None
        progress("memory")
        memory = {
            "shim": measure_rss(paths, env, tmpdir, opts["rss_first"], opts["rss_total"],
                                paths["shim"], False, summary=True),
            "baseline": measure_rss(paths, env, tmpdir, opts["rss_first"], opts["rss_total"],
                                    None, False),
            "recorder": measure_rss(paths, env, tmpdir, opts["rss_first"],
                                    opts["recorder_events"], paths["shim"], True),
            "gpu": measure_rss(paths, env, tmpdir, opts["rss_first"], opts["rss_gpu_total"],
                               paths["shim"], False, gpu_time=True),
        }

    table = build_table(launch, startup, effects, memory, opts)
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "?")
    except OSError:
        pass
    header = (f"ferrum-replay benchmarks{' (smoke run: figures not meaningful)' if args.smoke else ''}"
              f" — {model}, {os.cpu_count()} CPUs, {context.get('mhz_per_cpu', '?')} MHz; "
              f"stand-in driver (FERRUM_STANDIN_BENCH=1); {opts['rounds']} rounds × "
              f"{opts['repetitions']} repetitions, medians; {time.monotonic() - started:.0f} s; "
              f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after "
              f"(other work on the machine widens the ± spreads)")
    text = header + "\n\n" + table.render() + "\n"
    missed = [what for what, ok in table.verdicts if not ok]
    text += (f"\ntargets: {len(table.verdicts) - len(missed)} PASS, {len(missed)} MISS"
             + (" — " + "; ".join(missed) if missed else "") + "\n")
    sys.stdout.write(text)
    rows = sum(1 for kind, _ in table.rows if kind == "row")
    if rows != EXPECTED_ROWS or "nan" in text:
        sys.stderr.write(f"run_bench: the table has {rows} rows, expected {EXPECTED_ROWS}\n")
        return 1
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


def recorder_exit_only(paths, env, opts, progress):
    """--recorder-exit: the exit report's row and what it is measured against, nothing else."""
    with tempfile.TemporaryDirectory(prefix="ferrum-bench.") as tmpdir:
        progress("memory: a process without the recorder, then with it")
        memory = {"shim": measure_rss(paths, env, tmpdir, opts["rss_first"], opts["rss_total"],
                                      paths["shim"], False, summary=True),
                  "recorder": measure_rss(paths, env, tmpdir, opts["rss_first"],
                                          opts["recorder_events"], paths["shim"], True)}
    t = Table()
    t.section("Memory")
    recorder_exit_row(t, memory, opts)
    sys.stdout.write(t.render() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
