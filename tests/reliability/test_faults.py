#!/usr/bin/env python3
"""The fault-injection matrix: each scenario a real process under the shim and the recorder,
with one thing going wrong, and what the program and the trace keep afterwards.

Scenario                     the program                       the trace keeps
---------------------------  --------------------------------  ------------------------------------
real_function_missing        our exported cuGraphLaunch etc.   nothing (no range is opened for a
                             found with dlsym(RTLD_DEFAULT),   call that cannot reach a driver)
                             no libcuda: each returns
                             CUDA_ERROR_NOT_FOUND (500) /
                             cudaErrorSymbolNotFound, no crash;
                             dlerror() then reports nothing
driver_loaded_after_first    first launch: 500; after dlopen   one range per launch made once the
_launch                      of the driver the same pointer    driver is there
                             launches normally
tool_init_fails              unchanged (exit code, output),    no trace (no tool); nothing printed
                             also for a tool path that does
                             not exist
tool_rejects_every_push      unchanged                         no range, rejectedPushes = launches,
                                                               no protocol error (balanced)
launch_error_classes         every CUresult returned as the    one balanced range per launch,
                             driver gave it (1, 2, 3, 4, 100,  failed or not
                             201, 400, 700, 702, 719, 999 and
                             998, which has no name); runtime
fork_while_in_launch         parent and child both finish;     parent: every launch of its threads;
                             no deadlock                       child (own file): its own launches,
                                                               nothing open from the parent's
                                                               thread that was inside a launch
exit_from_worker             exit code 0 from exit(0) on a     every range completed before the exit
                             worker while others launch        report; the ones other threads had
                                                               open then are counted in openAtExit
                                                               (at most one per other thread)
underscore_exit              exit code kept                    no trace (_exit runs no exit hook),
                                                               no file left behind
sigterm_handler_exits        exit code 42 from the handler     every completed launch; the one the
                                                               signal interrupted, if any, is open
                                                               at exit (openAtExit <= 1) or closed
                                                               by it (a range the driver never saw)
exit_in_signal_handler_      exit code 0 from a signal         the process ends: no trace, one line
inside_recorder              handler's exit() that lands while  saying why (the exit report waited
                             the recorder holds a lock on that  for its own thread's lock: a hang)
                             thread (its first NVTX call)
exit_in_signal_handler_      the same inside the shim: a       the process ends: no launch summary,
inside_shim                  thread's registration for GPU     one line; its running marker stays
                             timing                            (no summary: a judge names it)
exit_in_signal_handler_      the same inside the GPU engine     the process ends: one line, no
inside_gpu_engine            (its mutex held), the context      summary; the destruction succeeds
                             destroyed by the program's atexit  (its hook waited for its own
                             handler before the shim's hook     thread's lock: a hang)
exit_in_signal_handler_      the same inside the driver,       the process ends with the handler's
inside_driver                its own lock held (GPU timing;    status in seconds, its trace whole;
                             the reaper's pass waits for it    the summary's GPU columns said not
                             holding the engine's mutex)       read (an exit hook waited: a hang)
file_size_limit              exit code and output unchanged    nothing past the limit: one line per
                             under RLIMIT_FSIZE 8 KiB and 0;   output ("File too large"), no
                             its own SIGXFSZ handler called    temporary left; at 0 (no summary)
                             for its own write only            the running marker stays, empty
errno_passes_through         a driver whose every function     the program's errno after each of
                             leaves errno set to a value of    its calls is its own call's (5
                             its own: looks up, instantiates,  lookups, 8 graphs, 2,000 launches,
                             launches and destroys 8 graphs,   their destruction, the context's):
                             destroys its context; recorder,   none left by the driver calls the
                             GPU timing, content and call      shim makes after the real one (end
                             sites on; the summary alone;      events, content, pools), nor by
                             off; each also with a C library   the C library calls of its own
                             whose calls leave errno set when  (activation, settings, markers);
                             they succeed (dirty_libc.c); a    dlerror() reports nothing after
                             tool that is not there, the       each call; the same across the
                             driver loaded privately, the      shim's own API (a naming scope,
                             shim without its exit library,    names by handle)
                             the shim's exports called
loader_error_on_every_route  dlerror() after each call is     (nothing of its own: the program's
                             none on each route to a launch    view is the check)
                             (driver linked, dlopen'ed, by
                             cuGetProcAddress, runtime shared
                             and static) with a tool that is
                             not there or the shim alone
address_space_limit          exit code and launches unchanged  every launch recorded or counted in
                             under RLIMIT_AS set just above    droppedForMemory; else one line
                             what it mapped; its errno as      saying out of memory
                             each of its calls left it (new
                             graphs made and destroyed too)
rename_without_memory        a graph renamed 6,000 times with    the summary names the graph with the
                             no memory left for the registry's  last name the program was told was
                             next chunk of labels: the names    taken; ferrum_replay_name_graph_exec
                             it cannot show are refused         returns -ENOSPC for the others
launch_refused_graph         a graph the registry had no room   its launches cost what a registered
                             for (no memory for its next chunk  graph's do: no stack walk, lock or
                             of records), launched 100,000      mapping tried again per launch; one
                             times beside a registered one      retry after a graph is destroyed;
                                                                registered once memory came back
first_nvtx_call_without      exit code and output unchanged    the thread's ranges and marks counted
_memory                      when a thread's first NVTX calls  in droppedForMemory, or one line
                             come after its heap is used up    saying out of memory
exit_without_memory          exit code and output unchanged    the summary written whole, or one
                             when its exit finds no memory     line saying why (never a partial or
                                                               silently missing one)
output_lock_impossible       exit code and output unchanged    the earlier trace and summary kept;
                             when its sandbox refuses          the new ones beside them at once,
                             socket() (seccomp, EPERM)         one line each: the lock cannot be
                                                               taken here (not "held elsewhere")
stderr_not_reopenable        stderr a blocking pipe that       the summary, the recorder's table,
                             cannot be reopened through /proc  the log lines after that step and
                             (descriptors used up; as root     the "cannot write trace" line reach
                             also setuid to another user, and  the pipe (RWF_NOWAIT writes); a full
                             chroot): output unchanged, its    pipe nobody reads costs a bounded
                             stderr still blocking             wait; the pipe's flags unchanged
marker_after_setuid          launches, then (as root) setuid   its running marker, which it can no
                             to another user, exits normally   longer remove, and one log line
                                                               that says so and why
Uses tests/shim/scenarios/harness.py; run through meson (suite reliability).
"""
import errno
import glob
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shim",
                                "scenarios"))
import harness  # noqa: E402
from harness import expect, expect_balanced  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support",
                                "tools"))
import trace_check  # noqa: E402

PROGRAM = None  # --program
FAILING_TOOL = None  # --failing-tool
IDLE_TOOL = None  # --idle-tool (tests/reliability/idle_tool.c)
C_PROGRAM = None  # --c-program (tests/reliability/fork_first_walk.c)
RUNTIME_FREE_DIR = None  # --runtime-free-dir (tests/support/standin/runtime_free)
LAUNCH_AT_LOAD = None  # --launch-at-load (tests/reliability/launch_at_load*.c)


def fault(mode, *args, **kwargs):
    return harness.run([PROGRAM, mode, *args], **kwargs)


def without_leak_check(env):
    """`env` for a program that takes every descriptor or gives up its user ID on purpose: under
    ASan, LeakSanitizer's check at exit reads /proc/PID/task (a descriptor; a process that is
    no longer dumpable after setuid cannot) and fails the run with a fatal error of its own."""
    if "ASAN_OPTIONS" in os.environ:
        env = dict(env, ASAN_OPTIONS=os.environ["ASAN_OPTIONS"] + ":detect_leaks=0")
    return env


def footer(trace):
    return trace.get("ferrumReplay", {})


def values(text):
    return {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", text)}


def real_function_missing():
    run_ = fault("no-driver")
    expect(run_.returncode == 0, "the program did not survive calls with no driver", run_)
    got = dict(re.findall(r"(\w+)=(\S+)", run_.stdout))
    for name in ("cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGraphInstantiateWithFlags",
                 "cuGraphExecDestroy"):
        expect(got.get(name) == "500", f"{name} returned {got.get(name)}, expected 500 "
               "(CUDA_ERROR_NOT_FOUND)", run_)
    expect(got.get("cudaGraphLaunch") == "500", "cudaGraphLaunch did not return "
           "cudaErrorSymbolNotFound (500)", run_)
    expect(got.get("ferrum_replay_name_graph_exec") in ("0", "absent"),
           "naming a graph with no driver failed", run_)
    expect(run_.stderr == "", "the shim printed without being asked", run_)
    # The shim's lookups of the missing driver fail inside each call: nothing of theirs may be
    # left for the program's dlerror().
    expect(got.get("loader_errors") == "0", "dlerror() reported the shim's own failed lookup "
           f"after a call: {run_.stdout.split('loader_first=')[-1].splitlines()[0]}", run_)
    # A range opened for a launch that reached no driver would be recorded and written; a
    # process that recorded nothing writes no trace at all.
    expect(run_.trace is None, "a range was opened for a launch that reached no driver", run_)


def driver_loaded_after_first_launch():
    run_ = fault("late-driver", "--launches", "50")
    expect(run_.returncode == 0, "launches failed once the driver was loaded", run_)
    got = values(run_.stdout)
    expect(got.get("first_launch") == 500, "the launch before the driver did not return 500", run_)
    expect(got.get("launches") == 50 and got.get("failed") == 0, "launches failed", run_)
    expect_balanced(run_)
    harness.expect_one_range_per_launch(run_, 50)


def unchanged(run_, bare, what):
    expect(run_.returncode == bare.returncode and run_.stdout == bare.stdout,
           f"{what}: the program's exit code or output changed", run_)
    expect(run_.stderr == "", f"{what}: something was printed", run_)


def tool_init_fails():
    argv = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "2", "--iters", "20", "--app-ranges"]
    bare = harness.run(argv, preload=False, record=False)
    for tool in (FAILING_TOOL, "/nonexistent/libtool.so"):
        run_ = harness.run(argv, record=False, env={"NVTX_INJECTION64_PATH": tool})
        unchanged(run_, bare, f"NVTX_INJECTION64_PATH={tool}")


def tool_rejects_every_push():
    argv = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "2", "--iters", "20", "--app-ranges"]
    bare = harness.run(argv, preload=False, record=False)
    run_ = harness.run(argv, env={"FERRUM_RECORD_REJECT": "all"})
    unchanged(run_, bare, "FERRUM_RECORD_REJECT=all")
    expect_balanced(run_)
    expect(not run_.ranges(), "a rejected push was recorded", run_)
    expect(footer(run_.trace).get("rejectedPushes") == 80, "expected 80 rejected pushes (40 "
           "launches, 40 app ranges)", run_)


# 998: a code our headers do not name (a newer driver's). Codes past 1023 are not used: they
# are outside CUresult's range of values, which C++ makes undefined to even load.
LAUNCH_RESULTS = [1, 2, 3, 4, 100, 201, 400, 700, 702, 719, 998, 999]


def launch_error_classes():
    argv = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "2", "--iters", "5"]
    for code in LAUNCH_RESULTS:
        env = {"FERRUM_STANDIN_LAUNCH_RESULT": str(code)}
        run_ = harness.run(argv, env=env)
        counts = run_.program_counts()
        expect(counts["result"] == code and counts["failed"] == 10,
               f"CUresult {code} was not returned unchanged", run_)
        expect(run_.returncode == 3, f"CUresult {code}: exit status changed", run_)
        expect_balanced(run_)
        harness.expect_one_range_per_launch(run_, 10)
    # The runtime's own error, whatever it maps the driver's to, is the same with the shim.
    argv = [harness.path_of("LAUNCH_RUNTIME"), "--graphs", "2", "--iters", "5"]
    for code in (2, 700, 999):
        env = {"FERRUM_STANDIN_LAUNCH_RESULT": str(code)}
        bare = harness.run(argv, preload=False, record=False, env=env)
        run_ = harness.run(argv, env=env)
        expect(run_.returncode == bare.returncode and run_.stdout == bare.stdout,
               f"runtime, CUresult {code}: result differs under the shim", run_)
        expect_balanced(run_)
        harness.expect_one_range_per_launch(run_, 10)


def traces_in(directory):
    return {int(re.search(r"\.(\d+)\.json$", p)[1]): trace_check.load(p)
            for p in glob.glob(os.path.join(directory, "t.*.json"))}


def fork_while_in_launch():
    for attempt in range(3):
        with tempfile.TemporaryDirectory() as tmp:
            # 2 ms replays, a launch queue of one: each launch waits ~2 ms inside the range.
            env = {"FERRUM_STANDIN_GRAPH_NS": "2000000", "FERRUM_STANDIN_LAUNCH_QUEUE": "1",
                   "FERRUM_RECORD_OUT": os.path.join(tmp, "t.%p.json")}
            run_ = fault("fork-in-launch", "--launches", "20", env=env, timeout=60)
            expect(run_.returncode == 0, "the parent failed", run_)
            got = values(run_.stdout)
            expect(got.get("child_status") == 0 and got.get("child_launches") == 20,
                   "the child did not finish its own launches", run_)
            traces = traces_in(tmp)
            child = traces.get(got["child_pid"])
            expect(child is not None, "the child wrote no trace", run_)
            parent = [t for pid, t in traces.items() if pid != got["child_pid"]]
            expect(len(parent) == 1, f"expected one parent trace, got {len(parent)}", run_)
            parent = parent[0]
            for trace, who in ((child, "child"), (parent, "parent")):
                problems = trace_check.check_nesting(trace)
                expect(not problems, f"{who}: ranges do not nest: {problems[:3]}", run_)
                errors = footer(trace).get("protocolErrors", {})
                expect(not any(errors.values()), f"{who}: protocol errors {errors}", run_)
            child_ranges = trace_check.ranges(child, domain=harness.DOMAIN)
            expect(len(child_ranges) == 20, f"child: {len(child_ranges)} ranges for 20 launches",
                   run_)
            parent_ranges = trace_check.ranges(parent, domain=harness.DOMAIN)
            expect(len(parent_ranges) == got["worker_launches"],
                   f"parent: {len(parent_ranges)} ranges for {got['worker_launches']} launches",
                   run_)


def fork_during_activation():
    """A fork() child made while another thread of its parent activates the shim has no thread
    that will ever finish that: its own graph calls must not wait for it. They waited about
    4.5 s each (a tool slow to initialise), or for ever (the settings' one warning waiting on
    a full stderr pipe). Now the child passes through at once; its results are the driver's,
    and it waits at most once, for its own warning (2 s)."""
    with tempfile.TemporaryDirectory() as tmp:
        marker = os.path.join(tmp, "started")  # made as the tool's start gets under way
        cases = (("slow-tool", {"NVTX_INJECTION64_PATH": FAILING_TOOL,
                                "FERRUM_TEST_TOOL_SLEEP_MS": "3000",
                                "FERRUM_TEST_TOOL_STARTED": marker}, 1000),
                 ("stderr-full", {"FERRUM_REPLAY_LOG": "bogus"}, 3500))
        runs = [(how, bound_ms, fault("fork-during-activation", "--launches", "5", "--how", how,
                                      env=env, timeout=90))
                for how, env, bound_ms in cases]
    for how, bound_ms, run_ in runs:
        got = values(run_.stdout)
        expect(run_.returncode == 0 and got.get("child_status") == 0 and
               got.get("child_launches") == 5 and got.get("child_failed") == 0,
               f"{how}: the child did not finish its launches (child_status=hung: it waited "
               "20 s)", run_)
        expect(got["child_ms"] < bound_ms,
               f"{how}: the child took {got['child_ms']} ms (bound {bound_ms})", run_)

def launch_during_activation():
    """Another thread starts the shim (its first graph call) and its NVTX tool is slow to
    initialise (8 s here): the main thread meanwhile looks the driver's functions up (dlsym),
    instantiates a graph and launches 200 times. It waits once, 2 s at most, for the whole
    process — each graph call and each lookup used to wait its own 2 s (three lookups: 6 s) —
    with one line saying so under FERRUM_REPLAY_LOG=error; every call returns the driver's
    result. Once the start has ended, the launches through the pointers looked up meanwhile are
    intercepted: the lookups handed out the genuine functions after their wait, and those
    replays were never counted or named for the life of the process."""
    n = 200
    with tempfile.TemporaryDirectory() as tmp:
        run_ = fault("launch-during-activation", "--launches", str(n), record=False, timeout=90,
                     env={"NVTX_INJECTION64_PATH": FAILING_TOOL,
                          "FERRUM_TEST_TOOL_SLEEP_MS": "8000",
                          "FERRUM_TEST_TOOL_STARTED": os.path.join(tmp, "started"),
                          "FERRUM_REPLAY_SUMMARY": "stderr", "FERRUM_REPLAY_LOG": "error"})
    got = values(run_.stdout)
    expect(run_.returncode == 0 and got.get("main_launches") == n and
           got.get("main_failed") == 0 and got.get("after_launches") == n and
           got.get("after_failed") == 0, "the program's calls did not all succeed", run_)
    expect(got["main_load_ms"] < 4000,
           f"looking up and instantiating took {got['main_load_ms']} ms while another thread "
           "started the shim (one wait of 2 s at most for the process)", run_)
    expect(got["main_ms"] < 1000, f"{n} launches took {got['main_ms']} ms meanwhile", run_)
    said = [line for line in run_.stderr.splitlines()
            if not line.startswith(("ferrum-replay launch summary:", "  "))]
    expect(said == ["ferrum-replay: another thread's start of the shim (its NVTX tool's "
                    "initialisation) has taken over 2000 ms: graph calls pass through until it "
                    "ends"], f"expected one line about the wait, got {said}", run_)
    counted = re.search(r"launch summary: \d+ graphs, (\d+) launches", run_.stderr)
    expect(counted and int(counted.group(1)) == 1 + n,
           f"the summary counts {counted and counted.group(1)} launches: expected the first "
           f"thread's 1 and the {n} made through the looked-up pointer after the start", run_)


def fork_while_naming():
    """fork() while another thread names a graph (the call-site walk, whose cache has a lock of
    its own): the child's first graph instantiation waited for ever on the lock that a thread
    the child does not have held at the fork (about one fork in eight here). 60 forks, each child
    instantiates and launches once: none may hang. (The worker loads and unloads a library as it goes: each unload empties
    the cache under its lock, which widens the window.) Not under a sanitizer whose allocator
    is not fork-safe (harness.allocator_not_fork_safe, F256): a child's malloc — the stand-in
    driver's own, or the demangler's — can wait for ever on a lock the worker held at the fork
    (a CI run's hung child under TSan: its SizeClassAllocator64 region mutex, under
    __cxa_demangle's realloc). The default stage judges it."""
    if runtime := harness.allocator_not_fork_safe():
        return f"skip: {runtime}'s allocator is not fork-safe (a child's malloc can hang)"
    run_ = fault("fork-while-naming", "--launches", "60", "--how", FAILING_TOOL, timeout=240)
    got = values(run_.stdout)
    expect(run_.returncode == 0 and got.get("forks") == 60, "the program failed", run_)
    expect(got["hung"] == 0, f"{got['hung']} of 60 children hung (killed after 2 s)", run_)
    expect(got["failed"] == 0, f"{got['failed']} children failed", run_)


def first_jump_inside_loader_walk():
    """The shim exports the C library's non-local jumps (F160) and looked up the real one at the
    process's first jump, through dladdr1 — the loader's main lock. A program that jumps inside
    its own dl_iterate_phdr walk (a sampler's guarded probe: sigsetjmp, a fault, siglongjmp from
    the handler) while another thread is in dlopen (which holds the main lock and waits for the
    walk's) deadlocked on its first jump: every run, with FERRUM_REPLAY=off too, in a process
    that never touches CUDA (S1). The bare C library's jump takes no lock. 5 runs each way."""
    for env in ({}, {"FERRUM_REPLAY": "off"}):
        for attempt in range(5):
            try:
                run_ = fault("jump-inside-loader-walk", "--how", FAILING_TOOL, record=False,
                             env=env, timeout=20)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{env}: run {attempt + 1} hung at its first jump")
            expect(run_.returncode == 0 and values(run_.stdout).get("jumped") == 1,
                   f"{env}: the program did not jump back", run_)


def fork_while_loader_busy():
    """A launcher that never launches forks while another of its threads walks the loaded
    objects (dl_iterate_phdr holds the loader's write lock for the walk; so does C++ exception
    unwinding): that lock stays held for ever in the child, and a dlopen there waits for it.
    Each child's first graph call activates the shim with only a launch summary asked for (no
    NVTX tool): the activation must load nothing (F70's exit-order library is loaded only where
    a tool was loaded already). 40 forks: none may hang."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s.%p.txt"),
               "FERRUM_REPLAY_RUNNING_DIR": tmp}
        run_ = fault("fork-while-loader-busy", "--launches", "40", record=False, env=env,
                     timeout=240)
    got = values(run_.stdout)
    expect(run_.returncode == 0 and got.get("forks") == 40, "the program failed", run_)
    expect(got["hung"] == 0, f"{got['hung']} of 40 children hung (killed after 2 s)", run_)
    expect(got["failed"] == 0, f"{got['failed']} children failed", run_)


def under_tsan():
    return "tsan" in os.environ.get("FERRUM_TEST_PRELOAD_FIRST", "")


def under_asan():
    return "asan" in os.environ.get("FERRUM_TEST_PRELOAD_FIRST", "")


def fork_children_while_loader_busy(how, forks, env=None):
    """fault fork-while-loader-busy `--how how`, `forks` children; each must neither hang nor
    fail. Under TSan a child that starts threads (GPU timing's reaper) after a multithreaded
    fork needs die_after_fork=0."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict({"FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s.%p.txt"),
                    "FERRUM_REPLAY_RUNNING_DIR": tmp}, **(env or {}))
        if under_tsan():
            env["TSAN_OPTIONS"] = os.environ.get("TSAN_OPTIONS", "") + ":die_after_fork=0"
        run_ = fault("fork-while-loader-busy", "--launches", str(forks), "--how", how,
                     record=False, env=env, timeout=240)
    got = values(run_.stdout)
    expect(run_.returncode == 0 and got.get("forks") == forks, "the program failed", run_)
    expect(got["hung"] == 0, f"{got['hung']} of {forks} children hung (killed after 2 s)", run_)
    expect(got["failed"] == 0, f"{got['failed']} children failed", run_)
    return run_


def fork_child_reopens_loaded_driver():
    """A fork child opens the driver it already has loaded again and closes that handle (a
    runtime's own dlopen of libcuda, a plugin manager's reference counting): in glibc neither
    takes the loader's write lock, which a fork child finds held for ever when another thread
    of the parent was walking the loaded objects (dl_iterate_phdr) at the fork. The shim's
    dlopen and dlclose hooks walked them (dl_iterate_phdr, to read the loader's unload count):
    every such child hung; and a parent thread that merely re-opened a loaded library made
    the shim itself the holder, hanging about one child in ten (F151). 20 forks with a walking
    thread, 40 with a re-opening one: none may hang. (Not under TSan: its own dlopen
    interceptor walks the loaded objects, in the bare program too. Under ASan only the walking
    thread: ASan's dlopen interceptor takes its symbolizer's spin lock, which a child forked
    while a parent thread was in that interceptor finds held for ever — the program without
    the shim hung 1 to 3 children of 40 in 7 of 15 runs.)"""
    if under_tsan():
        return "skip: ThreadSanitizer's own dlopen interceptor walks the loaded objects"
    # Functions looked up by name, as a program linked with -lcuda calls them: the shim keeps
    # the real functions it found, and watches the program's dlopen and dlclose from then on.
    by_name = {"FERRUM_TEST_LOOKUP_DEFAULT": "1"}
    fork_children_while_loader_busy("walk-reopen", 20, by_name)
    if not under_asan():
        fork_children_while_loader_busy("reopen", 40, by_name)


def fork_child_with_driver_loaded_locally():
    """A program whose driver is loaded RTLD_LOCAL (a framework's private dlopen) calls the
    graph functions it finds by name (the shim's exports): no scope holds the real functions,
    and each call site's first call looked for them in every loaded object with
    dl_iterate_phdr — in a fork child made while another thread walked the loaded objects, the
    child's first graph call hung for ever (F152). 20 forks: none may hang."""
    fork_children_while_loader_busy("walk", 20, {"FERRUM_TEST_DRIVER_LOCAL": "1",
                                                 "FERRUM_TEST_LOOKUP_DEFAULT": "1"})


def fork_child_gpu_timed_with_function_missing():
    """GPU timing's first timed instantiation resolves optional driver functions (the stand-in
    lacks cuThreadExchangeStreamCaptureMode; drivers before CUDA 12.8 lack
    cuEventElapsedTime_v2): a function no scope has was looked for with dl_iterate_phdr, and a
    fork child made while another thread walked the loaded objects hung at its first
    instantiation (F152). 20 forks with FERRUM_REPLAY_GPU_TIME=on: none may hang."""
    fork_children_while_loader_busy("walk", 20, {"FERRUM_REPLAY_GPU_TIME": "on"})


def fork_child_logs_missing_tool():
    """With FERRUM_REPLAY_LOG=info and an NVTX tool that cannot be loaded, the activation says
    why no tool answered; it looked for the tool among the loaded objects with dl_iterate_phdr,
    and a fork child made while another thread walked them hung at its first graph call (F153).
    20 forks: none may hang, and each child still says the tool is not loaded. (Not under TSan:
    its dlopen interceptor walks the loaded objects after NVTX's failed load of the tool.)"""
    if under_tsan():
        return "skip: ThreadSanitizer's dlopen interceptor walks the loaded objects"
    run_ = fork_children_while_loader_busy("walk", 20, {
        "FERRUM_REPLAY_LOG": "info", "NVTX_INJECTION64_PATH": "/nonexistent/libtool.so"})
    said = run_.stderr.count("the NVTX tool '/nonexistent/libtool.so' is not loaded")
    expect(said == 20, f"{said} of 20 children said the tool is not loaded", run_)


def fork_while_exit_list_busy():
    """A launcher that never launches forks while another of its threads is in the C library's
    __cxa_finalize (what each dlclose runs): it scans the exit list under the list's lock,
    which fork() does not reset, so a child forked meanwhile finds it held for ever. The shim's
    exit handler (registered with atexit, which takes that lock) was registered at a process's
    first range and first GPU-timed instantiation: such a child hung at its first launch
    (F147). 30 forks, each child's first instantiation and launch, with the recorder and GPU
    timing on: none may hang."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"FERRUM_REPLAY_GPU_TIME": "on", "FERRUM_REPLAY_RUNNING_DIR": tmp,
               "FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s.%p.txt"),
               "FERRUM_RECORD_OUT": os.path.join(tmp, "t.%p.json")}
        if "tsan" in os.environ.get("FERRUM_TEST_PRELOAD_FIRST", ""):
            env["TSAN_OPTIONS"] = os.environ.get("TSAN_OPTIONS", "") + ":die_after_fork=0"
        run_ = fault("fork-while-exit-list-busy", "--launches", "30", env=env, timeout=240)
    got = values(run_.stdout)
    expect(run_.returncode == 0 and got.get("forks") == 30, "the program failed", run_)
    expect(got["hung"] == 0, f"{got['hung']} of 30 children hung (killed after 2 s)", run_)
    expect(got["failed"] == 0, f"{got['failed']} children failed", run_)


def fork_first_walk_loads_no_unwinder():
    """A launcher written in C (no unwinder loaded: the real driver links no C++ runtime) forks
    while another of its threads walks the loaded objects, holding the loader's write lock,
    which fork() does not reset. The child's first instantiation walks the stack for its call
    site: glibc's backtrace() loads libgcc_s.so.1 at its first call, and adding a library takes
    that lock: the child hung for ever (F155). In a fork child the walk is made only where the
    unwinder is loaded already; there the graph is named without a call site. 20 forks, a launch
    summary asked for: none may hang, and the parent, which made no walk, loaded nothing. Not
    under a sanitizer: its runtime, first in the process, loads the unwinder itself (and TSan's
    fork with a thread inside its dl_iterate_phdr interceptor is its own matter)."""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
        return "skip: a sanitizer's runtime has the unwinder loaded: no such process under it"
    with tempfile.TemporaryDirectory() as tmp:
        env = {"LD_LIBRARY_PATH": RUNTIME_FREE_DIR,
               "FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s.%p.txt")}
        run_ = harness.run([C_PROGRAM, "20"], record=False, env=env, timeout=120)
    got = values(run_.stdout)
    expect(run_.returncode == 0 and got.get("forks") == 20, "the program failed", run_)
    expect(got["hung"] == 0, f"{got['hung']} of 20 children hung (killed after 2 s)", run_)
    expect(got["failed"] == 0, f"{got['failed']} children failed", run_)
    expect(got["unwinder_loaded"] == 0, "the test's premise: no unwinder in the parent", run_)

def launch_before_shim_constructor():
    """A library the program links launches from its constructor, which the C library runs
    before the preloaded shim's: the shim's note of the process that loaded it is not made yet.
    That process was taken for a fork child (F155's review): its first call-site walk, which
    would load the unwinder, was refused and its graph named "graph 1". It is the loading
    process: the graph is named after its call site. (A C program and the runtime-free driver:
    no unwinder loaded before the walk.)"""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
        return "skip: a sanitizer's runtime has the unwinder loaded: no such process under it"
    with tempfile.TemporaryDirectory() as tmp:
        summary_path = os.path.join(tmp, "summary.txt")
        env = {"LD_LIBRARY_PATH": os.pathsep.join([RUNTIME_FREE_DIR,
                                                   os.path.dirname(LAUNCH_AT_LOAD)]),
               "FERRUM_REPLAY_SUMMARY": summary_path}
        run_ = harness.run([LAUNCH_AT_LOAD], record=False, env=env, timeout=60)
        expect(run_.returncode == 0 and "launched" in run_.stderr, "the program failed", run_)
        with open(summary_path) as handle:
            summary = handle.read()
    expect("warm_up_at_load" in summary and "graph 1" not in summary,
           f"the graph is named after its call site, warm_up_at_load:\n{summary}", run_)


def fork_while_locale_busy():
    """A launcher forks while another of its threads is inside setlocale() (Python's
    locale.setlocale, a program that switches LC_NUMERIC around its formatting): setlocale holds
    the C library's locale lock for writing while it loads the locale, and fork() does not reset
    it. glibc's strerror translates its text through gettext, which takes that lock — in the C
    locale too — so each child whose launch summary or trace could not be written (a missing
    directory) waited for ever in exit() to say why (F154: 26 to 28 of 30 children hung). Here
    the lock is held for the whole run (the locale loaded is a FIFO nobody writes to); 8 forks,
    each child's first graph call and launch, then exit() with its summary, trace, running
    marker and names file in a directory that does not exist: each must end within 2 s, and
    say in its lines why its summary and trace are missing. Twice: with the shim as built, and
    with a copy alone in a directory, without libferrum-replay-last.so beside it (a supported
    install), whose failed load at activation left a loader error that dlerror() — as the shim
    cleared it — formatted under the same lock: every child hung there."""
    forks = 8
    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.join(tmp, "alone")
        os.mkdir(alone)
        shutil.copy(harness.path_of("FERRUM_SHIM"), alone)
        shims = (None, os.path.join(alone, os.path.basename(harness.path_of("FERRUM_SHIM"))))
        for index, shim in enumerate(shims):
            where = os.path.join(tmp, f"run{index}")  # the FIFO locale is made in it
            os.mkdir(where)
            missing = os.path.join(where, "missing")
            env = {"FERRUM_REPLAY_SUMMARY": os.path.join(missing, "s.%p.txt"),
                   "FERRUM_RECORD_OUT": os.path.join(missing, "t.%p.json"),
                   "FERRUM_REPLAY_RUNNING_DIR": missing,
                   "FERRUM_REPLAY_NAMES": os.path.join(missing, "names.txt")}
            if shim:
                env["LD_PRELOAD"] = shim
            if "tsan" in os.environ.get("FERRUM_TEST_PRELOAD_FIRST", ""):
                env["TSAN_OPTIONS"] = os.environ.get("TSAN_OPTIONS", "") + ":die_after_fork=0"
            run_ = fault("fork-while-locale-busy", "--launches", str(forks), "--how", where,
                         env=env, timeout=120)
            what = "the shim alone in its directory: " if shim else ""
            got = values(run_.stdout)
            expect(run_.returncode == 0 and got.get("forks") == forks,
                   f"{what}the program failed", run_)
            expect(got["hung"] == 0,
                   f"{what}{got['hung']} of {forks} children hung (killed after 2 s)", run_)
            expect(got["failed"] == 0, f"{what}{got['failed']} children failed", run_)
            summary = re.findall(r"cannot write the summary to '[^']*/missing/s\.\d+\.txt': "
                                 r"No such file or directory", run_.stderr)
            trace = re.findall(r"cannot write trace to '[^']*/missing/t\.\d+\.json': "
                               r"No such file or directory", run_.stderr)
            expect(len(summary) == forks and len(trace) == forks,
                   f"{what}{len(summary)} summary and {len(trace)} trace lines saying why, for "
                   f"{forks} children", run_)


def forked_children_count_their_own():
    """A launcher forks a child that launches nothing and one that launches 3 times: each
    process's launch summary counts its own launches (the children's counters restart at the
    fork), and the idle child writes no summary and no trace (the CI check of such a run:
    workflow fork_without_exec)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s.%p.txt"),
               "FERRUM_RECORD_OUT": os.path.join(tmp, "t.%p.json"),
               "FERRUM_REPLAY_RUNNING_DIR": tmp}
        run_ = fault("fork-children", "--launches", "5", env=env, timeout=60)
        expect(run_.returncode == 0, "the program failed", run_)
        got = values(run_.stdout)
        summaries = {int(re.search(r"s\.(\d+)\.txt$", p)[1]): open(p).read()
                     for p in glob.glob(os.path.join(tmp, "s.*.txt"))}
        expect(got["idle_child"] not in summaries, "the idle child wrote a summary", run_)
        expect(got["idle_child"] not in traces_in(tmp), "the idle child wrote a trace", run_)
        busy = summaries.get(got["busy_child"], "")
        expect(", 3 launches," in busy, f"the busy child's summary: {busy!r}", run_)
        parent = [text for pid, text in summaries.items() if pid != got["busy_child"]]
        expect(len(parent) == 1 and ", 10 launches," in parent[0],
               f"the parent's summary: {parent!r}", run_)
        # Each process that launched ended normally: no running marker is left.
        left = glob.glob(os.path.join(tmp, "*.running"))
        expect(not left, f"running markers left by processes that exited: {left}", run_)


def child_without_fork_handlers():
    """A child made without the C library's fork handlers — a raw clone system call here;
    _Fork() (POSIX 2024) and glibc's clone() alike — inherits the shim's and the recorder's state
    but none of their fork resets. Such a child that called exit() wrote its parent's ranges and
    launch count as its own (a judge counted them twice: ci-smoke-profile passed 20 ranges for 10
    launches), spilled its own ranges over its parent's in the file they still share (the
    parent's trace then held the child's graph), and with GPU timing on could wait for ever at
    exit on the lock of its parent's reaper, a thread it does not have. Now the child writes no
    trace and no summary (its own ranges cannot be told from its parent's), the parent's trace
    and summary hold exactly its own launches, each replay number once, and nothing hangs."""
    n = 8000  # more than a chunk of ranges (3,770): both processes spill (FERRUM_RECORD_MEMORY=0)
    for gpu in ("off", "on"):
        # With GPU timing the process has a second thread (the reaper): its child must not
        # allocate (--how idle: exit at once), and a sanitizer's runtime is not safe in such a
        # child at all (its allocator's and its own exit-time locks: "gpu fork_child_counts").
        if gpu == "on" and os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            env = {"FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s.%p.txt"),
                   "FERRUM_RECORD_OUT": os.path.join(tmp, "t.%p.json"),
                   "FERRUM_RECORD_MEMORY": "0", "FERRUM_REPLAY_GPU_TIME": gpu}
            how = ["--how", "idle"] if gpu == "on" else []
            try:
                run_ = fault("clone-child", "--launches", str(n), *how, env=env, timeout=120)
            except subprocess.TimeoutExpired:
                expect(False, f"GPU timing {gpu}: the child (or its parent) never ended")
            expect(run_.returncode == 0, f"GPU timing {gpu}: the program failed", run_)
            got = values(run_.stdout)
            expect(got.get("child_status") == 0 and got.get("launches") == 2 * n,
                   f"GPU timing {gpu}: the child or the parent's launches failed", run_)
            child = got["child"]
            traces = traces_in(tmp)
            summaries = {int(re.search(r"s\.(\d+)\.txt$", p)[1]): open(p).read()
                         for p in glob.glob(os.path.join(tmp, "s.*.txt"))}
            expect(child not in traces and child not in summaries,
                   f"GPU timing {gpu}: the child wrote its parent's data as its own: traces "
                   f"{sorted(traces)}, summaries {sorted(summaries)}", run_)
            expect(len(traces) == 1 and len(summaries) == 1,
                   f"GPU timing {gpu}: one trace and one summary (the parent's) expected", run_)
            (summary,) = summaries.values()
            expect(f", {2 * n} launches," in summary,
                   f"GPU timing {gpu}: the parent's summary: {summary!r}", run_)
            (trace,) = traces.values()
            ranges = trace_check.ranges(trace, domain=harness.DOMAIN)
            names = {r["name"] for r in ranges}
            replays = sorted(r["args"].get("payload") for r in ranges)
            expect(len(ranges) == 2 * n and len(names) == 1 and replays == list(range(1, 2 * n + 1)),
                   f"GPU timing {gpu}: the parent's trace: {len(ranges)} ranges of {names}, replay "
                   f"numbers {replays[:3]}...{replays[-3:]} (the child's spilled over them?)", run_)


def running_marker_until_exit():
    """With FERRUM_REPLAY_RUNNING_DIR (what `record` and ci-smoke-profile set), a process keeps
    DIR/ferrum-replay.PID.running from its first launch to its exit hook; the directory is made
    absolute (the program may change directory). A process that ends with _exit (no exit hook:
    as killed, or replaced by exec) leaves it, naming the program — what they report (workflow
    process_lost_after_launch); a normal exit leaves none (also for forked children:
    forked_children_count_their_own). Without the setting, no marker, even with a summary file;
    a directory that does not exist: none, and nothing said."""
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "run"))
        run_ = fault("underscore-exit", "--launches", "3", cwd=tmp,
                     env={"FERRUM_REPLAY_RUNNING_DIR": "run/"})
        expect(run_.returncode == 0, "_exit(0) did not exit 0", run_)
        files = os.listdir(os.path.join(tmp, "run"))
        markers = [m for m in (re.fullmatch(r"ferrum-replay\.(\d+)\.running", f) for f in files)
                   if m]
        expect(len(markers) == 1 and len(files) == 1,
               f"one marker and nothing else expected after _exit: {files}", run_)
        with open(os.path.join(tmp, "run", markers[0][0])) as handle:
            first = handle.readline()
        image = os.stat(PROGRAM)  # the program file it runs: exec'd away, another one
        pid_namespace = os.stat("/proc/self/ns/pid").st_ino  # (the test's is the program's)
        expect(first == f"ferrum-replay: running: pid={markers[0][1]} program=fault_program "
                        f"image={image.st_dev:x}:{image.st_ino:x} pidns={pid_namespace:x}\n",
               f"the marker's first line: {first!r}", run_)
        os.unlink(os.path.join(tmp, "run", markers[0][0]))
        # Two processes of one pid number (each pid 1 of a PID namespace of its own: containers
        # sharing the run directory) each keep a marker: the second is made beside the first,
        # where it used to be given up (and the first's exit took the only one away).
        unshare = shutil.which("unshare")
        if unshare and subprocess.run([unshare, "-pf", "true"], capture_output=True).returncode == 0:
            for _ in range(2):
                # (LeakSanitizer's check at exit cannot read the process's threads where /proc
                # is the outer namespace's: without it.)
                run_ = harness.run([unshare, "-pf", PROGRAM, "underscore-exit", "--launches", "2"],
                                   cwd=tmp,
                                   env=without_leak_check({"FERRUM_REPLAY_RUNNING_DIR": "run/"}))
                expect(run_.returncode == 0, "_exit(0) in a PID namespace", run_)
            files = sorted(os.listdir(os.path.join(tmp, "run")))
            expect(files == ["ferrum-replay.1.1.running", "ferrum-replay.1.running"],
                   f"a marker each for two processes of pid 1: {files}", run_)
            for name in files:
                with open(os.path.join(tmp, "run", name)) as handle:
                    line = handle.readline()
                expect(" pidns=" in line and f" pidns={pid_namespace:x}" not in line,
                       f"{name} names its own PID namespace: {line!r}", run_)
                os.unlink(os.path.join(tmp, "run", name))
        else:
            print("note: unshare -pf is not available here: the PID-namespace case did not run")
        # Normal exits (a parent and its forked child that launched): no marker.
        run_ = fault("fork-children", "--launches", "2", cwd=tmp, timeout=60,
                     env={"FERRUM_REPLAY_RUNNING_DIR": os.path.join(tmp, "run")})
        expect(run_.returncode == 0 and not os.listdir(os.path.join(tmp, "run")),
               f"markers left by normal exits: {os.listdir(os.path.join(tmp, 'run'))}", run_)
        # No running directory: a summary file, and nothing beside it.
        run_ = fault("underscore-exit", "--launches", "3", cwd=tmp,
                     env={"FERRUM_REPLAY_SUMMARY": "s.%p.txt"})
        expect(sorted(os.listdir(tmp)) == ["run"], f"without the setting: {os.listdir(tmp)}",
               run_)
        run_ = fault("underscore-exit", "--launches", "3", cwd=tmp, record=False,
                     env={"FERRUM_REPLAY_RUNNING_DIR": os.path.join(tmp, "missing"),
                          "FERRUM_REPLAY_SUMMARY": "stderr"})
        # (_exit: no summary either; the summary setting only keeps the shim at work.)
        expect(run_.returncode == 0 and sorted(os.listdir(tmp)) == ["run"] and
               run_.stderr == "",
               f"a running directory that does not exist: {os.listdir(tmp)}", run_)


def exit_during_first_launch():
    """The main thread calls exit(0) while another thread's first launch is making the running
    marker (held there 50 ms): the process ended normally, so no marker may be left — else
    ci-smoke-profile and `record` name a lost process that was not lost."""
    with tempfile.TemporaryDirectory() as tmp:
        run_ = fault("exit-during-first-launch", cwd=tmp, record=False, timeout=60,
                     # No tool: the summary keeps the shim at work.
                     env={"FERRUM_REPLAY_RUNNING_DIR": ".", "FERRUM_REPLAY_SUMMARY": "stderr"})
        expect(run_.returncode == 0 and "held=1" in run_.stdout,
               f"exit {run_.returncode}, the marker's making not held", run_)
        left = [f for f in os.listdir(tmp) if f.endswith(".running")]
        expect(not left, f"a normal exit left its marker: {left}", run_)


def exit_in_handler(mode, missing, **kwargs):
    """Runs fault_program `mode`, whose signal handler calls exit() inside our locked section:
    the process must end (exit 0) with one line saying there is `missing`."""
    try:
        run_ = fault(mode, timeout=30, **kwargs)
    except subprocess.TimeoutExpired:
        expect(False, f"{mode}: the process never ended (an exit hook waited for a lock its own "
               "thread held)")
    expect(run_.returncode == 0 and "armed=1" in run_.stdout, f"{mode}: the program failed", run_)
    lines = run_.stderr.splitlines()
    expect(len(lines) == 1 and "exit() was called" in lines[0] and "signal handler" in lines[0],
           f"{mode}: one line should say why there is {missing}", run_)
    return run_


def exit_in_signal_handler_inside_recorder():
    """A signal handler that calls exit() (a SIGTERM handler does) lands while the thread is
    inside the recorder, holding a lock: here its first NVTX call, registering the thread. The
    exit report, run by that exit on the same thread, waited for that lock: the process never
    ended. Now the report sees it and writes nothing, in one line."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "t.json")
        run_ = exit_in_handler("exit-in-handler", "no trace", preload=False,
                               env={"FERRUM_RECORD_OUT": trace})
        expect(not os.path.exists(trace), "a trace was written", run_)


def exit_in_signal_handler_inside_shim():
    """The same inside the shim: the handler lands in a thread's first timed launch (GPU timing
    on), which registers the thread under a lock of the shim's; the last GPU pass and the launch
    summary at exit waited for that lock. Now neither waits: one line says there is no summary,
    and the process ends with the handler's status. Its running marker stays (its launches are
    in no summary: a judge must name it; it used to be removed, and ci-smoke-profile passed)."""
    with tempfile.TemporaryDirectory() as tmp:
        run_ = exit_in_handler("exit-in-handler-timed", "no summary", record=False, cwd=tmp,
                               env={"FERRUM_REPLAY_GPU_TIME": "on",
                                    "FERRUM_REPLAY_SUMMARY": "stderr",
                                    "FERRUM_REPLAY_RUNNING_DIR": "."})
        left = os.listdir(tmp)
        expect(len(left) == 1 and re.fullmatch(r"ferrum-replay\.\d+\.running", left[0]),
               f"the marker of a process without its summary should stay, alone: {left}", run_)
        with open(os.path.join(tmp, left[0]), encoding="utf-8") as handle:
            line = handle.readline()
        expect(line.startswith("ferrum-replay: running: pid=") and
               " program=fault_program " in line, f"the marker's line: {line!r}", run_)


def exit_in_signal_handler_inside_gpu_engine():
    """The same inside the shim's GPU engine, its mutex held (a second context's event pool
    being mapped at its first instantiation), and the program's teardown destroys that context
    in an atexit handler that runs before the shim's exit hook, as a runtime's may: the context
    hook waited for the mutex its own thread held, and the process never ended (a hostile
    review). Now the hook sees the thread inside a lock of ours, stops GPU timing and passes
    the call through: the destruction succeeds, the process ends with one line."""
    env = {"FERRUM_REPLAY_GPU_TIME": "on", "FERRUM_REPLAY_SUMMARY": "stderr"}
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):  # the teardown in signal context: the premise
        env["TSAN_OPTIONS"] = os.environ.get("TSAN_OPTIONS", "") + ":report_signal_unsafe=0"
    run_ = exit_in_handler("exit-in-handler-pool", "no summary", record=False, env=env)
    expect("destroyed=0" in run_.stdout, "the program's own context destruction at exit", run_)


def exit_in_signal_handler_inside_driver():
    """A SIGTERM handler that calls exit() lands while its thread is inside the driver, holding
    the driver's own lock (the stand-in's 200th launch raises it there, as a real driver may be
    interrupted anywhere inside a call), with GPU timing on. The reaper's pass, asked for at
    exit, waits for that lock inside a driver call while it holds the engine's mutex, and the
    exit hooks waited for that mutex: the process never ended (a hostile review: 13 of 40
    SIGTERMs to a launching server). Without the shim the same exit ends at once. Now every
    exit-path wait on the engine is bounded: the process ends with the handler's status within
    seconds, its trace written; a launch summary says its GPU columns could not be read."""
    env = {"FERRUM_REPLAY_GPU_TIME": "on",
           "FERRUM_STANDIN_LAUNCH_RAISE_LOCKED": f"{int(signal.SIGTERM)},200",
           # 10 ms replays: the 199 before the signal are still running, so that the reaper's
           # pass asks the driver about them.
           "FERRUM_STANDIN_GRAPH_NS": "10000000"}
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):  # as sigterm_handler_exits
        env["TSAN_OPTIONS"] = os.environ.get("TSAN_OPTIONS", "") + ":report_signal_unsafe=0"
    for record, summary in ((True, False), (False, True), (True, True), (False, False)):
        with tempfile.TemporaryDirectory() as tmp:
            asked = dict(env, **({"FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "summary.txt")}
                                 if summary else {}))
            started = time.monotonic()
            try:
                run_ = fault("sigterm", timeout=30, record=record, env=asked)
            except subprocess.TimeoutExpired:
                expect(False, f"record={record} summary={summary}: the process never ended")
            took = time.monotonic() - started
            expect(run_.returncode == 42 and run_.report.get("launches") == 200,
                   f"record={record} summary={summary}: status {run_.returncode}, expected 42 "
                   "from the handler at the 200th launch", run_)
            expect(took < 10, f"record={record} summary={summary}: exit took {took:.1f} s", run_)
            expect(run_.stderr == "", "no line was asked for", run_)
            if record:
                expect(run_.trace is not None and
                       footer(run_.trace).get("protocolErrors", {}).get("popWithoutPush") == 0,
                       "the trace of the handler's exit", run_)
                ranges = len(trace_check.ranges(run_.trace, domain=harness.DOMAIN))
                expect(199 <= ranges <= 200, f"{ranges} ranges for 200 launches", run_)
            if summary:
                with open(asked["FERRUM_REPLAY_SUMMARY"], encoding="utf-8") as handle:
                    text = handle.read()
                # (Under TSan a raised signal waits for the thread's next intercepted call, the
                # driver's unlock: the handler then runs outside its lock, and the columns are
                # read.)
                held = "libtsan" not in os.environ.get("FERRUM_TEST_PRELOAD_FIRST", "")
                expect("200 launches" in text and "GPU time: " in text and
                       (not held or "GPU columns not read: the shim's GPU reader was held "
                        "inside a driver call at exit" in text), f"the summary:\n{text}", run_)


def fork_in_signal_handler_inside_our_lock():
    """A signal handler that calls fork() (a crash reporter's, a supervisor's) lands while its
    thread is inside a locked section of ours: the recorder registering the thread at its first
    NVTX call, the shim's registry growing its tables at an instantiation. Our fork prepare
    handler, run by that fork on that thread, waited for the lock the interrupted section holds:
    fork() never returned (both hung, 3 of 3). Now the host's fork returns, its child ends or
    goes on as it chose, and the parent's trace, summary and marker are its own; a child that
    goes on writes nothing of ours (its copy is its parent's, as a child without fork
    handlers).

    Under ASan without its leak check: in a child forked from a signal handler, LeakSanitizer's
    exit-time check finds its parent's threads in its list, not suspended, and says so on
    stderr ("Running thread N was not suspended"). Under TSan without its signal-unsafe-call
    reports: the recorder's prepare handler, outside its own locks, makes room for the child's
    orphaned buffers (an allocation) as for any fork, which TSan reports when the fork comes
    from a signal handler; glibc's fork takes the allocator's locks itself right after the
    prepare handlers, so a fork from a handler that interrupted malloc hangs with or without
    us. And under TSan only the child that ends at once: TSan's own runtime crashes in a child
    forked from a signal handler that goes on (SEGV inside TSan, with or without us)."""
    def fork_in_handler_env(env):
        env = without_leak_check(env)
        if "TSAN_OPTIONS" in os.environ:
            env = dict(env, TSAN_OPTIONS=os.environ["TSAN_OPTIONS"] + ":report_signal_unsafe=0")
        return env

    for how in ("exit",) if "tsan" in os.environ.get("FERRUM_TEST_PRELOAD_FIRST", "") else \
            ("exit", "continue"):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "t.json")
            try:
                run_ = fault("fork-in-handler", "--how", how, preload=False, timeout=30,
                             env=fork_in_handler_env({"FERRUM_RECORD_OUT": trace}))
            except subprocess.TimeoutExpired:
                expect(False, f"recorder, child {how}: fork() in the handler never returned (our "
                       "prepare handler waited for its own thread's lock)")
            expect(run_.returncode == 0 and "forked=1" in run_.stdout and run_.stderr == "",
                   f"recorder, child {how}: the program's fork or its output changed", run_)
            expect(("child=1" in run_.stdout) == (how == "continue"),
                   f"recorder, child {how}: the child's line", run_)
            names = sorted(e["name"] for e in trace_check.load(trace)["traceEvents"]
                           if e.get("ph") == "X")
            expect(names == ["main", "worker"], f"recorder, child {how}: the parent's trace holds "
                   f"{names}", run_)
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "summary.txt")
            try:
                run_ = fault("fork-in-handler-shim", "--how", how, "--launches", "5000",
                             timeout=30, cwd=tmp,
                             env=fork_in_handler_env({"FERRUM_REPLAY_SUMMARY": summary,
                                                      "FERRUM_REPLAY_RUNNING_DIR": "."}))
            except subprocess.TimeoutExpired:
                expect(False, f"shim, child {how}: fork() in the handler never returned (our "
                       "prepare handler waited for its own thread's lock)")
            expect(run_.returncode == 0 and "forked=1" in run_.stdout and
                   "instantiated=5000 raised=1" in run_.stdout and run_.stderr == "",
                   f"shim, child {how}: the program's fork or its output changed", run_)
            expect(os.listdir(tmp) == ["summary.txt"],
                   f"shim, child {how}: one summary, no marker left: {os.listdir(tmp)}", run_)
            with open(summary, encoding="utf-8") as handle:
                head = handle.readline()
            expect(head.startswith("ferrum-replay launch summary: 5001 graphs, 1 launches"),
                   f"shim, child {how}: the summary's first line: {head!r}", run_)
            expect_balanced(run_)


def first_launch_on_smallest_stack():
    """The process's first launch on a thread with the smallest stack POSIX allows
    (PTHREAD_STACK_MIN; some thread pools make them): a running directory, which makes that
    launch create the running marker, must not overflow a stack the launch fits without it
    (`record` and ci-smoke-profile always set one), nor must a summary file, nor a misspelt
    setting (its line and suggestion are made at that first launch: F257)."""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
        return "skip: a sanitizer's frames are larger than the smallest stack"
    with tempfile.TemporaryDirectory() as tmp:
        for env in (None, {"FERRUM_REPLAY_RUNNING_DIR": ".", "FERRUM_REPLAY_SUMMARY": "s.%p.txt",
                           "FERRUM_REPLAY_SUMARY": "misspelt"}):
            run_ = fault("small-stack", "--launches", "3", cwd=tmp, env=env)
            if env:
                expect("did you mean FERRUM_REPLAY_SUMMARY?" in run_.stderr,
                       "no line for the misspelt setting", run_)
            expect(run_.returncode == 0 and values(run_.stdout).get("launches") == 3,
                   f"with {env}: exit {run_.returncode}", run_)
        files = os.listdir(tmp)
        expect(len(files) == 1 and re.fullmatch(r"s\.\d+\.txt", files[0]),
               f"one summary and no marker expected: {files}")


def exit_with_little_stack():
    """exit() where little stack is left — on a thread with a 32 KiB stack, in a signal handler
    on a 16 KiB alternate stack (malloc'ed, or with a guard page, or disarmed in the handler),
    from main under a 40 KiB RLIMIT_STACK, from a fiber on a 16 KiB stack (on a thread, on the
    main thread without a stack limit), on a thread of a process that may make no more threads. The exit reports keep some 40 KiB of buffers in their frames: they crashed the
    program (status 139) or, on the malloc'ed stack, overwrote the heap below it — the program's
    own buffered output. Now: the program's status and output, the trace and the summary."""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
        return "skip: a sanitizer's frames are larger than these stacks"
    unlimited = resource.getrlimit(resource.RLIMIT_STACK)[1] == resource.RLIM_INFINITY
    cases = (("thread", 3, None), ("altstack", 7, None), ("guarded", 7, None),
             ("main", 0, {resource.RLIMIT_STACK: 40 * 1024}),
             # Stacks of the program's own making, above the thread's (their bounds unknown:
             # the reports go to a thread of ours), and a process that may make no thread (in
             # place: 128 KiB is room enough).
             ("fiber", 3, None), ("autodisarm", 7, None), ("no-thread", 3, None),
             *((("fiber-main", 3, {resource.RLIMIT_STACK: resource.RLIM_INFINITY}),)
               if unlimited else ()))
    expected = "".join(f"line {i:02d} of the program's own buffered output ......\n"
                       for i in range(40))
    for how, status, rlimits in cases:
        with tempfile.TemporaryDirectory() as tmp:
            summary = os.path.join(tmp, "s.txt")
            run_ = fault("exit-small-stack", "--launches", "5", "--how", how,
                         env={"FERRUM_REPLAY_SUMMARY": summary}, rlimits=rlimits)
            expect(run_.returncode == status, f"{how}: exit {run_.returncode}, not {status}", run_)
            expect(run_.stdout == expected, f"{how}: the program's own output changed", run_)
            expect(run_.trace is not None and len(run_.ranges()) == 5,
                   f"{how}: no trace of the 5 launches", run_)
            text = open(summary).read() if os.path.exists(summary) else ""
            expect(", 5 launches," in text, f"{how}: launch summary {text!r}", run_)


def file_size_limit():
    """The program runs with a file size limit (RLIMIT_FSIZE, `ulimit -f`) below the size of our
    files. A write past it fails with EFBIG and the kernel sends the writing thread SIGXFSZ,
    whose default action ends the program. Every file of ours — the trace, the recorder's spill
    (FERRUM_RECORD_MEMORY=0), the summary, the running marker — must fail with the error alone:
    exit code and output as without the shim, a SIGXFSZ handler of the program called for its
    own write only, one line per output that failed, no temporary left. The running marker
    goes where the summary was written; where it was not (limit 0) it stays, empty (its line
    could not be written either), so that the judges name the process whose launches are in
    no summary. (No spill file: beyond FERRUM_RECORD_MEMORY the ranges are dropped, counted in
    one more line.)"""
    if "tsan" in os.environ.get("FERRUM_TEST_PRELOAD_FIRST", ""):
        return ("skip: ThreadSanitizer's runtime writes a 512 KiB file of its own at start-up "
                "(/tmp/tsan.rodata.PID): the program dies of SIGXFSZ without the shim")
    for limit, own_bytes in ((8192, 0), (0, 0), (8192, 65536)):
        with tempfile.TemporaryDirectory() as tmp:
            # More ranges than a thread's first chunk holds (event_chunk.hpp: 3,770 of a
            # graph's replays), so that FERRUM_RECORD_MEMORY=0 makes the recorder spill.
            argv = [PROGRAM, "size-limit", "--launches", "8000", "--own-bytes", str(own_bytes)]
            rlimits = {resource.RLIMIT_FSIZE: limit}
            # The stand-in driver's report (a file of the test's) is not written at limit 0.
            quiet = {"FERRUM_STANDIN_REPORT": ""}
            bare = harness.run(argv, preload=False, record=False, cwd=tmp, rlimits=rlimits,
                               env=quiet)
            expect(bare.returncode == 0 and values(bare.stdout).get("launches") == 8000,
                   "the program failed without the shim", bare)
            left_bare = set(os.listdir(tmp))
            run_ = harness.run(argv, cwd=tmp, rlimits=rlimits,
                               env={**quiet, "FERRUM_RECORD_OUT": "t.json",
                                    "FERRUM_RECORD_MEMORY": "0",
                                    "FERRUM_REPLAY_SUMMARY": "s.txt",
                                    "FERRUM_REPLAY_RUNNING_DIR": "."})
            what = f"file size limit {limit} B, program writes {own_bytes} B"
            expect(run_.returncode == bare.returncode and run_.stdout == bare.stdout,
                   f"{what}: exit code or output changed (without the shim: exit "
                   f"{bare.returncode}, {bare.stdout!r})", run_)
            lines = run_.stderr.splitlines()
            spill = [l for l in lines if "no spill file could be made" in l]
            dropped = [l for l in lines if l.endswith("(droppedForMemory)")]
            outputs = [l for l in lines if l not in spill and l not in dropped]
            # The trace (about 180 KB) never fits; the summary (about 200 B) only the 8 KiB.
            expected = 1 if limit else 2
            expect(len(outputs) == expected and
                   all(line.endswith(": File too large") for line in outputs) and
                   any("trace" in line for line in outputs),
                   f"{what}: expected {expected} line(s) ending 'File too large'", run_)
            expect(len(spill) == 1 and ": File too large;" in spill[0] and len(dropped) == 1,
                   f"{what}: one line says the spill file failed, one counts what was dropped",
                   run_)
            left = set(os.listdir(tmp)) - left_bare
            markers = {f for f in left if re.fullmatch(r"ferrum-replay\.\d+\.running", f)}
            expect(left == {"s.txt"} if limit else (left == markers and len(markers) == 1),
                   f"{what}: left in the directory: {sorted(left)} (expected "
                   f"{'the summary' if limit else 'the running marker alone'})", run_)
            for marker in markers:
                expect(os.path.getsize(os.path.join(tmp, marker)) == 0,
                       f"{what}: the marker holds part of a line", run_)


def errno_passes_through():
    """A program's errno after a call through the shim is what the real call left: nothing the
    shim does afterwards on its own (GPU timing's end event, a new graph's content and event
    pool, the pools dropped around a context's end, the NVTX tool's push and pop — a test tool
    that leaves errno set in both) may leave a value there. The stand-in driver is made to leave a value of its own in errno from every
    function (FERRUM_STANDIN_DIRTY_ERRNO=1): after each of the program's calls errno must name the
    function the program called; and from every function but the launches (=2): after a launch,
    the program's own value must still be there (GPU timing's start event, before the real
    launch, must not show either). (Before the shim kept errno, 808 of 817 calls of a shorter
    run read another function's value.) The same for the loader's error state: after each call
    dlerror() reports nothing, also where the shim's own loader calls fail inside it (a tool
    that is not there made the program's successful dlsym of cuGraphLaunch read as failed)."""
    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.join(tmp, "libferrum-replay.so")  # no libferrum-replay-last.so beside it
        shutil.copy(harness.path_of("FERRUM_SHIM"), alone)
        errno_passes_configurations(alone)


def errno_passes_configurations(alone):
    launches = 250
    calls = 5 + 8 + 8 * launches + 8 + 1  # 5 lookups, 8 instantiates, the launches, 8 destroys
    everything = {"FERRUM_REPLAY_GPU_TIME": "on", "FERRUM_REPLAY_CONTENT": "on",
                  "FERRUM_REPLAY_SITE": "launch", "FERRUM_REPLAY_SUMMARY": "stderr",
                  "FERRUM_REPLAY_RUNNING_DIR": os.path.dirname(alone)}
    configurations = {
        "without the shim": dict(preload=False, record=False, env={}),
        "recorder, GPU timing, content and call sites": dict(env=everything),
        "the summary alone, no tool": dict(record=False, env={"FERRUM_REPLAY_SUMMARY": "stderr"}),
        # A tool whose push and pop leave errno set (the shim's range around each launch).
        "a tool that leaves errno set": dict(record=False, env={
            "NVTX_INJECTION64_PATH": IDLE_TOOL, "FERRUM_TEST_TOOL_DOMAINS": "1",
            "FERRUM_TEST_TOOL_DIRTY_ERRNO": "7777", "FERRUM_REPLAY_GPU_TIME": "on"}),
        "FERRUM_REPLAY=off": dict(record=False, env={"FERRUM_REPLAY": "off"}),
        # The shim's own loader calls failing inside the program's calls (the loader's error
        # state after each must be none): an NVTX tool that is not there; the driver loaded
        # privately (lookups by RTLD_NEXT miss); the shim without its exit library beside it.
        "a tool that cannot be loaded": dict(record=False, env={
            "NVTX_INJECTION64_PATH": "/nonexistent/libnvtx-tool.so",
            "FERRUM_REPLAY_SUMMARY": "stderr", "FERRUM_REPLAY_GPU_TIME": "on"}),
        "the driver loaded privately": dict(env={**everything, "FERRUM_TEST_DRIVER_LOCAL": "1"}),
        # The shim's exports called, as by a program linked against libcuda: each resolves
        # its real function at its first call. (Where the shim starts in a linked program's
        # first call, not in a lookup: loader_error_on_every_route.)
        "a tool that cannot be loaded, the shim's exports called": dict(record=False, env={
            "NVTX_INJECTION64_PATH": "/nonexistent/libnvtx-tool.so",
            "FERRUM_REPLAY_SUMMARY": "stderr", "FERRUM_TEST_EXPORTED": "1"}),
        "recorder, GPU timing, the shim's exports called": dict(env={
            **everything, "FERRUM_TEST_EXPORTED": "1"}),
        "the shim without its exit library": dict(env={**everything, "LD_PRELOAD": alone}),
    }
    # A C library whose calls leave errno set when they succeed (dirty_libc.c): every stretch
    # of ours inside a program's call — activation in its dlsym, the tool's start, the first
    # launch's registration and running marker, GPU timing's set-up — must keep errno.
    dirty_libc = {"FERRUM_TEST_DIRTY_LIBC": "5151"}
    configurations.update({
        f"{what}, a C library that leaves errno set": dict(how, env={**how["env"], **dirty_libc})
        for what, how in list(configurations.items())})
    # 1: every driver function leaves its value, the launch too (what the shim does after the
    # real call must not show); 2: the launches leave errno alone, so the program's own value
    # must survive them (what the shim does before the real launch must not show either).
    for mode in ("1", "2"):
        for what, how in configurations.items():
            errno_passes_run(f"{what}, dirty errno {mode}", launches, calls,
                             dict(how, env={**how["env"], "FERRUM_STANDIN_DIRTY_ERRNO": mode,
                                            "FERRUM_STANDIN_REPORT": ""}))


def errno_passes_run(what, launches, calls, how):
    run_ = fault("errno-passes", "--launches", str(launches), **how)
    got = values(run_.stdout)

    def first(key):  # the program's KEY=... line: the first wrong call it saw, or ""
        found = re.search(rf"^{key}=(.*)$", run_.stdout, re.M)
        return found.group(1) if found else ""

    expect(run_.returncode == 0 and got.get("errno_calls") == calls,
           f"{what}: the program failed", run_)
    expect(got.get("errno_wrong") == 0,
           f"{what}: after {got.get('errno_wrong')} of {calls} calls errno was not the "
           f"value expected (first: call, errno, expected: {first('errno_first')})", run_)
    expect(got.get("api_wrong") == 0 and
           got.get("api_calls") == (0 if how.get("preload") is False else 10),
           f"{what}: after {got.get('api_wrong')} of {got.get('api_calls')} calls of the shim's "
           f"own API (a naming scope, names by handle) errno was not the program's "
           f"(first: {first('api_first')})", run_)
    expect(got.get("loader_wrong") == 0,
           f"{what}: after {got.get('loader_wrong')} of {calls} calls dlerror() reported an "
           f"error (first: {first('loader_first')})", run_)


def loader_error_on_every_route():
    """The loader's error state after each of the program's calls is what it would be without
    the shim (none), on every route to a graph launch — the driver linked, dlopen'ed, reached
    through cuGetProcAddress and the runtime's entry-point lookup, the runtime shared and
    static — while the shim's own loader calls fail inside them: an NVTX tool that is not there
    (a stale NVTX_INJECTION64_PATH), the shim without libferrum-replay-last.so beside it.
    (The runtime routes read the tool's "cannot open shared object file" after their set-up.)"""
    programs = ("LAUNCH_DRIVER", "LAUNCH_DLOPEN_DRIVER", "LAUNCH_PROCADDRESS", "LAUNCH_ENTRY_POINT",
                "LAUNCH_RUNTIME", "LAUNCH_STATIC_RUNTIME")
    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.join(tmp, "libferrum-replay.so")  # no libferrum-replay-last.so beside it
        shutil.copy(harness.path_of("FERRUM_SHIM"), alone)
        configurations = {
            "without the shim": dict(preload=False, record=False, env={}),
            "a tool that cannot be loaded": dict(record=False, env={
                "NVTX_INJECTION64_PATH": "/nonexistent/libnvtx-tool.so",
                "FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s.%p.txt"),
                "FERRUM_REPLAY_GPU_TIME": "on"}),
            "the shim without its exit library": dict(env={
                "LD_PRELOAD": alone, "FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "t.%p.txt"),
                "FERRUM_REPLAY_GPU_TIME": "on", "FERRUM_REPLAY_SITE": "launch"}),
        }
        for program in programs:
            argv = [harness.path_of(program), "--graphs", "2", "--iters", "5", "--loader-state"]
            for what, how in configurations.items():
                run_ = harness.run(argv, **how)
                got = dict(re.findall(r"^(\w+)=(.*)$", run_.stdout, re.M))
                expect(run_.returncode == 0 and got.get("loader_errors") == "0",
                       f"{os.path.basename(argv[0])}, {what}: dlerror() reported an error after "
                       f"{got.get('loader_errors')} of its calls (first: "
                       f"{got.get('loader_first', '-')})", run_)


def address_space_limit():
    """The program limits its address space (RLIMIT_AS, `ulimit -v`) to what it has mapped plus
    256 KiB or 1 MiB — before its first launch or after it — and launches 20,000 times, then
    instantiates, launches and destroys 32 graphs more: the recorder's chunks, the shim's
    tables and GPU timing's pools, the snapshot and the trace at exit can no longer have the
    memory they want. Nothing of ours may end the program (no std::bad_alloc escaping into it,
    no store through a mapping that failed): exit code and launches as without the shim, only
    our own lines on stderr, no temporary left, the program's errno as each of its calls left
    it (it read ENOMEM after every launch and instantiate). A trace that is written accounts
    for every launch: recorded, or counted in droppedForMemory."""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST") or harness.EMULATOR:
        return "skip: a sanitizer's shadow memory or an emulator does not fit an address-space limit"
    launches = 20000
    total = launches + 2 * 32  # and 32 graphs instantiated under the limit, launched twice each
    for limit_first in ("0", "1"):
        for margin in (256 * 1024, 1024 * 1024):
            argv = [PROGRAM, "memory-limit", "--launches", str(launches), "--own-bytes",
                    str(margin), "--limit-first", limit_first]
            # The stand-in keeps its unfinished replays in a queue that grows on the heap, up to
            # 1,024 by default: how far it grows depends on how fast the program launches, and
            # its growth is the program's allocation, which the limit may leave no room for. A
            # graph the registry had no room for launched at 5 us a launch, so the queue never
            # grew; at a registered graph's speed (F171) it filled, and the stand-in's launch
            # answered CUDA_ERROR_OUT_OF_MEMORY at 1 MiB with GPU timing on (a real driver's
            # queue is not the program's heap). 64 replays stay within one block of it.
            quiet = {"FERRUM_STANDIN_REPORT": "", "FERRUM_STANDIN_LAUNCH_QUEUE": "64"}
            where = f"{margin // 1024} KiB more, limited {'before' if limit_first == '1' else 'after'} the first launch"
            with tempfile.TemporaryDirectory() as tmp:
                bare = harness.run(argv, preload=False, record=False, cwd=tmp, env=quiet)
            got = values(bare.stdout)
            expect(bare.returncode == 0 and got.get("launches") == total and
                   got.get("errno_changed_launch") == got.get("errno_changed_other") == 0,
                   f"{where}: the program fails without the shim", bare)
            for gpu_time in ("on", "off"):
                with tempfile.TemporaryDirectory() as tmp:
                    address_space_limited_run(argv, tmp, f"{where}, GPU timing {gpu_time}",
                                              total, {**quiet, "FERRUM_REPLAY_GPU_TIME": gpu_time})


def address_space_limited_run(argv, tmp, what, total, env):
    run_ = harness.run(argv, cwd=tmp, env={**env, "FERRUM_RECORD_OUT": "t.json",
                                           "FERRUM_REPLAY_SUMMARY": "s.txt"})
    got = values(run_.stdout)
    expect(run_.returncode == 0 and got.get("launches") == total and got.get("failed") == 0,
           f"{what}: exit code or launches changed", run_)
    # The program's errno after each of its calls is what the call left: our mappings that
    # failed (ENOMEM) must not show there (every launch and instantiate read ENOMEM). With GPU
    # timing on, the stand-in's own launch allocates under the pressure of the shim's events, and
    # malloc may leave ENOMEM behind from a mapping it recovered from: that is the real call's
    # errno, so there only the instantiates and destroys are held to it.
    kinds = ["other"] if env.get("FERRUM_REPLAY_GPU_TIME") == "on" else ["other", "launch"]
    changed = sum(got.get(f"errno_changed_{kind}", -1) for kind in kinds)
    first = ", ".join(line.split("=", 1)[1] for line in run_.stdout.splitlines()
                      if any(line.startswith(f"errno_first_{kind}=") for kind in kinds))
    expect(changed == 0, f"{what}: the program's errno changed across {changed} of its calls "
           f"(first: {first})", run_)
    foreign = [line for line in run_.stderr.splitlines() if not line.startswith("ferrum-replay")]
    expect(not foreign, f"{what}: lines not ours on stderr: {foreign[:3]}", run_)
    left = [f for f in os.listdir(tmp) if f.endswith(".tmp")]
    expect(not left, f"{what}: temporaries left: {left}", run_)
    trace_path = os.path.join(tmp, "t.json")
    if os.path.exists(trace_path):
        footer_ = footer(trace_check.load(trace_path))
        accounted = footer_.get("ranges", 0) + footer_.get("droppedForMemory", 0)
        expect(accounted >= total,
               f"{what}: {footer_.get('ranges')} ranges and "
               f"{footer_.get('droppedForMemory')} dropped for {total} launches", run_)
    else:
        expect("out of memory" in run_.stderr or "Cannot allocate memory" in run_.stderr,
               f"{what}: no trace, and no line saying why", run_)


def first_nvtx_call_without_memory():
    """A thread of the program makes its first NVTX calls (a range, a wide-character mark) after
    the program has used up its memory: an address-space limit (RLIMIT_AS) at what it mapped, and
    every block its heap could still give taken. What the recorder needs for that thread — its
    thread-local data, a buffer, room for a wide message — cannot be had, and none of it may end
    the program (glibc aborts a thread whose thread-local data of a dlopen'ed library, or the
    registration of a thread-local destructor, finds no memory): exit code and output as
    without the tool, only our own lines on stderr."""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST") or harness.EMULATOR:
        return "skip: a sanitizer's shadow memory or an emulator does not fit an address-space limit"
    argv = [PROGRAM, "heap-exhausted", "--launches", "100"]
    bare = harness.run(argv, preload=False, record=False)
    expect(bare.returncode == 0 and "heap_taken=1 ranges=100" in bare.stdout,
           "the program fails without the shim", bare)
    run_ = harness.run(argv)
    expect(run_.returncode == 0 and "heap_taken=1 ranges=100" in run_.stdout,
           "exit code or output changed", run_)
    foreign = [line for line in run_.stderr.splitlines() if not line.startswith("ferrum-replay")]
    expect(not foreign, f"lines not ours on stderr: {foreign[:3]}", run_)


def exit_without_memory():
    """The program launches, then uses up its memory (an address-space limit at what it mapped,
    every block of its heap taken) and returns: the exit hooks find no memory. The summary the
    user asked for (FERRUM_REPLAY_SUMMARY) is then written whole or not at all, and when not,
    one line says so: it was silently missing (a failed allocation returned without a word), or
    could be written with rows cut short."""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST") or harness.EMULATOR:
        return "skip: a sanitizer's shadow memory or an emulator does not fit an address-space limit"
    with tempfile.TemporaryDirectory() as tmp:
        argv = [PROGRAM, "exit-without-memory", "--launches", "100"]
        quiet = {"FERRUM_STANDIN_REPORT": ""}
        bare = harness.run(argv, preload=False, record=False, cwd=tmp, env=quiet)
        expect(bare.returncode == 0 and "heap_taken=1" in bare.stdout,
               "the program fails without the shim", bare)
        run_ = harness.run(argv, cwd=tmp, env={**quiet, "FERRUM_REPLAY_SUMMARY": "s.txt"})
        expect(run_.returncode == 0 and values(run_.stdout).get("launches") == 100 and
               "heap_taken=1" in run_.stdout, "exit code or output changed", run_)
        foreign = [line for line in run_.stderr.splitlines()
                   if not line.startswith("ferrum-replay")]
        expect(not foreign, f"lines not ours on stderr: {foreign[:3]}", run_)
        summary = os.path.join(tmp, "s.txt")
        if os.path.exists(summary):
            with open(summary) as handle:
                text = handle.read()
            expect(text.startswith("ferrum-replay launch summary: 1 graphs, 100 launches") and
                   text.endswith("\n") and len(text.splitlines()) >= 3,
                   f"a summary with rows missing: {text!r}", run_)
        else:
            expect("cannot write the summary to 's.txt': Cannot allocate memory" in run_.stderr,
                   "no summary, and no line saying why", run_)


def summary_rows(path):
    """{ordinal or 0 for the overflow row: (launches, name)} of a launch summary."""
    rows = {}
    with open(path) as handle:
        for line in handle:
            row = re.match(r" +(\d+) +(\d+) +\d+ +\d+  (.*)$", line)
            if row:
                rows[int(row[1])] = (int(row[2]), row[3])
    return rows


def rename_without_memory():
    """The program names its graph 6,000 times with its address space limited to what it has
    mapped: the registry's label pool cannot map its next chunk, so some names cannot be shown.
    ferrum_replay_name_graph_exec returned 0 ("took the name") for every one of them, and the
    record's {name} took the new name while its label kept the old one (F170). Now such a call
    returns -ENOSPC and the record stays as it was: the summary shows the last name the program
    was told was taken."""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST") or harness.EMULATOR:
        return "skip: a sanitizer's shadow memory or an emulator does not fit an address-space limit"
    with tempfile.TemporaryDirectory() as tmp:
        run_ = fault("rename-without-memory", "--launches", "6000", "--own-bytes", "0",
                     record=False, cwd=tmp,
                     env={"FERRUM_STANDIN_REPORT": "", "FERRUM_REPLAY_SUMMARY": "s.txt"})
        got = values(run_.stdout)
        expect(run_.returncode == 0 and got.get("taken", 0) + got.get("refused", 0) == 6000,
               "the program's run", run_)
        expect(got.get("refused", 0) > 0 and got.get("refused_with") == -errno.ENOSPC,
               f"names that could not be shown were reported taken: {got}", run_)
        rows = summary_rows(os.path.join(tmp, "s.txt"))
        expect(rows.get(1) == (2, f"step {got.get('last_taken')}"),
               f"the summary's row {rows.get(1)}: not the last name taken "
               f"(step {got.get('last_taken')})", run_)


def launch_refused_graph():
    """A graph the registry has no room for (its address space limited, no chunk of records to
    be had) shares the overflow record. Each of its launches took the slow path: a stack walk,
    the registry's mutex and a failed mmap, about 5 us instead of 30 ns (F171). Now the refusal
    is remembered lock-free: its launches map nothing and cost about what a registered graph's
    do (a margin of 10x plus 1 us: a loaded machine's noise, far below the 5 us before); after a
    destroy it is tried once more; once memory came back from outside the registry (the limit
    lifted, nothing registered: a refusal holds for 1 s at most, review X) its next launch
    registers it."""
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST") or harness.EMULATOR:
        return "skip: a sanitizer's shadow memory or an emulator does not fit an address-space limit"
    n = 20000
    with tempfile.TemporaryDirectory() as tmp:
        run_ = fault("launch-refused-graph", "--launches", str(n), "--own-bytes",
                     str(256 * 1024), record=False, cwd=tmp,
                     env={"FERRUM_STANDIN_REPORT": "", "FERRUM_STANDIN_BENCH": "1",
                          "FERRUM_REPLAY_SUMMARY": "s.txt"})
        got = dict(re.findall(r"(\w+)=(-?[\d.]+)", run_.stdout))
        expect(run_.returncode == 0 and "launches" in got, "the program's run", run_)
        registered, refused = float(got["registered_ns"]), float(got["refused_ns"])
        expect(int(got["refused_maps"]) <= int(got["registered_maps"]) + 1,
               f"{got['refused_maps']} mmap calls in {5 * n} launches of the refused graph "
               f"({got['registered_maps']} in as many of a registered one)", run_)
        expect(refused <= 10 * registered + 1000,
               f"a launch of the refused graph took {refused:.0f} ns, of a registered one "
               f"{registered:.0f} ns", run_)
        expect(int(got["maps_after_destroy"]) <= 2,
               f"{got['maps_after_destroy']} mmap calls in {n} launches after a destroy: more "
               "than one retry", run_)
        rows = summary_rows(os.path.join(tmp, "s.txt"))
        overflow = rows.get(0, (0, ""))
        expect(overflow == (6 * n, "graph (unregistered)"),
               f"the overflow row {overflow}: not the {6 * n} launches made while refused", run_)
        expect(rows.get(max(rows), (0,))[0] == 1 and max(rows) > 4096,
               f"the refused graph not registered once memory came back: {sorted(rows)[-3:]}",
               run_)


def output_lock_impossible():
    """The program's sandbox allows no sockets (a seccomp filter: socket() fails with EPERM), so
    the output lock cannot be taken at exit. Without the lock nothing is replaced: the earlier
    trace and summary at the names stay as they were and the new ones go beside them, at once
    (no wait for a holder that does not exist), with one line each that says the lock cannot be
    taken here and why, not that another process held it."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [PROGRAM, "no-sockets", "--launches", "50"]
        quiet = {"FERRUM_STANDIN_REPORT": ""}
        outputs = {"FERRUM_RECORD_OUT": "t.json", "FERRUM_REPLAY_SUMMARY": "s.txt"}
        started = time.monotonic()
        bare = harness.run(argv, preload=False, record=False, cwd=tmp, env=quiet)
        bare_took = time.monotonic() - started
        expect(bare.returncode == 0 and "sockets=0" in bare.stdout,
               "the program fails without the shim", bare)
        first = harness.run([PROGRAM, "size-limit", "--launches", "5"], cwd=tmp,
                            env={**quiet, **outputs})
        expect(first.returncode == 0 and first.stderr == "" and
               sorted(os.listdir(tmp)) == ["s.txt", "t.json"],
               f"the first run (with sockets) left {sorted(os.listdir(tmp))}", first)
        old = time.time() - 3600
        earlier = {}
        for name in ("s.txt", "t.json"):
            os.utime(os.path.join(tmp, name), (old, old))
            with open(os.path.join(tmp, name), "rb") as handle:
                earlier[name] = handle.read()
        started = time.monotonic()
        run_ = harness.run(argv, cwd=tmp, env={**quiet, **outputs})
        took = time.monotonic() - started
        expect(run_.returncode == 0 and run_.stdout == bare.stdout,
               f"exit code or output changed (without the shim: {bare.stdout!r})", run_)
        # (The bounded wait for a holder is 2 s: beside the program's own time, on a loaded
        # machine, 1.5 s more tells the two apart.)
        expect(took < bare_took + 1.5, f"took {took:.1f} s ({bare_took:.1f} s without the "
               "shim): waited for a lock nobody holds", run_)
        for name, data in earlier.items():
            with open(os.path.join(tmp, name), "rb") as handle:
                expect(handle.read() == data and os.stat(os.path.join(tmp, name)).st_mtime == old,
                       f"{name} was replaced without the lock", run_)
        beside = sorted(set(os.listdir(tmp)) - set(earlier))
        expect(len(beside) == 2 and re.fullmatch(r"s\.\d+\.txt", beside[0]) and
               re.fullmatch(r"t\.\d+\.json", beside[1]),
               f"expected s.<pid>.txt and t.<pid>.json beside: {beside}", run_)
        with open(os.path.join(tmp, beside[0])) as handle:
            expect(handle.read().startswith("ferrum-replay launch summary: 1 graphs, 50 launches"),
                   "the summary beside is not this run's", run_)
        trace = trace_check.load(os.path.join(tmp, beside[1]))
        expect(len(trace_check.ranges(trace, domain=harness.DOMAIN)) == 50,
               "the trace beside does not hold this run's 50 launches", run_)
        lines = run_.stderr.splitlines()
        why = "the output lock of its directory cannot be taken here: Operation not permitted"
        expect(len(lines) == 2 and all(why in line for line in lines) and
               any(beside[0] in line for line in lines) and
               any(beside[1] in line for line in lines) and
               not any("held" in line for line in lines),
               f"expected one line per output saying {why!r}", run_)


def stderr_reader_gone():
    """The program's stderr is a pipe whose reader has gone: the shim's own lines (an invalid
    setting, the summary) must not kill the program with SIGPIPE, nor change its exit code."""
    for env in ({"FERRUM_REPLAY": "bogus"}, {"FERRUM_REPLAY_SUMMARY": "stderr"},
                {"FERRUM_REPLAY_LOG": "debug"}):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            run_ = harness.run([PROGRAM, "underscore-exit", "--launches", "3"], env=env,
                               stderr=write_end)
        finally:
            os.close(write_end)
        expect(run_.returncode == 0, f"with {env} and a closed stderr pipe: exit {run_.returncode}",
               run_)


def rwf_nowait_on_pipes():
    """Whether this kernel writes a pipe with pwritev2(RWF_NOWAIT) (Linux 5.x and later)."""
    read_end, write_end = os.pipe()
    try:
        return os.pwritev(write_end, [b"x"], -1, os.RWF_NOWAIT) == 1
    except (OSError, AttributeError):
        return False
    finally:
        os.close(read_end)
        os.close(write_end)


def marker_after_setuid():
    """A program that launched and then gave up its user ID (setuid) cannot remove its running
    marker at exit (EACCES in the run's directory): the marker stays, and a judge reading the
    directory will call the process lost. It can no more be prevented than the program's own
    files can be written after it: the log says so in one line, instead of nothing."""
    run_dir = tempfile.mkdtemp(prefix="ferrum-running-")
    try:
        with tempfile.TemporaryDirectory() as cwd:
            os.chmod(cwd, 0o777)
            run_ = fault("stderr-unreopenable", "--how", "setuid", "--launch-first", "1",
                         "--launches", "3",
                         env=without_leak_check({"FERRUM_REPLAY_RUNNING_DIR": run_dir,
                                                 "FERRUM_REPLAY_LOG": "error"}),
                         cwd=cwd)
        if "unreopenable=skip" in run_.stdout:
            return "skip: giving up a user ID needs root"
        expect(run_.returncode == 0 and "launches=3 failed=0" in run_.stdout, "the program failed",
               run_)
        left = os.listdir(run_dir)
        expect(len(left) == 1 and left[0].endswith(".running"), f"the marker stays: {left}", run_)
        lines = [l for l in run_.stderr.splitlines() if "running marker" in l]
        expect(len(lines) == 1 and "was not removed: Permission denied" in lines[0] and
               "report this process as lost" in lines[0],
               f"one line says why the marker stays: {lines}", run_)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def stderr_not_reopenable():
    """The program's stderr is a blocking pipe that cannot be reopened through
    /proc/thread-self/fd/2 (descriptors used up; a pipe of another user after setuid; no /proc
    after chroot): every line the user asked for still reaches it, written on the program's own
    descriptor with RWF_NOWAIT, whose flags stay the program's; a full pipe costs the bounded
    wait and no more."""
    if not rwf_nowait_on_pipes():
        return ("skip: this kernel cannot write a pipe with RWF_NOWAIT: such a stream gets "
                "nothing (kStreamNotReopenable), as documented")
    env = {"FERRUM_REPLAY_SUMMARY": "stderr", "FERRUM_RECORD_TABLE": "1",
           "FERRUM_REPLAY_LOG": "debug"}
    skipped = []
    for how in ("descriptors", "setuid", "chroot"):
        with tempfile.TemporaryDirectory() as tmp:  # chroot: an empty directory, no /proc
            run_ = fault("stderr-unreopenable", "--how", how, "--launches", "20",
                         env=without_leak_check(env), cwd=tmp)
        expect(run_.returncode == 0, f"{how}: exit {run_.returncode}", run_)
        if "unreopenable=skip" in run_.stdout:
            skipped.append(how)  # setuid and chroot need root
            continue
        expect(f"unreopenable={how}" in run_.stdout, f"{how}: the step was not taken", run_)
        expect("launches=20 failed=0" in run_.stdout, f"{how}: launches failed", run_)
        expect("stderr_blocking=1" in run_.stdout,
               f"{how}: the program's stderr was made non-blocking", run_)
        lines = run_.stderr.splitlines()
        for pattern, what in ((r"^ferrum-replay launch summary: \d graphs, 20 launches", "summary"),
                              (r"^ferrum-replay recorder: 20 ranges on 1 threads", "table"),
                              (r"^ferrum-replay recorder: cannot write trace", "cannot-write line"),
                              (r"^protocol errors: none$", "table's last line"),
                              (r"^ferrum-replay: graph exec \S+ registered .* as graph 2",
                               "second graph's log line")):
            found = [l for l in lines if re.search(pattern, l)]
            expect(len(found) == 1, f"{how}: {len(found)} {what} lines on the pipe, expected 1",
                   run_)
    # A full pipe: a reader that makes room within the bound gets everything; nobody reading
    # costs the bound per write, and the description stays blocking.
    for late_reader in (True, False):
        read_end, write_end = os.pipe()
        got = []
        try:
            harness.fill_pipe(write_end)
            reader = None
            if late_reader:
                def drain():
                    time.sleep(1.0)
                    chunks = []
                    while True:
                        chunk = os.read(read_end, 65536)
                        if not chunk:
                            break
                        chunks.append(chunk)
                    got.append(b"".join(chunks).decode(errors="replace"))
                reader = threading.Thread(target=drain, daemon=True)
                reader.start()
            started = time.monotonic()
            run_ = fault("stderr-unreopenable", "--how", "descriptors", "--launches", "20",
                         env=without_leak_check({"FERRUM_REPLAY_SUMMARY": "stderr",
                                                 "FERRUM_RECORD_TABLE": "1"}),
                         stderr=write_end, timeout=60)
            took = time.monotonic() - started
            blocking = os.get_blocking(write_end)
        finally:
            os.close(write_end)
        if reader:
            reader.join(30)
        os.close(read_end)
        what = "a full pipe read late" if late_reader else "a full pipe nobody reads"
        expect(run_.returncode == 0 and "stderr_blocking=1" in run_.stdout,
               f"{what}: exit {run_.returncode}", run_)
        expect(blocking, f"{what}: the pipe's description was made non-blocking", run_)
        # Nobody reading: a few writes at exit (summary, its line, the table, the trace's line),
        # each given up after 2 s without progress.
        expect(took < 15, f"{what}: the program took {took:.1f} s", run_)
        if late_reader:
            text = got[0] if got else ""
            expect("ferrum-replay launch summary: " in text and "graphs, 20 launches" in text
                   and "protocol errors: none" in text,
                   f"{what}: the summary or the table did not arrive:\n{text[-2000:]}", run_)
            expect("made no room" not in text, f"{what}: a write gave up", run_)
    if skipped:  # what ran stands; say what did not
        print(f"note: stderr_not_reopenable: {', '.join(skipped)} not run (need root)")


def exit_from_worker():
    threads, launches = 4, 3000
    # Under ASan, LeakSanitizer's exit-time check stops the world while the other threads are
    # still launching, and its tracer crashes ("Tracer caught signal 11"): an LSan limitation
    # with exit() from one thread of many. ASan's other checks stay on.
    env = {}
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
        env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    for attempt in range(5):
        run_ = fault("exit-from-worker", "--launches", str(launches), "--threads", str(threads),
                     timeout=60, env=env)
        expect(run_.returncode == 0, "exit(0) from a worker did not exit 0", run_)
        expect_nesting_only(run_)
        errors = footer(run_.trace).get("protocolErrors", {})
        expect(errors.get("popWithoutPush") == 0 and errors.get("popWrongDomain") == 0,
               f"protocol errors {errors}", run_)
        expect(errors.get("openAtExit", 0) <= threads - 1,
               f"{errors.get('openAtExit')} ranges open at exit, at most {threads - 1} expected",
               run_)
        ours = run_.ranges()
        by_tid = {}
        for r in ours:
            by_tid[r["tid"]] = by_tid.get(r["tid"], 0) + 1
        expect(launches in by_tid.values(), "the exiting thread's launches are not all in the "
               f"trace: {by_tid}", run_)


def expect_nesting_only(run_):
    expect(run_.trace is not None, "the recorder wrote no trace", run_)
    problems = trace_check.check_nesting(run_.trace)
    expect(not problems, f"ranges overlap without nesting: {problems[:3]}", run_)


def environment_changed_at_run_time():
    """F67: settings come from the environment the process started with. A program that clears
    its environment before its first graph call, or after it, and changes it on another thread
    without end meanwhile (through its exit): the launch summary and the trace are where the
    start-up environment said (`%q{RUN_TAG}` as it was), every launch counted, nothing on
    stderr, the exit status kept. Before the fix the shim's settings were lost with a
    clearenv() before the first launch, and `%q{RUN_TAG}` was read at exit from the changed
    environment (unset: one line, the files elsewhere) by a getenv racing the program's setenv
    (freed memory)."""
    for how in ("before", "after"):
        with tempfile.TemporaryDirectory() as tmp:
            spill = os.path.join(tmp, "spill")
            os.mkdir(spill)
            env = {
                "RUN_TAG": "startup",
                "FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "summary.%q{RUN_TAG}.txt"),
                "FERRUM_RECORD_OUT": os.path.join(tmp, "t.%q{RUN_TAG}.json"),
                "FERRUM_RECORD_MEMORY": "0",  # spills from the first full chunk: reads TMPDIR
                "TMPDIR": spill,
            }
            # A large environment: the array getenv walks is then a mapping of its own, which
            # setenv's realloc moves and unmaps (a racing getenv faults instead of reading
            # stale memory).
            env.update({f"PAD_{i}": "1" for i in range(20000)})
            run_ = fault("env-churn", "--how", how, "--launches", "20000", env=env)
            expect(run_.returncode == 0, f"{how}: exit status {run_.returncode}", run_)
            expect(values(run_.stdout).get("launches") == 20000, f"{how}: launches missing",
                   run_)
            expect(run_.stderr == "", f"{how}: something on stderr", run_)
            summary = os.path.join(tmp, "summary.startup.txt")
            expect(os.path.exists(summary),
                   f"{how}: no summary where the start-up environment said: "
                   f"{sorted(os.listdir(tmp))}", run_)
            with open(summary) as handle:
                text = handle.read()
            expect("20000" in text, f"{how}: the summary does not count 20000 launches:\n{text}",
                   run_)
            if how == "after":
                # The recorder was attached at the first launch, before the clearenv (NVTX finds
                # its tool through the environment of the moment: docs/settings.md).
                trace_path = os.path.join(tmp, "t.startup.json")
                expect(os.path.exists(trace_path), f"no trace at the start-up pattern's name: "
                       f"{sorted(os.listdir(tmp))}", run_)
                trace = trace_check.load(trace_path)
                ranges = len(trace_check.ranges(trace, domain=harness.DOMAIN))
                expect(ranges == 20000, f"{ranges} ranges for 20000 launches", run_)


def working_directory_changed_before_exit():
    """F69: relative FERRUM_REPLAY_SUMMARY and FERRUM_REPLAY_RUNNING_DIR name files in the
    directory the process launched in, like the recorder's relative trace: a program that moves
    to another directory after its launches (a daemon, a test fixture) or into one it then
    removes keeps its summary beside its trace, nothing on stderr, its marker removed. Before
    the fix the summary went into the new directory, or (removed) was lost with a line on stderr
    and the marker left (the wrapper's judges then fail the run)."""
    for how in ("deleted", "elsewhere"):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = os.path.join(tmp, "run")
            other = os.path.join(tmp, "other")
            os.makedirs(os.path.join(run_dir, "markers"))
            os.mkdir(other)
            env = {"FERRUM_REPLAY_SUMMARY": "s.txt", "FERRUM_RECORD_OUT": "t.json",
                   "FERRUM_REPLAY_RUNNING_DIR": "markers"}
            run_ = fault("chdir-before-exit", "--how", other if how == "elsewhere" else how,
                         "--launches", "100", env=env, cwd=run_dir)
            expect(run_.returncode == 0, f"{how}: exit status {run_.returncode}", run_)
            expect(run_.stderr == "", f"{how}: something on stderr", run_)
            expect(os.path.exists(os.path.join(run_dir, "t.json")), f"{how}: no trace", run_)
            expect(os.path.exists(os.path.join(run_dir, "s.txt")),
                   f"{how}: no summary beside the trace: run/ {sorted(os.listdir(run_dir))}, "
                   f"other/ {sorted(os.listdir(other))}", run_)
            expect(not os.listdir(other), f"{how}: files of ours in the program's new "
                   f"directory: {os.listdir(other)}", run_)
            left = os.listdir(os.path.join(run_dir, "markers"))
            expect(not left, f"{how}: running marker left: {left}", run_)
    # Started in a directory deeper than PATH_MAX (hostile review of 2026-12-05): the recorder
    # read no working directory (getcwd: ERANGE) and resolved "t.json" at exit, in the program's
    # new directory; the shim the same for its summary. Such a name cannot be written where the
    # process started (its absolute name is too long): one line each, nothing elsewhere.
    with tempfile.TemporaryDirectory() as tmp:
        other = os.path.join(tmp, "other")
        os.mkdir(other)
        descend = 'for i in $(seq 22); do mkdir "$0" && cd -P "$0" || exit 9; done; exec "$@"'
        env = {"FERRUM_REPLAY_SUMMARY": "s.txt", "FERRUM_RECORD_OUT": "t.json"}
        run_ = harness.run(["/bin/sh", "-c", descend, "d" * 200, PROGRAM, "chdir-before-exit",
                            "--how", other, "--launches", "100"], env=env, cwd=tmp)
        lines = run_.stderr.splitlines()
        expect(run_.returncode == 0 and len(lines) == 2 and
               # (The trace's line names the path it tried, cut: the summary's the pattern.)
               f"cannot write trace to '{tmp}/ddd" in run_.stderr and
               "...': File name too long" in run_.stderr and
               "cannot write the summary to 's.txt': File name too long" in run_.stderr,
               "deep: one line each for the trace and the summary", run_)
        expect(not os.listdir(other), f"deep: files of ours in the program's new directory: "
               f"{os.listdir(other)}", run_)


def launch_from_library_destructor():
    """F70: a library the program links makes one last launch from its ELF destructor. The
    launch summary counts it, as the trace does, and `check --launch-summary` passes. Before
    the fix the shim's exit hook ran from its own destructor, which the C library calls before
    those of the program's libraries (load order): the summary said 10 launches, the trace
    held 11 ranges, and the judges failed the run ("ranges without a launch the shim
    counted")."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "s.txt")
        trace_path = os.path.join(tmp, "t.json")
        markers = os.path.join(tmp, "markers")
        os.mkdir(markers)
        run_ = fault("library-destructor-launch", "--launches", "10",
                     env={"FERRUM_REPLAY_SUMMARY": summary, "FERRUM_RECORD_OUT": trace_path,
                          "FERRUM_REPLAY_RUNNING_DIR": markers})
        expect(run_.returncode == 0, f"exit status {run_.returncode}", run_)
        expect(values(run_.stdout).get("destructor_launch") == 0, "no launch at exit", run_)
        expect(run_.stderr == "", "something on stderr", run_)
        with open(summary) as handle:
            text = handle.read()
        expect("11 launches" in text, f"the summary misses the destructor's launch:\n{text}",
               run_)
        ranges = len(trace_check.ranges(trace_check.load(trace_path), domain=harness.DOMAIN))
        expect(ranges == 11, f"{ranges} ranges in the trace, expected 11", run_)
        expect(not os.listdir(markers), f"running marker left: {os.listdir(markers)}", run_)


def exit_library_of_a_relative_shim():
    """The shim preloaded by a relative path (`LD_PRELOAD=shim/libferrum-replay.so`, as a user
    in a build tree writes it), in a program that changes directory before its first launch:
    the loader's name of the shim stays relative, and the activation's dlopen of the exit
    library "beside" it was resolved against the new working directory — it loaded whatever
    file of that name was there (here a copy planted in that directory) into the program.
    Now a relative name loads nothing: the hook runs from the shim's own destructor."""
    shim = harness.path_of("FERRUM_SHIM")
    build = os.path.dirname(os.path.dirname(shim))
    relative = os.path.relpath(shim, build)
    with tempfile.TemporaryDirectory() as tmp:
        planted = os.path.join(tmp, os.path.dirname(relative))
        os.makedirs(planted)
        shutil.copy(os.path.join(os.path.dirname(shim), "libferrum-replay-last.so"), planted)
        summary = os.path.join(tmp, "s.txt")
        env = {"LD_PRELOAD": relative, "FERRUM_REPLAY_SUMMARY": summary}
        run_ = fault("library-destructor-launch", "--launches", "10", "--how", tmp, cwd=build,
                     env=env)
        expect(run_.returncode == 0 and values(run_.stdout).get("destructor_launch") == 0,
               f"exit status {run_.returncode}", run_)
        loaded = re.findall(r"last_library=(.*)", run_.stdout)
        expect(loaded == ["none"], f"a library from the program's new directory: {loaded}", run_)
        with open(summary) as handle:
            expect("10 launches" in handle.read(), "no summary", run_)


def shim_dlopened_and_closed():
    """F68: a program that dlopens the shim to call its naming API (not preloaded) and
    dlcloses it: its threads still exit normally. Before the fix the shim was unloaded with the
    destructor of its thread-exit key still registered (glibc never removes one): the worker's
    exit jumped into unmapped memory, SIGSEGV."""
    run_ = fault("dlclose-shim", preload=False, record=False,
                 env={"FERRUM_SHIM": harness.path_of("FERRUM_SHIM")})
    expect(run_.returncode == 0, f"exit status {run_.returncode}", run_)
    expect(values(run_.stdout).get("joined") == 1, "the worker's exit did not return", run_)
    expect(run_.stderr == "", "something on stderr", run_)


def underscore_exit():
    with tempfile.TemporaryDirectory() as tmp:
        run_ = fault("underscore-exit", "--launches", "200",
                     env={"FERRUM_RECORD_OUT": os.path.join(tmp, "t.json"), "TMPDIR": tmp})
        expect(run_.returncode == 0, "_exit(0) did not exit 0", run_)
        expect(values(run_.stdout).get("launches") == 200, "launches missing", run_)
        left = os.listdir(tmp)
        expect(not left, f"_exit left files behind: {left}", run_)


def sigterm_during_trace_write():
    """A SIGTERM whose handler calls exit() lands while the exit hooks write the trace (hostile
    review of 2026-12-05): the second exit() found the report started and returned; the
    process ended with the handler's status, no trace, nothing said, and its 100 MB temporary
    (NAME.HOST.PID.N.tmp, a name no later run removes) stayed for good. Now the temporary goes,
    and one line says why there is no trace."""
    import time
    for launches in (1500000, 4000000):
        with tempfile.TemporaryDirectory() as tmp:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRUM_", "NVTX_"))}
            env.update({
                "LD_LIBRARY_PATH": harness.path_of("STANDIN_DIR"),
                "LD_PRELOAD": harness.path_of("FERRUM_SHIM"),
                "NVTX_INJECTION64_PATH": harness.path_of("FERRUM_RECORDER_LIB"),
                "FERRUM_RECORD_OUT": tmp + "/", "FERRUM_RECORD_TABLE": "0",
                "FERRUM_STANDIN_BENCH": "1"})
            if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
                env["TSAN_OPTIONS"] = os.environ.get("TSAN_OPTIONS", "") + \
                    ":report_signal_unsafe=0"
            harness.preload_first(env)
            child = subprocess.Popen([PROGRAM, "sigterm-at-exit", "--launches", str(launches)],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
            sent = False
            deadline = time.monotonic() + 120
            while child.poll() is None and time.monotonic() < deadline:
                if any(name.endswith(".tmp") for name in os.listdir(tmp)):
                    time.sleep(0.05)
                    child.send_signal(signal.SIGTERM)
                    sent = True
                    break
                time.sleep(0.005)
            try:
                out, err = child.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                child.kill()
                raise AssertionError("the program hung after SIGTERM during the trace write")
            left = os.listdir(tmp)
            if not sent or child.returncode != 42 or \
                    (not any(name.endswith(".tmp") for name in left) and
                     "ferrum-replay recorder" not in err and
                     [name for name in left if name.endswith(".json")]):
                # The write ended before the signal came (the trace was placed, whole): a
                # larger trace.
                continue
            expect(not left, f"files left after exit from the handler: {left}\nstderr: {err}")
            lines = [line for line in err.splitlines() if "ferrum-replay recorder" in line]
            expect(len(lines) == 1 and "exit() was called again while the trace was being "
                   "written" in lines[0] and "its temporary removed" in lines[0],
                   f"not one line saying why there is no trace:\n{err}")
            return None
    return "skip: the trace was written before the signal came, twice (a fast machine)"


def sigterm_handler_exits():
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = os.path.join(tmp, "t.json")
        report_path = os.path.join(tmp, "driver-report.txt")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRUM_", "NVTX_"))}
        env.update({
            "LD_LIBRARY_PATH": harness.path_of("STANDIN_DIR"),
            "LD_PRELOAD": harness.path_of("FERRUM_SHIM"),
            "NVTX_INJECTION64_PATH": harness.path_of("FERRUM_RECORDER_LIB"),
            "FERRUM_RECORD_OUT": trace_path,
            "FERRUM_RECORD_TABLE": "0",
            "FERRUM_STANDIN_REPORT": report_path,
            # 50 us replays, each launch waiting for the previous: a few thousand launches, not
            # millions.
            "FERRUM_STANDIN_GRAPH_NS": "50000",
            "FERRUM_STANDIN_LAUNCH_QUEUE": "1",
        })
        # Under TSan: exit() from a handler runs every exit hook of the process (libc's stdio
        # flush as much as our trace) in signal context. That is the scenario itself — what
        # such programs do — so TSan's signal-unsafe-call report would flag the premise, not us.
        if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
            env["TSAN_OPTIONS"] = os.environ.get("TSAN_OPTIONS", "") + ":report_signal_unsafe=0"
        harness.preload_first(env)
        child = subprocess.Popen([PROGRAM, "sigterm"], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        ready = child.stdout.readline()
        expect(ready.strip() == "ready", f"the program did not start: {ready!r}")
        import time
        time.sleep(0.2)  # let it launch for a while
        child.send_signal(signal.SIGTERM)
        try:
            out, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            raise AssertionError("the program hung after SIGTERM (deadlock in an exit hook?)")
        expect(child.returncode == 42, f"exit status {child.returncode}, expected 42 from the "
               f"handler\nstderr: {err}")
        expect(os.path.exists(trace_path), f"no trace after exit from the handler\nstderr: {err}")
        trace = trace_check.load(trace_path)
        problems = trace_check.check_nesting(trace)
        expect(not problems, f"ranges do not nest: {problems[:3]}")
        errors = footer(trace).get("protocolErrors", {})
        expect(errors.get("popWithoutPush") == 0 and errors.get("popWrongDomain") == 0
               and errors.get("openAtExit", 0) <= 1, f"protocol errors {errors}")
        ranges = len(trace_check.ranges(trace, domain=harness.DOMAIN))
        with open(report_path) as handle:
            driver = values(handle.read()).get("launches", 0)
        # The launch the signal interrupted, if any: its range is pushed before the driver counts
        # the launch, and the exit on that thread closes it (F140) — one range more than the
        # driver saw when the signal landed between the two (ASan widens that window: a CI run
        # found 1893 for 1892); left open (openAtExit), one fewer.
        expect(ranges >= 1 and driver - 1 <= ranges <= driver + 1,
               f"{ranges} ranges for {driver} launches the driver saw")


def vfork_child_exits():
    """A vfork() child whose exec fails calls exit() (not _exit): in the memory it shares with
    its parent, exit() ran the parent's exit handlers and destructors, and the C library marked
    them done — the parent then wrote no launch summary and no trace, its running marker stayed,
    and ci-smoke-profile failed a correct run (F162). Now the shim ends such a child at its exit
    handler with exit()'s status: the parent writes its summary and trace, whole, and removes
    its marker; with the recorder alone (no shim), the recorder hands its report to the parent's
    exit (tests/recorder/end_to_end: vfork_child_exit_leaves_the_parents_report)."""
    n = 5
    for gpu in ("off", "on"):
        with tempfile.TemporaryDirectory() as tmp:
            env = {"FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s.%p.txt"),
                   "FERRUM_RECORD_OUT": os.path.join(tmp, "t.%p.json"),
                   "FERRUM_REPLAY_RUNNING_DIR": tmp, "FERRUM_REPLAY_GPU_TIME": gpu}
            run_ = fault("vfork-exit", "--launches", str(n), env=env, timeout=60)
            got = values(run_.stdout)
            expect(run_.returncode == 0 and got.get("child_status") == 127
                   and got.get("launches") == 2 * n, f"GPU timing {gpu}: the program failed", run_)
            summaries = glob.glob(os.path.join(tmp, "s.*.txt"))
            expect(len(summaries) == 1, f"GPU timing {gpu}: the parent's summary: {summaries}",
                   run_)
            with open(summaries[0]) as handle:
                summary = handle.read()
            expect(f", {2 * n} launches," in summary, f"GPU timing {gpu}: {summary!r}", run_)
            traces = traces_in(tmp)
            expect(len(traces) == 1, f"GPU timing {gpu}: the parent's trace: {sorted(traces)}",
                   run_)
            (trace,) = traces.values()
            ranges = trace_check.ranges(trace, domain=harness.DOMAIN)
            expect(len(ranges) == 2 * n, f"GPU timing {gpu}: {len(ranges)} ranges", run_)
            left = glob.glob(os.path.join(tmp, "*.running"))
            expect(not left, f"GPU timing {gpu}: running marker left: {left}", run_)


SCENARIOS = {f.__name__: f for f in (
    exit_in_signal_handler_inside_recorder, exit_in_signal_handler_inside_shim,
    exit_in_signal_handler_inside_driver, exit_in_signal_handler_inside_gpu_engine,
    fork_in_signal_handler_inside_our_lock,
    real_function_missing, driver_loaded_after_first_launch, tool_init_fails,
    tool_rejects_every_push, launch_error_classes, fork_while_in_launch, fork_during_activation,
    launch_during_activation,
    fork_while_naming, fork_while_loader_busy, fork_while_exit_list_busy, fork_while_locale_busy,
    fork_first_walk_loads_no_unwinder, launch_before_shim_constructor,
    fork_child_reopens_loaded_driver, fork_child_with_driver_loaded_locally,
    first_jump_inside_loader_walk,
    fork_child_gpu_timed_with_function_missing, fork_child_logs_missing_tool,
    forked_children_count_their_own, child_without_fork_handlers, vfork_child_exits, running_marker_until_exit,
    exit_during_first_launch,
    first_launch_on_smallest_stack, exit_with_little_stack, file_size_limit, errno_passes_through,
    loader_error_on_every_route, address_space_limit, rename_without_memory,
    launch_refused_graph,
    first_nvtx_call_without_memory, exit_without_memory, output_lock_impossible,
    stderr_reader_gone, stderr_not_reopenable,
    marker_after_setuid,
    exit_from_worker, underscore_exit, sigterm_handler_exits, sigterm_during_trace_write, environment_changed_at_run_time,
    shim_dlopened_and_closed, working_directory_changed_before_exit,
    launch_from_library_destructor, exit_library_of_a_relative_shim)}

if __name__ == "__main__":
    args = sys.argv[1:]
    options = {"--program": "PROGRAM", "--failing-tool": "FAILING_TOOL",
               "--idle-tool": "IDLE_TOOL", "--c-program": "C_PROGRAM",
               "--runtime-free-dir": "RUNTIME_FREE_DIR", "--launch-at-load": "LAUNCH_AT_LOAD"}
    while args[:1] and args[0] in options:
        # Absolute: some scenarios run the program in a directory of their own.
        globals()[options[args[0]]] = os.path.abspath(args[1])
        args = args[2:]
    sys.argv[1:] = args
    harness.main(SCENARIOS)
