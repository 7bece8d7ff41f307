#!/usr/bin/env python3
"""End-to-end tests of libferrum-replay-recorder.so, the NVTX tool that is our test oracle.

Drives tests/support/tools/nvtx_client (a plain NVTX3 program, no shim) with the recorder attached
through NVTX_INJECTION64_PATH and compares the trace with the client's own account.
Environment (set by tests/recorder/end_to_end/meson.build): FERRUM_RECORDER_LIB, NVTX_CLIENT,
NVTX_CLIENT_MODULE.
Run all tests, or name some on the command line. Prints ok/FAIL per test and a closing
"N passed, N failed" line; exits 1 if any failed, 77 if the environment is missing.
"""
import os
import re
import subprocess
import sys
import tempfile
import unicodedata

# The tests' own trace reader (independent of the product's scripts/ferrum_replay_traces.py).
TOOLS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support", "tools")
sys.path.insert(0, TOOLS_DIR)
import trace_check  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

DOMAIN = "mydomain"
STATS = ["count", "total ms", "mean us", "min us", "p50 us", "p99 us", "max us"]
# The one column rule (recorder/summary_table.hpp): CPU columns, then with GPU time the same
# statistics prefixed "gpu ".
TABLE_HEADER = re.compile(r"^domain\s+range\s+" + r"\s+".join(STATS) + "$")
GPU_TABLE_HEADER = re.compile(r"^domain\s+range\s+" + r"\s+".join(STATS + [f"gpu {s}" for s in STATS])
                              + "$")


class Client:
    """One finished nvtx_client process and what it left behind."""

    def __init__(self, argv, done, tmp, trace_path):
        self.argv = argv
        self.returncode = done.returncode
        self.stdout = done.stdout
        self.stderr = done.stderr
        self.tmp = tmp
        self.values = {}
        self.counts = {}
        self.marks = {}       # (domain, name) -> marks made (--marks)
        self.start_end = {}   # (domain, name) -> start/end ranges started and ended (--start-end)
        for line in self.stdout.splitlines():
            fields = line.split("\t")
            table = {"range": self.counts, "mark": self.marks,
                     "startend": self.start_end}.get(fields[0])
            if table is not None and len(fields) == 4:
                table[(fields[1], fields[2])] = int(fields[3])
            elif len(fields) == 2 and fields[1].isdigit():
                self.values[fields[0]] = int(fields[1])
        self.trace_path = trace_path
        if trace_path is None and "pid" in self.values:
            self.trace_path = os.path.join(tmp, f"t.{self.values['pid']}.json")
        self._trace = None

    @property
    def trace(self):
        if self._trace is None:
            expect(self.trace_path and os.path.exists(self.trace_path),
                   f"no trace at {self.trace_path}", self)
            self._trace = trace_check.load(self.trace_path)
        return self._trace

    def summary(self):
        return trace_check.protocol_errors(self.trace)

    def describe(self):
        return (f"\n  argv: {' '.join(self.argv)}\n  exit: {self.returncode}\n"
                f"  stdout:\n{indent(self.stdout)}\n  stderr:\n{indent(self.stderr)}")


def indent(text):
    return "\n".join("    " + line for line in text.splitlines()[:40])


def expect(condition, message, client=None):
    if not condition:
        raise AssertionError(message + (client.describe() if client else ""))


def environment_path(variable):
    value = os.environ.get(variable)
    if not value or not os.path.exists(value):
        print(f"test_recorder: {variable} is not set or missing (run through meson test)")
        sys.exit(77)
    return value


def run_client(tmp, *args, env=None, out=None, attach=True, cwd=None, timeout=120,
               program="NVTX_CLIENT"):
    """Runs nvtx_client (or the program the variable `program` names) with the recorder attached;
    the trace goes to tmp/t.%p.json unless `out` names another pattern (then Client.trace_path
    is that pattern, unexpanded)."""
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("FERRUM_RECORD", "NVTX_"))}
    if attach:
        child_env["NVTX_INJECTION64_PATH"] = environment_path("FERRUM_RECORDER_LIB")
    child_env["FERRUM_RECORD_OUT"] = out if out is not None else os.path.join(tmp, "t.%p.json")
    child_env.update(env or {})
    # Sanitizer builds (scripts/test): their runtime must come before any preloaded library.
    first = os.environ.get("FERRUM_TEST_PRELOAD_FIRST")
    if first and child_env.get("LD_PRELOAD"):
        child_env["LD_PRELOAD"] = first + " " + child_env["LD_PRELOAD"]
    argv = [environment_path(program), *map(str, args)]
    done = subprocess.run(argv, env=child_env, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or tmp, errors="replace")
    return Client(argv, done, tmp, out if out is not None and "%" not in out else None)


def expect_counts_match(client, skip=()):
    """The trace holds exactly the ranges the client says were accepted ((domain, name) pairs
    in `skip` are not compared)."""
    recorded = trace_check.counts_by_domain_and_name(client.trace)
    claimed = {key: n for key, n in client.counts.items() if key not in skip}
    recorded = {key: n for key, n in recorded.items() if key not in skip}
    expect(recorded == claimed, f"trace counts {recorded} != client counts {claimed}", client)
    expect(client.summary()["ranges"] == sum(trace_check.counts_by_domain_and_name(
        client.trace).values()), "ferrumReplay.ranges disagrees with the X events", client)


def expect_clean(client):
    expect(client.returncode == 0, "client failed", client)
    problems = trace_check.check_nesting(client.trace)
    expect(not problems, f"ranges do not nest: {problems[:3]}", client)
    errors = client.summary()["protocolErrors"]
    expect(not any(errors.values()), f"protocol errors: {errors}", client)


CLIENT_LINE = re.compile(r"^(pid|pushes|rejected|untracked|open|child|child_status"
                         r"|cross_start_tid|cross_end_tid)\t\d+$"
                         r"|^(range|mark|startend)\t[^\t]*\t[^\t]*\t\d+$|^timed\t\d+\t\d+$")


def expect_stdout_is_clients_own(client):
    for line in client.stdout.splitlines():
        expect(CLIENT_LINE.match(line), f"unexpected stdout line {line!r}", client)


# ---- the tests ----

def test_basic_counts_and_attributes(tmp):
    c = run_client(tmp, "--iters", 50, "--domain", DOMAIN, "--registered", "--nested", 3,
                   "--unicode", "--cxx")
    expect_clean(c)
    expect_counts_match(c)
    expect(c.values["rejected"] == 0 and c.values["untracked"] == 0,
           "pushes were not all accepted", c)
    names = trace_check.counts_by_name(c.trace, DOMAIN)
    expect(names == {"dom-registered": 50, "dom-wide-\u00fc": 50}, f"domain ranges {names}", c)
    expect(trace_check.counts_by_name(c.trace, "global").get("wide-\u00e9\u4e2d") == 50,
           "unicode global ranges missing", c)
    dom = trace_check.ranges(c.trace, DOMAIN, "dom-registered")[0]
    expect(dom["args"]["category"] == 7 and dom["args"]["color"] == "#00a0ff"
           and isinstance(dom["args"]["payload"], int), f"attributes lost: {dom}", c)
    nest = trace_check.ranges(c.trace, "global", "nest2")
    expect({r["args"]["depth"] for r in nest} == {2}, "nest2 should be at depth 2", c)
    expect(sorted(r["args"]["payload"] for r in nest) == list(range(50)), "int64 payloads", c)
    step = trace_check.ranges(c.trace, "global", "step")[0]
    expect("payload" not in step["args"] and step["args"]["depth"] == 0,
           f"plain push has no payload: {step}", c)
    summary = c.summary()
    expect(summary["version"] == 1 and summary["pid"] == c.values["pid"], f"{summary}", c)
    expect(summary["domains"] == ["global", DOMAIN], f"domains {summary['domains']}", c)
    meta = [e for e in c.trace["traceEvents"] if e.get("ph") == "M"]
    expect(any(e["name"] == "process_name" and e["args"]["name"] == "nvtx_client" for e in meta),
           "process_name metadata", c)
    expect(c.trace["displayTimeUnit"] == "ns", "displayTimeUnit", c)
    for event in trace_check.ranges(c.trace):
        expect(event["pid"] == c.values["pid"] and event["dur"] >= 0 and event["ts"] >= 0,
               f"bad event {event}", c)


def test_multithreaded_loses_nothing(tmp):
    c = run_client(tmp, "--threads", 8, "--iters", 1000, "--domain", DOMAIN, "--registered",
                   "--nested", 2, "--name-threads")
    expect_clean(c)
    expect_counts_match(c)
    expect(c.counts[("global", "step")] == 8000, "client did not push 8000 steps", c)
    tids = {e["tid"] for e in trace_check.ranges(c.trace)}
    expect(len(tids) == 8, f"{len(tids)} threads in the trace, expected 8", c)
    names = {e["args"]["name"] for e in c.trace["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "thread_name" and e["tid"] in tids}
    expect(names == {f"worker-{i}" for i in range(8)}, f"thread names {names}", c)


def test_interleaved_domains_get_tracks_of_their_own(tmp):
    """Two domains whose push/pop ranges interleave on one thread (legal NVTX: one stack per
    domain) must not give one track of partly overlapping slices, which viewers drop and the
    judges fail: the domain that would overlap moves to a track of its own, named after the
    thread and the domain; ranges that nest (the workers') stay on their thread's track."""
    c = run_client(tmp, "--threads", 2, "--iters", 20, "--domain", DOMAIN, "--nested", 3,
                   "--name-threads", "--interleave", 200)
    expect_clean(c)
    expect_counts_match(c)
    expect(c.counts[(DOMAIN, "il-inner")] == 200, "client did not interleave 200 times", c)
    names = {e["tid"]: e["args"]["name"] for e in c.trace["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    main_tid = c.values["pid"]
    tids = lambda name, domain="global": {e["tid"] for e in trace_check.ranges(c.trace, domain,
                                                                               name)}
    inner = tids("il-inner", DOMAIN)
    expect(len(inner) == 1 and main_tid not in inner, f"il-inner on tracks {inner}", c)
    moved = inner.pop()
    expect(names.get(moved) == f"{names.get(main_tid)} \u00b7 {DOMAIN}",
           f"moved track named {names.get(moved)!r}", c)
    expect(tids("il-outer") == {main_tid} and tids("il-after") == {main_tid},
           "the global domain left its thread's track", c)
    expect(tids("dom-ascii", DOMAIN) == tids("step") and len(tids("step")) == 2,
           "nesting domains of the workers moved", c)
    expect({e["tid"] for e in trace_check.ranges(c.trace)} == tids("step") | {main_tid, moved},
           "tracks other than the threads' and the moved one", c)
    # The product's judge accepts the run (it failed it before: "ranges do not nest").
    judged = subprocess.run([os.path.join(ROOT, "scripts", "ferrum-replay"), "check",
                             c.trace_path, "--domain", DOMAIN], capture_output=True, text=True,
                            timeout=120)
    expect(judged.returncode == 0, f"check: {judged.stdout}{judged.stderr}", c)


def test_signal_handler_ranges(tmp):
    """A SIGPROF handler records ranges on the thread it interrupts, in the middle of that
    thread's own pushes and pops (and of its chunk being spilled): the program runs to its end,
    every range of the thread is in the trace, and each handler range is either in the trace or
    counted as dropped, never written over another or left half-written."""
    # The recorder is not async-signal-safe (nor is any NVTX tool we know): a thread's first
    # range and first use of a name allocate. ThreadSanitizer reports that as such; what this
    # test checks is what the trace holds.
    tsan = os.environ.get("TSAN_OPTIONS")
    env = {"TSAN_OPTIONS": tsan + ":report_signal_unsafe=0"} if tsan else None
    c = run_client(tmp, "--signal-ranges", 2000000, "--iters", 0, timeout=300, env=env)
    expect_clean(c)
    names = {}
    for e in trace_check.ranges(c.trace):
        names[e["name"]] = names.get(e["name"], 0) + 1
        expect(e["ts"] > 0, f"a range with no start: {e}", c)
    expect(names.get("main") == 2000000, f"main ranges in the trace: {names}", c)
    dropped = c.trace["ferrumReplay"].get("droppedInSignalHandlers", 0)
    handled = c.values.get("handler_ranges", 0)
    # A handler range that interrupted the copying of a name keeps a fixed one instead.
    lost = "(name lost: recorded in a signal handler)"
    in_trace = names.get("in handler", 0) + names.get(lost, 0)
    expect(in_trace + dropped == handled,
           f"handler ranges: {in_trace} in the trace + {dropped} dropped, "
           f"{handled} recorded by the handler", c)
    expect(set(names) <= {"main", "in handler", lost}, f"unexpected names: {set(names)}", c)


def test_signal_handler_wide_ranges(tmp):
    """The same in wide characters: each wide message becomes UTF-8 in the thread's scratch
    text, which a handler's wide push cleared and reallocated under the interrupted thread's
    own wide push or mark (AddressSanitizer: heap-use-after-free in ThreadBuffer::intern; a
    crash now and then; the thread's ranges and marks named after the handler's text, review
    NT-2). The handler's text now goes through bytes of its own, cut at 128 bytes where it
    interrupted a wide call."""
    tsan = os.environ.get("TSAN_OPTIONS")
    env = {"TSAN_OPTIONS": tsan + ":report_signal_unsafe=0"} if tsan else None
    c = run_client(tmp, "--signal-ranges", 500000, "--wide", "--iters", 0, timeout=300, env=env)
    expect_clean(c)
    long_text = "in handler " + "x" * 3000
    lost = "(name lost: recorded in a signal handler)"
    handler_names = {"in handler", long_text, long_text[:128], lost}
    names = {}
    for e in trace_check.ranges(c.trace):
        names[e["name"]] = names.get(e["name"], 0) + 1
    marks = {}
    for e in c.trace["traceEvents"]:
        if e.get("ph") == "i":
            marks[e["name"]] = marks.get(e["name"], 0) + 1
    expect(names.get("main") == 500000, f"main ranges: {names.get('main')}", c)
    expect(marks == {"main mark": 500000}, f"marks: { {k[:20]: v for k, v in marks.items()} }", c)
    expect(set(names) <= {"main"} | handler_names,
           f"unexpected names: { {k[:20] + '...' + str(len(k)) for k in set(names)} }", c)
    dropped = c.trace["ferrumReplay"].get("droppedInSignalHandlers", 0)
    handled = c.values.get("handler_ranges", 0)
    in_trace = sum(names.get(n, 0) for n in handler_names)
    expect(handled > 0 and in_trace + dropped == handled,
           f"handler ranges: {in_trace} in the trace + {dropped} dropped, {handled} recorded by "
           "the handler", c)


def test_signal_handler_while_stacks_grow(tmp):
    """A handler's range in the very domain whose stack the interrupted push is growing (or whose
    table of stacks it is growing): the handler used to push into the frames being reallocated,
    freed memory (AddressSanitizer: heap-use-after-free in push_in_place, every run). Such a
    range is now dropped and counted, and nothing else changes."""
    tsan = os.environ.get("TSAN_OPTIONS")
    env = {"TSAN_OPTIONS": tsan + ":report_signal_unsafe=0"} if tsan else None
    domains = 2000
    c = run_client(tmp, "--signal-growth", domains, "--iters", 0, timeout=300, env=env)
    expect_clean(c)
    names = {}
    for e in trace_check.ranges(c.trace):
        names[e["name"]] = names.get(e["name"], 0) + 1
    expect(names.get("growth") == domains * 64, f"growth ranges in the trace: {names}", c)
    dropped = c.trace["ferrumReplay"].get("droppedInSignalHandlers", 0)
    handled = c.values.get("handler_ranges", 0)
    lost = "(name lost: recorded in a signal handler)"
    # One "in handler" range is the client's own, before the signals start.
    in_trace = names.get("in handler", 0) - 1 + names.get(lost, 0)
    expect(handled > 0 and in_trace + dropped == handled,
           f"handler ranges: {in_trace} in the trace + {dropped} dropped, {handled} recorded by "
           "the handler", c)


def test_second_module(tmp):
    module = environment_path("NVTX_CLIENT_MODULE")
    c = run_client(tmp, "--threads", 4, "--iters", 100, "--domain", DOMAIN, "--module", module)
    expect_clean(c)
    expect_counts_match(c)
    expect(c.counts.get(("global", "module-step")) == 400, "module ranges not accepted", c)
    expect(trace_check.counts_by_name(c.trace, DOMAIN).get("module-dom") == 400,
           "the module's domain must be the client's domain", c)
    expect(c.summary()["domains"] == ["global", DOMAIN], f"{c.summary()['domains']}", c)


def test_loader_error_kept(tmp):
    """The program's first NVTX call starts the recorder, which looks the shim's GPU hand-off up
    (dlsym of ferrum_replay_set_gpu_sink...). Without the shim those lookups fail, and their
    message was left for the program's next dlerror(): a program checking a dlopen or dlsym of
    its own that way read our failure as its own. Now none, as without the recorder."""
    for attach in (False, True):
        c = run_client(tmp, "--iters", 1, "--loader-state", attach=attach)
        expect(c.returncode == 0 and re.search(r"^loader_error\tnone$", c.stdout, re.M),
               f"dlerror() after the first NVTX call, {'with' if attach else 'without'} the "
               "recorder: none expected", c)


def test_errno_kept(tmp):
    """The program's errno across each of its NVTX calls is what it set before: the recorder's
    own system calls inside them (its start, a thread's registration, new names and strings, a
    full chunk spilled, its pages handed back, a spill file that cannot be made) leave nothing
    there — also with a C library whose calls leave errno set when they succeed (dirty_libc.c:
    the recorder's start and a spilling pop left it, before)."""
    dirty = {"FERRUM_TEST_DIRTY_LIBC": "5151"}
    nowhere = os.path.join(tmp, "no-such-directory")
    for what, env in (("as it is", {}), ("a dirty C library", dirty),
                      ("every chunk spilled", {**dirty, "FERRUM_RECORD_MEMORY": "0"}),
                      ("no spill file possible", {**dirty, "FERRUM_RECORD_MEMORY": "0",
                                                  "TMPDIR": nowhere})):
        c = run_client(tmp, "--threads", 3, "--iters", 0, "--errno-check", 4000, env=env)
        first = re.search(r"^errno_first\t(.*)$", c.stdout, re.M)
        expect(c.returncode == 0 and c.values.get("errno_calls", 0) > 60000 and
               c.values.get("errno_wrong") == 0,
               f"{what}: errno changed across {c.values.get('errno_wrong')} of "
               f"{c.values.get('errno_calls')} NVTX calls (first: "
               f"{first.group(1) if first else '-'})", c)


def test_reject_all(tmp):
    c = run_client(tmp, "--iters", 20, "--domain", DOMAIN, "--nested", 2,
                   env={"FERRUM_RECORD_REJECT": "all"})
    expect_clean(c)
    expect(c.values["rejected"] == c.values["pushes"] == 60, "every push must return -1", c)
    expect(not trace_check.ranges(c.trace), "rejected pushes were recorded", c)
    expect(c.summary()["rejectedPushes"] == 60, f"rejectedPushes {c.summary()}", c)
    expect("rejected pushes: 60" in c.stderr, "table lacks the rejected line", c)


def test_reject_every_nth(tmp):
    c = run_client(tmp, "--threads", 4, "--iters", 250, "--domain", DOMAIN, "--nested", 3,
                   env={"FERRUM_RECORD_REJECT": "7"})
    expect_clean(c)
    expect_counts_match(c)
    pushes = c.values["pushes"]
    expect(c.values["rejected"] == pushes // 7, f"{c.values['rejected']} of {pushes} rejected", c)
    expect(c.summary()["rejectedPushes"] == pushes // 7, f"{c.summary()}", c)


def test_reject_limited_to_domain(tmp):
    c = run_client(tmp, "--threads", 2, "--iters", 100, "--domain", DOMAIN, "--registered",
                   "--nested", 2, env={"FERRUM_RECORD_REJECT": "all",
                                       "FERRUM_RECORD_REJECT_DOMAIN": DOMAIN})
    expect_clean(c)
    expect_counts_match(c)
    expect(not trace_check.ranges(c.trace, DOMAIN), "the rejected domain has ranges", c)
    glob = trace_check.counts_by_name(c.trace, "global")
    expect(glob == {"step": 200, "nest1": 200}, f"global ranges damaged: {glob}", c)
    expect(c.summary()["rejectedPushes"] == 200, f"{c.summary()}", c)


def test_reject_global_domain_every_nth(tmp):
    c = run_client(tmp, "--iters", 90, "--domain", DOMAIN, env={
        "FERRUM_RECORD_REJECT": "3", "FERRUM_RECORD_REJECT_DOMAIN": "global"})
    expect_clean(c)
    expect_counts_match(c)
    expect(trace_check.counts_by_name(c.trace, DOMAIN) == {"dom-ascii": 90},
           "domain ranges must be untouched", c)
    expect(trace_check.counts_by_name(c.trace, "global") == {"step": 60},
           "every third global push rejected", c)


def test_domain_named_empty(tmp):
    """A domain named "" (nvtxDomainCreateA(""); NULL and L"" alike) is a domain like any other.
    With no rejection asked for, the recorder took it for the rejection's domain and divided by
    the every-Nth count, 0: SIGFPE in the program (hostile review of 2026-12-05). Also with a
    rejection limited to another domain, and with FERRUM_RECORD_REJECT_DOMAIN alone (one line,
    nothing rejected)."""
    for env, said in (({}, None), ({"FERRUM_RECORD_REJECT": "2",
                                    "FERRUM_RECORD_REJECT_DOMAIN": "other"}, None),
                      ({"FERRUM_RECORD_REJECT_DOMAIN": "other"},
                       "ferrum-replay recorder: FERRUM_RECORD_REJECT_DOMAIN='other' limits "
                       "FERRUM_RECORD_REJECT, which is not set; rejecting nothing")):
        c = run_client(tmp, "--iters", 6, "--domain", "", "--nested", 2, env=env)
        expect_clean(c)
        expect_counts_match(c)
        expect(c.values["rejected"] == 0 and
               trace_check.counts_by_name(c.trace, "") == {"dom-ascii": 6},
               f"the domain named '' with {env}", c)
        if said:
            expect(c.stderr.count(said) == 1, "the one line for REJECT_DOMAIN alone", c)


def test_invalid_reject_value(tmp):
    c = run_client(tmp, "--iters", 5, env={"FERRUM_RECORD_REJECT": "sometimes"})
    expect_clean(c)
    expect_counts_match(c)
    line = ("ferrum-replay recorder: FERRUM_RECORD_REJECT='sometimes' is invalid "
            "(expected all or a positive integer); not rejecting")
    expect(c.stderr.count(line) == 1, "the warning must appear exactly once", c)
    expect(c.values["rejected"] == 0, "nothing may be rejected", c)


def test_unknown_setting_name(tmp):
    """A FERRUM_RECORD_* variable the recorder does not read (FERRUM_RECORD_OUTPUT for
    FERRUM_RECORD_OUT) was ignored in silence: the trace went to the default name and nothing
    said why (F257). One line names it and the setting it is closest to; the trace is as
    without it. The recorder's other variables, the harness's FERRUM_RECORDER_LIB among them,
    draw no line."""
    c = run_client(tmp, "--iters", 5, env={"FERRUM_RECORD_OUTPUT": os.path.join(tmp, "x.json")})
    expect_clean(c)
    expect_counts_match(c)
    line = ("ferrum-replay recorder: FERRUM_RECORD_OUTPUT is not a setting of this ferrum-replay "
            "(did you mean FERRUM_RECORD_OUT?); ignored")
    expect(c.stderr.count(line) == 1, "the line must appear exactly once", c)
    expect(not os.path.exists(os.path.join(tmp, "x.json")), "the unknown variable was used", c)
    c = run_client(tmp, "--iters", 5, env={"FERRUM_RECORD_CLOCK": "auto",
                                           "FERRUM_RECORD_MEMORY": "24M",
                                           "FERRUM_RECORDER_LIB": "x"})
    expect("is not a setting" not in c.stderr, "a variable of ours was called unknown", c)
    # A variable of the user's own that the trace's pattern reads (%q{NAME}) is theirs, not a
    # misspelt setting: no line, and the trace is where it says (review RG-4).
    c = run_client(tmp, "--iters", 5, out=os.path.join(tmp, "%q{FERRUM_RECORD_TAG}.json"),
                   env={"FERRUM_RECORD_TAG": "tagged"})
    expect(c.returncode == 0, "client failed", c)
    expect("is not a setting" not in c.stderr, "the pattern's own variable was called unknown", c)
    expect(os.path.isfile(os.path.join(tmp, "tagged.json")), "no trace at the pattern's name", c)


def test_pop_without_push(tmp):
    c = run_client(tmp, "--iters", 3, "--unbalanced-pop")
    expect_counts_match(c)
    errors = c.summary()["protocolErrors"]
    expect(errors == {"popWithoutPush": 1, "popWrongDomain": 0, "openAtExit": 0,
                     "endUnknownId": 0, "startOpenAtExit": 0}, f"{errors}", c)
    expect("protocol errors: 1 pop without push" in c.stderr, "table line", c)


def test_pop_in_wrong_domain(tmp):
    c = run_client(tmp, "--iters", 3, "--domain", DOMAIN, "--wrong-domain-pop")
    expect_counts_match(c)
    errors = c.summary()["protocolErrors"]
    expect(errors == {"popWithoutPush": 0, "popWrongDomain": 1, "openAtExit": 0,
                     "endUnknownId": 0, "startOpenAtExit": 0}, f"{errors}", c)
    expect(trace_check.counts_by_name(c.trace, "global").get("holder") == 1,
           "the range held open across the bad pop must still be recorded", c)
    expect("protocol errors: 1 popped in wrong domain" in c.stderr, "table line", c)


def test_open_at_exit(tmp):
    c = run_client(tmp, "--iters", 3, "--leave-open", 2, "--leave-open-in-thread", 3)
    expect_counts_match(c)
    expect(c.values["open"] == 5, "client should have left 5 ranges open", c)
    errors = c.summary()["protocolErrors"]
    expect(errors == {"popWithoutPush": 0, "popWrongDomain": 0, "openAtExit": 5,
                     "endUnknownId": 0, "startOpenAtExit": 0}, f"{errors}", c)
    expect("protocol errors: 5 open at exit" in c.stderr, "table line", c)


def test_all_protocol_errors_in_one_line(tmp):
    c = run_client(tmp, "--unbalanced-pop", "--wrong-domain-pop", "--leave-open", 1)
    expect("protocol errors: 1 pop without push, 1 popped in wrong domain, 1 open at exit"
           in c.stderr, "combined table line", c)


def test_pid_expansion(tmp):
    c = run_client(tmp, "--iters", 1)
    expect(os.path.exists(os.path.join(tmp, f"t.{c.values['pid']}.json")), "t.<pid>.json", c)
    expect(not [f for f in os.listdir(tmp) if f.endswith(".tmp")], "temporary left behind", c)


def test_env_var_expansion(tmp):
    out = os.path.join(tmp, "q.%q{FERRUM_TEST_TAG}.%q{FERRUM_TEST_UNSET}100%%.json")
    c = run_client(tmp, "--iters", 1, out=out, env={"FERRUM_TEST_TAG": "rank3"})
    expect(c.returncode == 0, "client failed", c)
    path = os.path.join(tmp, "q.rank3.100%.json")
    expect(os.path.exists(path), f"{path} missing; dir has {os.listdir(tmp)}", c)
    expect(path in c.stderr, "the table names the absolute trace path", c)


def test_default_output_in_working_directory(tmp):
    child_env = {"FERRUM_RECORD_OUT": ""}
    c = run_client(tmp, "--iters", 1, env=child_env)
    path = os.path.join(tmp, f"ferrum-replay.{c.values['pid']}.json")
    expect(os.path.exists(path), f"{path} missing; dir has {os.listdir(tmp)}", c)


def test_unwritable_output(tmp):
    out = os.path.join(tmp, "no-such-dir", "t.json")
    c = run_client(tmp, "--iters", 2, "--exit-code", 3, out=out,
                   env={"FERRUM_RECORD_TABLE": "0"})
    expect(c.returncode == 3, "the program's exit code must be kept", c)
    expect(c.stderr == f"ferrum-replay recorder: cannot write trace to '{out}': "
           "No such file or directory\n", "exactly one stderr line expected", c)
    expect_stdout_is_clients_own(c)
    # A relative name: the line names the path tried, resolved where the process started (it
    # named the pattern, and the user looked for no-such-dir/ where they were).
    inner = os.path.join(tmp, "inner")
    os.mkdir(inner)
    c = run_client(tmp, "--iters", 2, out="no-such-dir/t.json", cwd=inner,
                   env={"FERRUM_RECORD_TABLE": "0"})
    expect(c.stderr == f"ferrum-replay recorder: cannot write trace to "
           f"'{os.path.join(inner, 'no-such-dir', 't.json')}': No such file or directory\n",
           "a relative name: the path tried", c)


def test_no_stdout_pollution_and_table(tmp):
    c = run_client(tmp, "--iters", 10, "--domain", DOMAIN, "--registered", "--unicode")
    expect_stdout_is_clients_own(c)
    lines = c.stderr.splitlines()
    expect(lines and re.match(r"^ferrum-replay recorder: \d+ ranges on 1 threads of nvtx_client "
                              r"\(pid \d+\), trace: /",
                              lines[0]), "table header line", c)
    expect(any(TABLE_HEADER.match(line) for line in lines), "column header", c)
    for domain, name in c.counts:
        expect(any(re.match(rf"^{re.escape(domain)}\s+{re.escape(name)}\s+10\s", line)
                   for line in lines), f"no table row for {domain}/{name}", c)
    expect(lines[-1] == "protocol errors: none", "closing line", c)
    # Numeric columns are right-aligned: every row is equally wide on a terminal.
    widths = {sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in row)
              for row in lines[1:-1]}
    expect(len(widths) == 1, f"table columns are not aligned: widths {widths}", c)


def test_table_switched_off(tmp):
    c = run_client(tmp, "--iters", 3, env={"FERRUM_RECORD_TABLE": "0"})
    expect_clean(c)
    expect(c.stderr == "", "stderr must stay silent", c)


def test_exit_from_another_thread(tmp):
    c = run_client(tmp, "--threads", 2, "--iters", 100, "--exit-in-thread", "--exit-code", 5)
    expect(c.returncode == 5, "exit code from the exiting thread", c)
    expect_counts_match(c)
    expect(not trace_check.check_nesting(c.trace), "nesting", c)


def test_thread_recording_during_exit(tmp):
    for _ in range(3):
        c = run_client(tmp, "--threads", 2, "--iters", 200, "--spinner")
        expect(c.returncode == 0, "client crashed while a thread kept recording", c)
        # The spinner's ranges are not counted by the client: it never stops.
        expect_counts_match(c, skip={("global", "spin")})
        expect(not trace_check.check_nesting(c.trace), "nesting", c)
        os.unlink(c.trace_path)


def test_program_takes_the_trace_descriptor(tmp):
    """A thread of the program that, while the process exits, closes every descriptor it thinks
    stale (closefrom(3)) and opens a file of its own — which gets the lowest number — got the
    rest of the trace in that file: the recorder kept writing through a number it no longer
    held, and closed the program's descriptor after (26 MB of trace JSON in a program's log).
    Every descriptor of ours is now proved before each use (common/own_descriptor.hpp): the
    program's file holds its own lines only, and the trace is whole or not written, said in one
    line, its temporary removed."""
    victim = os.path.join(tmp, "victim.log")
    for run in range(4):
        out = os.path.join(tmp, f"t{run}.json")
        # The thread races the recorder for descriptor numbers by design: under TSan that race
        # is the program's, not reported; LeakSanitizer's own exit check reads /proc through
        # descriptors the thread closes too: left out under ASan.
        asan, tsan = os.environ.get("ASAN_OPTIONS", ""), os.environ.get("TSAN_OPTIONS", "")
        c = run_client(tmp, "--iters", 100000, "--reopen-at-exit", victim, out=out,
                       env={"FERRUM_RECORD_TABLE": "0",
                            "ASAN_OPTIONS": f"{asan}:detect_leaks=0".lstrip(":"),
                            "TSAN_OPTIONS": f"{tsan}:report_bugs=0".lstrip(":")})
        expect(c.returncode == 0, f"run {run}: the client failed", c)
        with open(victim, "rb") as f:
            foreign = [line for line in f.read().split(b"\n") if line not in (b"L", b"")]
        expect(not foreign, f"run {run}: {len(foreign)} lines in the program's file are not its "
               f"own: {foreign[:2]}", c)
        if os.path.exists(out):
            expect_counts_match(c)
        else:
            # One line says why — unless the thread closed our own description of stderr too
            # (a pipe is written through a non-blocking one of ours): then none, rather than a
            # line in the program's file.
            lines = c.stderr.splitlines()
            expect(len(lines) <= 1 and all("cannot write trace" in line for line in lines),
                   f"run {run}: no trace, and more than one line, or another", c)
        left = [n for n in os.listdir(tmp) if n.endswith(".tmp")]
        expect(not left, f"run {run}: temporaries left: {left}", c)


def test_fork_child_writes_its_own_trace(tmp):
    c = run_client(tmp, "--threads", 2, "--iters", 30, "--fork")
    expect_clean(c)
    expect_counts_match(c)
    expect(c.values.get("child_status") == 0, "the child failed", c)
    child = trace_check.load(os.path.join(tmp, f"t.{c.values['child']}.json"))
    counts = trace_check.counts_by_domain_and_name(child)
    expect(counts == {("global", "child-step"): 30, ("global", "around-fork"): 1},
           f"the child's trace must hold only its own ranges: {counts}", c)
    summary = trace_check.protocol_errors(child)
    expect(summary["pid"] == c.values["child"] and not any(summary["protocolErrors"].values()),
           f"child summary {summary}", c)
    expect(not trace_check.check_nesting(child), "child nesting", c)


# NVTX calls a program's fork handlers make: registered before the program's first NVTX call,
# they run inside the recorder's fork window (after its prepare handler took its locks, before its
# parent or child handler gave them back), F161.
FORK_HANDLER_CALLS = [f"{when}-{what}" for when in ("prepare", "parent", "child")
                      for what in ("mark", "range", "domain", "string", "thread-name", "category",
                                   "start-end")]


def traces_in(tmp):
    return sorted(n for n in os.listdir(tmp) if n.startswith("t.") and n.endswith(".json"))


def test_nvtx_calls_in_fork_handlers(tmp):
    # Each used to wait for ever on a lock its own thread held for the fork (the prepare
    # handler's first NVTX call on its thread, a domain, a string, a thread name).
    # Under TSan: the child of this fork from a worker thread writes its trace on a thread of
    # its own where the forking thread's stack is small (stack_room.hpp), which TSan refuses
    # after a multi-threaded fork unless told (its limit, not the recorder's).
    tsan = os.environ.get("TSAN_OPTIONS")
    env = {"TSAN_OPTIONS": tsan + ":die_after_fork=0"} if tsan else None
    for call in FORK_HANDLER_CALLS:
        run_dir = os.path.join(tmp, call)
        os.mkdir(run_dir)
        try:
            c = run_client(run_dir, "handler", call, program="FORK_EXIT_CLIENT", timeout=20,
                           env=env)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{call}: the program hung (killed after 20 s)")
        expect(c.returncode == 0 and "child status 0" in c.stdout and "parent done" in c.stdout,
               f"{call}: the program did not run to its end", c)
        traces = traces_in(run_dir)
        expect(len(traces) == 2, f"{call}: a trace each from the parent and the child: {traces}", c)
        for name in traces:
            trace = trace_check.load(os.path.join(run_dir, name))
            counts = trace_check.counts_by_domain_and_name(trace)
            own = {"main", "after"} if counts.get(("global", "main")) else {"child"}
            expect(all(counts.get(("global", n)) == 1 for n in own),
                   f"{call}: {name} lacks its own ranges: {counts}", c)


def test_gpu_flush_in_fork_handler(tmp):
    # A library's prepare handler, inside the recorder's fork window, asks the shim for the GPU
    # times so far: the sink handed them to the recorder's GPU tracks, whose lock this thread
    # held for the fork — for ever (review T). Refused now, counted; the program runs on.
    env = {"LD_PRELOAD": environment_path("FAKE_GPU_SHIM_LIB"), "FAKE_GPU_SHIM": "on",
           "FAKE_GPU_REPLAYS": "g=3"}
    # Under TSan: the fake shim's flush takes its own lock inside our fork window, while its
    # delivering thread takes that lock and then ours: the lock-order inversion any lock taken in
    # an earlier-registered prepare handler makes with a fork handler's locks (the premise).
    tsan = os.environ.get("TSAN_OPTIONS")
    if tsan:
        env["TSAN_OPTIONS"] = tsan + ":die_after_fork=0:detect_deadlocks=0"
    try:
        c = run_client(tmp, "handler", "prepare-gpu-flush", program="FORK_EXIT_CLIENT",
                       timeout=20, env=env)
    except subprocess.TimeoutExpired:
        raise AssertionError("the program hung (killed after 20 s)")
    expect(c.returncode == 0 and "child status 0" in c.stdout and "parent done" in c.stdout,
           "the program did not run to its end", c)


def runs_in_signal_context(tmp, mode, runs, timeout):
    """fork_exit_client MODE `runs` times, each in tmp/N: yields (N, Client); a run that does
    not end within `timeout` seconds fails the test. Under TSan, a signal handler's fork() or
    exit() is the premise, not a finding (report_signal_unsafe=0)."""
    tsan = os.environ.get("TSAN_OPTIONS")
    env = {"TSAN_OPTIONS": tsan + ":report_signal_unsafe=0"} if tsan else None
    for run in range(runs):
        run_dir = os.path.join(tmp, str(run))
        os.mkdir(run_dir)
        try:
            yield run, run_client(run_dir, mode, program="FORK_EXIT_CLIENT", timeout=timeout,
                                  env=env)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"run {run}: the program hung (killed after {timeout} s)")


def test_fork_in_signal_handler_inside_fork(tmp):
    # A SIGALRM handler forks while the program forks in a loop: some land inside fork(), where
    # the recorder's prepare handler holds its locks; the nested prepare took them again on the
    # same thread and waited for ever, 3 runs of 3 (review T). Every run ends now.
    if os.environ.get("FERRUM_TEST_PRELOAD_FIRST"):
        raise Skip("a sanitizer's own fork() interceptor holds its locks across fork(): a "
                   "nested fork hangs there without the recorder too")
    for run, c in runs_in_signal_context(tmp, "fork-in-fork", 3, timeout=60):
        expect(c.returncode == 0 and "done" in c.stdout, f"run {run}: the program failed", c)


def test_child_in_new_pid_namespace_keeps_its_output(tmp):
    # A child with a copy of memory (clone into a new pid namespace: no fork handlers) one of
    # whose threads has the owner's pid number there: the vfork check (F162) compared the
    # memory of "the owner" — its own thread — found it the same, and ended the child before
    # exit() flushed its output (review T). A vfork child's parent is the owner; this one's is not.
    c = run_client(tmp, "newpid-child", program="FORK_EXIT_CLIENT", timeout=30)
    if c.stdout.startswith("skip:"):
        raise Skip(c.stdout.strip())
    expect(c.returncode == 0 and "child status 0" in c.stdout, "the program failed", c)
    expect("child output" in c.stdout, "the child's buffered output was lost", c)


def test_exit_in_signal_handler_inside_fork(tmp):
    # A SIGALRM handler calls exit() while the program forks in a loop: the signal lands inside
    # fork() in some runs, where the recorder's fork handlers hold its locks; the report then
    # waited for them on the same thread for ever (F161). Every run ends, with its trace or with
    # the one line saying why there is none.
    # Under TSan: exit() from a handler runs the exit hooks in signal context: the premise.
    inside = 0
    for run, c in runs_in_signal_context(tmp, "exit-in-fork", 20, timeout=10):
        run_dir = os.path.join(tmp, str(run))
        expect(c.returncode == 0, f"run {run}: exit status", c)
        lines = [line for line in c.stderr.splitlines() if "exit() was called inside fork()" in line]
        traces = traces_in(run_dir)
        if lines:
            inside += 1
            expect(not traces and len(lines) == 1, f"run {run}: one line, no trace", c)
        else:
            expect(len(traces) == 1, f"run {run}: no trace and no line: {traces}", c)
            counts = trace_check.counts_by_domain_and_name(
                trace_check.load(os.path.join(run_dir, traces[0])))
            expect(counts == {("global", "serve"): 1}, f"run {run}: {counts}", c)
    print(f"  (exit() landed inside fork() in {inside} of 20 runs)")


def test_vfork_child_exit_leaves_the_parents_report(tmp):
    # A vfork child shares its parent's memory: its exit() (after a failed exec) ran the
    # recorder's exit hook there and marked the parent's report as written; the parent then
    # wrote no trace and no table at all (F162).
    c = run_client(tmp, "vfork-exit", program="FORK_EXIT_CLIENT", timeout=60)
    expect(c.returncode == 0 and "child status 127" in c.stdout, "the program failed", c)
    expect(traces_in(tmp) == [f"t.{c.values.get('pid')}.json"],
           f"one trace, the parent's: {traces_in(tmp)}", c)
    counts = trace_check.counts_by_domain_and_name(c.trace)
    expect(counts == {("global", "before"): 1, ("global", "after"): 1}, f"counts {counts}", c)
    expect(any(TABLE_HEADER.match(line) for line in c.stderr.splitlines()),
           "the parent's table is missing", c)


def expect_times_agree_with_monotonic(client, source):
    """Each "timed" range lies within the CLOCK_MONOTONIC bracket the client read around it
    (give or take 20 us of fitting error) and lasts at least its 1 ms sleep."""
    meta = client.summary()
    expect(meta.get("clockSource") == source, f"clockSource {meta.get('clockSource')!r}", client)
    origin = meta["clock"]["originMonotonicNs"]
    brackets = [tuple(map(int, line.split("\t")[1:])) for line in client.stdout.splitlines()
                if line.startswith("timed\t")]
    ranges = sorted(trace_check.ranges(client.trace, "global", "timed"), key=lambda e: e["ts"])
    expect(len(ranges) == len(brackets) > 0, f"{len(ranges)} ranges, {len(brackets)} brackets",
           client)
    slack = 20_000
    for event, (before, after) in zip(ranges, brackets):
        start = origin + round(event["ts"] * 1000)
        end = start + round(event["dur"] * 1000)
        expect(before - slack <= start and end <= after + slack,
               f"range [{start}, {end}] outside the client's [{before}, {after}]", client)
        expect(event["dur"] >= 1000 - slack / 1000, f"a 1 ms sleep lasted {event['dur']} us",
               client)


def test_clock_agrees_with_monotonic(tmp):
    # The default reads the CPU's counter where the kernel's CLOCK_MONOTONIC runs on it; the
    # client moves between CPUs between ranges.
    with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
        kernel_source = f.read().strip()
    counter = {"tsc": "tsc", "arch_sys_counter": "cntvct"}.get(kernel_source, "monotonic")
    c = run_client(tmp, "--iters", 1, "--timed", 20)
    expect_clean(c)
    expect_counts_match(c)
    expect_times_agree_with_monotonic(c, counter)


def test_clock_monotonic_setting(tmp):
    c = run_client(tmp, "--iters", 1, "--timed", 5, env={"FERRUM_RECORD_CLOCK": "monotonic"})
    expect_clean(c)
    expect_times_agree_with_monotonic(c, "monotonic")
    bad = run_client(tmp, "--iters", 1, env={"FERRUM_RECORD_CLOCK": "fast\nplease"})
    expect_clean(bad)
    lines = [line for line in bad.stderr.splitlines() if "FERRUM_RECORD_CLOCK" in line]
    expect(len(lines) == 1 and "'fast?please'" in lines[0] and "using auto" in lines[0],
           f"one quoted warning expected, got {lines}", bad)


def test_no_tool_no_trace(tmp):
    c = run_client(tmp, "--iters", 3, attach=False)
    expect(c.returncode == 0 and c.values["untracked"] == c.values["pushes"],
           "without a tool NVTX returns -2 for every push", c)
    expect(not os.listdir(tmp) and c.stderr == "", "nothing may be written without the tool", c)


def test_marks_are_instant_events(tmp):
    c = run_client(tmp, "--iters", 3, "--marks", "--categories")
    expect_clean(c)
    expect_counts_match(c)
    recorded = trace_check.mark_counts(c.trace)
    expect(recorded == c.marks and len(c.marks) == 4,
           f"trace marks {recorded} != client marks {c.marks}", c)
    for mark in trace_check.marks(c.trace):
        expect(mark["s"] == "t" and mark["tid"] == c.values["pid"] and "dur" not in mark
               and "depth" not in mark["args"], f"a mark is a thread's instant: {mark}", c)
    ex = trace_check.marks(c.trace, "global", "mark-ex")[0]
    expect(ex["args"] == {"category": 3, "categoryName": "category three", "payload": -4,
                          "color": "#112233"}, f"mark-ex's attributes: {ex}", c)
    dom = trace_check.marks(c.trace, "client", "dom-mark")[0]
    expect(dom["args"] == {"category": 7, "categoryName": "dom category seven"},
           f"dom-mark's attributes: {dom}", c)
    summary = c.summary()
    expect(summary["marks"] == 4 and summary["ranges"] == 6, f"footer counts: {summary}", c)
    expect("also in the trace: 4 marks, 0 start/end ranges\n" in c.stderr, "table line", c)


def test_start_end_ranges_pair_across_threads(tmp):
    c = run_client(tmp, "--iters", 2, "--start-end", "--categories")
    expect_clean(c)
    expect_counts_match(c)
    pairs, problems = trace_check.start_end_ranges(c.trace)
    expect(not problems, f"start/end ranges: {problems}", c)
    recorded = trace_check.start_end_counts(c.trace)
    expect(recorded == c.start_end and len(c.start_end) == 5,
           f"trace start/end ranges {recorded} != client's {c.start_end}", c)
    by_name = {begin["name"]: (begin, end) for begin, end in pairs}
    begin, end = by_name["se-cross"]
    expect(begin["tid"] == c.values["cross_start_tid"] and end["tid"] == c.values["cross_end_tid"]
           and begin["tid"] != end["tid"], f"each half on its own thread: {begin} {end}", c)
    begin, _ = by_name["se-ex"]
    expect(begin["args"] == {"category": 3, "categoryName": "category three", "payload": 2.5},
           f"se-ex's attributes: {begin}", c)
    begin, end = by_name["dom-se"]
    expect(begin["cat"] == end["cat"] == "client" and begin["args"]["categoryName"] ==
           "dom category seven", f"dom-se: {begin} {end}", c)
    expect(len({b["id"] for b, _ in pairs}) == 5, "one id per range", c)
    expect(c.summary()["startEndRanges"] == 5, f"footer: {c.summary()}", c)
    # The product's readers count push/pop ranges as before.
    summary = run_reader("summary", c.trace_path)
    lines = summary.stdout.splitlines()
    expect(summary.returncode == 0 and lines[0] ==
           "ferrum-replay summary: 4 ranges in 1 trace (1 process)" and
           "also in the traces: 0 marks, 5 start/end ranges" in lines and
           lines[-1] == "protocol errors: none", f"summary: {summary.stdout}{summary.stderr}", c)
    check = run_reader("check", "--domain", "client", c.trace_path)
    expect(check.returncode == 0, f"check: {check.stdout}{check.stderr}", c)


def test_start_end_protocol_errors(tmp):
    c = run_client(tmp, "--iters", 1, "--start-end", "--start-open", 2, "--end-unknown")
    expect(c.returncode == 0, "an unknown end never harms the program", c)
    errors = c.summary()["protocolErrors"]
    expect(errors == {"popWithoutPush": 0, "popWrongDomain": 0, "openAtExit": 0,
                      "endUnknownId": 2, "startOpenAtExit": 2}, f"{errors}", c)
    pairs, problems = trace_check.start_end_ranges(c.trace)
    expect(not problems and len(pairs) == 5, f"only complete pairs: {problems} {len(pairs)}", c)
    expect("protocol errors: 2 end of an unknown start/end range, 2 start/end range open at exit"
           in c.stderr, "table line", c)
    expect("also in the trace: 0 marks, 7 start/end ranges\n" in c.stderr, "table line", c)


def test_category_names_in_args(tmp):
    c = run_client(tmp, "--iters", 3, "--nested", 5, "--categories")
    expect_clean(c)
    for event in trace_check.ranges(c.trace, "client", "dom-ascii"):
        expect(event["args"]["category"] == 7 and
               event["args"]["categoryName"] == "dom category seven", f"{event}", c)
    nest3 = trace_check.ranges(c.trace, "global", "nest3")
    nest4 = trace_check.ranges(c.trace, "global", "nest4")
    nest2 = trace_check.ranges(c.trace, "global", "nest2")
    expect(len(nest3) == 3 and all(e["args"]["categoryName"] == "category three" for e in nest3),
           f"nest3: {nest3}", c)
    expect(all(e["args"]["categoryName"] == "category four \u00fc" for e in nest4),
           f"NameCategoryW: {nest4}", c)
    expect(all("categoryName" not in e["args"] for e in nest2), "category 2 has no name", c)
    expect({e["cat"] for e in nest3 + nest4} == {"global"}, "cat stays the domain's name", c)


def test_nvtx_without_ranges_gets_a_trace(tmp):
    # A process that only marks (no graph, no push/pop) still gets its trace ...
    c = run_client(tmp, "--iters", 0, "--marks")
    expect(c.summary()["ranges"] == 0 and len(trace_check.marks(c.trace)) == 4,
           f"marks only: {c.summary()}", c)
    start_end = run_client(tmp, "--iters", 0, "--start-end")
    expect(len(trace_check.start_end_ranges(start_end.trace)[0]) == 5, "start/end only",
           start_end)
    # ... while one that recorded nothing at all writes nothing.
    quiet = os.path.join(tmp, "quiet")
    os.mkdir(quiet)
    none = run_client(quiet, "--iters", 0, "--categories")
    expect(none.returncode == 0 and not os.listdir(quiet) and none.stderr == "",
           f"nothing recorded, nothing written: {os.listdir(quiet)}", none)


def test_long_process_name(tmp):
    # /proc/self/comm holds 15 bytes ("nvtx_client_wit"); the command line the whole name.
    name = "nvtx_client_with_a_long_process_name"
    os.symlink(environment_path("NVTX_CLIENT"), os.path.join(tmp, name))
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRUM_RECORD", "NVTX_"))}
    child_env.update(NVTX_INJECTION64_PATH=environment_path("FERRUM_RECORDER_LIB"),
                     FERRUM_RECORD_OUT=os.path.join(tmp, "t.json"))
    done = subprocess.run([os.path.join(".", name), "--iters", "1"], env=child_env, cwd=tmp,
                          capture_output=True, text=True, timeout=60)
    c = Client([name], done, tmp, os.path.join(tmp, "t.json"))
    meta = [e for e in c.trace["traceEvents"] if e.get("name") == "process_name"]
    expect([e["args"]["name"] for e in meta] == [name], f"process_name {meta}", c)
    expect(re.match(rf"^ferrum-replay recorder: 2 ranges on 1 threads of {name} "
                    rf"\(pid {c.values['pid']}\), trace: ", c.stderr), "the table's header", c)


def test_python_nvtx_package(tmp):
    # The real producer most Python programs use: PyPI's `nvtx`, installed into a cache inside
    # the build tree (never into the user's environment).
    target = nvtx_package()
    program = os.path.join(tmp, "annotated.py")
    with open(program, "w", encoding="utf-8") as handle:
        handle.write(PYTHON_PROGRAM)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRUM_RECORD", "NVTX_"))}
    child_env.update(NVTX_INJECTION64_PATH=environment_path("FERRUM_RECORDER_LIB"),
                     FERRUM_RECORD_OUT=os.path.join(tmp, "t.json"), PYTHONPATH=target)
    # Sanitizer builds: the instrumented recorder needs its runtime loaded first.
    first = os.environ.get("FERRUM_TEST_PRELOAD_FIRST")
    if first:
        child_env["LD_PRELOAD"] = " ".join(filter(None, [first, child_env.get("LD_PRELOAD")]))
    done = subprocess.run([sys.executable, program], env=child_env, cwd=tmp,
                          capture_output=True, text=True, timeout=120)
    c = Client([sys.executable, program], done, tmp, os.path.join(tmp, "t.json"))
    expect(c.returncode == 0 and c.stdout.startswith("main "), "the program ran", c)
    main_tid, other_tid = (int(v) for v in c.stdout.split()[1:3])
    expect_clean(c)
    expect(trace_check.counts_by_domain_and_name(c.trace) == {
        ("serve", "decode step"): 3, ("serve", "annotated"): 1, ("global", "plain push"): 1},
        f"push/pop ranges: {trace_check.counts_by_domain_and_name(c.trace)}", c)
    step = trace_check.ranges(c.trace, "serve", "decode step")[0]
    expect(step["args"].get("categoryName") == "decode" and step["args"].get("payload") in (0, 1, 2)
           and step["args"].get("color") == "#0000ff", f"push attributes: {step}", c)
    expect(trace_check.mark_counts(c.trace) == {("serve", "token"): 3, ("global", "done"): 1},
           f"marks: {trace_check.mark_counts(c.trace)}", c)
    token = trace_check.marks(c.trace, "serve", "token")[0]
    expect(token["args"].get("categoryName") == "decode", f"mark's category name: {token}", c)
    pairs, problems = trace_check.start_end_ranges(c.trace)
    expect(not problems and [(b["cat"], b["name"]) for b, _ in pairs] == [("serve", "request")],
           f"start/end: {pairs} {problems}", c)
    begin, end = pairs[0]
    expect(begin["tid"] == main_tid and end["tid"] == other_tid,
           f"begun on {begin['tid']}, ended on {end['tid']}", c)
    name = [e for e in c.trace["traceEvents"] if e.get("name") == "process_name"][0]
    expect(name["args"]["name"] == f"{os.path.basename(sys.executable)} annotated.py",
           f"the process is named by its script: {name}", c)


PYTHON_PROGRAM = """\
import threading
import nvtx

request = nvtx.start_range("request", domain="serve")
for i in range(3):
    nvtx.push_range("decode step", color="blue", domain="serve", category="decode", payload=i)
    nvtx.mark("token", domain="serve", category="decode")
    nvtx.pop_range(domain="serve")
with nvtx.annotate("annotated", domain="serve"):
    pass
nvtx.push_range("plain push")
nvtx.pop_range()
other = []
def finish():
    other.append(threading.get_native_id())
    nvtx.end_range(request)
thread = threading.Thread(target=finish)
thread.start()
thread.join()
nvtx.mark("done")
print("main", threading.get_native_id(), other[0])
"""
NVTX_VERSION = "0.2.16"


class Skip(Exception):
    """The test cannot run here; says why."""


def nvtx_package():
    """A directory holding PyPI's nvtx (NVTX_VERSION), installed once per build tree into
    FERRUM_TEST_CACHE. Raises Skip when it cannot be installed (PyPI unreachable)."""
    cache = os.environ.get("FERRUM_TEST_CACHE")
    if not cache:
        raise Skip("FERRUM_TEST_CACHE is not set (run through meson test)")
    target = os.path.join(cache, f"nvtx-{NVTX_VERSION}")
    if os.path.exists(os.path.join(target, "nvtx", "__init__.py")):
        return target
    partial = f"{target}.{os.getpid()}.tmp"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--disable-pip-version-check", "--no-warn-script-location",
                           "--target", partial, f"nvtx=={NVTX_VERSION}"],
                          capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        subprocess.run(["rm", "-rf", partial])
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Skip(f"cannot install nvtx=={NVTX_VERSION} from PyPI: {last}")
    try:
        os.rename(partial, target)
    except OSError:  # another run installed it meanwhile
        subprocess.run(["rm", "-rf", partial])
    return target


def run_reader(*args):
    """The product's trace reader (scripts/ferrum_replay_traces.py), as the wrapper runs it."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                          "scripts", "ferrum_replay_traces.py")
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          timeout=60)


def test_trace_check_cli(tmp):
    c = run_client(tmp, "--iters", 4, "--domain", DOMAIN)
    script = os.path.join(TOOLS_DIR, "trace_check.py")
    ok = subprocess.run([sys.executable, script, c.trace_path, "--domain", DOMAIN,
                         "--expect", "dom-ascii=4", "--expect-total", "4", "--no-protocol-errors"],
                        capture_output=True, text=True)
    expect(ok.returncode == 0 and ok.stdout == "", f"CLI rejected a good trace: {ok.stdout}", c)
    bad = subprocess.run([sys.executable, script, c.trace_path, "--expect", "step=5",
                          "--expect", "nothing=1"], capture_output=True, text=True)
    expect(bad.returncode == 1 and bad.stdout.splitlines() == [
        "step: 4 ranges, expected 5", "nothing: 0 ranges, expected 1"],
        f"CLI output for failed expectations: {bad.stdout!r}", c)
    summary = subprocess.run([sys.executable, script, c.trace_path, "--summary"],
                             capture_output=True, text=True)
    expect(summary.returncode == 0 and f"{DOMAIN}\tdom-ascii\t4" in summary.stdout.splitlines(),
           f"--summary output {summary.stdout!r}", c)
    broken = os.path.join(tmp, "broken.json")
    with open(broken, "w") as handle:
        handle.write("{\"traceEvents\": [")
    res = subprocess.run([sys.executable, script, broken], capture_output=True, text=True)
    expect(res.returncode == 2 and "not valid JSON" in res.stderr, f"broken: {res.stderr}", c)


def run_with_fake_gpu(tmp, mode, *args, replays=""):
    preload = environment_path("FAKE_GPU_SHIM_LIB")
    return run_client(tmp, *args, env={"LD_PRELOAD": preload, "FAKE_GPU_SHIM": mode,
                                       "FAKE_GPU_REPLAYS": replays,
                                       "FERRUM_REPLAY_DOMAIN": DOMAIN})


def test_gpu_times_from_the_sink(tmp):
    c = run_with_fake_gpu(tmp, "on", "--iters", 4, "--domain", DOMAIN,
                          replays="dom-ascii=4:3,dom-ascii=2:1")
    expect_clean(c)
    expect_counts_match(c)  # GPU events are not ranges
    gpu = [e for e in c.trace["traceEvents"] if e.get("ph") == "X"
           and e.get("cat") == f"{DOMAIN},gpu"]
    # 6 from the flush on device 0, 1 delivered by the fake shim's thread at registration.
    expect(len(gpu) == 7, f"{len(gpu)} GPU events", c)
    tids = {(e["pid"], e["tid"]) for e in gpu}
    expect(len(tids) == 2 and all(t >= 0x40000000 for _, t in tids), f"GPU tracks {tids}", c)
    names = {e["args"]["name"] for e in c.trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name" and (e["pid"], e["tid"]) in tids}
    expect(names == {"GPU 0 \u00b7 stream 0x5000", "GPU 1 \u00b7 stream 0x6000"},
           f"track names {names}", c)
    replays = sorted(e["args"]["replay"] for e in gpu if e["name"] == "dom-ascii")
    expect(replays == [1, 1, 2, 2, 3, 4], f"replay numbers {replays}", c)
    # On the trace's clock: inside the run, before its end.
    cpu_end = max(trace_check._ns(e["ts"]) + trace_check._ns(e["dur"])
                  for e in trace_check.ranges(c.trace))
    expect(all(0 < trace_check._ns(e["ts"]) for e in gpu), "GPU time before the origin", c)
    expect(all(trace_check._ns(e["ts"]) < cpu_end + 10**9 for e in gpu), "GPU time far off", c)
    meta = c.summary()
    expect(meta.get("gpu") == {"timed": 7, "inFlightAtExit": 1, "notTimed": 2,
                               "alignErrorNs": 250}, f"gpu block {meta.get('gpu')}", c)
    lines = c.stderr.splitlines()
    expect(any(GPU_TABLE_HEADER.match(line) for line in lines), "GPU column header", c)
    row = next((line for line in lines if line.startswith(DOMAIN) and " dom-ascii " in line), "")
    cells = row.split()
    # domain, range, 7 CPU cells, then gpu count 6, total 0.014 ms (4 x 3 us + 2 x 1 us).
    expect(cells[2] == "4" and cells[9] == "6" and cells[10] == "0.014", f"row {row!r}", c)
    expect("gpu: 7 replays timed, 1 in flight at exit, 2 not timed, alignment error <= 0.250 us"
           in lines, "gpu line", c)


def test_gpu_lengths_kept_where_starts_overlap(tmp):
    """F138: 1000 replays of 10 us run end to end, handed over with their starts rounded to a
    15.625 us grid (what the shim delivered 140 s into a run: float offsets from an old
    reference), alignment error 8.06 us. The trace and the table show each replay as long as the
    shim measured it (10 us), moved whole where it overlapped its predecessor; `check` fails a
    bound of 8 us on the mean, and `compare` against the same replays handed over exactly sees
    no change. (Shown with its start cut, a third of the replays were 0 us long, the mean 6.4 us:
    `check` passed the 8 us bound and `compare` called the same graph 56 % slower.)"""
    runs = {}
    for grid in ("15625", "0"):
        env = {"LD_PRELOAD": environment_path("FAKE_GPU_SHIM_LIB"), "FAKE_GPU_SHIM": "on",
               "FAKE_GPU_REPLAYS": "dom-ascii=1000:10", "FAKE_GPU_START_GRID_NS": grid,
               "FERRUM_REPLAY_DOMAIN": DOMAIN}
        c = run_client(tmp, "--iters", 4, "--domain", DOMAIN, env=env,
                       out=os.path.join(tmp, f"grid{grid}.json"))
        expect_clean(c)
        runs[grid] = c
    c = runs["15625"]
    gpu = [e for e in c.trace["traceEvents"] if e.get("ph") == "X"
           and e.get("cat") == f"{DOMAIN},gpu" and e["name"] == "dom-ascii"]
    expect(len(gpu) == 1000, f"{len(gpu)} GPU events", c)
    lengths = sorted({trace_check._ns(e["dur"]) for e in gpu})
    expect(lengths == [10000], f"GPU event lengths {lengths[:5]}... ns, all 10000 measured", c)
    spans = sorted((trace_check._ns(e["ts"]), trace_check._ns(e["ts"]) + trace_check._ns(e["dur"]))
                   for e in gpu)
    overlaps = sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1])
    expect(overlaps == 0, f"{overlaps} GPU events overlap their predecessor", c)
    row = next((line for line in c.stderr.splitlines()
                if line.startswith(DOMAIN) and " dom-ascii " in line), "")
    cells = row.split()
    # domain, range, 7 CPU cells, then gpu count, total ms, mean us, min us.
    expect(cells[9:13] == ["1000", "10.000", "10.000", "10.000"], f"table row {row!r}", c)
    expectations = os.path.join(tmp, "expect.txt")
    with open(expectations, "w") as handle:
        handle.write("dom-ascii  1  -  0.008\n")
    judged = run_reader("check", "--domain", DOMAIN, "--expect", expectations, c.trace_path)
    verdict = judged.stdout + judged.stderr
    expect(judged.returncode == 1 and "more than max-gpu-mean-ms 0.008" in verdict,
           f"check of a 10 us graph against 8 us: {judged.returncode} {verdict!r}", c)
    for base, new in (("0", "15625"), ("15625", "0")):
        compared = run_reader("compare", "--domain", DOMAIN, runs[base].trace_path,
                              runs[new].trace_path)
        expect(compared.returncode == 0, f"compare {base} -> {new}: {compared.returncode} "
               f"{compared.stdout!r} {compared.stderr!r}", c)


def test_gpu_sink_refused_changes_nothing(tmp):
    for mode in ("off", None):
        env = {"FERRUM_REPLAY_DOMAIN": DOMAIN}
        if mode:
            env.update(LD_PRELOAD=environment_path("FAKE_GPU_SHIM_LIB"), FAKE_GPU_SHIM=mode,
                       FAKE_GPU_REPLAYS="dom-ascii=3")
        c = run_client(tmp, "--iters", 3, "--domain", DOMAIN, env=env)
        expect_clean(c)
        expect(not any(str(e.get("cat", "")).endswith(",gpu") for e in c.trace["traceEvents"]),
               "GPU events without a sink", c)
        expect("gpu" not in c.summary(), "gpu block without a sink", c)
        expect(any(TABLE_HEADER.match(line) for line in c.stderr.splitlines()), "CPU header", c)
        expect(not any(line.startswith("gpu:") for line in c.stderr.splitlines()), "gpu line", c)


TESTS = {name[len("test_"):]: fn for name, fn in globals().items() if name.startswith("test_")}


def main():
    environment_path("FERRUM_RECORDER_LIB")
    environment_path("NVTX_CLIENT")
    names = sys.argv[1:] or list(TESTS)
    passed = failed = skipped = 0
    for name in names:
        if name not in TESTS:
            print(f"FAIL {name}: no such test")
            failed += 1
            continue
        with tempfile.TemporaryDirectory(prefix="ferrum-recorder-") as tmp:
            try:
                TESTS[name](tmp)
            except Skip as why:
                skipped += 1
                print(f"skip {name}: {why}")
                continue
            except (AssertionError, trace_check.TraceError, KeyError,
                    subprocess.TimeoutExpired) as error:
                failed += 1
                print(f"FAIL {name}: {type(error).__name__}: {error}")
                continue
        passed += 1
        print(f"ok   {name}")
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
