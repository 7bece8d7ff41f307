"""Issue 3 scenarios: every way a program reaches a graph launch — dlsym on a private
handle, cuGetProcAddress (flags 0 and 2), the shared and the static runtime, the runtime's
cudaGetDriverEntryPoint, Python ctypes, stacked interposers, an interposable driver, many
threads — each a real process under LD_PRELOAD, each asserting one balanced range per
launch and an unchanged result."""
import errno
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (expect, expect_balanced, expect_one_range_per_launch, main,  # noqa: E402
                     path_of, run)

GRAPHS, ITERS = 2, 25
LAUNCHES = GRAPHS * ITERS


def launch(program_variable, *extra, **kwargs):
    argv = [path_of(program_variable), "--graphs", str(GRAPHS), "--iters", str(ITERS), *extra]
    return run(argv, **kwargs)


def expect_covered(run_, report_key="launches", launches=LAUNCHES):
    expect(run_.returncode == 0, "program failed", run_)
    counts = run_.program_counts()
    expect(counts["launches"] == launches, f"program made {counts['launches']} launches", run_)
    if report_key:
        expect(run_.report.get(report_key) == launches,
               f"stand-in driver saw {run_.report}, expected {report_key}={launches}", run_)
    expect_one_range_per_launch(run_, launches)
    expect_balanced(run_)


def dlopen_local_dlsym():
    """dlopen("libcuda.so.1", RTLD_LOCAL) + dlsym(handle, "cuGraphLaunch"): out of reach of
    symbol interposition; caught by our dlsym."""
    expect_covered(launch("LAUNCH_DLOPEN_DRIVER"))


def procaddress_flags_0():
    expect_covered(launch("LAUNCH_PROCADDRESS", "--flags", "0"))


def procaddress_flags_2():
    """Flags 2 hands out cuGraphLaunch_ptsz, a different driver function: its own wrapper."""
    expect_covered(launch("LAUNCH_PROCADDRESS", "--flags", "2"), report_key="launches_ptsz")


def procaddress_legacy_self_query():
    """A pre-12.0 program: self-query at 11030 gets the 4-argument ABI back."""
    expect_covered(launch("LAUNCH_PROCADDRESS", "--self-query", "11030"))


def shared_runtime_table():
    """The shared runtime stand-in reaches the driver only through its cuGetProcAddress
    table; one range per launch, not two (our cudaGraphLaunch export and the table's
    wrapper are both crossed)."""
    run_ = launch("LAUNCH_RUNTIME", env={"FERRUM_REPLAY_LOG": "debug"})
    expect_covered(run_)
    log = run_.stderr
    expect(re.search(r'cuGetProcAddress self-query: answered with a wrapper of cuGetProcAddress_v2',
                     log), "the runtime's self-query at 12000 was not answered by the shim", run_)
    for flags in ("0", "2"):
        expect(re.search(rf'cuGetProcAddress\("cuGraphLaunch", \d+, flags {flags}\): wrapped', log),
               f"cuGraphLaunch with flags {flags} was not wrapped in the runtime's table", run_)


def static_runtime():
    """A static runtime: cudaGraphLaunch is a hidden local symbol of the program; only the
    cuGetProcAddress table route can see the launch."""
    expect_covered(launch("LAUNCH_STATIC_RUNTIME"))
    expect_covered(launch("LAUNCH_STATIC_RUNTIME", "--stream", "ptsz"), report_key="launches_ptsz")


def runtime_driver_entry_point():
    """cudaGetDriverEntryPoint answers from the runtime's stored (replaced) lookup pointer."""
    for flags in ("0", "2"):
        key = "launches_ptsz" if flags == "2" else "launches"
        expect_covered(launch("LAUNCH_ENTRY_POINT", "--flags", flags), report_key=key)


def python_ctypes():
    run_ = run([sys.executable, path_of("LAUNCH_CTYPES"), "--graphs", str(GRAPHS),
                "--iters", str(ITERS)])
    expect_covered(run_)


def stacked_interposers_both_orders():
    """Another interposer that finds the next cuGraphLaunch with dlsym(RTLD_NEXT): before us
    and after us in LD_PRELOAD, every launch passes both layers once, one range each."""
    other = path_of("COUNTING_INTERPOSER")
    for order in ("ours-first", "theirs-first"):
        with tempfile.TemporaryDirectory() as tmp:
            count_file = os.path.join(tmp, "count")
            preload = [path_of("FERRUM_SHIM"), other]
            if order == "theirs-first":
                preload.reverse()
            run_ = launch("LAUNCH_DRIVER", env={"LD_PRELOAD": " ".join(preload),
                                                "COUNTING_INTERPOSER_OUT": count_file},
                          timeout=60)
            expect_covered(run_)
            with open(count_file) as handle:
                seen = int(handle.read().split("=")[1])
            expect(seen == LAUNCHES, f"{order}: the other interposer saw {seen} launches", run_)


def interposable_driver():
    """A driver whose lookup returns its exported (interposable) symbols, i.e. ours: no loop,
    no double range, the genuine function still reached."""
    env = {"FERRUM_STANDIN_PROC_EXPORTED": "1"}
    expect_covered(launch("LAUNCH_RUNTIME", env=env, timeout=60))
    expect_covered(launch("LAUNCH_STATIC_RUNTIME", env=env, timeout=60))
    expect_covered(launch("LAUNCH_PROCADDRESS", "--flags", "2", env=env, timeout=60),
                   report_key="launches_ptsz")


def eight_threads_resolving():
    """8 threads resolve the driver (dlopen, dlsym, cuGetProcAddress) and launch at once."""
    for program in ("LAUNCH_PROCADDRESS", "LAUNCH_STATIC_RUNTIME", "LAUNCH_DLOPEN_DRIVER"):
        run_ = launch(program, "--threads", "8")
        expect_covered(run_, launches=8 * LAUNCHES)


def deepbind_reported_once():
    """dlopen(libcuda, RTLD_DEEPBIND) defeats interposition: one line when logs are asked
    for, silence otherwise; the program's result unchanged."""
    loud = launch("LAUNCH_DLOPEN_DRIVER", "--dlopen-flags", "deepbind",
                  env={"FERRUM_REPLAY_LOG": "error"})
    expect(loud.returncode == 0, "program failed", loud)
    lines = [l for l in loud.stderr.splitlines() if "RTLD_DEEPBIND" in l]
    expect(len(lines) == 1, "expected one RTLD_DEEPBIND line", loud)
    quiet = launch("LAUNCH_DLOPEN_DRIVER", "--dlopen-flags", "deepbind")
    expect(quiet.returncode == 0 and quiet.stderr == "", "not silent by default", quiet)


def plugins_loaded_local():
    """A library dlopened RTLD_LOCAL (a Python extension module, ctypes.CDLL) that links the
    shared runtime, or the driver, and calls it by name: the runtime or driver it brought is in
    no scope of the shim's (dlsym(RTLD_NEXT) cannot see it), yet its calls by name reach our
    exports first. Each reaches the genuine function (it used to return 500, "not found":
    every instantiate, launch and destroy failed), one range per launch; and RTLD_GLOBAL as
    before. Logs asked for: nothing to say (one runtime, no ambiguity)."""
    for plugin in ("LAUNCH_RUNTIME_PLUGIN", "LAUNCH_DRIVER_PLUGIN"):
        for scope in ("local", "global"):
            run_ = run([path_of("PLUGIN_LOADER"), scope, path_of(plugin), "--graphs", str(GRAPHS),
                        "--iters", str(ITERS)], env={"FERRUM_REPLAY_LOG": "error"})
            expect_covered(run_)
            expect(run_.stderr == "", f"{plugin} {scope}: unexpected output", run_)


def plugins_beside_a_loaded_shim():
    """The program loads ferrum-replay itself for its naming API — a copy at another path beside
    the preloaded one (RTLD_LOCAL), or instead of preloading it (RTLD_GLOBAL) — then a plugin
    that brought its runtime or driver (RTLD_LOCAL): the plugin's calls still reach its own
    (the copy's exports are never taken for the real function: they answered 500; a dlopened
    shim found no C library after it and resolved nothing)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "libferrum-replay-copy.so")
        shutil.copy(path_of("FERRUM_SHIM"), copy)
        for plugin in ("LAUNCH_RUNTIME_PLUGIN", "LAUNCH_DRIVER_PLUGIN"):
            argv = [path_of("PLUGIN_LOADER"), "local", path_of(plugin), "--graphs", str(GRAPHS),
                    "--iters", str(ITERS)]
            expect_covered(run(argv, env={"PLUGIN_LOADER_FIRST": copy}))
            alone = run(argv, preload=False, record=False,
                        env={"PLUGIN_LOADER_FIRST": "global:" + path_of("FERRUM_SHIM")})
            expect(alone.returncode == 0 and alone.program_counts()["failed"] == 0,
                   f"{plugin}: the shim loaded RTLD_GLOBAL failed the plugin's calls", alone)
            # A copy loaded RTLD_LOCAL before the shim loaded RTLD_GLOBAL: the launches reach the
            # global one, which must name them. The local copy, in no scope the launches search,
            # was taken for an earlier copy: the shim stepped aside and nothing was named, no
            # summary written (review CQ-2).
            beside = run(argv, preload=False,
                         env={"PLUGIN_LOADER_FIRST": f"{copy};global:{path_of('FERRUM_SHIM')}",
                              "FERRUM_REPLAY_SUMMARY": "stderr"})
            expect_covered(beside)
            expect(beside.stderr.count("ferrum-replay launch summary:") == 1,
                   f"{plugin}: a local copy first, the global shim wrote no summary", beside)


def runtime_copies_in_two_plugins():
    """Two libraries, each with its own copy of the runtime (under names of their own, as
    wheels vendor it), loaded RTLD_LOCAL: each one's calls by name reach its own copy — an error
    lands in its own runtime's state, and a thread launching through B while A is unloaded and
    loaded again never runs inside A (it did: the first copy loaded answered every caller, and
    its unloading under B's launches was a SIGSEGV, with FERRUM_REPLAY=off too)."""
    argv = [path_of("RUNTIME_COPIES"), path_of("RUNTIME_COPY_PLUGIN_A"),
            path_of("RUNTIME_COPY_PLUGIN_B")]
    slow = {"FERRUM_STANDIN_LAUNCH_CALL_NS": "200000"}  # B still launching while A goes
    bare = run(argv, preload=False, record=False, env=slow)
    expect(bare.returncode == 0, "the program failed without the shim", bare)
    run_ = run(argv, env=slow)
    expect_covered(run_, report_key=None, launches=264)
    expect(run_.stdout == bare.stdout, "results differ from the run without the shim", run_)
    off = run(argv, record=False, env=dict(slow, FERRUM_REPLAY="off"))
    expect(off.stdout == bare.stdout, "FERRUM_REPLAY=off: results differ", off)
    # Two copies of the shim preloaded: the first finds the second's exports after it, and what
    # comes after that cannot be asked for. It took the first definition in load order, plugin
    # A's private runtime, for every caller: B's error landed in A's runtime (exit 3; review
    # CQ-3). Each caller's own, as with one copy.
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "libferrum-replay-copy.so")
        shutil.copy(path_of("FERRUM_SHIM"), copy)
        two = run(argv, env=dict(slow, LD_PRELOAD=f"{path_of('FERRUM_SHIM')} {copy}"))
        expect(two.returncode == bare.returncode and two.stdout == bare.stdout,
               "two copies of the shim preloaded: results differ from the run without it", two)


def driver_unloaded_and_reloaded():
    """The driver unloaded (dlclose) and loaded again at another address, three times: through
    its private handle's cuGetProcAddress_v2, and by name from a plugin that brought it and took
    it away again — also with the C library's own dlclose (ctypes.CDLL("libdl.so.2").dlclose),
    which never reaches ours. Every call reaches the driver loaded now — the shim used to call
    the first one's address, a crash (also with FERRUM_REPLAY=off) — one range per launch."""
    # Under ASan: the stand-in driver's own state (made on its first launch, never freed, as the
    # real driver's) is reported by LeakSanitizer once its library is unloaded — frames in an
    # unloaded module match no suppression. Not ours: leak checking off for these runs.
    quiet = ({"ASAN_OPTIONS": os.environ["ASAN_OPTIONS"] + ":detect_leaks=0"}
             if "ASAN_OPTIONS" in os.environ else {})
    for argv in ([path_of("DRIVER_RELOADS"), "lookup", "3", "20"],
                 [path_of("DRIVER_RELOADS"), "by-name", path_of("RELOAD_PLUGIN"), "3", "20"],
                 # unloaded by the C library's own dlclose, which never reaches ours
                 [path_of("DRIVER_RELOADS"), "by-name-libc", path_of("RELOAD_PLUGIN"), "3",
                  "20"]):
        run_ = run(argv, env=quiet)
        expect_covered(run_, report_key=None, launches=60)
        expect(run_.stdout.count("moved=yes") == 2, "the driver was not loaded elsewhere", run_)
        off = run(argv, record=False, env=dict(quiet, FERRUM_REPLAY="off"))
        expect(off.returncode == 0 and off.program_counts()["failed"] == 0,
               "FERRUM_REPLAY=off: the program failed", off)


def two_driver_instances():
    """Two instances of the driver at once (the same library at another path): the second's
    own cuGetProcAddress_v2, asked after only the second was initialised, answers with the
    second's functions — not the first instance's, whose cuDeviceGet then said "not
    initialised". And the other way round (F158): the program's own lookups by name, after a
    lookup on a second instance's handle (a copy, a dlmopen namespace), answer from the driver
    the program links. With the shim at work and with FERRUM_REPLAY=off."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "libcuda-copy.so.1")
        shutil.copy(os.path.join(path_of("STANDIN_DIR"), "libcuda.so.1"), copy)
        for env in ({}, {"FERRUM_REPLAY": "off"}):
            run_ = run([path_of("DRIVER_RELOADS"), "instances", copy], record=not env, env=env)
            expect(run_.returncode == 0 and
                   "lookup answered from: itself; cuDeviceGet=0" in run_.stdout,
                   f"{env}: the second instance's lookup answered for another", run_)
        # F158: the program's own cuGetProcAddress(_v2) BY NAME, after a lookup on the second
        # instance's handle (a copy at another path, a dlmopen namespace), answers from the
        # driver the program links — it answered from the other instance, whose cuDeviceGet
        # then said "not initialised".
        # Not dlmopen under a sanitizer: the instrumented stand-in brings its sanitizer runtime
        # into the new namespace, which refuses to start there ("does not come first").
        seconds = [["copy", copy]]
        if not os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
            seconds.append(["dlmopen"])
        for second in seconds:
            for env in ({}, {"FERRUM_REPLAY": "off"}):
                run_ = run([path_of("BY_NAME_LOOKUP_INSTANCES")] + second, record=not env, env=env)
                for lookup in ("cuGetProcAddress_v2", "cuGetProcAddress"):
                    expect(run_.returncode == 0 and
                           f"by name {lookup}: result=0 from=linked cuDeviceGet=0" in run_.stdout,
                           f"{second[0]}, {env}: the program's {lookup} by name answered from "
                           "the other instance", run_)


def cuda11_runtime_instantiate():
    """A program built against the CUDA 11 runtime (PyTorch, TensorRT, any program built with
    CUDA 11) calls cudaGraphInstantiate with the five arguments the name took before CUDA 12:
    error node, log buffer, its size. The shim's export is unversioned, so it also answers
    libcudart.so.11.0's versioned name; it passed three on, and the runtime handed the driver a
    log pointer and size from whatever the registers held: the driver's diagnostic went through
    a wild pointer (a crash), with FERRUM_REPLAY=off too (F157). What the program sees must be
    what it sees without the shim, whatever the settings; each replay one balanced range."""
    argv = [path_of("INSTANTIATE_CUDA11"), "10"]
    bare = run(argv, preload=False, record=False)
    seen = dict(line.split("=", 1) for line in bare.stdout.splitlines() if "=" in line)
    expect(bare.returncode == 0 and seen.get("failed_result") == "1" and
           seen.get("failed_log", "").startswith("graph not instantiated") and
           seen.get("error_node_cleared") == "1" and seen.get("result") == "0" and
           seen.get("launched") == "10",
           "without the shim, the CUDA 11 runtime stand-in did not behave as CUDA 11's", bare)
    for env in ({}, {"FERRUM_REPLAY": "off"}, {"FERRUM_REPLAY_SUMMARY": "stderr"}):
        run_ = run(argv, record=not env, env=env)
        expect(run_.returncode == 0 and run_.stdout == bare.stdout,
               f"{env}: the program saw other results than without the shim:\n{bare.stdout}",
               run_)
        if not env:
            expect_one_range_per_launch(run_, 10)
            expect_balanced(run_)


def handler_launch_while_reading_settings():
    """A signal handler launches while the thread it interrupted is inside the shim's first
    reading of its settings (held there by a warning line waiting on a full stderr pipe): the
    launch passes through with the driver's own result, and the program ends (it used to spin
    for ever, waiting for the reading it had interrupted)."""
    bare = run([path_of("HANDLER_LAUNCH")], preload=False, record=False, timeout=30)
    expect(bare.returncode == 0, "the program failed without the shim", bare)
    for env in ({"FERRUM_REPLAY_GPU_TIME": "bogus"}, {"FERRUM_REPLAY_GPU_TIME": "bogus",
                                                      "FERRUM_REPLAY": "off"}):
        run_ = run([path_of("HANDLER_LAUNCH")], env=env, timeout=30)
        expect(run_.returncode == 0, f"{env}: the program did not end normally", run_)
        expect(run_.program_counts() == bare.program_counts(),
               f"{env}: the handler's launch returned another result than without the shim",
               run_)


def handler_calls_while_instantiating():
    """The thread instantiates and destroys graphs in a loop; a timer's signal handler on it
    launches a graph nobody registered (a null handle), or names a graph, landing among other
    places where the shim registers the new graph under its own locks. The program ends (it hung
    on the first such signal: the handler's call waited for a lock its own thread held), every
    launch of the handler returns the driver's own answer, and a naming either takes the name or
    says -EAGAIN (it came from inside the shim on that thread)."""
    program = path_of("HANDLER_LAUNCH")
    # CUDA (and so the shim and the recorder, which allocate at a name's first use) called from a
    # signal handler is the premise: ThreadSanitizer's report of it is not what this checks.
    tsan = os.environ.get("TSAN_OPTIONS")
    sanitizer = {"TSAN_OPTIONS": tsan + ":report_signal_unsafe=0"} if tsan else {}
    bare = run([program, "instantiating", "null"], preload=False, record=False, timeout=60,
               env=sanitizer)
    expect(bare.returncode == 0, "the program failed without the shim", bare)
    answer = re.search(r"result=(-?\d+)", bare.stdout)
    expect(answer is not None, "no result without the shim", bare)
    for env, record in (({}, True), ({}, False), ({"FERRUM_REPLAY_SITE": "off"}, False),
                        ({"FERRUM_REPLAY_SITE": "launch"}, True),
                        ({"FERRUM_REPLAY_GPU_TIME": "on"}, True)):
        run_ = run([program, "instantiating", "null"], record=record, timeout=60,
                   env={"FERRUM_REPLAY_SUMMARY": "stderr", **sanitizer, **env})
        expect(run_.returncode == 0 and "HANG" not in run_.stderr,
               f"{env}, recorder {record}: the program did not end", run_)
        expect(f"result={answer.group(1)}" in run_.stdout,
               f"{env}: the handler's launch returned another result than without the shim", run_)
        if record:
            expect_balanced(run_)
    named = run([program, "instantiating", "name"], timeout=60,
                env={"FERRUM_REPLAY_SUMMARY": "stderr", **sanitizer})
    expect(named.returncode == 0 and "HANG" not in named.stderr, "the program did not end", named)
    expect(" other=0" in named.stdout, "a naming answered neither 0 nor -EAGAIN", named)
    expect_balanced(named)


def calls_from_fork_handlers():
    """A fork handler of the program's that runs while the shim still holds its registry's
    mutex for the fork (the driver's handlers before it, the shim's after it) — as a signal
    handler landing in that window would — launches a null graph, instantiates and destroys a
    graph and names one, in the parent and in the child: each ends (the first call waited for the
    lock its own thread held, for ever), the CUDA calls return the driver's own answers, and the
    naming says -EAGAIN."""
    program = path_of("HANDLER_LAUNCH")
    bare = run([program, "forking"], preload=False, record=False, timeout=30)
    expect(bare.returncode == 0, "the program failed without the shim", bare)
    run_ = run([program, "forking"], timeout=30, env={"FERRUM_REPLAY_SUMMARY": "stderr"})
    expect(run_.returncode == 0, "the program did not end normally", run_)
    for side in ("parent", "child"):
        answers = re.search(side + r": (launch=\S+ instantiate=\S+ destroy=\S+) name=absent",
                            bare.stdout)
        expect(answers is not None, f"no {side} line without the shim", bare)
        expect(f"{side}: {answers.group(1)} name=-{errno.EAGAIN}" in run_.stdout,
               f"{side}: other answers than without the shim, or a naming not refused", run_)


def loader_passthrough():
    """dlsym/dlvsym/dlopen for anything that is not a CUDA entry point answer exactly as
    without the shim: same addresses (RTLD_NEXT too), same NULL and dlerror on failure."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "coverage",
                          "loader_passthrough.py")
    bare = run([sys.executable, script], preload=False, record=False)
    shimmed = run([sys.executable, script], record=False)
    expect(bare.returncode == 0, "the script failed", bare)
    expect(shimmed.stdout == bare.stdout and shimmed.stderr == bare.stderr,
           f"loader answers differ under the shim:\nwithout:\n{bare.describe()}", shimmed)


def exit_inside_thread_setup():
    """A signal handler calls exit() while a worker's first launch is inside the shim's set-up of
    the thread (its thread-end and exit hooks armed: pthread_setspecific, which the program
    raises the signal from). The pop owed was marked before that set-up, for a push not yet
    issued, and the exit hook issued it: "pop without push" (a fresh-eye review found). Every
    landing: balanced, nothing open, the program's status kept."""
    program = path_of("EXIT_IN_THREAD_SETUP")
    tsan = os.environ.get("TSAN_OPTIONS")  # exit() from a handler is the premise, as above
    sanitizer = {"TSAN_OPTIONS": tsan + ":report_signal_unsafe=0"} if tsan else {}
    raised = 0
    for at in range(1, 5):
        run_ = run([program, str(at)], timeout=60, env=sanitizer)
        expect(run_.returncode == 0, f"signal at pthread_setspecific #{at}: status", run_)
        raised += "raised" in run_.stdout
        expect_balanced(run_)
        ours = run_.ranges()
        expect(1 <= len(ours) <= 2, f"#{at}: {len(ours)} ranges for at most 2 launches", run_)
    expect(raised >= 1, "the signal never landed inside the thread's set-up", run_)


SCENARIOS = {f.__name__: f for f in (
    loader_passthrough,
    dlopen_local_dlsym, procaddress_flags_0, procaddress_flags_2, procaddress_legacy_self_query,
    shared_runtime_table, static_runtime, runtime_driver_entry_point, python_ctypes,
    stacked_interposers_both_orders, interposable_driver, eight_threads_resolving,
    deepbind_reported_once, plugins_loaded_local, plugins_beside_a_loaded_shim,
    runtime_copies_in_two_plugins, driver_unloaded_and_reloaded,
    two_driver_instances, cuda11_runtime_instantiate, handler_launch_while_reading_settings,
    handler_calls_while_instantiating, calls_from_fork_handlers, exit_inside_thread_setup)}

if __name__ == "__main__":
    main(SCENARIOS)
