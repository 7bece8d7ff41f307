"""Runs test programs as real processes, with and without the preloaded shim, and reads what
the recorder (the NVTX tool that stands in for Nsight Systems here) saw.

Paths come from the environment that tests/shim/scenarios/meson.build sets: FERRUM_SHIM,
FERRUM_RECORDER_LIB, STANDIN_DIR (holds the stand-in libcuda.so.1 / libcudart.so.13) and one
variable per test program (LAUNCH_DRIVER, LAUNCH_RUNTIME, ...).
"""
import os
import re
import resource
import subprocess
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support",
                                "tools"))
import trace_check  # noqa: E402

DOMAIN = "ferrum-replay"


def path_of(variable):
    value = os.environ.get(variable)
    if not value:
        raise SystemExit(f"harness: {variable} is not set (run through meson test)")
    return value


class Run:
    """One finished process: exit code, output, the program's own count line, the trace."""

    def __init__(self, argv, returncode, stdout, stderr, trace, report):
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.trace = trace
        self.report = report  # the stand-in driver's counters, a dict (may be empty)

    def program_counts(self):
        """The test program's closing line: launches=N failed=F result=R."""
        match = re.search(r"launches=(\d+) failed=(\d+) result=(-?\d+)", self.stdout)
        if not match:
            raise AssertionError(f"no 'launches=' line from {self.argv}:\n{self.stdout}\n{self.stderr}")
        return {"launches": int(match[1]), "failed": int(match[2]), "result": int(match[3])}

    def ranges(self, domain=DOMAIN, name=None):
        assert self.trace is not None, "no trace was recorded"
        return trace_check.ranges(self.trace, domain=domain, name=name)

    def describe(self):
        return (f"argv={self.argv}\nexit={self.returncode}\nstdout:\n{self.stdout}\n"
                f"stderr:\n{self.stderr}")


def preload_first(child_env):
    """Sanitizer builds (scripts/test): FERRUM_TEST_PRELOAD_FIRST names the sanitizer runtime,
    which must come first in the initial library list, as heaptrack puts it before its own
    library. Prepended to whatever LD_PRELOAD a scenario chose; nothing changes when unset."""
    first = os.environ.get("FERRUM_TEST_PRELOAD_FIRST")
    if first:  # also without the shim: the stand-ins and the recorder are instrumented too
        child_env["LD_PRELOAD"] = " ".join(filter(None, [first, child_env.get("LD_PRELOAD")]))


def allocator_not_fork_safe():
    """The sanitizer runtime preloaded first (FERRUM_TEST_PRELOAD_FIRST) when its allocator holds
    no lock across fork(), else None. GCC 12's libasan and libtsan hold none (LLVM added them
    later: llvm-project#96600 for TSan, 2024): a child forked while another thread of the parent
    allocates can wait for ever in its first malloc — the program's own as much as ours (F256).
    glibc's malloc, the default stage's, is reset by fork(). A test whose children must not hang
    while a parent thread allocates skips under such a runtime, saying so; the default stage
    judges it."""
    first = os.environ.get("FERRUM_TEST_PRELOAD_FIRST", "")
    return next((runtime for runtime in ("libasan", "libtsan") if runtime in first), None)


# Cross-architecture runs (scripts/test-aarch64): FERRUM_TEST_EMULATOR names qemu-user. The
# loader variables must reach the emulated program, not the (host) emulator: they travel in
# QEMU_SET_ENV.
EMULATOR = os.environ.get("FERRUM_TEST_EMULATOR", "")
LOADER_VARIABLES = ("LD_PRELOAD", "LD_LIBRARY_PATH", "NVTX_INJECTION64_PATH")


def under_emulator(argv, child_env):
    if not EMULATOR:
        return argv
    settings = [f"{key}={child_env.pop(key)}" for key in LOADER_VARIABLES if key in child_env]
    if settings:
        child_env["QEMU_SET_ENV"] = ",".join(settings)  # values never hold commas here
    return [EMULATOR, *argv]


def run(argv, preload=True, record=True, env=None, timeout=120, stderr=None, cwd=None,
        rlimits=None):
    """Runs argv with the stand-in libraries on LD_LIBRARY_PATH; preloads the shim and attaches
    the recorder when asked. Returns a Run. `stderr`: a descriptor for the program's stderr
    instead of capturing it (Run.stderr is then ""). `cwd`: the program's working directory.
    `rlimits`: {resource.RLIMIT_*: soft limit} for the program (hard limits kept)."""
    with tempfile.TemporaryDirectory(prefix="ferrum-test-") as tmp:
        child_env = dict(os.environ)
        for key in [k for k in child_env if k.startswith(("FERRUM_", "NVTX_"))]:
            if key not in ("FERRUM_SHIM", "FERRUM_RECORDER_LIB"):
                del child_env[key]
        child_env.pop("LD_PRELOAD", None)
        child_env["LD_LIBRARY_PATH"] = path_of("STANDIN_DIR")
        report_path = os.path.join(tmp, "driver-report.txt")
        child_env["FERRUM_STANDIN_REPORT"] = report_path
        trace_path = os.path.join(tmp, "trace.json")
        if preload:
            child_env["LD_PRELOAD"] = path_of("FERRUM_SHIM")
        if record:
            child_env["NVTX_INJECTION64_PATH"] = path_of("FERRUM_RECORDER_LIB")
            child_env["FERRUM_RECORD_OUT"] = trace_path
            child_env["FERRUM_RECORD_TABLE"] = "0"
        child_env.update(env or {})
        preload_first(child_env)
        argv_run = under_emulator(argv, child_env)
        done = subprocess.run(argv_run, env=child_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE if stderr is None else stderr, text=True,
                              timeout=timeout, errors="replace", cwd=cwd,
                              preexec_fn=(lambda: set_limits(rlimits)) if rlimits else None)
        trace = trace_check.load(trace_path) if record and os.path.exists(trace_path) else None
        report = {}
        if os.path.exists(report_path):
            with open(report_path) as handle:
                for line in handle:
                    report.update({k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)})
        return Run(argv, done.returncode, done.stdout, done.stderr or "", trace, report)


def fill_pipe(write_end):
    """Fills a pipe nobody reads without leaving its description changed (the program gets it
    blocking)."""
    os.set_blocking(write_end, False)
    try:
        while True:
            os.write(write_end, b"f" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(write_end, True)


def set_limits(rlimits):
    for limit, soft in rlimits.items():
        resource.setrlimit(limit, (soft, resource.getrlimit(limit)[1]))


def expect(condition, message, run_=None):
    if not condition:
        raise AssertionError(message + ("\n" + run_.describe() if run_ else ""))


def expect_balanced(run_):
    """Every range the recorder saw nests, and no push/pop protocol error happened."""
    expect(run_.trace is not None, "the recorder wrote no trace", run_)
    problems = trace_check.check_nesting(run_.trace)
    expect(not problems, f"ranges overlap without nesting: {problems[:3]}", run_)
    errors = trace_check.protocol_errors(run_.trace)
    bad = {k: v for k, v in errors.get("protocolErrors", {}).items() if v}
    expect(not bad, f"NVTX protocol errors: {bad}", run_)


def expect_one_range_per_launch(run_, launches):
    ours = run_.ranges()
    expect(len(ours) == launches,
           f"{len(ours)} ranges in domain {DOMAIN} for {launches} launches", run_)
    nested = [r for r in ours if r.get("args", {}).get("depth", 0) != 0]
    expect(not nested, f"{len(nested)} of our ranges are nested in another of ours "
           "(one replay became two ranges)", run_)


def main(scenarios):
    """CLI: harness-based test files call main(dict name -> function); argv[1] picks one, or
    all run. Prints ok/FAIL per scenario; exit 1 on any failure. `--list` prints the names,
    one a line: meson reads them at configure time and declares one test per scenario, so the
    dict is the one list of a file's scenarios."""
    if sys.argv[1:] == ["--list"]:
        print("\n".join(scenarios))
        sys.exit(0)
    names = sys.argv[1:] or list(scenarios)
    failed = 0
    for name in names:
        try:
            outcome = scenarios[name]()
        except AssertionError as error:
            failed += 1
            print(f"FAIL {name}: {error}")
            continue
        except Exception as error:  # a crash, a hang, a missing file: still a named failure
            failed += 1
            # Where in the test: an error of the test's own reading is a line, not a riddle.
            where = traceback.extract_tb(error.__traceback__)[-1]
            print(f"FAIL {name}: {type(error).__name__}: {error} "
                  f"({os.path.basename(where.filename)}:{where.lineno}: {where.line})")
            continue
        if outcome == "skip" or (isinstance(outcome, str) and outcome.startswith("skip:")):
            print(f"SKIP {name}" + (outcome[4:] if outcome != "skip" else ""))
            if len(names) == 1:
                sys.exit(77)
        else:
            print(f"ok   {name}")
    sys.exit(1 if failed else 0)
