#!/usr/bin/env python3
"""Output safety of the recorder's trace, end to end: a real program under the shim and the
recorder, with something hostile or odd at FERRUM_RECORD_OUT.

What is guaranteed (and checked here):
  - a symbolic link planted at the trace path is never followed: its target is untouched, the
    link stays, the trace goes to NAME.1.EXT and stderr says so in one line;
  - a file that is not a ferrum-replay trace is never replaced unless FERRUM_RECORD_FORCE=1;
    an earlier ferrum-replay trace is replaced (as before);
  - the trace is created 0644 minus the umask;
  - a bad or unwritable path is one clear line on stderr; the program's exit code and output
    are unchanged, nothing crashes;
  - exit never waits on a lock we did not create: an flock on the output directory, held by
    the program itself or by another process, changes nothing; our own output lock, held
    elsewhere, costs at most ~2 s and then nothing is replaced (one line);
  - a temporary left by a killed process of ours is removed by the next run to that name;
  - a device, FIFO or descriptor path is written as a stream (never NAME.1 beside /dev/null);
    a FIFO without a reader and /dev/full are one line each; the summary file likewise;
  - a process that recorded nothing writes no trace and prints no table.
Uses tests/shim/scenarios/harness.py; run through meson (suite reliability).
"""
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shim",
                                "scenarios"))
import harness  # noqa: E402
from harness import expect  # noqa: E402

ARGS = ["--graphs", "2", "--iters", "5"]


def launch(out, **env):
    """Runs the driver test program with the recorder writing to `out`, table on."""
    run_env = {"FERRUM_RECORD_OUT": out, "FERRUM_RECORD_TABLE": "1"}
    run_env.update(env)
    return harness.run([harness.path_of("LAUNCH_DRIVER"), *ARGS], env=run_env)


def expect_program_unharmed(run_):
    expect(run_.returncode == 0, "the program's exit code changed", run_)
    expect(run_.program_counts()["launches"] == 10, "the program's output changed", run_)


def recorder_lines(run_):
    return [l for l in run_.stderr.splitlines() if l.startswith("ferrum-replay recorder:")]


def load_trace(path):
    with open(path) as handle:
        trace = json.load(handle)
    return trace


def expect_our_trace(path, run_):
    expect(os.path.isfile(path) and not os.path.islink(path), f"no trace file at {path}", run_)
    trace = load_trace(path)
    ours = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == harness.DOMAIN]
    expect(len(ours) == 10, f"{len(ours)} ranges in {path}, expected 10", run_)


def symlink_planted():
    with tempfile.TemporaryDirectory() as tmp:
        victim = os.path.join(tmp, "victim.txt")
        with open(victim, "w") as handle:
            handle.write("precious\n")
        out = os.path.join(tmp, "trace.json")
        os.symlink(victim, out)
        # A link planted just now looks like a sibling process's output and the trace goes to
        # trace.<pid>.json beside it (exit_report.cpp); planted earlier, it is simply not ours.
        old = time.time() - 3600
        os.utime(out, (old, old), follow_symlinks=False)
        run_ = launch(out)
        expect_program_unharmed(run_)
        with open(victim) as handle:
            expect(handle.read() == "precious\n", "the symlink's target was written", run_)
        expect(os.path.islink(out), "the planted symlink was removed", run_)
        diverted = os.path.join(tmp, "trace.1.json")
        expect_our_trace(diverted, run_)
        notices = [l for l in recorder_lines(run_) if "is not a ferrum-replay trace" in l]
        expect(len(notices) == 1 and f"'{diverted}'" in notices[0]
               and "symbolic link" in notices[0] and "FORCE" not in notices[0],
               "no single line saying where the trace went instead", run_)
        expect(any(l.endswith("trace: " + diverted) for l in recorder_lines(run_)),
               "the table line does not name the file written", run_)

        # Forced: a symbolic link is still neither replaced nor followed (FORCE replaces only a
        # regular file of the user's).
        forced = launch(out, FERRUM_RECORD_FORCE="1")
        expect_program_unharmed(forced)
        expect(os.path.islink(out), "FERRUM_RECORD_FORCE=1 replaced the link", forced)
        expect_our_trace(os.path.join(tmp, "trace.2.json"), forced)
        with open(victim) as handle:
            expect(handle.read() == "precious\n", "forcing wrote through the symlink", forced)


def foreign_file_kept():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        with open(out, "w") as handle:
            handle.write('{"accuracy": 0.93}\n')
        old = time.time() - 3600  # written long before this run: not a sibling's trace
        os.utime(out, (old, old))
        run_ = launch(out)
        expect_program_unharmed(run_)
        with open(out) as handle:
            expect(handle.read() == '{"accuracy": 0.93}\n', "a foreign file was replaced", run_)
        expect(os.stat(out).st_mtime == old, "a foreign file's time stamp was touched", run_)
        expect_our_trace(os.path.join(tmp, "results.1.json"), run_)
        notices = [l for l in recorder_lines(run_) if "is not a ferrum-replay trace" in l]
        expect(len(notices) == 1 and "FERRUM_RECORD_FORCE=1 replaces a regular file" in notices[0],
               "the notice does not say how to replace the file", run_)
        forced = launch(out, FERRUM_RECORD_FORCE="1")
        expect_program_unharmed(forced)
        expect_our_trace(out, forced)


def earlier_trace_replaced():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace.json")
        first = launch(out)
        expect_our_trace(out, first)
        old = time.time() - 3600
        os.utime(out, (old, old))
        second = launch(out)
        expect_program_unharmed(second)
        expect_our_trace(out, second)
        expect(not os.path.exists(os.path.join(tmp, "trace.1.json")),
               "an earlier ferrum-replay trace was not replaced", second)
        expect(not [l for l in recorder_lines(second) if "is not a ferrum-replay trace" in l],
               "replacing our own trace printed a notice", second)


def mode_respects_umask():
    with tempfile.TemporaryDirectory() as tmp:
        for mask in (0o022, 0o027, 0o077):
            out = os.path.join(tmp, f"trace-{mask:o}.json")
            old = os.umask(mask)
            try:
                run_ = launch(out)
            finally:
                os.umask(old)
            expect_our_trace(out, run_)
            mode = stat.S_IMODE(os.stat(out).st_mode)
            expect(mode == 0o644 & ~mask, f"mode {mode:o} with umask {mask:o}", run_)


def bad_paths_one_line():
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "adir"))
        cases = {
            "/proc/version/trace.json": "Not a directory",
            os.path.join(tmp, "missing", "trace.json"): "No such file or directory",
            os.path.join(tmp, "adir"): "Is a directory",
            os.path.join(tmp, "n" * 300 + ".json"): "File name too long",
            "/proc/self/trace.json": None,  # procfs refuses new files; whatever errno it picks
        }
        for out, reason in cases.items():
            run_ = launch(out)
            expect_program_unharmed(run_)
            lines = [l for l in recorder_lines(run_) if "cannot write trace" in l]
            expect(len(lines) == 1, f"{out}: expected one 'cannot write trace' line", run_)
            if reason:
                expect(lines[0].endswith(": " + reason), f"{out}: the line does not say why", run_)
            expect(any(l.endswith("trace not written") for l in recorder_lines(run_)),
                   f"{out}: the table does not say the trace was not written", run_)
        leftovers = [n for n in os.listdir(tmp) if n.endswith(".tmp")]
        expect(not leftovers, f"temporary files left behind: {leftovers}")

        # A control character in the path (via %q{VAR}) cannot split the line.
        run_ = launch(os.path.join(tmp, "missing", "%q{ODD}.json"), ODD="a\nb")
        lines = [l for l in recorder_lines(run_) if "cannot write trace" in l]
        expect(len(lines) == 1 and "a?b" in lines[0], "a newline in the path split the line", run_)


def summary_file_never_followed():
    """The shim's own exit summary (FERRUM_REPLAY_SUMMARY=path) takes a fresh name beside a
    planted symlink or an existing file and says where, in one line."""
    with tempfile.TemporaryDirectory() as tmp:
        victim = os.path.join(tmp, "victim.txt")
        with open(victim, "w") as handle:
            handle.write("precious\n")
        summary = os.path.join(tmp, "summary.txt")
        os.symlink(victim, summary)
        # Planted before this run (planted during it, it is a sibling's: summary.<pid>.txt).
        old = time.time() - 3600
        os.utime(summary, (old, old), follow_symlinks=False)
        run_ = harness.run([harness.path_of("LAUNCH_DRIVER"), *ARGS], record=False,
                           env={"FERRUM_REPLAY_SUMMARY": summary})
        expect_program_unharmed(run_)
        with open(victim) as handle:
            expect(handle.read() == "precious\n", "the summary was written through a symlink", run_)
        expect(os.path.islink(summary), "the planted symlink was replaced", run_)
        written = [n for n in os.listdir(tmp) if n.startswith("summary.") and n != "summary.txt"]
        expect(written == ["summary.1.txt"], f"not the fresh name summary.1.txt: {written}", run_)
        expect(len(written) == 1, f"expected one fresh summary file beside the link: {written}",
               run_)
        expect(len([l for l in run_.stderr.splitlines() if written[0] in l]) == 1,
               "no single line saying where the summary went", run_)
        mode = stat.S_IMODE(os.stat(os.path.join(tmp, written[0])).st_mode)
        expect(mode & 0o022 == 0 and mode & 0o600 == 0o600, f"summary mode {mode:o}", run_)


def merge_output_never_followed():
    """`ferrum-replay merge -o OUT`: the temporary file it writes first must not follow a
    symlink planted at its (predictable) name OUT.<pid>.tmp. Expected to fail until
    FINDINGS.md F5 is fixed (it is opened with plain open(tmp, "w"))."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "scripts"))
    import contextlib
    import io
    import ferrum_replay_traces as traces
    with tempfile.TemporaryDirectory() as tmp:
        first = os.path.join(tmp, "a.json")
        launch(first)
        victim = os.path.join(tmp, "victim.txt")
        with open(victim, "w") as handle:
            handle.write("precious\n")
        out = os.path.join(tmp, "merged.json")
        os.symlink(victim, f"{out}.{os.getpid()}.tmp")
        with contextlib.redirect_stderr(io.StringIO()):
            traces.main(["merge", "-o", out, first])
        with open(victim) as handle:
            expect(handle.read() == "precious\n",
                   "merge wrote its output through a symlink planted at its temporary name")


def merge_output_streams():
    """`ferrum-replay merge -o OUT`: a FIFO, a character device (a pseudo-terminal), a socket
    and the descriptor paths (/dev/fd/N, /proc/self/fd/N, /dev/stdout) are written in place as
    streams, never replaced by a regular file; a FIFO without a reader and a socket are one
    line each, at once; a symbolic link at OUT is never followed."""
    import pty
    import socket
    import subprocess
    helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                          "ferrum_replay_traces.py")

    def merge(out, trace, timeout=30, **kwargs):
        started = time.monotonic()
        done = subprocess.run([sys.executable, helper, "merge", trace, "-o", out],
                              capture_output=True, text=True, timeout=timeout, **kwargs)
        return done, time.monotonic() - started

    def describe(done):
        return f"\nexit {done.returncode}\nstdout: {done.stdout[-500:]}\nstderr: {done.stderr}"

    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "a.json")
        launch(trace)
        # A FIFO without a reader: one line, at once; the FIFO stays.
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        done, took = merge(fifo, trace)
        lines = done.stderr.splitlines()
        expect(done.returncode == 2 and len(lines) == 1 and "cannot write" in lines[0] and
               took < 20, f"a FIFO without a reader: one line ({took:.1f} s)" + describe(done))
        expect(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced" + describe(done))
        # With a reader: the merged trace comes through it.
        reader = subprocess.Popen(["cat", fifo], stdout=subprocess.PIPE)
        done, _ = merge(fifo, trace)
        got = reader.communicate(timeout=30)[0]
        expect(done.returncode == 0 and json.loads(got)["ferrumReplay"]["ranges"] == 10 and
               stat.S_ISFIFO(os.lstat(fifo).st_mode), "merge through a FIFO" + describe(done))
        # A character device: a pseudo-terminal's slave, read back from its master.
        master, slave = pty.openpty()
        try:
            import termios
            attrs = termios.tcgetattr(slave)
            attrs[1] &= ~termios.OPOST  # no "\n" -> "\r\n"
            attrs[3] &= ~termios.ECHO
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
            tty = os.ttyname(slave)
            done, _ = merge(tty, trace)
            os.set_blocking(master, False)
            data = b""
            while True:
                try:
                    chunk = os.read(master, 1 << 16)
                except (BlockingIOError, OSError):
                    break
                if not chunk:
                    break
                data += chunk
            expect(done.returncode == 0 and b'"ferrumReplay"' in data and
                   stat.S_ISCHR(os.stat(tty).st_mode), f"merge to the device {tty}" +
                   describe(done))
        finally:
            os.close(master)
            os.close(slave)
        # A socket: one line, and the socket stays.
        sock_path = os.path.join(tmp, "sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(sock_path)
            done, took = merge(sock_path, trace)
            expect(done.returncode == 2 and len(done.stderr.splitlines()) == 1 and took < 20 and
                   stat.S_ISSOCK(os.lstat(sock_path).st_mode), "a socket" + describe(done))
        finally:
            listener.close()
        # Descriptor paths: this process's descriptor, whatever it is (here a pipe).
        for form in ("/dev/fd/{}", "/proc/self/fd/{}"):
            read_end, write_end = os.pipe()
            try:
                done, _ = merge(form.format(write_end), trace, pass_fds=[write_end])
                os.close(write_end)
                write_end = None
                data = b""
                while True:
                    chunk = os.read(read_end, 1 << 16)
                    if not chunk:
                        break
                    data += chunk
                expect(done.returncode == 0 and json.loads(data)["ferrumReplay"]["ranges"] == 10,
                       f"merge -o {form}" + describe(done))
            finally:
                os.close(read_end)
                if write_end is not None:
                    os.close(write_end)
        done, _ = merge("/dev/stdout", trace)
        expect(done.returncode == 0 and json.loads(done.stdout)["ferrumReplay"]["ranges"] == 10,
               "merge -o /dev/stdout" + describe(done))
        done, _ = merge("/dev/fd/9", trace)  # not open in the helper: one line
        expect(done.returncode == 2 and len(done.stderr.splitlines()) == 1,
               "a descriptor that is not open" + describe(done))
        # A symbolic link at OUT: replaced by the merged file, its target untouched.
        victim = os.path.join(tmp, "victim.txt")
        with open(victim, "w") as handle:
            handle.write("precious\n")
        link = os.path.join(tmp, "link.json")
        os.symlink(victim, link)
        done, _ = merge(link, trace)
        with open(victim) as handle:
            expect(handle.read() == "precious\n", "merge followed a link at -o" + describe(done))


def timed_launch(argv, out, timeout=30, **env):
    """Runs argv with the recorder writing to `out`, table on; returns (run, seconds)."""
    run_env = {"FERRUM_RECORD_OUT": out, "FERRUM_RECORD_TABLE": "1"}
    run_env.update(env)
    started = time.monotonic()
    run_ = harness.run(argv, env=run_env, timeout=timeout)
    return run_, time.monotonic() - started


def locked_directory_never_blocks():
    """The output directory flock'ed (LOCK_EX) by the program itself, then by another process:
    the exit completes at once and the trace is written (it used to hang forever)."""
    import fcntl
    program = [harness.path_of("LAUNCH_DRIVER"), *ARGS]
    with tempfile.TemporaryDirectory() as tmp:
        # The program's own singleton lock: taken before exec, so the program holds it.
        locker = ("import fcntl, os, sys\n"
                  "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
                  "fcntl.flock(fd, fcntl.LOCK_EX)\n"
                  "os.set_inheritable(fd, True)\n"
                  "os.execv(sys.argv[2], sys.argv[2:])\n")
        out = os.path.join(tmp, "own.json")
        run_, took = timed_launch([sys.executable, "-c", locker, tmp, *program], out)
        expect_program_unharmed(run_)
        expect(took < 10, f"exit took {took:.1f} s with the program holding a lock on its dir", run_)
        expect_our_trace(out, run_)
        # Another process's lock.
        fd = os.open(tmp, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            out = os.path.join(tmp, "other.json")
            run_, took = timed_launch(program, out)
            expect_program_unharmed(run_)
            expect(took < 10, f"exit took {took:.1f} s with another process locking the dir", run_)
            expect_our_trace(out, run_)
        finally:
            os.close(fd)


def output_lock_held_elsewhere():
    """Our own lock (an abstract socket per directory), held by a stuck ferrum-replay process:
    at most ~2 s, then the trace goes beside anything at the name, with one line."""
    import socket
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.json")
        first = launch(out)
        expect_our_trace(out, first)
        old = time.time() - 3600
        os.utime(out, (old, old))
        st = os.stat(tmp)
        holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        holder.bind(f"\0ferrum-replay-output-{st.st_dev:x}-{st.st_ino:x}")
        try:
            run_, took = timed_launch([harness.path_of("LAUNCH_DRIVER"), *ARGS], out)
        finally:
            holder.close()
        expect_program_unharmed(run_)
        expect(1.5 < took < 10, f"took {took:.1f} s; expected the bounded ~2 s wait", run_)
        expect(os.stat(out).st_mtime == old, "the earlier trace was replaced without the lock", run_)
        beside = [n for n in os.listdir(tmp) if n not in ("t.json",)]
        expect(len(beside) == 1 and re.fullmatch(r"t\.\d+\.json", beside[0]),
               f"expected t.<pid>.json beside: {beside}", run_)
        expect_our_trace(os.path.join(tmp, beside[0]), run_)
        lines = [l for l in recorder_lines(run_) if "output lock" in l]
        expect(len(lines) == 1 and beside[0] in lines[0], "no single line about the lock", run_)


def program_output_goes_first():
    """Our exit lines on the stderr a program shares with its stdout (`prog 2>&1 | ...`): the
    recorder's table, a launch summary on stderr. Our exit hooks ran before the C library
    flushed the program's buffered stdout, so ours came first; `prog 2>&1 | head -1` took a
    line of ours, left, and the program's own last write met a pipe without a reader: SIGPIPE,
    status 141, in a third of runs, never without us (review DD-5). Now the program's buffered
    output (its last line, left for the exit to write) goes first."""
    program = [harness.path_of("LAUNCH_DRIVER"), *ARGS, "--tail-unflushed"]
    with tempfile.TemporaryDirectory() as tmp:
        for what, env, record, ours in (
                ("the recorder's table", {"FERRUM_RECORD_OUT": os.path.join(tmp, "t.json"),
                                          "FERRUM_RECORD_TABLE": "1"}, True,
                 "ferrum-replay recorder:"),
                ("a launch summary on stderr", {"FERRUM_REPLAY_SUMMARY": "stderr"}, False,
                 "ferrum-replay launch summary:")):
            run_ = harness.run(program, env=env, record=record, stderr=subprocess.STDOUT)
            lines = run_.stdout.splitlines()
            mine = [i for i, l in enumerate(lines) if l.startswith("tail=unflushed")]
            theirs = [i for i, l in enumerate(lines) if l.startswith(ours)]
            expect(run_.returncode == 0 and mine and theirs and mine[-1] < theirs[0],
                   f"{what}: the program's own output is not first:\n{run_.stdout[:600]}", run_)


def reader_gone_at_exit():
    """`prog | head -1`: the reader has taken its line and left before the program exits, with
    output of the program's still in its stdout buffer, which the C library's last flush meets
    with SIGPIPE (status 141) after every exit handler and destructor. F197's first version
    flushed it earlier, from our exit hooks: the SIGPIPE struck there, before the recorder's
    trace (lost every time, table off and trace to a file) and before a launch summary on
    stderr — and before the destructors of the program's libraries (review HH-4). Our files and
    lines are written, and the program ends as it would without us."""
    import signal
    program = [harness.path_of("LAUNCH_DRIVER"), *ARGS, "--tail-unflushed", "--exit-after-ms",
               "300"]
    with tempfile.TemporaryDirectory() as tmp:
        trace, errors = os.path.join(tmp, "t.json"), os.path.join(tmp, "stderr.txt")
        for what, extra, merged in (
                ("the trace, table off", {"NVTX_INJECTION64_PATH": harness.path_of(
                    "FERRUM_RECORDER_LIB"), "FERRUM_RECORD_OUT": trace,
                    "FERRUM_RECORD_TABLE": "0"}, False),
                ("the trace and the table, 2>&1", {"NVTX_INJECTION64_PATH": harness.path_of(
                    "FERRUM_RECORDER_LIB"), "FERRUM_RECORD_OUT": trace,
                    "FERRUM_RECORD_TABLE": "1"}, True),
                ("a launch summary on stderr", {"FERRUM_REPLAY_SUMMARY": "stderr"}, False)):
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("FERRUM_", "NVTX_", "LD_"))}
            env.update({"LD_LIBRARY_PATH": harness.path_of("STANDIN_DIR"),
                        "LD_PRELOAD": harness.path_of("FERRUM_SHIM"), **extra})
            harness.preload_first(env)
            for stale in (trace, errors):
                if os.path.exists(stale):
                    os.unlink(stale)
            with open(errors, "w") as stderr:
                child = subprocess.Popen(program, env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT if merged else stderr)
                child.stdout.readline()  # one line, as head -1, then gone
                child.stdout.close()
                status = child.wait(timeout=60)
            with open(errors) as handle:
                said = handle.read()
            expect(status == -signal.SIGPIPE, f"{what}: status {status}, not SIGPIPE's (the "
                   f"C library's last flush into a pipe without a reader):\n{said[-800:]}")
            if "FERRUM_RECORD_OUT" in extra:
                expect(os.path.exists(trace), f"{what}: the trace was not written:\n{said[-800:]}")
            if "FERRUM_REPLAY_SUMMARY" in extra:
                expect("ferrum-replay launch summary:" in said,
                       f"{what}: the summary was not written:\n{said[-800:]}")
        # A socket whose reader shut it for reading: writable to poll, every write EPIPE. The
        # flush of the program's buffer before our table raised its SIGPIPE there, inside our
        # hook, before the summary file (review II-1); now held, and the buffer kept for the C
        # library's own last flush.
        import socket
        summary = os.path.join(tmp, "s.txt")
        for stale in (trace, summary):
            if os.path.exists(stale):
                os.unlink(stale)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FERRUM_", "NVTX_", "LD_"))}
        env.update({"LD_LIBRARY_PATH": harness.path_of("STANDIN_DIR"),
                    "LD_PRELOAD": harness.path_of("FERRUM_SHIM"),
                    "NVTX_INJECTION64_PATH": harness.path_of("FERRUM_RECORDER_LIB"),
                    "FERRUM_RECORD_OUT": trace, "FERRUM_RECORD_TABLE": "1",
                    "FERRUM_REPLAY_SUMMARY": summary})
        harness.preload_first(env)
        ours, theirs = socket.socketpair()
        child = subprocess.Popen(program, env=env, stdout=theirs, stderr=subprocess.STDOUT)
        theirs.close()
        ours.settimeout(60)
        first = ours.recv(1)
        ours.shutdown(socket.SHUT_RD)
        status = child.wait(timeout=60)
        ours.close()
        expect(first and status == -signal.SIGPIPE,
               f"a socket shut for reading: status {status}, not SIGPIPE's at the C library's "
               "last flush")
        expect(os.path.exists(trace) and os.path.exists(summary),
               f"a socket shut for reading: trace {os.path.exists(trace)}, summary "
               f"{os.path.exists(summary)}: the program died inside our exit hook")
        # `prog > file 2>&1` past the program's file size limit: its last flush fails with
        # EFBIG and SIGXFSZ ends it, at the end, as without us — the bytes our early flush
        # could not write go back (they were dropped: the program exited 0).
        import resource
        if "tsan" in os.environ.get("FERRUM_TEST_PRELOAD_FIRST", ""):
            return None  # TSan's runtime writes a file of its own at start-up (fault file_size_limit)
        out_file = os.path.join(tmp, "out.txt")
        statuses = []
        for preload in ("", harness.path_of("FERRUM_SHIM")):
            env["LD_PRELOAD"] = preload
            env.pop("FERRUM_REPLAY_SUMMARY", None)
            env["FERRUM_RECORD_OUT"] = os.path.join(tmp, "big.json")
            harness.preload_first(env)
            if not statuses:  # how much the program writes without a limit
                with open(out_file, "w") as handle:
                    subprocess.run(program, env=env, stdout=handle, stderr=subprocess.DEVNULL,
                                   timeout=60)
                limit = os.path.getsize(out_file) - 4  # its last line does not fit
            with open(out_file, "w") as handle:
                done = subprocess.run(
                    program, env=env, stdout=handle, stderr=subprocess.STDOUT, timeout=60,
                    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
            statuses.append(done.returncode)
        expect(statuses == [-signal.SIGXFSZ] * 2,
               f"past the file size limit, bare and with the shim: statuses {statuses}, "
               "expected SIGXFSZ's at the C library's last flush")


INTERVAL_TIMER = None  # --interval-timer: tests/reliability/interval_timer.c, built


def output_lock_held_under_fast_timer():
    """The program's own 20 us SIGALRM timer (no SA_RESTART) running through exit, and our
    output lock held for 0.3 s by another ferrum-replay process, as processes of one run ending
    into one directory hold it: the exit waited for the lock 10 ms at a time with a sleep
    restarted on what remained after each signal, which never ran out under such a timer -- the
    program never ended (review DD-4). Now it ends, and the trace is at its name."""
    import socket
    import threading
    expect(INTERVAL_TIMER and os.path.isfile(INTERVAL_TIMER),
           f"the interval timer library {INTERVAL_TIMER!r} is not built")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.json")
        st = os.stat(tmp)
        holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        holder.bind(f"\0ferrum-replay-output-{st.st_dev:x}-{st.st_ino:x}")
        release = threading.Timer(0.3, holder.close)
        release.start()
        try:
            run_, took = timed_launch(
                [harness.path_of("LAUNCH_DRIVER"), *ARGS], out,
                LD_PRELOAD=f"{harness.path_of('FERRUM_SHIM')} {INTERVAL_TIMER}",
                FERRUM_TEST_TIMER_US="20")
        finally:
            release.cancel()
            holder.close()
        expect("cannot be preloaded" not in run_.stderr, "the timer was not preloaded", run_)
        expect_program_unharmed(run_)
        expect(took < 10, f"exit took {took:.1f} s under a 20 us timer (the lock was free after "
               "0.3 s)", run_)
        expect_our_trace(out, run_)


def host_tag():
    """The 8 hex digits our temporaries carry: 32-bit FNV-1a of the host name."""
    value = 2166136261
    for byte in socket_hostname().encode():
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return f"{value:08x}"


def socket_hostname():
    import socket
    return socket.gethostname()


def dead_pid():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def dead_leftovers_removed():
    """What a SIGKILL mid-write leaves (a temporary with our header, no file at the name) is
    removed by the next run to that name, which takes the name; foreign files stay."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.json")
        dead = dead_pid()
        leftover = f"{out}.{host_tag()}.{dead}.0.tmp"
        with open(leftover, "w") as handle:
            handle.write('{"traceEvents":[\n{"ph":"M","name":"process_name"' + " " * 100000)
        foreign = f"{out}.{host_tag()}.{dead}.1.tmp"
        with open(foreign, "w") as handle:
            handle.write("not ours\n")
        run_ = launch(out)
        expect_program_unharmed(run_)
        expect_our_trace(out, run_)
        expect(not os.path.exists(leftover), "the dead process's temporary was not removed", run_)
        expect(os.path.exists(foreign), "a file that is not our trace was removed", run_)
        expect(sorted(os.listdir(tmp)) == sorted(["t.json", os.path.basename(foreign)]),
               f"unexpected files: {os.listdir(tmp)}", run_)
        expect(not [l for l in recorder_lines(run_) if "is not a ferrum-replay trace" in l],
               "the next run was diverted", run_)
    # A %p pattern: a process killed while it wrote left t.PID.json.TAG.PID.N.tmp, a name no
    # later process takes; a later run of the pattern removes those of dead processes (hostile
    # review of 2026-12-05: 100 MB each, for good), and nothing else.
    header = '{"traceEvents":[\n{"ph":"M","name":"process_name"' + " " * 1000
    with tempfile.TemporaryDirectory() as tmp:
        def leftover(name, text=header):
            path = os.path.join(tmp, name)
            with open(path, "w") as handle:
                handle.write(text)
            return path
        dead, other_dead = dead_pid(), dead_pid()
        gone = leftover(f"t.{dead}.json.{host_tag()}.{dead}.0.tmp")
        kept = [
            leftover(f"t.{other_dead}.json.{host_tag()}.{other_dead}.0.tmp", "not ours\n"),
            leftover(f"t.{os.getpid()}.json.{host_tag()}.{os.getpid()}.0.tmp"),  # alive
            leftover(f"t.{dead}.json.{host_tag()}.{other_dead}.0.tmp"),  # not its own name
            leftover(f"u.{dead}.json.{host_tag()}.{dead}.0.tmp"),  # not the pattern's
            leftover(f"t.{dead}.json.00000000.{dead}.0.tmp"),  # another host's
        ]
        run_ = launch(os.path.join(tmp, "t.%p.json"))
        expect_program_unharmed(run_)
        expect(not os.path.exists(gone), "a dead process's temporary of the pattern stayed", run_)
        stayed = [p for p in kept if os.path.exists(p)]
        expect(stayed == kept, f"removed what was not certainly a leftover: "
               f"{sorted(set(kept) - set(stayed))}", run_)


def stream_outputs():
    """Devices, FIFOs and descriptor paths are streams: written, never created beside."""
    program = [harness.path_of("LAUNCH_DRIVER"), *ARGS]
    for device in ("/dev/null", "/dev/stderr"):
        run_ = launch(device)
        expect_program_unharmed(run_)
        expect(not os.path.exists(device + ".1"), f"{device}.1 was created", run_)
        expect(not [l for l in recorder_lines(run_) if "cannot write" in l or "exists" in l],
               f"{device}: a complaint", run_)
        if device == "/dev/stderr":
            expect('"ferrumReplay"' in run_.stderr, "the trace did not reach stderr", run_)
    run_ = launch("/dev/full")
    expect_program_unharmed(run_)
    lines = [l for l in recorder_lines(run_) if "cannot write trace" in l]
    expect(len(lines) == 1 and lines[0].endswith("'/dev/full': No space left on device"),
           "/dev/full: not one line saying ENOSPC", run_)
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        run_, took = timed_launch(program, fifo)
        expect_program_unharmed(run_)
        expect(took < 10, f"a FIFO without a reader held the exit {took:.1f} s", run_)
        lines = [l for l in recorder_lines(run_) if "cannot write trace" in l]
        expect(len(lines) == 1 and "no process is reading it" in lines[0],
               "a FIFO without a reader: not one line", run_)
        expect(sorted(os.listdir(tmp)) == ["fifo"], f"files created: {os.listdir(tmp)}", run_)
        # Forced, a FIFO is still not replaced.
        run_ = launch(fifo, FERRUM_RECORD_FORCE="1")
        expect(stat.S_ISFIFO(os.lstat(fifo).st_mode), "FORCE replaced a FIFO", run_)
    # The shim's summary follows the same rules.
    for device in ("/dev/null", "/dev/stderr"):
        run_ = harness.run(program, record=False, env={"FERRUM_REPLAY_SUMMARY": device})
        expect_program_unharmed(run_)
        expect(not os.path.exists(device + ".1"), f"summary: {device}.1 was created", run_)
        if device == "/dev/stderr":
            expect("ferrum-replay launch summary: 2 graphs, 10 launches" in run_.stderr,
                   "the summary did not reach stderr", run_)
    run_ = harness.run(program, record=False, env={"FERRUM_REPLAY_SUMMARY": "/dev/full"})
    expect_program_unharmed(run_)
    expect(len([l for l in run_.stderr.splitlines() if "No space left on device" in l]) == 1,
           "summary to /dev/full: not one line", run_)


def run_with_stdout(argv, stdout, env, timeout=30, stderr=None):
    """Runs argv as harness.run does (shim, recorder, stand-ins), its stdout given (and its
    stderr, else read); returns (returncode or None when it had to be killed, stderr as read,
    seconds)."""
    import subprocess
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("FERRUM_", "NVTX_")) or k in ("FERRUM_SHIM",
                                                                     "FERRUM_RECORDER_LIB")}
    child_env.pop("LD_PRELOAD", None)
    child_env["LD_LIBRARY_PATH"] = harness.path_of("STANDIN_DIR")
    child_env["LD_PRELOAD"] = harness.path_of("FERRUM_SHIM")
    child_env.update(env)
    harness.preload_first(child_env)
    started = time.monotonic()
    child = subprocess.Popen(harness.under_emulator(argv, child_env), env=child_env,
                             stdout=stdout,
                             stderr=subprocess.PIPE if stderr is None else stderr)
    try:
        _, err = child.communicate(timeout=timeout)
        err = err or b""
        code = child.returncode
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
        err = err or b""
        code = None
    return code, err.decode(errors="replace"), time.monotonic() - started


def streams_never_block():
    """No write to a stream blocks beyond the 2 s bound, whatever the stream: a terminal nobody
    reads (a blocking write to a tty waits in the kernel even after poll said writable), a
    socket nobody reads, a pipe; the host's own descriptor keeps its flags."""
    import pty
    import socket
    program = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "4", "--iters", "3000"]
    # Many graphs: a summary larger than a terminal's buffer.
    many = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "3000", "--iters", "1"]
    master, slave = pty.openpty()
    try:
        for argv, env, what in (
                (program, {"NVTX_INJECTION64_PATH": harness.path_of("FERRUM_RECORDER_LIB"),
                           "FERRUM_RECORD_OUT": "/dev/stdout", "FERRUM_RECORD_TABLE": "0"},
                 "trace"),
                (many, {"FERRUM_REPLAY_SUMMARY": "/dev/stdout"}, "summary")):
            code, err, took = run_with_stdout(argv, slave, env)
            expect(code == 0, f"{what} to a terminal nobody reads: exit {code} after {took:.1f} s"
                   f" (hung in write?)\n{err}")
            expect(took < 12, f"{what} to a terminal nobody reads took {took:.1f} s")
            expect(len([l for l in err.splitlines() if "made no room for 2 s" in l]) == 1,
                   f"{what}: not one line saying the terminal made no room:\n{err}")
            expect(os.get_blocking(slave), "the terminal was made non-blocking")
            # Drain what reached the terminal, for the next run.
            os.set_blocking(master, False)
            try:
                while os.read(master, 65536):
                    pass
            except (BlockingIOError, OSError):
                pass
            os.set_blocking(master, True)
    finally:
        os.close(master)
        os.close(slave)
    # A socket nobody reads, as stdout.
    left, right = socket.socketpair()
    try:
        code, err, took = run_with_stdout(
            program, left.fileno(),
            {"NVTX_INJECTION64_PATH": harness.path_of("FERRUM_RECORDER_LIB"),
             "FERRUM_RECORD_OUT": "/dev/stdout", "FERRUM_RECORD_TABLE": "0"})
        expect(code == 0 and took < 12, f"trace to a socket nobody reads: exit {code} after "
               f"{took:.1f} s\n{err}")
        expect(len([l for l in err.splitlines() if "made no room for 2 s" in l]) == 1,
               f"socket: not one line saying the reader made no room:\n{err}")
        expect(left.getblocking(), "the socket was made non-blocking")
    finally:
        left.close()
        right.close()


def slow_reader_bounded():
    """A reader that takes a page now and then (4 KiB every 0.5 s: a stuck consumer, a FIFO
    read by a process that only polls) held the exit for as long as it liked: the 2 s bound was
    on time without progress, and each page restarted it (a 1 MB trace: minutes; F101). Now
    the file's whole wait is bounded too, 2 s plus 1 ms per 64 bytes it took: the
    program ends within seconds with its own status, one line saying the trace is
    incomplete."""
    import threading
    program = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "4", "--iters", "3000"]
    read_end, write_end = os.pipe()
    done = threading.Event()

    def trickle():
        while not done.wait(0.5):
            try:
                if not os.read(read_end, 4096):
                    return
            except OSError:
                return

    reader = threading.Thread(target=trickle)
    reader.start()
    try:
        code, err, took = run_with_stdout(
            program, write_end,
            {"NVTX_INJECTION64_PATH": harness.path_of("FERRUM_RECORDER_LIB"),
             "FERRUM_RECORD_OUT": "/dev/stdout", "FERRUM_RECORD_TABLE": "0"}, timeout=60)
    finally:
        done.set()
        reader.join()
        os.close(read_end)
        os.close(write_end)
    expect(code == 0, f"trace to a reader of a page each 0.5 s: exit {code} after {took:.1f} s"
           f"\n{err}")
    expect(took < 12, f"trace to a reader of a page each 0.5 s took {took:.1f} s")
    said = [line for line in err.splitlines() if "too slowly" in line]
    expect(len(said) == 1 and "the trace is incomplete" in said[0],
           f"not one line saying the reader was too slow:\n{err}")


def stalled_stderr_waited_for_once():
    """Stderr a full pipe nobody reads: each line of ours (a warning for each bad setting, a log
    line at each instantiation with FERRUM_REPLAY_LOG=debug) waited its own 2 s for room — this
    test's program took 40 s (F101). Now the file's whole wait is bounded: 2 s once. The
    program's own status and output stay its own."""
    program = [harness.path_of("LAUNCH_DRIVER"), "--graphs", "4", "--iters", "10"]
    read_end, write_end = os.pipe()
    harness.fill_pipe(write_end)
    out_read, out_write = os.pipe()
    try:
        code, _, took = run_with_stdout(
            program, out_write,
            {"FERRUM_REPLAY_GPU_TIME": "bogus", "FERRUM_REPLAY_SITE": "bogus",
             "FERRUM_REPLAY_CONTENT": "bogus", "FERRUM_REPLAY_GPU_TIME_EVERY": "0",
             "FERRUM_REPLAY_DOMAIN": "MPI", "FERRUM_REPLAY_LOG": "debug",
             "FERRUM_REPLAY_SUMMARY": "stderr"}, stderr=write_end, timeout=90)
        os.close(out_write)
        out_write = -1
        with os.fdopen(out_read, "rb") as handle:
            out_read = -1
            output = handle.read()
    finally:
        for fd in (read_end, write_end, out_read, out_write):
            if fd >= 0:
                os.close(fd)
    expect(code == 0 and b"launches" in output,
           f"stderr full: exit {code} after {took:.1f} s, stdout {output[:200]!r}")
    expect(took < 6, f"stderr full, five bad settings and the debug log: {took:.1f} s (2 s at "
           "most for the first line, none for the rest)")


def links_to_streams_never_followed():
    """A symbolic link at the trace or summary name is never followed, whatever it points to:
    a link to a FIFO (read by someone) or to a device is left alone and the output goes to
    NAME.1.EXT beside it, as for any foreign file."""
    import threading
    program = [harness.path_of("LAUNCH_DRIVER"), *ARGS]
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        got = []

        def read_fifo():
            with open(fifo, "rb") as handle:  # blocks until a writer comes, then to its end
                got.append(handle.read())
        reader = threading.Thread(target=read_fifo, daemon=True)
        reader.start()
        old = time.time() - 3600
        for target, name in ((fifo, "to-fifo.json"), ("/dev/null", "to-null.json")):
            link = os.path.join(tmp, name)
            os.symlink(target, link)
            os.utime(link, (old, old), follow_symlinks=False)
            run_ = launch(link)
            expect_program_unharmed(run_)
            expect(os.path.islink(link), f"{name}: the link was replaced", run_)
            expect_our_trace(os.path.join(tmp, name.replace(".json", ".1.json")), run_)
            notices = [l for l in recorder_lines(run_) if "is not a ferrum-replay trace" in l]
            expect(len(notices) == 1, f"{name}: not one line saying where the trace went", run_)
            summary = os.path.join(tmp, name.replace(".json", ".txt"))
            os.symlink(target, summary)
            os.utime(summary, (old, old), follow_symlinks=False)
            run_ = harness.run(program, record=False, env={"FERRUM_REPLAY_SUMMARY": summary})
            expect_program_unharmed(run_)
            expect(os.path.islink(summary), f"{name}: the summary's link was replaced", run_)
            fresh = summary.replace(".txt", ".1.txt")
            expect(os.path.isfile(fresh), f"no summary at {fresh}", run_)
            with open(fresh) as handle:
                expect(handle.read().startswith("ferrum-replay launch summary: 2 graphs"),
                       f"{fresh} is not the summary", run_)
        # Nothing went through the link into the FIFO: open it once to end the reader.
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        reader.join(5)
        expect(got == [b""], f"the FIFO behind a link received {len(got[0]) if got else 0} bytes")
        # The descriptor paths, themselves links, are still streams.
        run_ = launch("/proc/self/fd/2")
        expect('"ferrumReplay"' in run_.stderr, "/proc/self/fd/2 is no longer a stream", run_)


def long_names_written():
    """Any name the file system accepts can be written: the temporary beside it and fresh
    names are shortened by one rule where they would exceed NAME_MAX (255 bytes)."""
    program = [harness.path_of("LAUNCH_DRIVER"), *ARGS]
    with tempfile.TemporaryDirectory() as tmp:
        old = time.time() - 3600
        for length in (240, 250):
            out = os.path.join(tmp, "g" * length + ".json")
            run_ = launch(out)
            expect_program_unharmed(run_)
            expect(not [l for l in recorder_lines(run_) if "cannot write" in l],
                   f"a {length + 5}-byte name was refused", run_)
            expect_our_trace(out, run_)
            os.utime(out, (old, old))
            again = launch(out)  # replaces its own earlier trace
            expect_our_trace(out, again)
            summary = os.path.join(tmp, "s" * length + ".txt")
            run_ = harness.run(program, record=False, env={"FERRUM_REPLAY_SUMMARY": summary})
            expect(os.path.isfile(summary) and not run_.stderr,
                   f"a {length + 4}-byte summary name was refused", run_)
        # Fresh names beside a foreign file of a 255-byte name fit too, and stay apart.
        out = os.path.join(tmp, "f" * 250 + ".json")
        with open(out, "w") as handle:
            handle.write("foreign\n")
        os.utime(out, (old, old))
        for _ in range(2):
            run_ = launch(out)
            expect_program_unharmed(run_)
            notices = [l for l in recorder_lines(run_) if "is not a ferrum-replay trace" in l]
            expect(len(notices) == 1, "no single line saying where the trace went", run_)
        fresh = sorted(n for n in os.listdir(tmp) if n.startswith("f") and n != "f" * 250 + ".json")
        expect(len(fresh) == 2 and all(len(n) <= 255 and n.endswith(".json") for n in fresh),
               f"fresh names: {fresh}")
        for name in fresh:
            expect_our_trace(os.path.join(tmp, name), run_)
        with open(out) as handle:
            expect(handle.read() == "foreign\n", "the foreign file was replaced")
        expect(not [n for n in os.listdir(tmp) if n.endswith(".tmp")], "temporaries left")


def unset_variable_named():
    """%q{UNSET} expands to nothing and one line names the variable (trace and summary)."""
    with tempfile.TemporaryDirectory() as tmp:
        run_ = launch(os.path.join(tmp, "r%q{FERRUM_TEST_NOT_SET}.json"))
        expect_program_unharmed(run_)
        expect_our_trace(os.path.join(tmp, "r.json"), run_)
        lines = [l for l in recorder_lines(run_) if "FERRUM_TEST_NOT_SET" in l]
        expect(len(lines) == 1, "no single line naming the unset variable", run_)
        run_ = harness.run([harness.path_of("LAUNCH_DRIVER"), *ARGS], record=False,
                           env={"FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s%q{NOPE_X}.txt")})
        expect(os.path.exists(os.path.join(tmp, "s.txt")), "no summary at s.txt", run_)
        expect(len([l for l in run_.stderr.splitlines() if "NOPE_X" in l]) == 1,
               "summary: no single line naming the unset variable", run_)
        # The running directory's too (it said nothing, and the markers went elsewhere).
        os.mkdir(os.path.join(tmp, "run"))
        run_ = harness.run([harness.path_of("LAUNCH_DRIVER"), *ARGS], record=False,
                           env={"FERRUM_REPLAY_SUMMARY": os.path.join(tmp, "s2.txt"),
                                "FERRUM_REPLAY_RUNNING_DIR":
                                    os.path.join(tmp, "run%q{NOPE_RUN}")})
        expect_program_unharmed(run_)
        expect([l for l in run_.stderr.splitlines() if "NOPE_RUN" in l] ==
               ["ferrum-replay: FERRUM_REPLAY_RUNNING_DIR: not set: NOPE_RUN (each %q{NAME} "
                "expanded to nothing)"], "running directory: no single line naming it", run_)
        # A very long path is printed cut, never whole.
        long_dir = os.path.join(tmp, "missing", "d" * 3000)
        run_ = launch(os.path.join(long_dir, "t.json"))
        lines = [l for l in recorder_lines(run_) if "cannot write trace" in l]
        expect(len(lines) == 1 and len(lines[0]) < 400 and "...'" in lines[0],
               "a long path was not cut in the message", run_)
        # A pattern that expands to nothing at all: one line saying so (it said "Is a
        # directory" about the pattern, after a line naming the variable).
        run_ = launch("%q{FERRUM_TEST_NOT_SET}")
        expect_program_unharmed(run_)
        lines = [l for l in recorder_lines(run_) if " ranges on " not in l]
        expect(len(lines) == 1 and "expands to an empty name" in lines[0] and
               "FERRUM_TEST_NOT_SET" in lines[0], "an empty name: not one line saying so", run_)


def another_users_trace_kept():
    """A trace of another user's at the trace path (a directory several users write to, without
    the sticky bit; or any directory, for root) was taken for ours by its content alone and
    replaced. It is now left alone, as another user's summary is: ours goes beside it, one line;
    FERRUM_RECORD_FORCE=1 replaces only a file of the user's own."""
    if os.geteuid() != 0:
        return "skip: needs root to make a file of another user's"
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        out = os.path.join(tmp, "trace.json")
        expect_our_trace(out, launch(out))
        os.chown(out, 4242, 4242)
        old = time.time() - 3600  # long before this run: not a sibling's
        os.utime(out, (old, old))
        with open(out, "rb") as handle:
            theirs = handle.read()
        for force in ("0", "1"):
            run_ = launch(out, FERRUM_RECORD_FORCE=force)
            expect_program_unharmed(run_)
            with open(out, "rb") as handle:
                expect(handle.read() == theirs and os.stat(out).st_uid == 4242,
                       f"another user's trace was replaced (FORCE={force})", run_)
            notices = [l for l in recorder_lines(run_) if "is not a ferrum-replay trace" in l]
            expect(len(notices) == 1, f"FORCE={force}: no single line saying where it went", run_)
        expect_our_trace(os.path.join(tmp, "trace.1.json"), run_)


def nothing_recorded_nothing_written():
    """A child forked after CUDA started that launches nothing writes no trace, prints no table,
    and leaves the job's fixed name to the process with data."""
    fork_launch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "wrapper",
                               "fork_launch.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        run_ = harness.run([sys.executable, fork_launch, "--early", "0", "--before", "2",
                            "--child", "0", "--after", "1"],
                           env={"FERRUM_RECORD_OUT": out, "FERRUM_RECORD_TABLE": "1"})
        expect(run_.returncode == 0, "fork_launch failed", run_)
        expect(sorted(os.listdir(tmp)) == ["job.json"], f"files: {os.listdir(tmp)}", run_)
        trace = load_trace(out)
        ours = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == harness.DOMAIN]
        expect(len(ours) == 3, f"job.json holds {len(ours)} ranges, not the parent's 3", run_)
        tables = [l for l in recorder_lines(run_) if " ranges on " in l]
        expect(len(tables) == 1, f"{len(tables)} tables printed, expected the parent's only", run_)


SCENARIOS = {f.__name__: f for f in (
    symlink_planted, foreign_file_kept, earlier_trace_replaced, mode_respects_umask,
    bad_paths_one_line, summary_file_never_followed, merge_output_never_followed,
    merge_output_streams, another_users_trace_kept,
    locked_directory_never_blocks, output_lock_held_elsewhere, output_lock_held_under_fast_timer,
    program_output_goes_first, reader_gone_at_exit,
    dead_leftovers_removed,
    stream_outputs, unset_variable_named, nothing_recorded_nothing_written, streams_never_block,
    links_to_streams_never_followed, long_names_written, slow_reader_bounded,
    stalled_stderr_waited_for_once)}

if __name__ == "__main__":
    if sys.argv[1:2] == ["--interval-timer"]:
        INTERVAL_TIMER = sys.argv[2]
        sys.argv[1:3] = []
    harness.main(SCENARIOS)
