#!/usr/bin/env python3
"""The host's resources stay the host's: real programs under the shim and the recorder that do
to their descriptors and libraries what real programs do, and the recorder's messages about it.

Scenario                 the program                              what must hold
-----------------------  ---------------------------------------  ---------------------------------
descriptors_closed       6,000 launches; closes every descriptor  its 4 files byte-identical (during
                         3..1023 after the first 2,000, launches  the run and after exit); the trace
                         2,000 with them closed, then opens 4     holds exactly 6,000 ranges, and
                         files of its own (the lowest numbers)    its footer and the table's first
                         and launches 2,000 more                  line say 6,000
descriptors_replaced     the same, 1,500 per phase, and then      the same, 6,000 ranges
                         dup2s its files over every number 3..63
                         and launches 1,500 more
standard_streams_taken   closes stdout and stderr and opens two   they hold exactly its bytes after
                         files of its own, which take numbers 1   exit (checked by the program and
                         and 2: before its first launch           the test): no table, summary, log
                         (O_CLOEXEC) or after (without): then     line or trace written to
                         launches, with the table, the summary    /dev/stdout reaches them; the
                         and the log on stderr                    trace file holds every launch
driver_unloadable        dlopens the driver, launches 3,000       dlopen(RTLD_NOLOAD) no longer finds
                         times, dlcloses it                       it, as without the shim (checked:
                                                                  the bare run unloads it too)
threads_come_and_go      20,000 threads one after another, each   every launch its range, on its own
                         launching once                           thread's track; resident size at
                                                                  the end under 40 MiB more than
                                                                  the bare run's (not ~10 KiB per
                                                                  ended thread)
tool_without_handlers    an NVTX tool that attaches but installs  the shim's log says the tool is
                         nothing (FERRUM_REPLAY_LOG=info)         loaded and handles no domain, not
                                                                  that it failed; a tool that fails
                                                                  and an unset path each get their
                                                                  own words
table_capped             60 graphs with distinct names            the table lists the 50 busiest and
                                                                  one line for the other 10; the
                                                                  trace has all 60
table_bogus_value        FERRUM_RECORD_TABLE=bogus                one quoted warning line, then the
                                                                  table (the default)
Uses tests/shim/scenarios/harness.py; run through meson (suite reliability).
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shim",
                                "scenarios"))
import harness  # noqa: E402
from harness import expect, expect_balanced  # noqa: E402

PROGRAM = None  # --program
IDLE_TOOL = None  # --idle-tool
FAILING_TOOL = None  # --failing-tool


def known_bytes(index):
    """What host_resources writes to its file own<index>."""
    pattern = bytes(c ^ (index + 1) for c in b"own-file-")
    size = 512 * 1024
    return (pattern * (size // len(pattern) + 1))[:size]


def values(text):
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", text)}


def table_ranges(stderr):
    match = re.search(r"^ferrum-replay recorder: (\d+) ranges on \d+ threads", stderr, re.M)
    return int(match[1]) if match else None


def check_descriptors(mode, per_phase, phases):
    with tempfile.TemporaryDirectory(prefix="ferrum-fds-") as own_dir:
        # Every full chunk of ranges spilled (FERRUM_RECORD_MEMORY=0): the spill is what the
        # program's descriptors must not reach.
        run_ = harness.run([PROGRAM, "descriptors", own_dir, str(per_phase), mode],
                           env={"FERRUM_RECORD_TABLE": "1", "FERRUM_RECORD_MEMORY": "0"})
        expect(run_.returncode == 0, "the program failed", run_)
        expect("own_files=ok" in run_.stdout, "the program's own files changed during the run",
               run_)
        for index in range(4):
            with open(os.path.join(own_dir, f"own{index}"), "rb") as handle:
                expect(handle.read() == known_bytes(index),
                       f"own{index} changed by the time the process had exited", run_)
    launches = per_phase * phases
    got = values(run_.stdout)
    expect(got.get("launches") == launches and got.get("failed") == 0, "launches failed", run_)
    expect_balanced(run_)
    harness.expect_one_range_per_launch(run_, launches)
    held = len(harness.trace_check.ranges(run_.trace))
    footer = run_.trace["ferrumReplay"]["ranges"]
    expect(footer == held == launches,
           f"footer says {footer} ranges, the trace holds {held}, launches {launches}", run_)
    expect(table_ranges(run_.stderr) == launches,
           f"the table's first line does not say {launches} ranges", run_)


def descriptors_closed():
    check_descriptors("close", 2000, 3)


def descriptors_replaced():
    check_descriptors("dup2", 1500, 4)


def standard_streams_taken():
    launches = 50
    for when in ("before", "after"):
        total = launches * (2 if when == "after" else 1)
        for to_stdout in (False, True):
            with tempfile.TemporaryDirectory(prefix="ferrum-std-") as own_dir:
                env = {"FERRUM_RECORD_TABLE": "1", "FERRUM_REPLAY_SUMMARY": "stderr",
                       "FERRUM_REPLAY_LOG": "info"}
                if to_stdout:
                    env.update({"NVTX_INJECTION64_PATH": harness.path_of("FERRUM_RECORDER_LIB"),
                                "FERRUM_RECORD_OUT": "/dev/stdout"})
                run_ = harness.run([PROGRAM, "standard-streams", own_dir, str(launches), when],
                                   record=not to_stdout, env=env)
                what = f"{when}, trace to {'/dev/stdout' if to_stdout else 'a file'}"
                expect(run_.returncode == 0,
                       f"{what}: the program's own files changed during the run", run_)
                for index, name in ((5, "out"), (6, "err")):
                    with open(os.path.join(own_dir, name), "rb") as handle:
                        expect(handle.read() == known_bytes(index),
                               f"{what}: its file {name} (descriptor {index - 4}) holds more "
                               f"than its own bytes after exit", run_)
                if not to_stdout:
                    harness.expect_one_range_per_launch(run_, total)


def driver_unloadable():
    # Under LeakSanitizer (scripts/test's asan stage): the stand-in driver keeps its state for
    # the life of the process, and once it is unloaded nothing points there any more, with or
    # without the shim. Leak checking of the shim and the recorder is left to the other scenarios.
    quiet = {}
    if "ASAN_OPTIONS" in os.environ:
        quiet["ASAN_OPTIONS"] = os.environ["ASAN_OPTIONS"] + ":detect_leaks=0"
    bare = harness.run([PROGRAM, "unload"], preload=False, record=False, env=quiet)
    expect(bare.returncode == 0 and values(bare.stdout).get("still_loaded") == 0,
           "without the shim the driver is not unloaded either: this test could not fail", bare)
    run_ = harness.run([PROGRAM, "unload"], env=quiet)
    expect(run_.returncode == 0, "the program failed", run_)
    expect(values(run_.stdout).get("still_loaded") == 0,
           "with the shim and the recorder attached, dlclose no longer unloads the driver", run_)
    expect_balanced(run_)
    harness.expect_one_range_per_launch(run_, 3000)


def tool_without_handlers():
    argv = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "1", "--iters", "3"]
    log = {"FERRUM_REPLAY_LOG": "info"}
    idle = harness.run(argv, record=False, env={**log, "NVTX_INJECTION64_PATH": IDLE_TOOL})
    expect(idle.returncode == 0, "the program failed", idle)
    expect("failed" not in idle.stderr, "a tool that attached was reported as failed", idle)
    expect(re.search(r"the NVTX tool '.*idle-nvtx-tool.*' is loaded but answered no "
                     r"nvtxDomainCreateA", idle.stderr),
           "the log does not say that the tool is loaded but handles no domain", idle)
    failing = harness.run(argv, record=False,
                          env={**log, "NVTX_INJECTION64_PATH": FAILING_TOOL})
    expect(re.search(r"the NVTX tool '.*failing-nvtx-tool.*' is not loaded \(it could not be "
                     r"loaded or its initialisation failed\)", failing.stderr),
           "a tool whose initialisation fails is not reported as such", failing)
    unset = harness.run(argv, record=False, env=log)
    expect("no NVTX tool is attached (NVTX_INJECTION64_PATH is unset)" in unset.stderr,
           "no tool at all is not reported as such", unset)


def table_capped():
    argv = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "60", "--iters", "1"]
    run_ = harness.run(argv, env={"FERRUM_RECORD_TABLE": "1", "FERRUM_REPLAY_SITE": "off"})
    expect(run_.returncode == 0, "the program failed", run_)
    lines = run_.stderr.splitlines()
    rows = [line for line in lines if re.match(rf"^{harness.DOMAIN}\s+graph \d+\s", line)]
    expect(len(rows) == 50, f"{len(rows)} table rows, expected the 50 busiest", run_)
    expect(table_ranges(run_.stderr) == 60, "the first line does not count all 60 ranges", run_)
    rest = [line for line in lines if line.startswith("... and ")]
    expect(len(rest) == 1 and re.match(r"^\.\.\. and 10 more range names \(10 ranges, total "
                                       r"\d+\.\d{3} ms\); the trace has every range$", rest[0]),
           "no single line for the other 10 names", run_)
    harness.expect_one_range_per_launch(run_, 60)
    expect(len({r["name"] for r in run_.ranges()}) == 60, "the trace lacks names", run_)


def table_bogus_value():
    argv = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "1", "--iters", "3"]
    run_ = harness.run(argv, env={"FERRUM_RECORD_TABLE": "bogus"})
    expect(run_.returncode == 0, "the program failed", run_)
    lines = run_.stderr.splitlines()
    warnings = [line for line in lines if "FERRUM_RECORD_TABLE" in line]
    expect(warnings == ["ferrum-replay recorder: FERRUM_RECORD_TABLE='bogus' is invalid "
                        "(expected 1 or 0); printing the table"],
           "expected exactly one quoted warning", run_)
    expect(table_ranges(run_.stderr) == 3, "the table (the default) was not printed", run_)


def threads_come_and_go():
    """20,000 threads one after another, each launching once (a pool that recycles its threads,
    a thread per request). Every launch keeps its range, on its own thread's track; and the
    recorder's memory does not grow by a buffer per ended thread (it did: 191 MB resident at the
    end, 10 KiB per thread) — it keeps their events, not their buffers."""
    threads = 20000
    bare = harness.run([PROGRAM, "thread-churn", str(threads)], preload=False, record=False)
    run_ = harness.run([PROGRAM, "thread-churn", str(threads)])
    got = values(run_.stdout)
    expect(run_.returncode == 0 and got.get("launches") == threads and got.get("failed") == 0,
           "launches failed", run_)
    expect_balanced(run_)
    harness.expect_one_range_per_launch(run_, threads)
    tids = {r["tid"] for r in run_.ranges()}
    expect(len(tids) == threads, f"{threads} threads' ranges on {len(tids)} tracks", run_)
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
        return  # a sanitizer keeps freed memory in quarantine: resident size says nothing here
    grown = got["rss_kb"] - values(bare.stdout)["rss_kb"]
    expect(grown < 40 * 1024,
           f"resident size grew by {grown} KiB over the bare run for {threads} ended threads",
           run_)


SCENARIOS = {f.__name__: f for f in (descriptors_closed, descriptors_replaced,
                                     standard_streams_taken, driver_unloadable, threads_come_and_go,
                                     tool_without_handlers, table_capped, table_bogus_value)}

if __name__ == "__main__":
    args = sys.argv[1:]
    while args[:1] in (["--program"], ["--idle-tool"], ["--failing-tool"]):
        option, value, args = args[0], args[1], args[2:]
        if option == "--program":
            PROGRAM = value
        elif option == "--idle-tool":
            IDLE_TOOL = value
        elif option == "--failing-tool":
            FAILING_TOOL = value
    sys.argv = [sys.argv[0], *args]
    harness.main(SCENARIOS)
