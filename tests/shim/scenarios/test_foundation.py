"""Issue 2 scenarios: a program that calls a graph launch by name, under the preloaded shim,
with the recorder as the NVTX tool. Each asserts what a user would see: one balanced range
per launch, the launch's result unchanged, and silence where nothing was asked for."""
import os
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DOMAIN, expect, expect_balanced, expect_one_range_per_launch, main,  # noqa: E402
                     path_of, run)
import trace_check  # noqa: E402  (on the path harness set)

GRAPHS, ITERS = 3, 40
LAUNCHES = GRAPHS * ITERS
CUDA_ERROR_LAUNCH_FAILED = 719


def launch(program_variable, *extra, **kwargs):
    argv = [path_of(program_variable), "--graphs", str(GRAPHS), "--iters", str(ITERS), *extra]
    return run(argv, **kwargs)


# Runs a program (argv[1:]) with the environment this process has plus the NAME=value entries
# of argv[0] (newline-separated) appended as they are: a name may appear twice, which no
# mapping of Python's can hold.
EXECVE_WITH_ENTRIES = r"""
import ctypes, os, sys
entries = [f"{k}={v}".encode() for k, v in os.environ.items()]
entries += [e.encode() for e in sys.argv[1].split("\n") if e]
env = (ctypes.c_char_p * (len(entries) + 1))(*entries, None)
args = (ctypes.c_char_p * (len(sys.argv[2:]) + 1))(*[a.encode() for a in sys.argv[2:]], None)
ctypes.CDLL(None, use_errno=True).execve(sys.argv[2].encode(), args, env)
sys.exit(f"execve: {os.strerror(ctypes.get_errno())}")
"""


def launch_with_entries(entries):
    """LAUNCH_DRIVER under the shim, its environment holding `entries` as given (duplicates
    too). The Python that builds it runs without the shim (a sanitizer stage's runtime cannot be
    preloaded into every interpreter); the launcher gets it, its sanitizer's runtime first."""
    preload = " ".join(filter(None, (os.environ.get("FERRUM_TEST_PRELOAD_FIRST"),
                                      path_of("FERRUM_SHIM"))))
    argv = [sys.executable, "-c", EXECVE_WITH_ENTRIES,
            "\n".join([f"LD_PRELOAD={preload}", *entries]), path_of("LAUNCH_DRIVER"),
            "--graphs", str(GRAPHS), "--iters", str(ITERS)]
    return run(argv, preload=False)


def check_named_graphs(run_):
    """Distinct graphs get distinct, stable names: one name per graph, each with every
    replay of that graph (the names themselves are issue 4's: call sites here)."""
    names = sorted({r["name"] for r in run_.ranges()})
    expect(len(names) == GRAPHS, f"range names {names}, expected {GRAPHS} distinct ones", run_)
    for name in names:
        count = len(run_.ranges(name=name))
        expect(count == ITERS, f"{name!r} has {count} ranges, expected {ITERS}", run_)


def plain_launch(program_variable, report_key, *extra):
    run_ = launch(program_variable, *extra)
    expect(run_.returncode == 0, "program failed", run_)
    counts = run_.program_counts()
    expect(counts["launches"] == LAUNCHES, f"program made {counts['launches']} launches", run_)
    expect(run_.report.get(report_key) == LAUNCHES,
           f"stand-in driver saw {run_.report} (expected {report_key}={LAUNCHES})", run_)
    expect_one_range_per_launch(run_, LAUNCHES)
    expect_balanced(run_)
    check_named_graphs(run_)


def numbered_names_without_sites():
    """With call sites off and no other name, graphs are "graph N" in instantiation order.
    Each graph's category (its ordinal) is named after it, and the trace shows that name."""
    run_ = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_SITE": "off"})
    names = sorted({r["name"] for r in run_.ranges()})
    expect(names == [f"graph {i}" for i in range(1, GRAPHS + 1)],
           f"range names {names}, expected graph 1..{GRAPHS}", run_)
    for i in range(1, GRAPHS + 1):
        ranges = run_.ranges(name=f"graph {i}")
        expect(len(ranges) == ITERS, f"graph {i} has {len(ranges)} ranges, expected {ITERS}", run_)
        expect(all(r["args"]["category"] == i and r["args"].get("categoryName") == f"graph {i}"
                   for r in ranges), f"graph {i}'s category name: {ranges[0]['args']}", run_)


def runtime_launch():
    """cudaGraphLaunch of the shared runtime reaches the driver underneath: one range, not two."""
    plain_launch("LAUNCH_RUNTIME", "launches")


def driver_launch():
    plain_launch("LAUNCH_DRIVER", "launches")


def runtime_ptsz():
    """A program built with CUDA_API_PER_THREAD_DEFAULT_STREAM imports cudaGraphLaunch_ptsz."""
    plain_launch("LAUNCH_RUNTIME_PTSZ", "launches_ptsz")


def driver_ptsz():
    plain_launch("LAUNCH_DRIVER_PTSZ", "launches_ptsz")


def runtime_stream_handles():
    """Stream handles 0, 0x1 (legacy) and 0x2 (per-thread) pass through untouched."""
    for stream, key in (("null", "launches"), ("legacy", "launches"), ("ptsz", "launches_ptsz")):
        plain_launch("LAUNCH_RUNTIME", key, "--stream", stream)


def failing_launch():
    """A failing launch: the same result code and output as without the shim, range balanced."""
    env = {"FERRUM_STANDIN_LAUNCH_RESULT": str(CUDA_ERROR_LAUNCH_FAILED)}
    for program in ("LAUNCH_DRIVER", "LAUNCH_RUNTIME"):
        bare = launch(program, preload=False, record=False, env=env)
        shimmed = launch(program, env=env)
        expect(bare.returncode == 3, "the stand-in failure did not reach the program", bare)
        expect(shimmed.returncode == bare.returncode and shimmed.stdout == bare.stdout,
               f"{program}: result differs under the shim:\nwithout:\n{bare.describe()}", shimmed)
        expect(shimmed.program_counts()["failed"] == LAUNCHES, "not every launch failed", shimmed)
        expect_one_range_per_launch(shimmed, LAUNCHES)
        expect_balanced(shimmed)


def exception_through_launch():
    """A C++ exception thrown below the shim unwinds through the launch: the range is still
    popped (our destructor runs), and the program sees its exception unchanged."""
    env = {"FERRUM_STANDIN_LAUNCH_THROW": "1"}
    for program in ("LAUNCH_DRIVER", "LAUNCH_RUNTIME"):
        bare = launch(program, "--app-ranges", preload=False, record=False, env=env)
        shimmed = launch(program, "--app-ranges", env=env)
        expect(f"exceptions={LAUNCHES}" in bare.stdout, "the stand-in did not throw", bare)
        expect(shimmed.returncode == bare.returncode and shimmed.stdout == bare.stdout,
               f"{program}: outcome differs under the shim:\nwithout:\n{bare.describe()}", shimmed)
        expect_one_range_per_launch(shimmed, LAUNCHES)
        expect_balanced(shimmed)
        app = shimmed.ranges(domain="global", name="app step")
        expect(len(app) == LAUNCHES, f"{len(app)} app ranges for {LAUNCHES} launches", shimmed)


def longjmp_out_of_launch():
    """A watchdog leaves launches with siglongjmp from a signal handler (raised inside the
    stand-in driver's launch): no destructor runs, yet every launch — the abandoned ones and
    every one after them, on every thread — has its range and is counted, and every push has
    its pop: the abandoned range's pop is issued at the thread's next launch, or, where the
    thread's last launch was left that way, as the thread ends (worker threads that then
    return) or at exit (a main thread that then returns from main, its graphs never destroyed)."""
    env = {"FERRUM_STANDIN_LAUNCH_RAISE": str(int(signal.SIGUSR1)),
           "FERRUM_REPLAY_SUMMARY": "stderr"}
    # (jumps per thread, threads, extra arguments): the first launches left, later ones return;
    # then every launch left, the last one included, with no graph call after it on its thread.
    cases = [(5, 1, ()), (5, 4, ()), (LAUNCHES, 2, ()), (LAUNCHES, 1, ("--keep-graphs",))]
    for program in ("LAUNCH_DRIVER", "LAUNCH_RUNTIME"):
        for jumps, threads, extra in cases:
            run_ = launch(program, "--jump-out", str(jumps), "--threads", str(threads), *extra,
                          env=env)
            expect(f"jumped={jumps * threads}" in run_.stdout, "the watchdog did not jump", run_)
            expect(run_.returncode == 3, "a jumped launch is a failed one for the program", run_)
            total = LAUNCHES * threads
            expect(run_.report.get("launches") == total, "launches did not reach the driver",
                   run_)
            expect_one_range_per_launch(run_, total)
            expect_balanced(run_)
            open_at_exit = run_.trace["ferrumReplay"]["protocolErrors"]["openAtExit"]
            expect(open_at_exit == 0, f"{open_at_exit} ranges open at exit", run_)
            expect(f"{GRAPHS} graphs, {total} launches" in run_.stderr,
                   "the summary does not count every launch", run_)
            expect(len({r["tid"] for r in run_.ranges()}) == threads, "ranges missing on a thread",
                   run_)
    # Then a fork (a helper child that exits at once) after the main thread's last launch was
    # left: the child inherited the pop owed and issued it at its exit — a range of the
    # parent's launch in the child's trace, no launch of the child's to account for it. The
    # parent closes it before the fork (a fresh-eye review found).
    with tempfile.TemporaryDirectory() as out:
        run_ = launch("LAUNCH_DRIVER", "--jump-out", str(LAUNCHES), "--keep-graphs",
                      "--fork-after", env=dict(env, FERRUM_RECORD_OUT=os.path.join(out, "t.%p.json")))
        traces = sorted(os.listdir(out))
        expect(run_.returncode == 3 and f"jumped={LAUNCHES}" in run_.stdout, "the run", run_)
        expect(len(traces) == 1, f"traces {traces}: the child wrote one of the parent's range", run_)
        trace = trace_check.load(os.path.join(out, traces[0]))
        ours = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == DOMAIN]
        expect(len(ours) == LAUNCHES and
               trace["ferrumReplay"]["protocolErrors"]["openAtExit"] == 0,
               f"the parent's trace: {len(ours)} ranges for {LAUNCHES} launches", run_)


def calls_below_an_abandoned_launch():
    """After a launch left by siglongjmp, the program serves from a deeper frame whose 64 KiB
    buffer it has not written yet, so the abandoned call's stack words under the jump target
    keep their values (F160): every later launch from there has its range and is counted (100
    of 102 went without either, for good), by the driver API and the runtime's; a naming made
    there takes its name (it said -EAGAIN); and a child forked there traces its own launches,
    not the parent's abandoned range."""
    served = 100
    env = {"FERRUM_STANDIN_LAUNCH_RAISE": str(int(signal.SIGUSR1)),
           "FERRUM_REPLAY_SUMMARY": "stderr"}
    program = path_of("JUMP_THEN_DEEPER")
    # Each of the C library's jumps; __longjmp_chk is what a _FORTIFY_SOURCE build calls.
    # Not _longjmp under TSan: it does not see a _longjmp leave a signal handler and reports
    # the handler's later calls as signal-unsafe (the program without the shim too).
    kinds = ["siglongjmp", "longjmp"]
    if "tsan" not in os.environ.get("FERRUM_TEST_PRELOAD_FIRST", ""):
        kinds.append("_longjmp")
    jumps = [(program, ["--jump", kind]) for kind in kinds]
    jumps.append((path_of("JUMP_THEN_DEEPER_FORTIFIED"), ["--jump", "siglongjmp"]))
    for api in ([], ["--runtime"]):
        for binary, jump in jumps:
            run_ = run([binary, *api, *jump, str(served)], env=env)
            expect(run_.returncode == 0 and f"served={served}" in run_.stdout,
                   f"{api} {jump}: the run", run_)
            total = served + 2
            expect(run_.report.get("launches") == total, "launches did not reach the driver", run_)
            expect_one_range_per_launch(run_, total)
            expect_balanced(run_)
            expect(f"1 graphs, {total} launches" in run_.stderr,
                   f"{api} {jump}: the summary does not count every launch", run_)
    named = run([program, "--name", str(served)], env=env)
    expect(named.returncode == 0 and "name=0" in named.stdout,
           "the naming below the abandoned launch was refused", named)
    decoded = named.ranges(name="decode")
    expect(len(decoded) == served, f"{len(decoded)} ranges named decode for {served} launches",
           named)
    with tempfile.TemporaryDirectory() as out:
        run_ = run([program, "--fork", str(served)],
                   env=dict(env, FERRUM_RECORD_OUT=os.path.join(out, "t.%p.json")))
        expect(run_.returncode == 0 and "child=0" in run_.stdout, "the run", run_)
        counts = sorted(
            len([e for e in trace_check.load(os.path.join(out, name))["traceEvents"]
                 if e.get("ph") == "X" and e.get("cat") == DOMAIN])
            for name in os.listdir(out))
        expect(counts == [3, served + 2],
               f"ranges per trace {counts}: the child's own 3 launches, the parent's "
               f"{served + 2}", run_)


def rejecting_tool():
    """A tool that rejects our pushes: we still pop exactly once (the tool swallows it), so the
    application's own ranges stay intact and no protocol error occurs."""
    env = {"FERRUM_RECORD_REJECT": "all", "FERRUM_RECORD_REJECT_DOMAIN": DOMAIN}
    run_ = launch("LAUNCH_DRIVER", "--app-ranges", env=env)
    expect(run_.returncode == 0, "program failed", run_)
    expect(not run_.ranges(), "the tool rejected every push of ours, yet ranges were recorded", run_)
    app = run_.ranges(domain="global", name="app step")
    expect(len(app) == LAUNCHES, f"{len(app)} app ranges for {LAUNCHES} launches", run_)
    expect_balanced(run_)
    rejected = run_.trace["ferrumReplay"]["rejectedPushes"]
    expect(rejected == LAUNCHES, f"recorder counted {rejected} rejected pushes", run_)


def rejecting_every_third_push():
    """Rejections interleaved with acceptances, across both our domain and the app's."""
    run_ = launch("LAUNCH_DRIVER", "--app-ranges", env={"FERRUM_RECORD_REJECT": "3"})
    expect(run_.returncode == 0, "program failed", run_)
    expect_balanced(run_)
    recorded = len(run_.ranges()) + len(run_.ranges(domain="global"))
    rejected = run_.trace["ferrumReplay"]["rejectedPushes"]
    expect(recorded + rejected == 2 * LAUNCHES,
           f"{recorded} recorded + {rejected} rejected != {2 * LAUNCHES} pushes", run_)
    expect(rejected == 2 * LAUNCHES // 3, f"{rejected} rejected, expected every third", run_)


def no_tool_attached():
    """No NVTX tool: the shim is a silent pass-through; output identical to a bare run."""
    for program in ("LAUNCH_DRIVER", "LAUNCH_RUNTIME"):
        bare = launch(program, preload=False, record=False)
        shimmed = launch(program, record=False)
        for field in ("returncode", "stdout", "stderr"):
            expect(getattr(bare, field) == getattr(shimmed, field),
                   f"{program}: {field} differs with the shim and no tool:\nwithout:\n"
                   f"{bare.describe()}", shimmed)
        expect(shimmed.report.get("launches") == LAUNCHES, "launches did not reach the driver",
               shimmed)


def switched_off():
    """FERRUM_REPLAY=off: pure pass-through even with a tool attached."""
    for value in ("off", "0"):
        # The app's own ranges load the recorder, so an absence of ours means something.
        run_ = launch("LAUNCH_RUNTIME", "--app-ranges", env={"FERRUM_REPLAY": value})
        expect(run_.returncode == 0 and run_.stderr == "", "output changed", run_)
        expect(len(run_.ranges(domain="global")) == LAUNCHES, "the app's ranges are missing", run_)
        expect(not run_.ranges(), f"FERRUM_REPLAY={value} still produced ranges", run_)
        expect(run_.report.get("launches") == LAUNCHES, "launches did not reach the driver", run_)


def two_copies_of_the_shim():
    """The same library preloaded twice from two paths (a container's installed copy and the one
    `ferrum-replay record` adds): the program's launches reach the first copy, which reaches
    the driver through the second. Every replay must still be one range and counted once, on
    every route, whichever copy comes first; the first copy says that the launches go past the
    later one."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "libferrum-replay.so")
        shutil.copyfile(path_of("FERRUM_SHIM"), copy)
        for order in ((path_of("FERRUM_SHIM"), copy), (copy, path_of("FERRUM_SHIM"))):
            for program in ("LAUNCH_RUNTIME", "LAUNCH_DRIVER", "LAUNCH_PROCADDRESS",
                            "LAUNCH_STATIC_RUNTIME"):
                run_ = launch(program, env={"LD_PRELOAD": " ".join(order),
                                            "FERRUM_REPLAY_SUMMARY": "stderr",
                                            "FERRUM_REPLAY_LOG": "info"})
                what = f"{program} with {order[0]} first"
                expect(run_.returncode == 0, f"{what}: the program failed", run_)
                expect_one_range_per_launch(run_, LAUNCHES)
                expect_balanced(run_)
                summaries = run_.stderr.count("ferrum-replay launch summary:")
                expect(summaries == 1, f"{what}: {summaries} launch summaries", run_)
                # The later copy is never reached now (the first calls the driver past it): the
                # first says so.
                expect(f"another copy of ferrum-replay ('{order[1]}') is loaded beside this one "
                       f"('{order[0]}')" in run_.stderr,
                       f"{what}: the first copy did not say that the launches skip the later "
                       "one", run_)


def older_copy_after_the_shim():
    """A copy of the shim built before copies stepped aside (tests/shim/coverage/older_shim_copy.c:
    it opens a range of its own, "older copy", around every launch it is handed), preloaded after
    today's shim — a container's image preloads one, `ferrum-replay record` puts its own first.
    The launches must reach the driver past it: every replay was two nested ranges, and the
    judges passed the doubled count (review CP-1). Preloaded first, it names the replays and
    today's copy steps aside, as for any copy."""
    older = path_of("OLDER_SHIM_COPY")
    for program in ("LAUNCH_DRIVER", "LAUNCH_DLOPEN_DRIVER"):
        run_ = launch(program, env={"LD_PRELOAD": f"{path_of('FERRUM_SHIM')} {older}",
                                    "FERRUM_REPLAY_SUMMARY": "stderr"})
        expect(run_.returncode == 0, f"{program}: the program failed", run_)
        expect(run_.report.get("launches") == LAUNCHES, "launches did not reach the driver", run_)
        expect_one_range_per_launch(run_, LAUNCHES)
        doubled = run_.ranges(domain="global", name="older copy")
        expect(not doubled, f"{program}: {len(doubled)} launches went through the older copy "
               "(a second range each)", run_)
        expect_balanced(run_)
        expect(run_.stderr.count("ferrum-replay launch summary:") == 1,
               f"{program}: not one launch summary", run_)
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
        # The stand-in's dlsym resolves RTLD_NEXT after itself, not after its caller (a real
        # copy's does: shim/hooks/loader_stubs_*.S): a sanitizer runtime preloaded before it
        # resolves its interceptors through it and gets the wrong ones (TSan: a crash at start).
        return
    for program in ("LAUNCH_DRIVER",):
        run_ = launch(program, env={"LD_PRELOAD": f"{older} {path_of('FERRUM_SHIM')}",
                                    "FERRUM_REPLAY_LOG": "info"})
        expect(run_.returncode == 0 and run_.report.get("launches") == LAUNCHES,
               f"{program}, older copy first: the launches did not reach the driver", run_)
        expect(len(run_.ranges(domain="global", name="older copy")) == LAUNCHES and
               not run_.ranges(),
               f"{program}, older copy first: it must name every replay, today's copy none", run_)
        expect(f"another copy of ferrum-replay ('{older}') is loaded before this one" in
               run_.stderr,
               f"{program}, older copy first: today's copy did not say why it passes through",
               run_)


def older_copy_alone_with_an_early_nvtx_call():
    """An older copy of the GPU-timing era preloaded alone (the stand-in: its dlsym, asked through
    a handle for cuGraphLaunch, starts it — its first NVTX call), today's recorder as the tool,
    and a program whose first NVTX call comes before its first launch. The recorder, starting
    inside that call, asked the copy's dlsym whether it was a copy of the shim; the copy's NVTX
    call came back into the recorder's start and waited for it for ever (review CQ-1). It reads
    the copy's export table instead: the program runs to its end."""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
        return  # the stand-in's dlsym cannot stand behind a sanitizer runtime (its file says why)
    run_ = launch("LAUNCH_DRIVER", "--app-domains", "1", timeout=60,
                  env={"LD_PRELOAD": path_of("OLDER_SHIM_COPY")})
    expect(run_.returncode == 0 and run_.report.get("launches") == LAUNCHES,
           "the program did not run to its end", run_)
    expect(len(run_.ranges(domain="global", name="older copy")) == LAUNCHES,
           "the older copy did not name every launch", run_)


def program_exporting_the_api():
    """A program that carries its own fallbacks of ferrum-replay's API, exported
    (tests/support/programs/api_stubs.c: a naming function that names nothing, GPU-time hand-off
    functions that abort if called). It is no copy of the shim: taken for one, the shim switched
    itself off and nothing was recorded, silently (review CP-5); and the recorder must never
    call the program's functions as if they were the shim's (CP-3)."""
    for gpu_time in ("off", "on"):
        run_ = launch("LAUNCH_DRIVER_API_STUBS", env={"FERRUM_REPLAY_GPU_TIME": gpu_time,
                                                      "FERRUM_REPLAY_SUMMARY": "stderr"})
        what = f"FERRUM_REPLAY_GPU_TIME={gpu_time}"
        expect(run_.returncode == 0 and "api_stubs:" not in run_.stderr,
               f"{what}: the program failed, or its own hand-off was called", run_)
        expect(run_.report.get("launches") == LAUNCHES, "launches did not reach the driver", run_)
        expect_one_range_per_launch(run_, LAUNCHES)
        expect_balanced(run_)
        expect(run_.stderr.count("ferrum-replay launch summary:") == 1,
               f"{what}: not one launch summary", run_)
        # The program's flush answers the loader first; the recorder takes the shim's hand-off
        # from the first copy with the marker instead (its GPU times were lost: review CR-3).
        replays = len(list(trace_check.gpu_replays(run_.trace)))
        expect(replays == (LAUNCHES if gpu_time == "on" else 0),
               f"{what}: {replays} GPU replays in the trace for {LAUNCHES} launches", run_)


def eight_threads():
    """8 threads launching at once: every launch has its range, balanced per thread."""
    run_ = launch("LAUNCH_DRIVER", "--threads", "8")
    expect(run_.returncode == 0, "program failed", run_)
    total = run_.program_counts()["launches"]
    expect(total == 8 * LAUNCHES, f"program reports {total} launches", run_)
    expect_one_range_per_launch(run_, total)
    expect_balanced(run_)
    threads = {r["tid"] for r in run_.ranges()}
    expect(len(threads) == 8, f"ranges on {len(threads)} threads, expected 8", run_)


def invalid_setting_one_line():
    """An invalid setting is one clear line; the default then applies."""
    run_ = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_DOMAIN": "MPI"})
    lines = run_.stderr.splitlines()
    expect(len(lines) == 1 and "FERRUM_REPLAY_DOMAIN='MPI' is invalid" in lines[0],
           "expected exactly one line about FERRUM_REPLAY_DOMAIN", run_)
    expect_one_range_per_launch(run_, LAUNCHES)  # in the default domain


SOURCE_ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")


def documented_setting_names():
    """Every FERRUM_REPLAY* variable docs/settings.md names in its tables (the settings' and the
    wrapper's), and every one the wrapper, CI job, GPU smoke script and Python package use."""
    with open(os.path.join(SOURCE_ROOT, "docs", "settings.md"), encoding="utf-8") as handle:
        names = set(re.findall(r"^\| `(FERRUM_REPLAY[A-Z0-9_]*)`", handle.read(), re.M))
    tools = [os.path.join(SOURCE_ROOT, "scripts", name)
             for name in ("ferrum-replay", "ci-smoke-profile", "gpu-smoke")]
    package = os.path.join(SOURCE_ROOT, "python", "ferrum_replay")
    tools += [os.path.join(package, name) for name in os.listdir(package) if name.endswith(".py")]
    for tool in tools:
        with open(tool, encoding="utf-8") as handle:
            names |= set(re.findall(r"\b(FERRUM_REPLAY(?:_[A-Z0-9]+)*)\b", handle.read()))
    return sorted(names)


def unknown_setting_one_line():
    """A FERRUM_REPLAY* variable that nothing of ours reads — a misspelt setting — was ignored
    in silence: FERRUM_REPLAY_SUMARY gave no summary and no word why (F257). It is one line
    naming it and the setting it is closest to, as for a bad value; the run is unchanged. Every
    variable docs/settings.md lists, set, draws no such line; switched off, nothing is read."""
    with tempfile.TemporaryDirectory() as tmp:
        run_ = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_SUMARY": os.path.join(tmp, "s.txt"),
                                            "FERRUM_REPLAY_VERBOSE": "1"})
        lines = run_.stderr.splitlines()
        expect(len(lines) == 2, "expected two lines, one per unknown variable", run_)
        expect(any("FERRUM_REPLAY_SUMARY is not a setting" in line
                   and "did you mean FERRUM_REPLAY_SUMMARY?" in line for line in lines),
               "no line naming FERRUM_REPLAY_SUMARY and the setting it is closest to", run_)
        expect(any("FERRUM_REPLAY_VERBOSE is not a setting" in line and "did you mean" not in line
                   for line in lines), "no line naming FERRUM_REPLAY_VERBOSE alone", run_)
        expect_one_range_per_launch(run_, LAUNCHES)
        expect(not os.listdir(tmp), "a misspelt summary setting wrote a file", run_)
        names = documented_setting_names()
        expect(len(names) >= 16 and "FERRUM_REPLAY_PID" in names,
               f"docs/settings.md and the tools name {len(names)} FERRUM_REPLAY* variables", run_)
        valid = {"FERRUM_REPLAY": "on", "FERRUM_REPLAY_LOG": "error",
                 "FERRUM_REPLAY_DOMAIN": "ferrum-replay", "FERRUM_REPLAY_SITE": "instantiate",
                 "FERRUM_REPLAY_CONTENT": "off", "FERRUM_REPLAY_FORMAT": "{name}",
                 "FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "summary.txt"),
                 "FERRUM_REPLAY_RUNNING_DIR": tmp, "FERRUM_REPLAY_GPU_TIME": "off",
                 "FERRUM_REPLAY_GPU_TIME_EVERY": "1", "FERRUM_REPLAY_BUILD": "0",
                 "FERRUM_REPLAY_PID": "1"}
        every = {name: valid.get(name, tmp) for name in names}
        every["FERRUM_REPLAY_NAMES"] = os.path.join(tmp, "missing.names")
        every["FERRUM_REPLAY_SITE_SKIP"] = "none"
        run_ = launch("LAUNCH_DRIVER", env=every)
        said = [line for line in run_.stderr.splitlines() if "is not a setting" in line]
        expect(not said, f"a documented variable is called unknown: {said}", run_)
        run_ = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY": "off", "FERRUM_REPLAY_SUMARY": "x"})
        expect(run_.stderr == "", "switched off, a variable was still read", run_)
        # A variable of the user's own that a pattern of ours reads (%q{NAME}, in the shim's or
        # the recorder's pattern) is theirs, not a misspelt setting: no line, and it is used
        # (review RG-4). One that %% makes literal is read by nothing: still one line.
        env = {"FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "%q{FERRUM_REPLAY_RUN}.txt"),
               "FERRUM_REPLAY_RUN": "run7",
               "FERRUM_RECORD_OUT": os.path.join(tmp, "%q{FERRUM_REPLAY_JOB}.json"),
               "FERRUM_REPLAY_JOB": "j",
               "FERRUM_REPLAY_RUNNING_DIR": os.path.join(tmp, "%%q{FERRUM_REPLAY_TAG}"),
               "FERRUM_REPLAY_TAG": "t"}
        run_ = launch("LAUNCH_DRIVER", env=env)
        said = [line for line in run_.stderr.splitlines() if "is not a setting" in line]
        expect(len(said) == 1 and "FERRUM_REPLAY_TAG is not a setting" in said[0],
               f"expected one line, of FERRUM_REPLAY_TAG alone: {said}", run_)
        expect(os.path.isfile(os.path.join(tmp, "run7.txt")),
               "the summary is not at the name the user's variable gave", run_)
        # Only the pattern settings' values count: a %q{} in another setting's value, or in the
        # misspelt variable's own, exempts nothing (review RV2-2).
        run_ = launch("LAUNCH_DRIVER", env={
            "FERRUM_REPLAY_DOMAIN": "x%q{FERRUM_REPLAY_SUMARY}",
            "FERRUM_REPLAY_SUMARY": os.path.join(tmp, "%q{FERRUM_REPLAY_SUMARY}")})
        said = [line for line in run_.stderr.splitlines() if "is not a setting" in line]
        expect(len(said) == 1 and "FERRUM_REPLAY_SUMARY is not a setting" in said[0],
               f"a misspelt setting exempted by a %q{{}} outside the pattern settings: {said}",
               run_)
        # The bounds (review RV3-2, RV3-3): a pattern as long as its reader takes it — the
        # shim's summary of 1023 bytes, the recorder's trace of 4095 — exempts the variable at
        # its end; one longer than any reader takes (4096 bytes) exempts nothing. 32 distinct
        # FERRUM_* variables are remembered, all patterns together; another name (HOME) takes
        # no room; the 33rd draws its line.
        summary = os.path.join(tmp, "s")
        summary += "x" * (1023 - len(summary) - len("%q{FERRUM_REPLAY_RUN}")) + "%q{FERRUM_REPLAY_RUN}"
        trace = "t" * (4095 - len("%q{FERRUM_REPLAY_JOB}")) + "%q{FERRUM_REPLAY_JOB}"
        env = {"FERRUM_REPLAY_SUMMARY": summary, "FERRUM_REPLAY_RUN": "1",
               "FERRUM_RECORD_OUT": trace, "FERRUM_REPLAY_JOB": "j"}
        run_ = launch("LAUNCH_DRIVER", env=env)
        said = [line for line in run_.stderr.splitlines() if "is not a setting" in line]
        expect(not said and len(summary) == 1023 and len(trace) == 4095,
               f"a pattern of the length its reader takes exempted nothing: {said}", run_)
        run_ = launch("LAUNCH_DRIVER", env=dict(env, FERRUM_RECORD_OUT="t" + trace))
        said = [line for line in run_.stderr.splitlines() if "is not a setting" in line]
        expect(len(said) == 1 and "FERRUM_REPLAY_JOB is not a setting" in said[0],
               f"a pattern no reader takes (4096 bytes) exempted its variable: {said}", run_)
        names = [f"FERRUM_REPLAY_V{i}" for i in range(33)]
        pattern = "%q{HOME}" * 40 + "".join(f"%q{{{name}}}" for name in names)
        run_ = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_RUNNING_DIR": os.path.join(tmp, pattern),
                                            **{name: "v" for name in names}})
        said = [line for line in run_.stderr.splitlines() if "is not a setting" in line]
        expect(len(said) == 1 and "FERRUM_REPLAY_V32 is not a setting" in said[0],
               f"expected a line for the 33rd variable alone: {said}", run_)
        # A name read many times takes one place (review RV4-3): 40 reads of A, then B.
        run_ = launch("LAUNCH_DRIVER", env={
            "FERRUM_REPLAY_RUNNING_DIR": os.path.join(tmp, "%q{FERRUM_REPLAY_A}" * 40 +
                                                      "%q{FERRUM_REPLAY_B}"),
            "FERRUM_REPLAY_A": "a", "FERRUM_REPLAY_B": "b"})
        said = [line for line in run_.stderr.splitlines() if "is not a setting" in line]
        expect(not said, f"a variable read after a repeated one was called unknown: {said}",
               run_)
        # A setting the environment holds twice: every reader takes the first value, so only
        # its variables are the user's (review RV4-3). The environment is built by execve.
        for first, second, line_for_run in (
                (os.path.join(tmp, "plain.txt"), os.path.join(tmp, "%q{FERRUM_REPLAY_RUN}.txt"),
                 True),
                (os.path.join(tmp, "%q{FERRUM_REPLAY_RUN}.txt"), os.path.join(tmp, "plain.txt"),
                 False)):
            run_ = launch_with_entries([f"FERRUM_REPLAY_SUMMARY={first}",
                                        f"FERRUM_REPLAY_SUMMARY={second}", "FERRUM_REPLAY_RUN=r"])
            said = [line for line in run_.stderr.splitlines() if "is not a setting" in line]
            expect(run_.returncode == 0 and
                   (said == [] if not line_for_run else
                    len(said) == 1 and "FERRUM_REPLAY_RUN is not a setting" in said[0]),
                   f"FERRUM_REPLAY_SUMMARY twice, first {os.path.basename(first)}: {said}", run_)
        # A hostile environment: 20,000 unknown variables and three patterns of 4,000 bytes
        # cost the first launch no more than it takes to say so (a first version matched each
        # variable against each FERRUM_* value: 3.3 s, review RV2-1; about 0.06 s now).
        hostile = {f"FERRUM_REPLAY_X{i}": "1" for i in range(20000)}
        full = "%q{FERRUM_REPLAY_Y}" * 210
        hostile.update({"FERRUM_REPLAY_SUMMARY": full, "FERRUM_REPLAY_RUNNING_DIR": full,
                        "FERRUM_RECORD_OUT": full})
        started = time.monotonic()
        run_ = launch("LAUNCH_DRIVER", env=hostile)
        took = time.monotonic() - started
        expect(run_.returncode == 0 and took < 2.5 and
               "19992 more FERRUM_REPLAY* variables are not settings" in run_.stderr,
               f"20,000 unknown variables and three long patterns took {took:.2f} s", run_)
        # Many: eight lines, then one counting the rest.
        many = {f"FERRUM_REPLAY_UNKNOWN_{i}": "1" for i in range(11)}
        run_ = launch("LAUNCH_DRIVER", env=many)
        lines = run_.stderr.splitlines()
        expect(len(lines) == 9 and sum("is not a setting" in line for line in lines) == 8
               and "3 more FERRUM_REPLAY* variables are not settings" in lines[-1],
               "expected 8 lines and one counting the other 3", run_)


def custom_domain():
    run_ = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_DOMAIN": "my graphs"})
    expect(run_.stderr == "", "a valid setting printed something", run_)
    expect_one_range_per_launch_in(run_, "my graphs")


def expect_one_range_per_launch_in(run_, domain):
    count = len(run_.ranges(domain=domain))
    expect(count == LAUNCHES, f"{count} ranges in domain {domain!r}", run_)
    expect(not run_.ranges(), "ranges still went to the default domain", run_)


def log_levels():
    """Silent by default; FERRUM_REPLAY_LOG=info says once that it is active and where."""
    quiet = launch("LAUNCH_DRIVER")
    expect(quiet.stderr == "", "the shim printed without being asked", quiet)
    info = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_LOG": "info"})
    active = [l for l in info.stderr.splitlines() if l.startswith("ferrum-replay: active")]
    expect(len(active) == 1, "no single 'active' line at FERRUM_REPLAY_LOG=info", info)
    expect("an NVTX tool is attached" in active[0], "the line does not say a tool is attached", info)
    debug = launch("LAUNCH_DRIVER", env={"FERRUM_REPLAY_LOG": "debug"})
    registered = [l for l in debug.stderr.splitlines() if " registered by " in l]
    expect(len(registered) == GRAPHS, "debug log does not name each new graph once", debug)


def non_cuda_processes():
    """Processes that never touch CUDA behave exactly as without the shim — even with an
    invalid setting in the environment, which only a CUDA-using process would report."""
    commands = [
        ["bash", "-c", "echo out; echo err >&2; ls / >/dev/null; exit 7"],
        [sys.executable, "-c", "import sys, json; print(json.dumps([1, 2])); "
         "sys.stderr.write('e\\n'); sys.exit(5)"],
    ]
    for argv in commands:
        bare = run(argv, preload=False, record=False)
        for env in ({}, {"FERRUM_REPLAY": "bogus", "FERRUM_REPLAY_LOG": "debug",
                         "FERRUM_REPLAY_SUMARY": "misspelt"}):
            shimmed = run(argv, record=False, env=env)
            for field in ("returncode", "stdout", "stderr"):
                expect(getattr(bare, field) == getattr(shimmed, field),
                       f"{argv[0]}: {field} differs under the shim with {env}:\nwithout:\n"
                       f"{bare.describe()}", shimmed)


# Every name the shim intercepts that a lookup can answer with (launches, instantiations, the
# destroy, the context-ending calls, the driver's lookup itself), and a runtime name.
PROBED_NAMES = ["cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGraphInstantiate",
                "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags",
                "cuGraphInstantiateWithParams", "cuGraphExecDestroy", "cuCtxDestroy_v2",
                "cuGreenCtxDestroy", "cuCtxFromGreenCtx",
                "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxReset",
                "cuDevicePrimaryCtxRetain", "cuGetProcAddress", "cuGetProcAddress_v2",
                "cudaGraphLaunch"]


def cuda_names_probed_without_cuda():
    """A process that never loads CUDA but looks its names up through a handle — of the
    program (dlopen(NULL), Python's ctypes.CDLL(None)) or of the shim — with dlsym and dlvsym
    gets the loader's answer (our export, as from RTLD_DEFAULT) and nothing starts: no setting
    read, no NVTX tool or libferrum-replay-last.so loaded, no names file read, nothing printed
    (F121). Each name in a process of its own, so that no route hides behind another's start;
    the environment is hostile: the recorder attached, a bad setting, a names file with a bad
    line, the debug log, a summary and a running marker asked for."""
    probe, shim = path_of("PROBE_CUDA_NAMES"), path_of("FERRUM_SHIM")
    with tempfile.TemporaryDirectory() as tmp:
        names = os.path.join(tmp, "bad.names")
        with open(names, "w") as handle:
            handle.write("this is not a names line\n")
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        hostile = {"FERRUM_REPLAY": "bogus", "FERRUM_REPLAY_LOG": "debug",
                   "FERRUM_REPLAY_NAMES": names, "FERRUM_REPLAY_GPU_TIME": "on",
                   "FERRUM_REPLAY_SUMMARY": out + "/", "FERRUM_REPLAY_RUNNING_DIR": out}

        def probe_one(name):
            argv = [probe, shim, name]
            # Without the shim preloaded, its handle is a dlopen of it (RTLD_LOCAL): the plain
            # loader's answers, which nothing of ours sees.
            bare = run(argv, preload=False, record=False)
            expect(bare.returncode == 0 and bare.stderr == "", f"{name}: the probe failed bare",
                   bare)
            shimmed = run(argv, env=hostile)
            expect(shimmed.returncode == 0 and shimmed.stderr == "",
                   f"{name}: the probe printed under the shim (it started)", shimmed)
            expect(shimmed.trace is None, f"{name}: the recorder wrote a trace", shimmed)
            expect(not os.listdir(out), f"{name}: the shim wrote {os.listdir(out)}", shimmed)
            lines, bare_lines = shimmed.stdout.splitlines(), bare.stdout.splitlines()
            expect(len(lines) == len(bare_lines), f"{name}: not the bare run's lines:\n"
                   f"{bare.stdout}", shimmed)
            for line, bare_line in zip(lines, bare_lines):
                if line.startswith("program "):
                    # Preloaded, the program's scope holds our export: the answer is the same
                    # lookup's through RTLD_DEFAULT, which the shim never sees.
                    expect(line.endswith(" = RTLD_DEFAULT"),
                           f"{name}: not the answer of RTLD_DEFAULT: {line!r}", shimmed)
                elif line.startswith("shim "):  # the loader's answer, as without the shim
                    expect(line.split(" = ")[0] == bare_line.split(" = ")[0],
                           f"{name}: {line!r}, without the shim {bare_line!r}", shimmed)
                else:  # what is mapped: nothing the shim brings in when it starts
                    expect(line == bare_line, f"{name}: {line!r}, without the shim "
                           f"{bare_line!r}", shimmed)
        # Every name, also after one has failed: each route on its own says whether it starts.
        failures = []
        for name in PROBED_NAMES:
            try:
                probe_one(name)
            except AssertionError as error:
                failures.append(str(error))
        expect(not failures, "\n".join(f.splitlines()[0] for f in failures) +
               ("\nthe first in full:\n" + failures[0] if failures else ""))
        # Python's ctypes, as a program probing for CUDA does it: our exports are found (they
        # are in the program's scope), and the only library of ours mapped is the shim.
        argv = [sys.executable, "-c", "import ctypes, os\n"
                "for name in ('cuGraphLaunch', 'cuGetProcAddress_v2', 'cuGraphInstantiate'):\n"
                "    print(name, hasattr(ctypes.CDLL(None), name))\n"
                "print(sorted({os.path.basename(l.split()[-1]) for l in open('/proc/self/maps')\n"
                "              if 'ferrum' in l or 'libcuda' in l}))"]
        shimmed = run(argv, env=hostile)
        expected = "".join(f"{name} True\n" for name in
                           ("cuGraphLaunch", "cuGetProcAddress_v2", "cuGraphInstantiate"))
        expected += f"['{os.path.basename(shim)}']\n"
        expect((shimmed.returncode, shimmed.stdout, shimmed.stderr) == (0, expected, ""),
               f"python ctypes: expected exit 0, stdout {expected!r}, no stderr", shimmed)
        expect(not os.listdir(out), f"python ctypes: the shim wrote {os.listdir(out)}", shimmed)


SCENARIOS = {f.__name__: f for f in (
    numbered_names_without_sites, runtime_launch, driver_launch, runtime_ptsz, driver_ptsz,
    runtime_stream_handles, failing_launch, exception_through_launch, longjmp_out_of_launch,
    calls_below_an_abandoned_launch,
    rejecting_tool, rejecting_every_third_push, no_tool_attached, switched_off,
    two_copies_of_the_shim, older_copy_after_the_shim, older_copy_alone_with_an_early_nvtx_call,
    program_exporting_the_api, eight_threads,
    invalid_setting_one_line, unknown_setting_one_line, custom_domain, log_levels, non_cuda_processes,
    cuda_names_probed_without_cuda)}

if __name__ == "__main__":
    main(SCENARIOS)
