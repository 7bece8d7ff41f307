"""Issue 4 scenarios: names that tell graphs apart in unmodified programs — call sites,
content, the program's own names, a names file, the message template, handle reuse, and
the exit summary — each in a real process under the shim with the recorder attached."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (expect, expect_balanced, expect_one_range_per_launch, main,  # noqa: E402
                     path_of, run)
from python_versions import python3_among  # noqa: E402  (tests/support/tools)

GRAPHS, ITERS = 3, 10
LAUNCHES = GRAPHS * ITERS
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
EXAMPLES = os.path.join(ROOT, "examples")
# The ferrum_replay Python package, imported from the checkout, and a program that uses it.
PACKAGE_ENV = {"PYTHONPATH": os.path.join(ROOT, "python")}
NAME_PACKAGE = os.path.join(ROOT, "tests", "support", "programs", "name_package.py")


def launch(*extra, program="LAUNCH_DRIVER", graphs=GRAPHS, iters=ITERS, **kwargs):
    argv = [path_of(program), "--graphs", str(graphs), "--iters", str(iters), *extra]
    return run(argv, **kwargs)


def counts_by_name(run_):
    counts = {}
    for r in run_.ranges():
        counts[r["name"]] = counts.get(r["name"], 0) + 1
    return counts


def with_file(text):
    handle = tempfile.NamedTemporaryFile("w", suffix=".names", delete=False)
    handle.write(text)
    handle.close()
    return handle.name


def call_site_names():
    """Unnamed graphs take the name of the program's function that instantiated them; graphs
    from the same site are kept apart by their number; never a CUDA or shim function."""
    run_ = launch()
    expect(run_.returncode == 0, "program failed", run_)
    counts = counts_by_name(run_)
    expect(len(counts) == GRAPHS, f"expected {GRAPHS} names, got {counts}", run_)
    site = min(counts, key=len)  # the first graph of the site carries it bare
    expect(not re.match(r"(cu|cuda)[A-Z]|graph \d|ferrum", site),
           f"the call site {site!r} is not the program's function", run_)
    expect(all(n == site or n.startswith(site + " (graph ") for n in counts),
           f"graphs from one site are not '{site}' and '{site} (graph N)': {counts}", run_)
    expect(set(counts.values()) == {ITERS}, f"counts {counts}", run_)


def stripped_binary_sites():
    """In a stripped program the call site degrades to module+offset, still distinct."""
    with tempfile.TemporaryDirectory() as tmp:
        stripped = os.path.join(tmp, "server_stripped")
        shutil.copy(path_of("LAUNCH_DRIVER"), stripped)
        subprocess.run(["strip", "--strip-all", stripped], check=True)
        run_ = run([stripped, "--graphs", str(GRAPHS), "--iters", str(ITERS)])
    names = sorted(counts_by_name(run_))
    expect(len(names) == GRAPHS, f"names {names}", run_)
    expect(re.fullmatch(r"server_stripped\+0x[0-9a-f]+", names[0]) is not None,
           f"expected module+offset, got {names}", run_)


def site_past_symbol_end():
    """A call site in a local function right after an exported one: unstripped, the local
    function's own name; stripped, module+offset — never the exported neighbour, which is only
    the nearest symbol below the address (the same class as libffi's unexported call stub
    answered as ffi_prep_go_closure)."""
    run_ = run([path_of("SITE_AFTER_EXPORT"), "3"])
    names = sorted(counts_by_name(run_))
    expect(run_.returncode == 0 and names[0] == "(anonymous namespace)::instantiate_after_neighbour",
           f"unstripped: names {names}", run_)
    with tempfile.TemporaryDirectory() as tmp:
        stripped = os.path.join(tmp, "site_stripped")
        shutil.copy(path_of("SITE_AFTER_EXPORT"), stripped)
        subprocess.run(["strip", "--strip-all", stripped], check=True)
        run_ = run([stripped, "3"])
    names = sorted(counts_by_name(run_))
    expect(len(names) == 3 and not any("exported_neighbour" in n for n in names),
           f"stripped: named after the neighbouring export: {names}", run_)
    expect(re.fullmatch(r"site_stripped\+0x[0-9a-f]+", names[0]) is not None,
           f"stripped: expected module+offset, got {names}", run_)


def sites_after_unload():
    """A plugin unloaded (dlclose) and another loaded at its addresses: each plugin's graph is
    named after its own function. The names the shim had cached for the first plugin's return
    addresses were given to the second one's graphs ('prefill_plugin_site (graph 2)')."""
    run_ = run([path_of("UNLOADED_SITES"), path_of("PREFILL_PLUGIN"), path_of("DECODE_PLUGIN"),
                str(ITERS)])
    expect(run_.returncode == 0, "program failed", run_)
    if "same_address=1" not in run_.stdout:
        return "skip: the loader put the second plugin elsewhere: nothing was reused"
    counts = counts_by_name(run_)
    expect(counts == {"prefill_plugin_site": ITERS, "decode_plugin_site": ITERS},
           f"each plugin's graph named after its own function: {counts}", run_)


def sites_of_moved_modules():
    """A loaded plugin whose path names another build of it by the time a graph is
    instantiated inside (a library upgraded on disk while the program runs; a relative dlopen
    path after a chdir): the graph is never named after a function of the file now at the path
    ('site_in_other_build'), only after its own function or as module+offset."""
    for mode in ("replaced", "chdir"):
        with tempfile.TemporaryDirectory(prefix="ferrum-moved-") as tmp:
            loaded_dir, other_dir = os.path.join(tmp, "loaded"), os.path.join(tmp, "other")
            os.mkdir(loaded_dir)
            os.mkdir(other_dir)
            plugin = os.path.join(loaded_dir, "plugin.so")
            shutil.copy(path_of("LOADED_BUILD_PLUGIN"), plugin)
            newer = os.path.join(other_dir, "plugin.so")
            shutil.copy(path_of("OTHER_BUILD_PLUGIN"), newer)
            args = [plugin, newer] if mode == "replaced" else [loaded_dir, other_dir]
            run_ = run([path_of("MOVED_MODULE_SITES"), mode, *args, str(ITERS)])
            expect(run_.returncode == 0, f"{mode}: program failed", run_)
            counts = counts_by_name(run_)
            expect(sum(counts.values()) == ITERS and len(counts) == 1,
                   f"{mode}: one graph, every launch in a range: {counts}", run_)
            (name,) = counts
            expect("site_in_other_build" not in name,
                   f"{mode}: named after the file now at the path: {name!r}", run_)
            expect("site_in_loaded_build" in name or re.fullmatch(r"plugin\.so\+0x[0-9a-f]+", name),
                   f"{mode}: neither its own function nor module+offset: {name!r}", run_)


def sites_of_reloaded_modules():
    """A plugin unloaded, rebuilt in place (another build at its path) and loaded again at the
    same address: the second graph is named after the new build's function, never from the
    names cached for the first build — with a build ID and without one (some toolchains link
    without: the module is then told apart by its file)."""
    for suffix in ("", "_NO_ID"):
        with tempfile.TemporaryDirectory(prefix="ferrum-reloaded-") as tmp:
            plugin, newer = os.path.join(tmp, "plugin.so"), os.path.join(tmp, "newer.so")
            shutil.copy(path_of("LOADED_BUILD_PLUGIN" + suffix), plugin)
            shutil.copy(path_of("OTHER_BUILD_PLUGIN" + suffix), newer)
            run_ = run([path_of("MOVED_MODULE_SITES"), "reloaded", plugin, newer, str(ITERS)])
            expect(run_.returncode == 0, f"{suffix or 'build ID'}: program failed", run_)
            if "same_address=1" not in run_.stdout:
                return "skip: the loader put the rebuilt plugin elsewhere: nothing was reused"
            counts = counts_by_name(run_)
            expect(counts == {"site_in_loaded_build": ITERS, "site_in_other_build": ITERS},
                   f"{suffix or 'build ID'}: each graph named after its own build: {counts}",
                   run_)


def ctypes_call_sites():
    """Graphs instantiated from Python through ctypes: the FFI layers (libffi's call stub,
    the _ctypes module) are skipped like the CUDA libraries, and below them lies the program's
    Python code, which the C stack cannot name: each graph is named by its number, not after an
    FFI function nor after CPython's own (every one was `_PyObject_MakeTpCall`, review PY-4)."""
    # The interpreter is known by its file, not by argv[0], which a program sets as it likes
    # (review TD-4): run as "worker", Python's graphs still have no site; a C++ program run as
    # "python3" keeps its own.
    as_argv0 = "import os, sys; os.execv(sys.argv[1], sys.argv[2:])"
    for argv0 in (None, "worker"):
        argv = [sys.executable, path_of("LAUNCH_CTYPES"), "--graphs", str(GRAPHS), "--iters",
                str(ITERS)]
        if argv0:
            argv = [sys.executable, "-c", as_argv0, argv[0], argv0, *argv[1:]]
        run_ = run(argv)
        expect(run_.returncode == 0, "program failed", run_)
        counts = counts_by_name(run_)
        expect(counts == {f"graph {n}": ITERS for n in range(1, GRAPHS + 1)},
               f"argv[0] {argv0 or 'as run'}: names {counts}", run_)
    run_ = run([sys.executable, "-c", as_argv0, path_of("LAUNCH_DRIVER"), "python3", "--graphs",
                str(GRAPHS), "--iters", str(ITERS)])
    counts = counts_by_name(run_)
    expect(run_.returncode == 0 and "instantiate_graphs" in counts,
           f"a C++ program run as python3: names {counts}", run_)
    # A Python whose executable holds the interpreter (Debian's /usr/bin/python3.N links no
    # libpython), run through the dynamic loader, and deleted while it runs (an upgrade under a
    # long job): its file as /proc names it is the loader, or ends " (deleted)" (review TE-1,
    # TE-2).
    static = [p for p in sorted(glob.glob("/usr/bin/python3.[0-9]*")) if re.search(r"\d$", p)
              and b"libpython" not in subprocess.run(["ldd", p], capture_output=True).stdout]
    loader = next(iter(glob.glob("/lib64/ld-linux-*.so.*") + glob.glob("/lib/ld-linux-*.so.*")),
                  None)
    if not static or not loader:
        print("note: no Python with the interpreter in its executable, or no loader: TE-1 and "
              "TE-2 not checked")
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, os.path.basename(static[0]))
        shutil.copy(static[0], copy)
        unlink_then_run = ("import os, runpy, sys; os.unlink(sys.executable); "
                           "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], "
                           "run_name='__main__')")
        for what, argv in (("through the loader", [loader, static[0], path_of("LAUNCH_CTYPES")]),
                           ("deleted", [copy, "-c", unlink_then_run, path_of("LAUNCH_CTYPES")])):
            # Under LeakSanitizer, a Python started through the loader shows the loader's own
            # allocations for its extension modules (_dl_map_object_deps) as leaks: not ours.
            quiet = ({"ASAN_OPTIONS": os.environ["ASAN_OPTIONS"] + ":detect_leaks=0"}
                     if "ASAN_OPTIONS" in os.environ else {})
            run_ = run([*argv, "--graphs", str(GRAPHS), "--iters", str(ITERS)], env=quiet)
            counts = counts_by_name(run_)
            expect(run_.returncode == 0 and
                   counts == {f"graph {n}": ITERS for n in range(1, GRAPHS + 1)},
                   f"{static[0]} {what}: names {counts}", run_)


def runtime_instantiation_registers_once():
    """cudaGraphInstantiate reaches the driver's instantiate underneath (shared runtime) or
    only the driver's (static runtime): either way one identity per graph, from the
    outermost API the program called."""
    for program, api in (("LAUNCH_RUNTIME", "cudaGraphInstantiate"),
                         ("LAUNCH_STATIC_RUNTIME", "cuGraphInstantiate")):
        run_ = launch(program=program, env={"FERRUM_REPLAY_LOG": "debug"})
        registered = re.findall(r"registered by (\w+) as graph (\d+)", run_.stderr)
        expect(len(registered) == GRAPHS, f"{program}: registrations {registered}", run_)
        expect(all(found.startswith(api) for found, _ in registered),
               f"{program}: registered by {registered}, expected {api}*", run_)
        expect_one_range_per_launch(run_, LAUNCHES)


def category_and_payload():
    """Category = the graph's number, payload = its replay number (1, 2, 3...)."""
    run_ = launch(env={"FERRUM_REPLAY_SITE": "off"})
    for ordinal in range(1, GRAPHS + 1):
        ranges = sorted(run_.ranges(name=f"graph {ordinal}"), key=lambda r: r["ts"])
        expect({r["args"].get("category") for r in ranges} == {ordinal},
               f"graph {ordinal}: categories {[r['args'] for r in ranges[:2]]}", run_)
        expect([r["args"].get("payload") for r in ranges] == list(range(1, ITERS + 1)),
               f"graph {ordinal}: payloads are not the replay numbers", run_)
        expect(len({r["args"].get("color") for r in ranges}) == 1, "colour not stable", run_)


def site_at_launch():
    """FERRUM_REPLAY_SITE=launch names graphs where they are first launched."""
    run_ = launch(env={"FERRUM_REPLAY_SITE": "launch"})
    expect_one_range_per_launch(run_, LAUNCHES)
    expect(len(counts_by_name(run_)) == GRAPHS, "graphs share names", run_)


def handle_reuse_gets_new_identity():
    """The stand-in hands destroyed handles out again (swapped, with two graphs): each
    re-instantiated graph is a new graph with a new number, never a stale name."""
    iters, every = 20, 5
    run_ = launch("--reinstantiate", str(every), graphs=2, iters=iters,
                  env={"FERRUM_REPLAY_SITE": "off", "FERRUM_REPLAY_SUMMARY": "stderr"})
    expect(run_.returncode == 0, "program failed", run_)
    counts = counts_by_name(run_)
    generations = iters // every
    expect(len(counts) == 2 * generations,
           f"expected {2 * generations} identities, got {sorted(counts)}", run_)
    expect(set(counts.values()) == {every}, f"each identity has {every} launches: {counts}", run_)
    # The summary agrees: every graph launched `every` times, none more.
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(.+)$", run_.stderr, re.M)
    expect(len(rows) == 2 * generations and all(int(r[1]) == every for r in rows),
           f"summary rows {rows}", run_)
    expect_balanced(run_)


def user_names():
    """ferrum_replay_name_graph_exec, looked up with dlsym(RTLD_DEFAULT)."""
    run_ = launch("--name-graphs", "decode batch")
    counts = counts_by_name(run_)
    expect(sorted(counts) == [f"decode batch {i}" for i in range(GRAPHS)],
           f"names {sorted(counts)}", run_)
    # Without the shim the program runs unchanged.
    bare = launch("--name-graphs", "decode batch", preload=False, record=False)
    expect(bare.returncode == 0 and bare.program_counts()["launches"] == LAUNCHES,
           "the program needs the shim to run", bare)


def user_names_from_two_threads():
    run_ = launch("--name-graphs", "racing", "--name-from-threads")
    expect(run_.returncode == 0, "program failed", run_)
    counts = counts_by_name(run_)
    expect(sorted(counts) == [f"racing {i}" for i in range(GRAPHS)], f"names {counts}", run_)
    expect_balanced(run_)


def unusual_names():
    """Long, UTF-8 and control-byte names reach the trace printable and whole (the cut at
    127 bytes itself is unit-tested)."""
    run_ = launch("--name-graphs", "décodeur\tbatch 批" + "x" * 100)
    names = list(counts_by_name(run_))
    expect(len(names) == GRAPHS, f"names {names}", run_)
    for name in names:
        expect(name.startswith("décodeur?batch 批x"), f"name {name!r}", run_)
        expect(len(name.encode()) <= 127, f"{len(name.encode())} bytes: not cut", run_)


def python_ctypes_names():
    """The documented Python example: names by scope and by handle through the ferrum_replay
    package, unchanged without the shim."""
    script = os.path.join(EXAMPLES, "name_graphs_ctypes.py")
    run_ = run([sys.executable, script, "4"])
    expect("named=yes launches=8" in run_.stdout, "the example did not name", run_)
    expect(counts_by_name(run_) == {"embedding lookup": 4, "sampler": 4},
           f"names {counts_by_name(run_)}", run_)
    bare = run([sys.executable, script, "4"], preload=False, record=False)
    expect("named=no launches=8" in bare.stdout and bare.returncode == 0, "fails without the shim",
           bare)


# name_scopes (tests/support/programs/name_scopes.cpp) launches its graph i i + 1 times.
SCOPED = {"outer": 2, "inner": 3 + 4, "explicit": 5, "level 15": 7}
SCOPE_GRAPHS, SCOPE_LAUNCHES = 8, 8 * 9 // 2


def scoped_names(run_):
    """{name: launches} of the scoped graphs, and the names of the others (by their counts)."""
    counts = counts_by_name(run_)
    scoped = {n: c for n, c in counts.items() if n in SCOPED}
    return scoped, sorted(n for n in counts if n not in SCOPED)


def scope_names():
    """ferrum_replay_push_graph_name / _pop_graph_name and ScopedGraphName: every graph
    instantiated on the thread inside a scope (runtime, driver, cuGetProcAddress) takes the
    innermost name; a later name by handle wins; another thread's graph and graphs outside
    every scope keep their call sites; 16 levels hold names, the 17th is -ENOSPC and still
    pops; pop without push is -EINVAL."""
    run_ = run([path_of("NAME_SCOPES")])
    expect(run_.returncode == 0 and "scope: present" in run_.stdout, "program failed", run_)
    expect(f"launches={SCOPE_LAUNCHES} failed=0" in run_.stdout, "launches", run_)
    expect("push17=-28 pops=0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0, pop_empty=-22 push_null=-22 "
           "pop_null=0" in run_.stdout, "the scope's return codes", run_)
    expect("name_explicit=0 name_null_handle=-22 name_null_name=-22" in run_.stdout,
           "ferrum_replay_name_graph_exec's return codes", run_)
    scoped, others = scoped_names(run_)
    expect(scoped == SCOPED, f"scoped graphs {scoped}, expected {SCOPED}", run_)
    counts = counts_by_name(run_)
    expect(sorted(counts[n] for n in others) == [1, 6, 8],
           f"the unscoped graphs (0, 5, 7) are not named by call site: {counts}", run_)
    expect(all(not n.startswith(("outer", "inner", "level", "graph ")) for n in others),
           f"unscoped names {others}", run_)
    expect_one_range_per_launch(run_, SCOPE_LAUNCHES)
    expect_balanced(run_)
    # Without the shim the program runs unchanged (the C++ helper is a no-op).
    bare = run([path_of("NAME_SCOPES")], preload=False, record=False)
    expect(bare.returncode == 0 and "scope: absent" in bare.stdout
           and f"launches={SCOPE_LAUNCHES} failed=0" in bare.stdout, "fails without the shim",
           bare)


def names_not_taken():
    """ferrum_replay_name_graph_exec returns 0 only when the shim took the name (the header's
    contract). Preloaded but naming nothing — no NVTX tool and no summary (`ferrum-replay run`
    alone: every launch passes through), or FERRUM_REPLAY=off — it is -ENOTSUP; a null handle
    or name is -EINVAL whatever the shim's state. It used to return 0 for everything there,
    null handle included. With only a summary asked, the shim is at work: the name is taken
    and the summary shows it."""
    not_taken = "name_explicit=-95 name_null_handle=-22 name_null_name=-22"
    for label, record, env in (("no tool, no summary", False, {}),
                               ("FERRUM_REPLAY=off", True, {"FERRUM_REPLAY": "off"})):
        run_ = run([path_of("NAME_SCOPES")], record=record, env=env)
        expect(run_.returncode == 0 and "scope: present" in run_.stdout and
               f"launches={SCOPE_LAUNCHES} failed=0" in run_.stdout, f"{label}: program", run_)
        expect(not_taken in run_.stdout, f"{label}: expected {not_taken!r}", run_)
    run_ = run([path_of("NAME_SCOPES")], record=False, env={"FERRUM_REPLAY_SUMMARY": "stderr"})
    expect("name_explicit=0 name_null_handle=-22 name_null_name=-22" in run_.stdout,
           "only a summary: the name is taken, a null one refused", run_)
    expect(re.search(r"^\s+\d+\s+5\s+0\s+0\s+explicit$", run_.stderr, re.M),
           "only a summary: the summary does not show the name taken", run_)


def scope_beats_names_file():
    """A scope's name is the program's own: it beats a names file's rule, which still names
    the graphs outside every scope."""
    path = with_file("site:* = from the file\n")
    try:
        run_ = run([path_of("NAME_SCOPES")], env={"FERRUM_REPLAY_NAMES": path})
    finally:
        os.unlink(path)
    scoped, others = scoped_names(run_)
    expect(scoped == SCOPED, f"scoped graphs {scoped}, expected {SCOPED}", run_)
    expect(counts_by_name(run_).get("from the file") == 1 + 6 + 8,
           f"the names file named {counts_by_name(run_)}", run_)


# name_package.py launches its graph i i + 1 times.
PACKAGE_NAMED = {"by raw_cuda_graph_exec": 1, "by c_void_p": 2, "by int": 3, "scoped": 4,
                 "inner": 5, "decorated": 6, "torch order": 7}
PACKAGE_LAUNCHES = 9 * 10 // 2


def python_package_names():
    """The ferrum_replay package: name() takes an object with raw_cuda_graph_exec() (as
    torch.cuda.CUDAGraph), a ctypes pointer and an int; graph_name() names what the thread
    instantiates inside it, nested, as a decorator, and around a context manager that
    instantiates on exit (torch.cuda.graph) when written first; written second it has closed
    by then. A handle outside a pointer's range and a name with a NUL are refused, never
    wrapped or cut; a graph object with no executable graph yet (its raw_cuda_graph_exec()
    raises, as PyTorch's before instantiate()) is not named and its error is not passed on,
    nor is the error of an object whose __index__ raises (a TypeError). Without the shim: the
    same program, names ignored."""
    run_ = run([sys.executable, NAME_PACKAGE], env=PACKAGE_ENV)
    expect(run_.returncode == 0 and "available=True" in run_.stdout
           and "named=True,True,True" in run_.stdout and "typeerrors=10" in run_.stdout
           and "rejected=4" in run_.stdout and "null=False" in run_.stdout
           and "unready=False,False" in run_.stdout
           and f"launches={PACKAGE_LAUNCHES} failed=0" in run_.stdout, "program", run_)
    counts = counts_by_name(run_)
    named = {n: c for n, c in counts.items() if n in PACKAGE_NAMED}
    expect(named == PACKAGE_NAMED, f"named graphs {named}, expected {PACKAGE_NAMED}", run_)
    others = {n: c for n, c in counts.items() if n not in PACKAGE_NAMED}
    expect(sorted(others.values()) == [8, 9] and "wrong order" not in others,
           f"graphs 7 and 8 keep their call sites: {others}", run_)
    expect_one_range_per_launch(run_, PACKAGE_LAUNCHES)
    expect_balanced(run_)
    bare = run([sys.executable, NAME_PACKAGE], env=PACKAGE_ENV, preload=False, record=False)
    expect(bare.returncode == 0 and "available=False" in bare.stdout
           and "named=False,False,False" in bare.stdout and "typeerrors=10" in bare.stdout
           and "rejected=4" in bare.stdout and "null=False" in bare.stdout
           and "unready=False,False" in bare.stdout
           and f"launches={PACKAGE_LAUNCHES} failed=0" in bare.stdout and not bare.stderr,
           "without the shim", bare)
    # Preloaded but naming nothing (`ferrum-replay run` with no tool and no summary): the shim
    # is there, and name() says False for each name it did not take (it said True).
    idle = run([sys.executable, NAME_PACKAGE], env=PACKAGE_ENV, record=False)
    expect(idle.returncode == 0 and "available=True" in idle.stdout
           and "named=False,False,False" in idle.stdout and "null=False" in idle.stdout
           and "unready=False,False" in idle.stdout and f"launches={PACKAGE_LAUNCHES} failed=0" in idle.stdout,
           "preloaded, no tool and no summary: name() must not say it took a name", idle)


# Names with surrogates that stand for no byte, which str.encode cannot encode: a lone half of
# a pair (as json.loads gives for "\ud83d") by handle, a pair written in Python (not joined
# into its character) beside surrogateescape's stand-ins for the bytes of 'é' by scope. Graph
# i is launched i + 1 times.
UNENCODABLE_PROGRAM = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import name_graphs_ctypes as example
import ferrum_replay
cuda = example.open_driver()
execs = [example.instantiate(cuda)[1]]
lone = json.loads('"decode \\ud83d"')
print("named=%s" % ferrum_replay.name(execs[0], lone))
with ferrum_replay.graph_name("rocket \ud83d\ude80 x\udcc3\udca9"):
    execs.append(example.instantiate(cuda)[1])
execs.append(example.instantiate(cuda)[1])
started = time.monotonic()
ferrum_replay.name(execs[2], "huge " + "\ud800" * 10_000_000)
print("huge_name_seconds_under_1=%s" % (time.monotonic() - started < 1))
for i, exec_ in enumerate(execs):
    for _ in range(i + 1):
        example.check(cuda.cuGraphLaunch(exec_, None), "cuGraphLaunch")
example.check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
print("done")
"""


def python_package_unencodable_names():
    """A str name holding a surrogate that stands for no byte (a lone half of a pair) is
    named with '?' in its place, as malformed UTF-8 is; surrogateescape's stand-ins still give
    back their bytes. It raised UnicodeEncodeError into the program, with or without the
    shim, from name() and from graph_name(). A name of ten million lone surrogates is cut as
    any other, in well under a second (the whole text was walked in Python: seven seconds)."""
    argv = [sys.executable, "-c", UNENCODABLE_PROGRAM, EXAMPLES]
    run_ = run(argv, env=PACKAGE_ENV)
    expect(run_.returncode == 0 and
           run_.stdout == "named=True\nhuge_name_seconds_under_1=True\ndone\n", "program", run_)
    counts = counts_by_name(run_)
    expect(counts == {"decode ?": 1, "rocket ?? x\u00e9": 2, "huge " + "?" * 122: 3},
           f"names {counts}", run_)
    # Under LeakSanitizer, no table of the suppressions Python's own allocations matched.
    quiet = {"LSAN_OPTIONS": os.environ["LSAN_OPTIONS"] + ":print_suppressions=0"} \
        if "LSAN_OPTIONS" in os.environ else {}
    bare = run(argv, env={**PACKAGE_ENV, **quiet}, preload=False, record=False)
    expect(bare.returncode == 0 and
           bare.stdout == "named=False\nhuge_name_seconds_under_1=True\ndone\n" and
           not bare.stderr, "without the shim", bare)


# Alarms every 20 us for SECONDS; the handler raises KeyboardInterrupt wherever it lands in
# opening or holding a scope (the function that holds it, graph_name's __enter__ however it is
# written), not in __exit__ (before its first line runs, any context manager written in Python
# leaks: documented). Each round pushes an enclosing name by hand, opens and closes the scope,
# then pops: the enclosing name must be the one level left.
INTERRUPTED_SCOPE_PROGRAM = r"""
import signal, sys, time
import ferrum_replay
push, pop = ferrum_replay._push_graph_name, ferrum_replay._pop_graph_name
def body():
    with ferrum_replay.graph_name("interrupted"):
        pass
entering = ferrum_replay.graph_name.__dict__["__enter__"]
codes = {body.__code__, getattr(entering, "__code__", None),
         getattr(getattr(type(entering), "__get__", None), "__code__", None)}
def handler(signum, frame):
    if frame is not None and frame.f_code in codes:
        raise KeyboardInterrupt
signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 1e-4, 2e-5)
rounds = interrupted = leaked = popped_enclosing = 0
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    rounds += 1
    push(b"enclosing")
    try:
        body()
    except KeyboardInterrupt:
        interrupted += 1
    if pop() != 0:  # nothing left: the scope took the enclosing name off
        popped_enclosing += 1
        continue
    if pop() == 0:  # two levels were left: the scope's stayed pushed
        leaked += 1
        while pop() == 0:
            pass
signal.setitimer(signal.ITIMER_REAL, 0)
print("rounds=%d interrupted=%d leaked=%d popped_enclosing=%d"
      % (rounds, interrupted, leaked, popped_enclosing))
"""


def python_package_scope_interrupted():
    """A signal's exception (Ctrl-C's KeyboardInterrupt, an alarm's) raised anywhere as a
    graph_name scope opens never takes the enclosing scope's name off, and, from Python 3.10
    on, never leaves the scope's own name pushed — which named every graph the thread
    instantiated from then on. The push is a C call that `with` makes (no Python code of ours
    between it and the registration of __exit__). Thousands of alarms per Python: this one, and
    3.8, 3.9 and 3.10 where the machine has them. Before, on 3.10 some 3,400 scopes of 300,000
    stayed pushed; on 3.8 and 3.9 thousands stayed pushed and thousands more popped the
    enclosing name. (3.8 and 3.9 still leave some pushed, on the way out: their `with` can be
    interrupted after its block and before it calls __exit__, or by a second signal inside the
    first one's unwinding, for every context manager.) Python 3.11 and later never showed the
    old window: with none of 3.8 to 3.10 here the test checks them and says it is skipped."""
    pythons = {sys.version_info[:2]: sys.executable}
    for minor in (8, 9, 10):
        found = python3_among([minor])
        if found:
            pythons[(3, minor)] = found
    for version, python in sorted(pythons.items()):
        run_ = run([python, "-c", INTERRUPTED_SCOPE_PROGRAM, "2"], env=PACKAGE_ENV,
                   record=False, timeout=60)
        counts = dict(part.split("=") for part in run_.stdout.split())
        what = "Python %d.%d" % version
        expect(run_.returncode == 0 and int(counts.get("interrupted", 0)) >= 200,
               f"{what}: too few scopes interrupted to say anything", run_)
        expect(counts["popped_enclosing"] == "0",
               f"{what}: an interrupted scope took the enclosing name off", run_)
        expect(version < (3, 10) or counts["leaked"] == "0",
               f"{what}: an interrupted scope left its name pushed", run_)
        print(f"{what}: {run_.stdout.strip()}")
    missing = sorted({8, 9, 10} - {minor for _, minor in pythons})
    if missing:
        print("note: no Python 3.%s here: not checked" % ", 3.".join(map(str, missing)))
    if len(missing) == 3:
        return "skip: no Python 3.8, 3.9 or 3.10 here, where the window was"


SCOPED_STEPS_PROGRAM = r"""
import asyncio, contextlib, functools, gc, sys, types
sys.path.insert(0, sys.argv[1])
import name_graphs_ctypes as example
import ferrum_replay
cuda = example.open_driver()
def launch_new():
    exec_ = example.instantiate(cuda)[1]
    example.check(cuda.cuGraphLaunch(exec_, None), "cuGraphLaunch")

@ferrum_replay.graph_name("generator")
def generator():
    launch_new()
    got = yield 1
    launch_new()  # resumed with send()
    try:
        yield got
    except ValueError:  # thrown in
        launch_new()
    try:
        yield 3
    finally:  # closed early
        launch_new()

@ferrum_replay.graph_name("coroutine")
async def coroutine():
    launch_new()
    await asyncio.sleep(0)  # meanwhile another task's graph: not named after this scope
    launch_new()
    return 7

async def meanwhile():
    launch_new()

@ferrum_replay.graph_name("async generator")
async def async_generator():
    launch_new()
    await asyncio.sleep(0)
    yield 1
    launch_new()
    yield 2

def plain(function):  # a decorator that returns a plain def (a timer's, torch.inference_mode()'s)
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper

@ferrum_replay.graph_name("wrapped generator")
@plain
def wrapped_generator():
    yield 4
    launch_new()

@ferrum_replay.graph_name("wrapped coroutine")
@plain
async def wrapped_coroutine():
    await asyncio.sleep(0)
    launch_new()
    return 8

@ferrum_replay.graph_name("wrapped async generator")
@plain
async def wrapped_async_generator():
    for item in (5,):
        await asyncio.sleep(0)
        launch_new()
        yield item

def primed(function):  # a priming decorator: the generator it hands back has started
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        steps = function(*args, **kwargs)
        next(steps)
        return steps
    return wrapper

@ferrum_replay.graph_name("primed")
@primed
def averager():
    total = 0
    while True:
        total += yield total

shared = (n for n in range(3))

@ferrum_replay.graph_name("shared")
def hand_out():  # hands out a generator the program keeps using
    return shared

@types.coroutine
def tick():
    yield

@ferrum_replay.graph_name("generator-based coroutine")
def ticker():
    return tick()

values = []
steps = generator()
launch_new()  # created, not started: outside
values.append(next(steps))
launch_new()  # suspended at a yield: outside
values.append(steps.send(2))
values.append(steps.throw(ValueError("in")))
steps.close()
launch_new()
values.extend(wrapped_generator())
values.append(averager().send(5))
values.append(next(hand_out()))
values.extend(shared)
unawaited = wrapped_coroutine()  # never awaited: one warning, for it
del unawaited
gc.collect()

async def main():
    values.extend(await asyncio.gather(coroutine(), meanwhile()))
    values.extend([item async for item in async_generator()])
    values.append(await wrapped_coroutine())
    values.extend([item async for item in wrapped_async_generator()])
    values.append(await ticker())
asyncio.run(main())
with contextlib.ExitStack() as stack:  # calls graph_name.__enter__(scope) itself
    stack.enter_context(ferrum_replay.graph_name("exit stack"))
    launch_new()
print(values)
pop = ferrum_replay._pop_graph_name  # None without the shim
print("left=%d" % (sum(1 for _ in iter(pop, -22)) if pop else 0))
"""


def python_package_scope_decorates_steps():
    """graph_name as a decorator of a generator, a coroutine and an async generator function
    names the graphs their bodies instantiate — each step (to a yield, an await), resumed by
    next, send or throw, and the `finally` that close runs — and not the graphs the thread
    instantiates while they are suspended (the caller's, another asyncio task's). Before, the
    scope closed as the call returned the generator or coroutine object, before any of its
    body ran: none of its graphs took the name. The values come back unchanged, and nothing is
    left pushed. The same program runs without the shim. A scope entered through
    contextlib.ExitStack (which calls graph_name.__enter__ on the class) names its graph too.
    So does the scope over a decorator that returns a plain def around such a function (a
    timer's, torch.inference_mode()'s): the kind is told by what the call returned (F150) —
    only where that is the decorated body's own object, not started: a priming decorator's
    generator still takes send(), a generator the program hands out keeps its items, a
    generator-based coroutine is still awaitable, and a coroutine never awaited gets one
    warning, its own."""
    expected = "[1, 2, 3, 4, 5, 0, 1, 2, 7, None, 1, 2, 8, 5, None]\nleft=0\n"
    # Whether a body's object has started is told differently by each Python (review Z3: 3.13
    # reports f_lasti 2 for one not started, and the wrapped bodies lost their names there): the
    # same on the oldest Python the package supports, the first with ag_suspended, the newest.
    pythons = {sys.version_info[:2]: sys.executable}
    for minors in ((8,), (12,), (14, 13)):
        found = python3_among(minors)
        if found:
            pythons.setdefault(tuple(int(part) for part in subprocess.run(
                [found, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                text=True, timeout=30).stdout.split()), found)
    for version, python in sorted(pythons.items()):
        what = "Python %d.%d" % version
        run_ = run([python, "-c", SCOPED_STEPS_PROGRAM, EXAMPLES], env=PACKAGE_ENV)
        expect(run_.returncode == 0 and run_.stdout == expected, f"{what}: program", run_)
        expect(run_.stderr.count("was never awaited") == 1
               and "coroutine 'wrapped_coroutine' was never awaited" in run_.stderr,
               f"{what}: one warning for the coroutine never awaited, under its own name", run_)
        counts = counts_by_name(run_)
        scoped = {name: counts.pop(name, 0)
                  for name in ("generator", "coroutine", "async generator", "exit stack",
                               "wrapped generator", "wrapped coroutine",
                               "wrapped async generator")}
        expect(scoped == {"generator": 4, "coroutine": 2, "async generator": 2, "exit stack": 1,
                          "wrapped generator": 1, "wrapped coroutine": 1,
                          "wrapped async generator": 1} and
               sum(counts.values()) == 4, f"{what}: names {scoped}, the others {counts}", run_)
    bare = run([sys.executable, "-c", SCOPED_STEPS_PROGRAM, EXAMPLES], env=PACKAGE_ENV,
               preload=False, record=False)
    expect(bare.returncode == 0 and bare.stdout == expected, "without the shim", bare)


# An async generator left suspended when asyncio.run() ends: the loop closes it
# (shutdown_asyncgens), and its `finally` instantiates a graph. Another dropped in a reference
# cycle and collected while the loop runs: the loop's finalizer closes it.
INTERRUPTED_ASYNC_GENERATOR_PROGRAM = r"""
import asyncio, gc, os, sys
import ferrum_replay

PACKAGE = os.path.dirname(ferrum_replay.__file__)


class Tick(Exception):
    '''A timeout signal's exception the program catches and goes on.'''


# "": the body only yields, each point judged at once; "kept": the program keeps each exception
# it caught (and so the frames of its traceback) until asyncio.run() has returned; "await": the
# body awaits inside each step and in its `finally`.
MODE = sys.argv[1] if len(sys.argv) > 1 else ""
made = {"decorated": 0, "own": 0}
cleaned = {"decorated": 0, "own": 0}
kept = []


@ferrum_replay.graph_name("rows")
async def rows():
    made["decorated"] += 1
    try:
        for i in range(2):
            if MODE == "await":
                await asyncio.sleep(0)
            yield i
    finally:
        if MODE == "await":
            await asyncio.sleep(0)
        cleaned["decorated"] += 1


async def own_rows():  # the program's own, undecorated
    made["own"] += 1
    try:
        yield 0
        yield 1
    finally:
        cleaned["own"] += 1


def raising_at(n):
    '''A profile function raising Tick at the n-th point where a signal's handler could run in
    the package's code: as one of its functions starts, and after each C function it calls.'''
    seen = [0]

    def profile(frame, event, arg):
        # Python 3.8 to 3.10 raise a profile function's "call" exception on a generator's
        # resumption before its handlers are in place, where no signal lands: fresh frames only.
        call = event == "call" and (sys.version_info >= (3, 11) or frame.f_lasti < 0)
        if (call or event == "c_return") and frame.f_code.co_filename.startswith(PACKAGE):
            seen[0] += 1
            if seen[0] == n:
                raise Tick
    return profile


async def main():
    loop_hooks = sys.get_asyncgen_hooks()
    n = other = 0
    while True:
        n += 1
        ticked = False
        sys.setprofile(raising_at(n))
        try:
            async for _ in rows():
                pass
        except Tick as tick:
            ticked = True
            if MODE == "kept":
                kept.append(tick)
        except BaseException as error:  # anything but its own exception: the package's doing
            sys.setprofile(None)
            print("at point %d: the program caught %r" % (n, error))
            ticked = True
            other += 1
        finally:
            sys.setprofile(None)
        if sys.get_asyncgen_hooks() != loop_hooks:
            print("at point %d: the loop's async generator hooks were replaced" % n)
            sys.set_asyncgen_hooks(*loop_hooks)
        # The program's own generator, left open: the loop closes it as it ends.
        await own_rows().__anext__()
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)
        if MODE == "" and made["decorated"] != cleaned["decorated"]:
            print("at point %d: a decorated generator was never closed" % n)
            cleaned["decorated"] = made["decorated"]
        if not ticked:
            return n, other


points, other = asyncio.run(main())
del kept[:]
gc.collect()
print("points=%d own generators not closed=%d decorated not closed=%d caught other=%d"
      % (points, made["own"] - cleaned["own"], made["decorated"] - cleaned["decorated"], other))
"""


def python_package_async_generator_interrupted():
    """A signal's exception the program catches (a timeout's) raised anywhere in the decorator
    of an async generator -- as each of the package's functions starts, after each C function
    it calls -- never leaves the event loop's async generator hooks replaced, and the program's
    generator is always closed, its `finally` run. At one point the hooks stayed replaced: no
    async generator of the program was closed from then on (review PY-1); at 15 others of 28 on Python 3.11 the
    decorated generator was never closed (PY-2). A profile function raises at each point in
    turn, on this Python and on 3.8 and 3.13 where the machine has them, shim or not. (Python
    3.13 warns of an awaitable made and never awaited, as for any program's code a signal
    interrupts so: that warning is not judged here.)"""
    pythons = {sys.version_info[:2]: sys.executable}
    for minor in (8, 13):
        found = python3_among([minor])
        if found:
            pythons[(3, minor)] = found
    for version, python in sorted(pythons.items()):
        for mode, preload in (("", True), ("", False), ("kept", True), ("await", True)):
            argv = [python, "-W", "ignore:coroutine method:RuntimeWarning", "-c",
                    INTERRUPTED_ASYNC_GENERATOR_PROGRAM, mode]
            run_ = run(argv, env=PACKAGE_ENV, preload=preload, record=False, timeout=120)
            what = "Python %d.%d, %s%s" % (version + ("shim" if preload else "no shim",
                                                        f", {mode}" if mode else ""))
            counts = re.search(r"^points=(\d+) own generators not closed=(\d+) decorated not "
                               r"closed=(\d+) caught other=(\d+)$", run_.stdout, re.M)
            expect(run_.returncode == 0 and counts and int(counts[1]) > 20,
                   f"{what}: the program", run_)
            expect(counts[4] == "0" and "caught" not in run_.stdout.replace("caught other", "")
                   and "hooks were replaced" not in run_.stdout and counts[2] == "0",
                   f"{what}: an interruption changed the program's exception or left the "
                   "loop's hooks replaced", run_)
            if mode == "await":
                # A body left inside a step, at an `await` of its own, stays there (only its
                # driver could resume it); nothing of that reaches the program (TD-2).
                expect("already running" not in run_.stderr,
                       f"{what}: the loop's close of a body still inside a step", run_)
            else:
                expect("at point" not in run_.stdout and counts[3] == "0" and not run_.stderr,
                       f"{what}: an interruption left a generator unclosed", run_)
            print(f"{what}: {counts[1]} points, {counts[3]} bodies unclosed")


LEFT_OPEN_PROGRAM = r"""
import asyncio, gc, sys
sys.path.insert(0, sys.argv[1])
import name_graphs_ctypes as example
import ferrum_replay
cuda = example.open_driver()

# A decorated async generator whose `finally` awaits, then instantiates a graph.
def closed_generator(name, said):
    @ferrum_replay.graph_name(name)
    async def tokens():
        try:
            for i in range(100):
                yield i
        finally:
            await asyncio.sleep(0)
            exec_ = example.instantiate(cuda)[1]
            example.check(cuda.cuGraphLaunch(exec_, None), "cuGraphLaunch")
            print(said, flush=True)
    return tokens

tokens = closed_generator("left open", "cleanup ran")
collected = closed_generator("collected", "collected cleanup ran")

async def main():
    global kept  # kept alive: closed by the loop's shutdown, not by the garbage collector
    kept = tokens()
    print(await kept.__anext__())
    dropped = collected()
    print(await dropped.__anext__())
    cycle = [dropped]
    cycle.append(cycle)
    del dropped, cycle
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0)
asyncio.run(main())
pop = ferrum_replay._pop_graph_name  # None without the shim
print("left=%d" % (sum(1 for _ in iter(pop, -22)) if pop else 0))
"""


def python_package_async_generator_left_open():
    """A decorated async generator still suspended when asyncio.run() ends is closed by the
    event loop once, through the decorator, and its `finally` runs in the scope: the graph it
    instantiates there is named, and nothing reaches stderr. The loop knew the generator inside
    the decorator too and closed both at once: "an error occurred during closing of
    asynchronous generator ... aclose(): asynchronous generator is already running" on stderr,
    shim or not, and the `finally` ran outside the scope. One dropped in a reference cycle and
    collected is closed by the loop's finalizer the same way (with no finalizer of its own, the
    inner generator was closed by the collector, synchronously: "async generator ignored
    GeneratorExit", and its `finally` stopped at its `await`)."""
    argv = [sys.executable, "-c", LEFT_OPEN_PROGRAM, EXAMPLES]
    expected = "0\n0\ncollected cleanup ran\ncleanup ran\nleft=0\n"
    quiet = {"LSAN_OPTIONS": os.environ["LSAN_OPTIONS"] + ":print_suppressions=0"} \
        if "LSAN_OPTIONS" in os.environ else {}
    run_ = run(argv, env={**PACKAGE_ENV, **quiet, "FERRUM_REPLAY_SITE": "off"})
    expect(run_.returncode == 0 and run_.stdout == expected and
           "asynchronous generator" not in run_.stderr, "program", run_)
    counts = counts_by_name(run_)
    expect(counts == {"left open": 1, "collected": 1}, f"names {counts}", run_)
    bare = run(argv, env={**PACKAGE_ENV, **quiet}, preload=False, record=False)
    expect(bare.returncode == 0 and bare.stdout == expected and not bare.stderr,
           "without the shim", bare)


OBJECTS_PROGRAM = r"""
import asyncio, functools, importlib, sys, threading, time
import ferrum_replay

def plain(function):  # a decorator that returns a plain def (a timer's, torch.no_grad()'s)
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper

class AttrDict(dict):  # the common one-liner: its __getattr__ raises KeyError
    __getattr__ = dict.__getitem__

@ferrum_replay.graph_name("forward")
@plain
def forward(x):
    return AttrDict(logits=x * 2)

print("logits=%d" % forward(3).logits, flush=True)

# A module scanner imports every submodule, with the program's own argv.
sys.argv = ["serve.py", "run", "--", "sh", "-c", "echo replaced"]
importlib.import_module("ferrum_replay.__main__")
print("still running", flush=True)

# A server's event loop in a daemon thread, its decorated coroutine suspended at exit: left
# alone, as it would be undecorated (not closed from the main thread by an atexit hook).
@ferrum_replay.graph_name("server")
@plain
async def serve():
    queue = asyncio.Queue()
    try:
        await queue.get()
    finally:
        print("finally ran on " + threading.current_thread().name, flush=True)
        await asyncio.sleep(0)

loop = asyncio.new_event_loop()
threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True).start()
time.sleep(0.2)
print("main done", flush=True)
"""


def python_package_leaves_program_objects_alone():
    """The package never acts on the program's objects beyond the names it was asked for,
    shim or not (review JJ): `@graph_name` over a plain wrapper read `cr_code` from every
    result, and a result whose `__getattr__` raises KeyError (an AttrDict) made every call
    fail; a coroutine it wrapped, still suspended in a daemon thread's event loop at exit,
    was closed from the main thread by weakref.finalize's atexit hook (the program's
    `finally` ran there, and "coroutine ignored GeneratorExit" reached stderr); importing
    ferrum_replay.__main__ (a module scanner) replaced the process with the wrapper, run on
    the program's argv."""
    argv = [sys.executable, "-c", OBJECTS_PROGRAM]
    expected = "logits=6\nstill running\nmain done\n"
    for preload in (True, False):
        run_ = run(argv, env=PACKAGE_ENV, preload=preload, record=False)
        expect(run_.returncode == 0 and run_.stdout == expected and not run_.stderr,
               f"{'with' if preload else 'without'} the shim", run_)


def names_file():
    """Ordinals and site patterns name graphs; bad lines are one line: the first, numbered, and
    the count of the rest; FERRUM_REPLAY_LOG=info lists each."""
    path = with_file("# the server's graphs\n1 = prefill\nsite:* = decoder\nbogus line\n0 = x\n")
    try:
        run_ = launch(env={"FERRUM_REPLAY_NAMES": path})
    finally:
        os.unlink(path)
    counts = counts_by_name(run_)
    # Graph 1 by number; the other two share the site rule's name (chosen by a person).
    expect(counts == {"prefill": ITERS, "decoder": 2 * ITERS}, f"names {counts}", run_)
    errors = [l for l in run_.stderr.splitlines() if "FERRUM_REPLAY_NAMES" in l]
    expect(len(errors) == 1 and "line 4:" in errors[0] and "and 1 more bad line," in errors[0],
           "expected one line: line 4, and 1 more", run_)
    missing = launch(env={"FERRUM_REPLAY_NAMES": "/nonexistent/names"})
    expect(missing.returncode == 0 and missing.stderr.count("\n") == 1 and
           "cannot be read" in missing.stderr, "a missing file is not one clear line", missing)


def names_file_not_a_regular_file():
    """FERRUM_REPLAY_NAMES at a FIFO with no writer, /dev/zero or a directory: never opened or
    waited for — the program finishes at once with its own result and every range, and one
    line says what was skipped (with the recorder attached, and with only a summary asked)."""
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "names.fifo")
        os.mkfifo(fifo)
        for path, kind in ((fifo, "a FIFO"), ("/dev/zero", "a character device"),
                           (tmp, "a directory")):
            for record, extra in ((True, {}), (False, {"FERRUM_REPLAY_SUMMARY": "stderr"})):
                for log in ("silent", "info"):
                    env = {"FERRUM_REPLAY_NAMES": path, "FERRUM_REPLAY_LOG": log, **extra}
                    run_ = launch(env=env, record=record, timeout=30)
                    expect(run_.returncode == 0 and run_.program_counts()["launches"] == LAUNCHES,
                           f"{path}: the program did not finish normally", run_)
                    lines = [l for l in run_.stderr.splitlines() if "FERRUM_REPLAY_NAMES" in l]
                    expect(len(lines) == 1 and f"FERRUM_REPLAY_NAMES='{path}' is {kind}, not a "
                           "regular file; skipped" in lines[0],
                           f"{path}: expected one line saying it was skipped", run_)
                    if record:
                        expect_one_range_per_launch(run_, LAUNCHES)


def names_file_many_bad_lines():
    """A names file of 100,000 bad lines: one line, the first and the count of the rest (20
    lines and a count were printed, with FERRUM_REPLAY_LOG silent); each at FERRUM_REPLAY_LOG=info;
    a file over 1 MiB is skipped whole in one line. The good lines still apply."""
    path = with_file("1 = kept\n" + "bogus\n" * 100000)
    try:
        run_ = launch(env={"FERRUM_REPLAY_NAMES": path, "FERRUM_REPLAY_SITE": "off"})
    finally:
        os.unlink(path)
    lines = [l for l in run_.stderr.splitlines() if "FERRUM_REPLAY_NAMES" in l]
    expect(len(lines) == 1 and "line 2:" in lines[0] and
           "and 99999 more bad lines, each ignored" in lines[0],
           f"{len(lines)} lines about the names file, expected one with the count", run_)
    expect(counts_by_name(run_).get("kept") == ITERS, "the good line did not apply", run_)
    path = with_file("1 = kept\n" + "bogus\n" * 3)
    try:
        run_ = launch(env={"FERRUM_REPLAY_NAMES": path, "FERRUM_REPLAY_SITE": "off",
                           "FERRUM_REPLAY_LOG": "info"})
    finally:
        os.unlink(path)
    listed = [l for l in run_.stderr.splitlines() if "FERRUM_REPLAY_NAMES" in l and
              "; line ignored" in l]
    # Each once, and no summary line repeating the first (nor asking for info, which is on).
    expect(len(listed) == 3 and len(set(listed)) == 3 and
           not any("more bad line" in l for l in listed),
           "FERRUM_REPLAY_LOG=info: not each bad line listed once", run_)
    huge = with_file("# padding\n" * 200000)
    try:
        big = launch(env={"FERRUM_REPLAY_NAMES": huge})
    finally:
        os.unlink(huge)
    expect(big.returncode == 0 and big.stderr.count("\n") == 1 and
           "larger than 1 MiB" in big.stderr, "a huge file is not one line", big)


def echoed_paths_cannot_forge_lines():
    """A path with a newline and an escape sequence is echoed printable and quoted: one line,
    no control byte, nothing that reads as a second message."""
    forged = "/nonexistent/names\n\x1b[32mferrum-replay: all good"
    run_ = launch(env={"FERRUM_REPLAY_NAMES": forged})
    lines = run_.stderr.splitlines()
    expect(len(lines) == 1 and "\x1b" not in run_.stderr, "the path forged a line", run_)
    expect(lines[0].startswith("ferrum-replay: FERRUM_REPLAY_NAMES='/nonexistent/names??[32m"
                               "ferrum-replay: all good' cannot be read"), "not quoted", run_)
    long_path = "/nonexistent/" + "p" * 4000  # too long for a setting: refused, quoted, cut
    refused = launch(env={"FERRUM_REPLAY_NAMES": long_path})
    expect(refused.stderr.count("\n") == 1 and "p" * 188 not in refused.stderr and
           "...' is invalid" in refused.stderr, "an overlong path is not cut at 200 bytes",
           refused)


def message_template():
    run_ = launch(env={"FERRUM_REPLAY_FORMAT": "{name} #{ordinal} via {api}",
                       "FERRUM_REPLAY_SITE": "off"})
    counts = counts_by_name(run_)
    expect(sorted(counts) == [f"graph {i} #{i} via cuGraphInstantiateWithFlags"
                              for i in range(1, GRAPHS + 1)], f"messages {sorted(counts)}", run_)
    bad = launch(env={"FERRUM_REPLAY_FORMAT": "{nmae}"})
    lines = bad.stderr.splitlines()
    expect(len(lines) == 1 and "FERRUM_REPLAY_FORMAT='{nmae}' is invalid" in lines[0],
           "an invalid template is not one clear line", bad)
    expect_one_range_per_launch(bad, LAUNCHES)


def template_collisions_stay_apart():
    """A template that renders alike for different graphs still gives distinct messages."""
    run_ = launch(env={"FERRUM_REPLAY_FORMAT": "{api}"})
    expect(len(counts_by_name(run_)) == GRAPHS, f"messages {counts_by_name(run_)}", run_)


def person_names_stay_apart_unless_shown_alike():
    """Graphs a person named differently never share a message: not under a template that shows
    no {name}, not when their long names are cut alike (the names file's graphs named alike still
    share theirs: names_file)."""
    run_ = launch("--name-graphs", "job", env={"FERRUM_REPLAY_FORMAT": "{api}"})
    counts = counts_by_name(run_)
    expect(len(counts) == GRAPHS and all(n == ITERS for n in counts.values()),
           f"differently named graphs under '{{api}}': messages {counts}", run_)
    prefix = "model.layers.attention." * 8  # 184 bytes: every name is cut at the same place
    run_ = launch("--name-graphs", prefix)
    counts = counts_by_name(run_)
    expect(len(counts) == GRAPHS and all(n == ITERS for n in counts.values()),
           f"long names cut alike: messages {counts}", run_)
    expect(sum(name.endswith(")") and "(graph " in name for name in counts) == GRAPHS - 1,
           f"all but the first of the cut names should say their graph: {sorted(counts)}", run_)


def content_names():
    """Graphs from one call site, told apart by their kernels."""
    kernels = "gemm*3,softmax;flash_fwd*2;rmsnorm"
    run_ = launch("--graph-kernels", kernels,
                  env={"FERRUM_REPLAY_CONTENT": "on", "FERRUM_REPLAY_FORMAT": "{content}"})
    names = sorted(counts_by_name(run_))
    expect(len(names) == GRAPHS, f"names {names}", run_)
    expect(any("gemm x3" in n for n in names) and any("flash_fwd x2" in n for n in names) and
           any("rmsnorm x1" in n for n in names), f"content not described: {names}", run_)


def summary_file():
    """FERRUM_REPLAY_SUMMARY=PATH: per-graph launches, failures, rejected pushes; an existing
    file is never replaced."""
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "summary.%p.txt")
        env = {"FERRUM_REPLAY_SUMMARY": target, "FERRUM_STANDIN_LAUNCH_RESULT": "719",
               "FERRUM_RECORD_REJECT": "all", "FERRUM_RECORD_REJECT_DOMAIN": "ferrum-replay"}
        run_ = launch(env=env)
        files = os.listdir(tmp)
        expect(len(files) == 1 and files[0].startswith("summary."), f"files {files}", run_)
        with open(os.path.join(tmp, files[0])) as handle:
            text = handle.read()
        expect(f"{GRAPHS} graphs, {LAUNCHES} launches, {LAUNCHES} failed, {LAUNCHES} rejected"
               in text, f"summary:\n{text}", run_)
        # Written before this run (an hour ago): another program's file is never replaced...
        old = time.time() - 3600
        planted = os.path.join(tmp, "fixed.txt")
        with open(planted, "w") as handle:
            handle.write("not ours\n")
        os.utime(planted, (old, old))
        again = launch(env={"FERRUM_REPLAY_SUMMARY": planted})
        with open(planted) as handle:
            expect(handle.read() == "not ours\n", "an existing file was overwritten", again)
        expect(os.path.exists(os.path.join(tmp, "fixed.1.txt")) and "is in" in again.stderr,
               "the summary did not go to a fresh name with a line saying so", again)
        # ...but an earlier summary of ours is, by every rerun, today's header or an older one.
        mine = os.path.join(tmp, "mine.txt")
        for earlier in (None, "ferrum-replay: 1 graphs, 3 launches\n"):
            if earlier:
                with open(mine, "w") as handle:
                    handle.write(earlier)
                os.utime(mine, (old, old))
            rerun = launch(env={"FERRUM_REPLAY_SUMMARY": mine})
            expect("summary" not in rerun.stderr, "replacing our own summary printed a line",
                   rerun)
            with open(mine) as handle:
                expect(handle.read().startswith("ferrum-replay launch summary:"),
                       "the earlier summary was not replaced", rerun)
            os.utime(mine, (old, old))
        expect(not [n for n in os.listdir(tmp) if n.startswith("mine.") and n != "mine.txt"],
               f"a rerun wrote beside its own earlier summary: {os.listdir(tmp)}")
        # A trailing '/' names a directory: a file of its own inside it.
        inside = os.path.join(tmp, "dir")
        os.mkdir(inside)
        run_ = launch(env={"FERRUM_REPLAY_SUMMARY": inside + "/"})
        files = os.listdir(inside)
        expect(len(files) == 1 and re.fullmatch(r"ferrum-replay-summary\.\d+\.txt", files[0]),
               f"files in dir/: {files}", run_)


SUMMARY_TITLE = re.compile(r"^ferrum-replay launch summary: (\d+) graphs, (\d+) launches, "
                           r"(\d+) failed, (\d+) rejected pushes \(pid \d+")
# A graph's row (its number first), or the destroyed graphs' totals row ("-", then "(N earlier
# graphs, destroyed)"): launches, failed, rejected.
SUMMARY_ROW = re.compile(r"^  +(\d+|-)  +(\d+)  +(\d+)  +(\d+)  (.*)$")


def summary_title_sums_rows():
    """The summary's title counts what its rows show. A worker main did not stop, still
    launching as the process exits, made the title's launches fewer than its rows' (its totals
    were read before the rows, each counter twice)."""
    for attempt in range(3):
        # A thread launches graph 0 over and over, each launch returning at once, while main
        # calls exit(): it launches on while the summary is written. Not recorded: the recorder's
        # report would slow the exit and the window down.
        run_ = launch("--launching-at-exit", record=False,
                      env={"FERRUM_REPLAY_SUMMARY": "stderr"})
        expect(run_.returncode == 0, "the program", run_)
        lines = run_.stderr.splitlines()
        titles = [SUMMARY_TITLE.match(line) for line in lines]
        titles = [t for t in titles if t]
        expect(len(titles) == 1, "one summary", run_)
        graphs, launches, failed, rejected = (int(v) for v in titles[0].groups())
        rows = [SUMMARY_ROW.match(line) for line in lines]
        rows = [r for r in rows if r and (r[1] != "-" or "earlier graphs, destroyed" in r[5])]
        destroyed = sum(int(re.search(r"\((\d+) earlier graphs", r[5])[1])
                        for r in rows if r[1] == "-")
        counted = [r for r in rows if r[1] != "-"]
        expect(launches > GRAPHS * ITERS, "the worker launched as the process exited", run_)
        expect(graphs == len(counted) + destroyed, f"{graphs} graphs in the title, {len(counted)} "
               f"rows and {destroyed} destroyed", run_)
        for column, total in ((2, launches), (3, failed), (4, rejected)):
            shown = sum(int(r[column]) for r in rows)
            expect(shown == total, f"title: {total}, rows: {shown} (column {column}), attempt "
                   f"{attempt + 1}", run_)


SCENARIOS = {f.__name__: f for f in (
    call_site_names, stripped_binary_sites, site_past_symbol_end, sites_after_unload,
    sites_of_moved_modules, sites_of_reloaded_modules, ctypes_call_sites,
    runtime_instantiation_registers_once,
    category_and_payload, site_at_launch, handle_reuse_gets_new_identity, user_names,
    user_names_from_two_threads, unusual_names, python_ctypes_names, python_package_names,
    python_package_unencodable_names, python_package_scope_interrupted,
    python_package_scope_decorates_steps, python_package_async_generator_left_open,
    python_package_async_generator_interrupted,
    python_package_leaves_program_objects_alone,
    scope_names, names_not_taken,
    scope_beats_names_file, names_file,
    names_file_not_a_regular_file, names_file_many_bad_lines, echoed_paths_cannot_forge_lines,
    message_template, template_collisions_stay_apart, person_names_stay_apart_unless_shown_alike,
    content_names, summary_file, summary_title_sums_rows)}

if __name__ == "__main__":
    main(SCENARIOS)
