#!/usr/bin/env python3
"""ferrum_replay_traces.py: what `ferrum-replay` and `ci-smoke-profile` do with traces and
reports once a program has run. Standard library only; installed beside the libraries.

    summary [--domain D] [--by-process] TRACE...
        the recorder's per-range table, over saved traces (one or many processes)
    compare [--threshold PCT] BASE NEW
        mean GPU time per graph (CPU launch time where there is none), BASE against NEW, each
        a trace or a directory of traces; exit 1 when a graph grew by more than PCT% (default
        10) or is missing from NEW, 2 on bad input
    merge -o OUT TRACE...
        one Chrome/Perfetto trace from per-process (per-rank) traces, or from merged traces:
        one process track each, pids kept distinct, processes named by rank and file, time
        stamps aligned
    written --since STAMP PATTERN
        the traces of one recording session: files matching a recorder output pattern that
        hold a trace whose recorder started after STAMP was made
    nsys-table --domain D --stats-base BASE REPORT
        our domain's rows of `nsys stats` nvtx_sum / nvtx_gpu_proj_sum CSV files
    check [options] TRACE...
        the CI smoke verdict (see `check --help`): one line, exit 0 (pass) or 1 (fail)

Hidden helpers of the sh wrapper (one implementation of docs/text-rules.md): expand, fresh,
quote, record-output, record-report. (The sh wrapper doubles '%' itself: literal_pattern.)

Trace format: recorder/trace_writer.hpp. Every reader streams: memory does not grow with
the number of events (one event or metadata value may be at most MAX_VALUE bytes). Inputs
named twice (the same file by another path) are read once. Exit status 2: unreadable input or
bad usage.
"""
import argparse
from array import array
import codecs
import collections
import csv
import errno
import fcntl
import fnmatch
import glob
import hashlib
import json
import math
import os
import re
import shlex
import signal
import socket
import stat
import sys
import tempfile
import time


class InputError(Exception):
    """A file we were given cannot be used; the message names it."""


# ---- text rules (docs/text-rules.md; cases: tests/cases/text_rules.json) ----

MESSAGE_LIMIT = 200  # bytes of a value echoed in a message
EXPAND_LIMIT = 4095  # bytes of an expanded output pattern
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
codecs.register_error("ferrum-replay-qmark", lambda e: ("?" * (e.end - e.start), e.end))
# C0, DEL, C1; U+2028/U+2029; the bidi embeddings, overrides (U+202A..U+202E) and isolates
# (U+2066..U+2069), which reorder the rest of a line on screen (review EE5).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069]")


def _as_bytes(value):
    if isinstance(value, bytes):
        return value
    # Text from argv or the file system: undecodable bytes come back as themselves. A lone
    # surrogate from a trace's JSON ("\ud800") is no byte of anyone's: it becomes the malformed
    # sequence it would be in UTF-8, which printable() shows as '?'s.
    text = str(value)
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def printable(value, limit=None):
    """Section 3: well-formed UTF-8 is kept except C0, DEL, C1, U+2028..U+202E, U+2066..U+2069
    (each '?');
    every byte of a malformed sequence is '?'. With a limit (bytes), cut at a character
    boundary and append '...'."""
    text = _UNPRINTABLE.sub("?", _as_bytes(value).decode("utf-8", "ferrum-replay-qmark"))
    if limit is not None and len(text.encode("utf-8")) > limit:
        out, used = [], 0
        for char in text:
            size = len(char.encode("utf-8"))
            if used + size > limit:
                break
            out.append(char)
            used += size
        text = "".join(out) + "..."
    return text


def domain_name(value):
    """Section 4: (the NVTX domain to use, None or what a name must be). `value` (the user's
    FERRUM_REPLAY_DOMAIN) when it is 1 to 63 bytes that printable() keeps, not MPI (which
    Nsight hides), not GLOBAL_DOMAIN_NAME (where the program's own ranges are) nor
    MORE_DOMAINS_NAME (the program's too); otherwise,
    and when unset or empty, the default -- what the shim and the
    recorder use (they say why), so that a judge looks where the ranges are."""
    if not value:
        return DEFAULT_DOMAIN_NAME, None
    raw = _as_bytes(value)
    if len(raw) > MAX_DOMAIN_LENGTH or printable(raw).encode("utf-8") != raw:
        return DEFAULT_DOMAIN_NAME, "1 to 63 printable bytes"
    if raw == b"MPI":
        return DEFAULT_DOMAIN_NAME, "a name other than MPI, which Nsight hides"
    if raw == GLOBAL_DOMAIN_NAME.encode():
        return DEFAULT_DOMAIN_NAME, "a name other than global, the name of NVTX's default domain"
    if raw == MORE_DOMAINS_NAME.encode():
        return DEFAULT_DOMAIN_NAME, ("a name other than (more domains), the recorder's for a "
                                     "program's many")
    return raw.decode("utf-8"), None


MAX_DOMAIN_LENGTH = 63
DEFAULT_DOMAIN_NAME = "ferrum-replay"
GLOBAL_DOMAIN_NAME = "global"  # a trace's name for NVTX's default domain (the recorder's)
MORE_DOMAINS_NAME = "(more domains)"  # the recorder's for a program's domains beyond 4,096
# (The bytes, as the shim reads them: os.environ decodes with the locale's encoding.)
DEFAULT_DOMAIN = domain_name(os.environb.get(b"FERRUM_REPLAY_DOMAIN"))[0]
DOMAIN_HELP = ("the NVTX domain of the shim's ranges (default: FERRUM_REPLAY_DOMAIN's, as the "
               "shim takes it, else ferrum-replay); balance and drops are judged on the trace's "
               "counts for it where the trace counts it apart (shimDomain), else on the whole "
               "process's")


def quoted(value):
    """A user-supplied value as it stands in a message: printable, limited, single-quoted."""
    return f"'{printable(value, MESSAGE_LIMIT)}'"


_PLAIN_COUNT = re.compile(r"[0-9]+\Z")
_PLAIN_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")


def plain_count(text):
    """A count as a user types one on a command line or in an expectations file: ASCII digits.
    int() also takes a sign, '_' between digits and other scripts' digits ('١٠'), none of which
    a user meant as a count. ValueError otherwise."""
    if not _PLAIN_COUNT.match(text):
        raise ValueError(text)
    return int(text)


def plain_decimal(text):
    """A bound or a percentage as a user types one: ASCII digits, a point, an exponent; no sign
    (every bound is >= 0: '-0' is no bound), no '_', no 'nan' or 'inf', no other script's digits,
    which float() takes. ValueError otherwise, and for a value too large to be finite."""
    if not _PLAIN_DECIMAL.match(text) or not math.isfinite(float(text)):
        raise ValueError(text)
    return float(text)


def listed(texts, limit=4, separator=", "):
    """The first `limit` of a message's list, and how many it leaves out: a one-line message
    never names thousands of graphs, and never hides that there were more."""
    texts = list(texts)
    more = f" (and {len(texts) - limit} more)" if len(texts) > limit else ""
    return separator.join(texts[:limit]) + more


def expand_output(pattern, pid=None, host=None, env=None):
    """Section 1: (expansion, [names of unset variables]). %p is the pid of the ferrum-replay
    wrapper that started us (FERRUM_REPLAY_PID), else ours. Raises InputError when the
    expansion is longer than EXPAND_LIMIT bytes."""
    if pid is None:
        pid = os.environ.get("FERRUM_REPLAY_PID") or os.getpid()
    if env is None:
        env = os.environ
    out, unset, i, n = [], [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        spec = pattern[i + 1] if i + 1 < n else ""
        if c != "%" or spec == "":
            # A relative pattern whose leading placeholders expanded to nothing (an unset
            # %q{DIR}/) stays relative: it never names the root directory.
            if c == "/" and i > 0 and not any(out):
                out.append(".")
            out.append(c)
            i += 1
        elif spec == "p":
            out.append(str(pid))
            i += 2
        elif spec == "h":
            if host is None:
                try:
                    host = socket.gethostname()
                except OSError:
                    host = ""
            out.append(host)
            i += 2
        elif spec == "%":
            out.append("%")
            i += 2
        elif spec == "q" and pattern.startswith("{", i + 2) and "}" in pattern[i + 3:]:
            close = pattern.index("}", i + 3)
            name = pattern[i + 3:close]
            if _VARIABLE.match(name):
                value = env.get(name)
                if value is None:
                    if name not in unset:
                        unset.append(name)
                else:
                    out.append(value)
            else:
                out.append(pattern[i:close + 1])  # not a variable name: kept literally
            i = close + 1
        else:
            out.append(c)
            i += 1
    text = "".join(out)
    if len(_as_bytes(text)) > EXPAND_LIMIT:
        raise InputError(f"{quoted(pattern)} expands to more than {EXPAND_LIMIT} bytes")
    return text, unset


def literal_pattern(path):
    """Section 1: the pattern that expands to exactly `path` (every '%' doubled), for a
    literal path handed on where a pattern is expected."""
    return path.replace("%", "%%")


def unset_warning(pattern, unset):
    names = ", ".join(f"%q{{{name}}}" for name in unset)
    return (f"warning: {names} in {quoted(pattern)}: {'these variables are' if len(unset) > 1 else 'the variable is'} "
            "not set (expanded to nothing)")


def fresh_name(path, token):
    """Section 2: NAME.TOKEN.EXT (NAME.TOKEN without an extension) in the last component."""
    base = path.rfind("/") + 1
    dot = path.rfind(".")
    if base < dot < len(path) - 1:
        return f"{path[:dot]}.{token}{path[dot:]}"
    return f"{path}.{token}"


# ---- reading traces: one streaming reader ----

CHUNK = 1 << 20        # characters read at a time
MAX_VALUE = 16 << 20   # one event, or one top-level value other than traceEvents
_decoder = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def open_regular(path, binary=False, what="a trace file", follow=True):
    """Opens a regular file for reading, or refuses in one line: a FIFO, a device such as
    /dev/zero, a directory or a socket is never read (nor waited on: O_NONBLOCK). Every input
    a judge reads goes through here (`what` names it in the refusal); `follow=False` refuses a
    symbolic link too (files the shim made itself, which are never links)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC |
                     (0 if follow else os.O_NOFOLLOW))
    except OSError as error:
        raise InputError(f"{quoted(path)}: cannot read: {error.strerror or error}") from error
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else
                    "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise InputError(f"{quoted(path)}: {kind}, not {what}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    if binary:
        return os.fdopen(fd, "rb")
    return os.fdopen(fd, "r", encoding="utf-8", newline="")


class TraceReader:
    """Reads a Chrome trace-event object {"traceEvents": [...], ...} incrementally: events
    are handed to a callback in batches; every other top-level value is kept (each at most
    MAX_VALUE bytes) and returned. Memory: the buffer (about CHUNK, or one event), not the
    trace. Lines that are whole events (the recorder writes one per line) are decoded many
    at a time by the C decoder; anything else one value at a time."""

    def __init__(self, path):
        self.path = path
        self.handle = open_regular(path)
        self.buf, self.pos, self.eof, self.dropped = "", 0, False, 0
        self.fast = True  # whether whole lines may be decoded at once (reset by fill)

    def close(self):
        self.handle.close()

    def fail(self, what, at=None):
        where = f" (character {self.dropped + (self.pos if at is None else at)})"
        raise InputError(f"{quoted(self.path)}: not valid JSON: {what}{where}")

    def fill(self):
        try:
            data = self.handle.read(CHUNK)
        except UnicodeDecodeError as error:
            raise InputError(f"{quoted(self.path)}: not valid JSON: not UTF-8 text "
                             f"({error.reason})") from error
        except OSError as error:
            raise InputError(f"{quoted(self.path)}: cannot read: "
                             f"{error.strerror or error}") from error
        if not data:
            self.eof = True
            return
        self.dropped += self.pos
        self.buf = self.buf[self.pos:] + data
        self.pos = 0
        self.fast = True

    def peek(self):
        """The next character that is not whitespace ('' at the end), not consumed."""
        while True:
            self.pos = _WHITESPACE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos:self.pos + 1]
            self.fill()

    def value(self, what="a value"):
        self.peek()
        while True:
            try:
                obj, end = _decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as error:
                incomplete = (error.pos >= len(self.buf) - 8 or
                              error.msg.startswith("Unterminated string"))
                if self.eof or not incomplete:
                    self.fail(error.msg, error.pos)
            except RecursionError as error:
                raise InputError(f"{quoted(self.path)}: JSON nested too deeply for a "
                                 "trace") from error
            else:
                if end < len(self.buf) or self.eof:
                    self.pos = end
                    return obj
                # (at the buffer's end: a number may go on)
            # Incomplete so far: read on, up to MAX_VALUE (whatever the value: a string, an
            # object, a number).
            if len(self.buf) - self.pos > MAX_VALUE:
                raise InputError(f"{quoted(self.path)}: {what} larger than "
                                 f"{MAX_VALUE >> 20} MiB: not a trace this tool reads")
            self.fill()

    def events(self, on_batch):
        """After '[': the array's elements, in batches, to on_batch(list)."""
        if self.peek() == "]":
            self.pos += 1
            return
        loads = json.loads
        while True:
            # Whole lines ending in ',' are a list of elements when "[" + lines + "]" decodes
            # (it cannot decode if the lines end the array or cut an element).
            # The array's end is the first "\n]" (a raw line break is never inside a string):
            # cut before it. One failed attempt per buffer; then one value at a time.
            if self.fast:
                limit = self.buf.find("\n]", self.pos)
                nl = self.buf.rfind("\n", self.pos, len(self.buf) if limit < 0 else limit)
                piece = self.buf[self.pos:nl].rstrip() if nl > self.pos else ""
                batch = None
                if len(piece) > 1 and piece[-1] == ",":
                    try:
                        batch = loads("[" + piece[:-1] + "]")
                    except (ValueError, RecursionError):
                        batch = None
                if batch:
                    on_batch(batch)
                    self.pos = nl + 1
                    if self.peek() in ("]", ""):
                        self.fail("a ',' before the end of the array")
                    continue
                self.fast = False
            on_batch([self.value("an event")])
            c = self.peek()
            if c == ",":
                self.pos += 1
                if self.peek() in ("]", ""):
                    self.fail("a ',' before the end of the array")
            elif c == "]":
                self.pos += 1
                return
            else:
                self.fail("expected ',' or ']' after an event")

    def read(self, on_batch):
        """Streams the document; returns its top-level values other than traceEvents."""
        try:
            c = self.peek()
            if c == "":
                self.fail("the file is empty")
            if c != "{":
                self.value()  # valid JSON of another shape, or an error naming the spot
                raise InputError(f"{quoted(self.path)}: no traceEvents list: not a Chrome "
                                 "trace-event file")
            self.pos += 1
            top, seen = {}, False
            c = self.peek()
            while c != "}":
                if c != '"':
                    self.fail("expected a key")
                key = self.value("a key")
                if self.peek() != ":":
                    self.fail("expected ':'")
                self.pos += 1
                if key == "traceEvents" and self.peek() == "[":
                    if seen:
                        raise InputError(f"{quoted(self.path)}: traceEvents given twice")
                    self.pos += 1
                    self.events(on_batch)
                    seen = True
                    top.pop(key, None)
                else:
                    top[key] = self.value(f"the value of {key[:40]!r}")
                c = self.peek()
                if c == ",":
                    self.pos += 1
                    c = self.peek()
                    if c == "}":
                        self.fail("a ',' before '}'")
                elif c != "}":
                    self.fail("expected ',' or '}'")
            self.pos += 1
            if self.peek() != "":
                self.fail("extra data after the trace object")
            if not seen or "traceEvents" in top:
                raise InputError(f"{quoted(self.path)}: no traceEvents list: not a Chrome "
                                 "trace-event file")
            return top
        finally:
            self.close()


def tail_metadata(path):
    """The ferrumReplay object of a trace, read from the end of the file, where the recorder
    and merge write it; None when it is not found there (the caller then reads the file)."""
    with open_regular(path, binary=True) as handle:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(max(0, size - (1 << 20)))
        text = handle.read().decode("utf-8", "replace")
    key = '"ferrumReplay":'
    at = len(text)
    # The block is the last key of the file: a few tries from the end find it. Bounded, as
    # each failed try may parse up to the end: a crafted file of 1 MiB of keys took seconds.
    for _ in range(8):
        at = text.rfind(key, 0, at)
        if at < 0:
            return None
        try:
            start = _WHITESPACE.match(text, at + len(key)).end()
            obj, end = _decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and text[end:].strip() == "}":
            return obj
    return None


def _is_number(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and abs(value) < 1e18)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2 ** 63


def _is_count(value):
    return _is_int(value) and value >= 0


def validate_meta(path, meta_value):
    """Refuses, with one line naming the file, a ferrumReplay object whose fields have types
    the readers do not expect (a hand-edited or foreign file), instead of a traceback."""
    if meta_value is None:
        return
    if not isinstance(meta_value, dict):
        raise InputError(f"{quoted(path)}: ferrumReplay is not an object")
    for key, value in meta_value.items():
        if isinstance(value, float) and not _is_number(value):
            raise InputError(f"{quoted(path)}: ferrumReplay.{key} is not a finite number")
        if isinstance(value, int) and not isinstance(value, bool) and not _is_int(value):
            raise InputError(f"{quoted(path)}: ferrumReplay.{key} is out of range")
    for key in ("pid", "ranges", "marks", "startEndRanges", "rejectedPushes") + \
            tuple(key for key, _ in DROPS):
        if key in meta_value and not _is_int(meta_value[key]):
            raise InputError(f"{quoted(path)}: ferrumReplay.{key} is not an integer")
    rank = meta_value.get("rank")
    if rank is not None and not (isinstance(rank, dict) and
                                 all(isinstance(v, (str, type(None))) or _is_int(v)
                                     for v in rank.values())):
        raise InputError(f"{quoted(path)}: ferrumReplay.rank is not a {{variable, value}} object")
    errors = meta_value.get("protocolErrors", {})
    if not isinstance(errors, dict) or not all(_is_int(v) for v in errors.values()):
        raise InputError(f"{quoted(path)}: ferrumReplay.protocolErrors is not a table of counts")
    # The shim's own counts, which the judges trust instead of the whole process's: each a
    # count the recorder writes, none above the whole process's (review OO-4: an empty or
    # negative one passed the shim's range left open, or cancelled another trace's errors).
    shim = meta_value.get("shimDomain")
    if shim is not None:
        shim_errors = shim.get("protocolErrors") if isinstance(shim, dict) else None
        if not (isinstance(shim, dict) and isinstance(shim.get("name"), str) and
                isinstance(shim_errors, dict) and set(shim_errors) == set(SHIM_ERRORS) and
                all(_is_count(shim_errors[k]) and shim_errors[k] <= errors.get(k, 0)
                    for k in SHIM_ERRORS) and
                all(_is_count(shim.get(k, 0)) and shim.get(k, 0) <= meta_value.get(k, 0)
                    for k in SHIM_DROPS) and _is_count(shim.get(SHIM_IN_FLIGHT, 0))):
            raise InputError(f"{quoted(path)}: ferrumReplay.shimDomain is not the shim's share "
                             "of the process's counts (a name, protocolErrors "
                             f"{{{', '.join(SHIM_ERRORS)}}}, each a count no larger than the "
                             f"process's; {SHIM_IN_FLIGHT} a count)")
    clock = meta_value.get("clock")
    if clock is not None and not (isinstance(clock, dict) and
                                  all(_is_int(v) for v in clock.values())):
        raise InputError(f"{quoted(path)}: ferrumReplay.clock is not a table of integers")
    merged = meta_value.get("merged")
    if merged is not None and not (isinstance(merged, list) and
                                   all(isinstance(m, dict) for m in merged)):
        raise InputError(f"{quoted(path)}: ferrumReplay.merged is not a list of objects")
    domains = meta_value.get("domains")
    if domains is not None and not (isinstance(domains, list) and
                                    all(isinstance(d, str) for d in domains)):
        raise InputError(f"{quoted(path)}: ferrumReplay.domains is not a list of names")


def validate_event(path, index, event):
    if event.get("ph") == "X":
        # A complete event says what ran, where, when and for how long: one without a duration
        # read as 0 us made a judge pass on a trace that holds no time at all.
        for key in ("name", "ts", "dur", "pid", "tid"):
            if key not in event:
                raise InputError(f"{quoted(path)}: event {index}: a complete event (\"ph\":\"X\") "
                                 f"without {key}")
    for key in ("name", "cat"):
        if key in event and not isinstance(event[key], str):
            raise InputError(f"{quoted(path)}: event {index}: {key} is not text")
    for key in ("ts", "dur"):
        if key in event and not _is_number(event[key]):
            raise InputError(f"{quoted(path)}: event {index}: {key} is not a finite number")
    if "dur" in event and event["dur"] < 0:  # no range ends before it starts
        raise InputError(f"{quoted(path)}: event {index}: dur is negative")
    for key in ("pid", "tid"):
        if key in event and not _is_int(event[key]):
            raise InputError(f"{quoted(path)}: event {index}: {key} is not an integer")
    if "args" in event and not isinstance(event["args"], dict):
        raise InputError(f"{quoted(path)}: event {index}: args is not an object")


def _ns(value):
    # ts/dur are microseconds with three decimals: integer nanoseconds keep touching ranges
    # from looking overlapped after float rounding.
    return round(float(value) * 1000)


def file_identity(path):
    st = os.stat(path)
    return st.st_dev, st.st_ino


def distinct_inputs(paths):
    """The paths in order, each file once: another path to a file already given (./a.json,
    a symbolic link, a hard link) is dropped, with a note on stderr."""
    kept, seen = [], {}
    for path in paths:
        try:
            identity = file_identity(path)
        except OSError:
            kept.append(path)  # reading it says why it cannot be read
            continue
        if identity in seen:
            print(f"ferrum-replay: note: {quoted(path)} is the same file as "
                  f"{quoted(seen[identity])}: read once", file=sys.stderr)
            continue
        seen[identity] = path
        kept.append(path)
    return kept


def duration_bucket(ns):
    """The log bucket of a duration (ns): exact below 32 ns, then 16 buckets per power of two.
    The same buckets as the recorder's DurationHistogram (recorder/summary_table.hpp)."""
    ns = int(ns) if ns > 0 else 0
    if ns < 32:
        return ns
    e = ns.bit_length() - 1
    return 32 + (e - 5) * 16 + ((ns >> (e - 4)) & 15)


def bucket_middle(bucket):
    if bucket < 32:
        return bucket
    e = (bucket - 32) // 16 + 5
    low = (16 + (bucket - 32) % 16) << (e - 4)
    return low + (1 << (e - 4)) // 2


def percentile(hist, percent, low, high):
    """The nearest-rank percentile of a {bucket: count} histogram: the middle of its bucket,
    clamped to [low, high] (within 3.2% of the exact value; exact for one distinct value)."""
    total = sum(hist.values())
    if not total:
        return 0.0
    rank = max(1, math.ceil(percent / 100 * total))
    seen = 0
    value = high
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen >= rank:
            value = bucket_middle(bucket)
            break
    return float(min(max(value, low), high))


class NameStats:
    """Per range name: the count, and the total, minimum and maximum duration (ns), and a
    histogram of log buckets for p50/p99 (duration_bucket). Compact, because memory grows with
    the distinct names (docs/reliability.md): one dict slot, one index and four array cells
    per name, a small dict of the buckets in use (a few per name: bounded by the spread of its
    durations, never by its count), and the name itself, interned (shared by every table and
    process that has it) -- not a key tuple and a list of boxed numbers each."""

    __slots__ = ("index", "count", "total", "low", "high", "hist")

    def __init__(self):
        self.index = {}             # name -> row
        self.count = array("q")
        self.total = array("d")     # float ns: exact to 2^53 ns (104 days of range time)
        self.low = array("d")
        self.high = array("d")
        self.hist = []              # per row: {bucket: count}, or one bucket as an int (_compact)

    def add(self, name, count, total, low, high, hist=None):
        """Adds `count` durations; `hist` is their {bucket: count} histogram (None: all in the
        bucket of `low`)."""
        if hist is None:
            hist = {duration_bucket(low): count} if count else {}
        row = self.index.get(name)
        if row is None:
            self.index[sys.intern(name)] = len(self.count)
            self.count.append(count)
            self.total.append(total)
            self.low.append(low)
            self.high.append(high)
            self.hist.append(self._compact(hist, count))
            return
        mine = self.histogram(row)
        for bucket, n in hist.items():
            mine[bucket] = mine.get(bucket, 0) + n
        self.count[row] += count
        self.total[row] += total
        if low < self.low[row]:
            self.low[row] = low
        if high > self.high[row]:
            self.high[row] = high
        self.hist[row] = self._compact(mine, self.count[row])

    # A name whose durations all fall in one bucket (most names of a trace with many distinct
    # names have one range each) keeps that bucket as a bare int, its count being the row's:
    # a dict per name would double the memory per distinct name.
    @staticmethod
    def _compact(hist, count):
        if len(hist) == 1:
            (bucket, n), = hist.items()
            if n == count:
                return bucket
        return dict(hist)

    def histogram(self, row):
        """The {bucket: count} histogram of `row` (a new dict for a one-bucket row)."""
        h = self.hist[row]
        return {h: self.count[row]} if h.__class__ is int else h

    def add_duration(self, row, dur):
        """One more duration for an existing row (the scan's hot path)."""
        h = self.hist[row]
        b = duration_bucket(dur)
        if h.__class__ is int:
            if h != b:
                self.hist[row] = {h: self.count[row], b: 1}
        else:
            h[b] = h.get(b, 0) + 1
        self.count[row] += 1
        self.total[row] += dur
        if dur < self.low[row]:
            self.low[row] = dur
        if dur > self.high[row]:
            self.high[row] = dur

    def percentiles(self, name):
        """(p50, p99) of `name`, in ns."""
        row = self.index[name]
        low, high = self.low[row], self.high[row]
        hist = self.histogram(row)
        return (percentile(hist, 50, low, high), percentile(hist, 99, low, high))

    def merge(self, other):
        count, total, low, high = other.count, other.total, other.low, other.high
        for name, row in other.index.items():
            self.add(name, count[row], total[row], low[row], high[row], other.histogram(row))

    def __len__(self):
        return len(self.count)

    def get(self, name):
        """(count, total, low, high) of `name`, or None."""
        row = self.index.get(name)
        return None if row is None else (self.count[row], self.total[row], self.low[row],
                                         self.high[row])

    def items(self):
        """(name, (count, total, low, high)), in no particular order."""
        count, total, low, high = self.count, self.total, self.low, self.high
        for name, row in self.index.items():
            yield name, (count[row], total[row], low[row], high[row])

    def ranges(self):
        return sum(self.count)


class GraphIndex:
    """The graph numbers of one (pid, domain)'s ranges, beside its NameStats. The shim's ranges
    carry their graph's number as their NVTX category: a graph's identity in its process, where
    its name may change (renamed after its first launches); 0 for a range without one. Per row of
    the NameStats: the number its ranges have (-1 when they have several: graphs named alike)
    and its latest start; the ranges per number of those mixed rows. Compact
    (docs/reliability.md): 16 bytes per name, nothing per number unless names are shared."""

    __slots__ = ("owner", "start", "mixed", "top", "again")

    def __init__(self):
        self.owner = array("q")     # per NameStats row: its ranges' number, or -1
        self.start = array("d")     # per NameStats row: its latest start, ns
        self.mixed = {}             # (row, number) -> ranges, for rows whose owner is -1
        # The highest number a new name came with; `again` once a new name came with a number
        # not above it: a graph seen before under another name may be (numbers are handed out
        # in order, so graphs first launched in that order and never renamed never set it).
        self.top = 0
        self.again = False


class Scan:
    """What the readers need of one trace, gathered in one streaming pass: per (pid, domain)
    the NameStats of its range names; the nesting check per thread; the process names; the
    ferrumReplay object. Memory grows with the distinct names, threads and nesting depth,
    never with the number of events."""

    def __init__(self, path, numbered=False):
        self.path = path
        self.stats = {}           # (pid, cat) -> NameStats
        # (pid, cat) -> GraphIndex of its ranges: kept for the judges that need graphs, not
        # names (`numbered`: check, compare), 16 bytes a name more.
        self.numbered = numbered
        self.graphs = {}
        self.gpu_stats = {}       # (pid, domain) -> NameStats of GPU replays (cat "DOMAIN,gpu")
        self.process_names = {}   # pid -> name (first process_name event)
        # (pid, tid) -> [last start, its end, stack of ends, their domains, None], or once two
        # domains overlapped on the track [last start, its end, None, None, {cat: stack of ends}]
        self.threads = {}
        self.cat_names = {}       # each domain's name, once
        self.problems = []        # the first few nesting problems
        self.problem_count = 0
        self.events = 0
        self.meta = {}
        top = TraceReader(path).read(self.batch)
        value = top.get("ferrumReplay")
        validate_meta(path, value)
        self.meta = value if isinstance(value, dict) else {}
        # A program's own NVTX domain whose name ends in ",gpu" (the trace lists it among its
        # domains) holds ranges, not GPU replays: the recorder counts them in "ranges".
        domains = self.meta.get("domains")
        if isinstance(domains, list):
            for pid, domain in list(self.gpu_stats):
                if f"{domain},gpu" in domains:
                    self.stats[(pid, f"{domain},gpu")] = self.gpu_stats.pop((pid, domain))

    def problem(self, text):
        self.problem_count += 1
        if len(self.problems) < 4:
            self.problems.append(text)

    def batch(self, batch):
        path, stats, threads, validate = self.path, self.stats, self.threads, validate_event
        cat_names = self.cat_names
        last_pid = last_cat = table = graphs = None
        index = self.events - 1
        self.events += len(batch)
        for event in batch:
            index += 1
            if type(event) is not dict:
                continue
            ph = event.get("ph")
            if ph == "X":
                ts = event.get("ts")
                dur = event.get("dur")
                pid = event.get("pid")
                tid = event.get("tid")
                cat = event.get("cat")
                name = event.get("name")
                # The usual event in a few type tests; anything else gets the full check
                # (which raises InputError naming the field, or finds it acceptable).
                if not ((type(ts) is float or type(ts) is int) and -1e18 < ts < 1e18 and
                        (type(dur) is float or type(dur) is int) and 0 <= dur < 1e18 and
                        type(pid) is int and type(tid) is int and type(cat) is str and
                        type(name) is str and -9223372036854775808 < pid < 9223372036854775808
                        and -9223372036854775808 < tid < 9223372036854775808 and
                        type(event.get("args", stats)) is not list):
                    validate(path, index, event)
                    cat, name = str(cat), str(name)
                start = round(ts * 1000.0)
                dur = round(dur * 1000.0)
                if table is None or pid != last_pid or cat != last_cat:
                    # One copy of each domain's name, held by the nesting stacks below (a
                    # copy per open range of a 4 KiB name took 561 MB, review QQ-1).
                    cat = cat_names.setdefault(cat, cat)
                    if cat.endswith(",gpu"):  # a GPU replay: GPU time, not a range
                        table = self.gpu_stats.get((pid, cat[:-4]))
                        if table is None:
                            table = self.gpu_stats[(pid, cat[:-4])] = NameStats()
                    else:
                        table = stats.get((pid, cat))
                        if table is None:
                            table = stats[(pid, cat)] = NameStats()
                        graphs = self.graphs.get((pid, cat))
                        if graphs is None and self.numbered:
                            graphs = self.graphs[(pid, cat)] = GraphIndex()
                    last_pid, last_cat = pid, cat
                else:
                    cat = last_cat
                row = table.index.get(name)
                if row is None:
                    table.add(name, 1, dur, dur, dur)
                else:
                    table.add_duration(row, dur)
                if cat.endswith(",gpu"):
                    continue  # GPU tracks are stream-ordered, not nested: no nesting check
                if graphs is not None:
                    args = event.get("args")
                    category = args.get("category", 0) if type(args) is dict else 0
                    if type(category) is not int or not 0 <= category <= 0xFFFFFFFF:
                        category = 0  # NVTX's are 32-bit: anything else is no graph's number
                    if row is None:  # the table's new row, its last
                        graphs.owner.append(category)
                        graphs.start.append(start)
                        if category > graphs.top:
                            graphs.top = category
                        elif category:
                            graphs.again = True
                    else:
                        owner = graphs.owner[row]
                        if owner != category:
                            mixed = graphs.mixed
                            if owner >= 0:  # a second number: the ranges so far were all owner's
                                mixed[(row, owner)] = table.count[row] - 1
                                graphs.owner[row] = -1
                            mixed[(row, category)] = mixed.get((row, category), 0) + 1
                        if start > graphs.start[row]:
                            graphs.start[row] = start
                # Nesting, per track (pid, tid), as the events come: each track's ranges are in
                # start order, enclosing ranges first, and nest — a domain that interleaves with
                # another on its thread has a track of its own (trace_writer.hpp; merge keeps
                # that order) — but only 64 per thread (range_tracks.hpp): beyond, two domains'
                # ranges share a track and may overlap there, no error of either (NVTX keeps a
                # stack per thread and domain). `check` failed the program's 65 interleaving
                # domains as "ranges do not nest" (review LL-2): a track where two domains'
                # ranges overlap is checked per domain from then on (a stack for each: memory
                # for those tracks only).
                end = start + dur
                thread = threads.get((pid, tid))
                if thread is None:
                    threads[(pid, tid)] = [start, end, [end], [cat], None]
                    continue
                if start < thread[0] or (start == thread[0] and end > thread[1]):
                    self.problem(f"pid {pid} tid {tid}: {cat}/{name} at {ts} us is out of "
                                 "start order")
                    continue
                thread[0] = start
                thread[1] = end
                stacks = thread[4]
                if stacks is None:
                    stack, cats = thread[2], thread[3]
                    while stack and stack[-1] <= start:
                        stack.pop()
                        cats.pop()
                    if not stack or end <= stack[-1]:
                        stack.append(end)
                        cats.append(cat)
                        continue
                    if cats[-1] == cat:
                        self.problem(f"pid {pid} tid {tid}: {cat}/{name} at {ts} us overlaps "
                                     "its enclosing range")
                        continue
                    stacks = thread[4] = {}
                    for outer_end, outer_cat in zip(stack, cats):
                        stacks.setdefault(outer_cat, []).append(outer_end)
                    thread[2] = thread[3] = None
                stack = stacks.setdefault(cat, [])
                while stack and stack[-1] <= start:
                    stack.pop()
                if stack and end > stack[-1]:
                    self.problem(f"pid {pid} tid {tid}: {cat}/{name} at {ts} us overlaps its "
                                 "enclosing range")
                    continue
                stack.append(end)
            elif ph == "M":
                validate(path, index, event)
                if event.get("name") == "process_name":
                    pid = event.get("pid")
                    if pid not in self.process_names:
                        self.process_names[pid] = (event.get("args") or {}).get("name")

    @property
    def merged(self):
        return "merged" in self.meta

    def renamed(self, pid, cat):
        """{name: the name its graph was shown under last} for the names of (pid, cat)'s ranges
        that belong to one numbered graph, one renamed since (docs/naming.md: a name given after
        the graph's first launches). A name several graphs had stays as it is."""
        graphs, table = self.graphs.get((pid, cat)), self.stats.get((pid, cat))
        out = {}
        if graphs is None or table is None or not graphs.again:
            return out
        owner, start = graphs.owner, graphs.start
        # The rows of each number side by side: one sorted list of number << 32 | row (not a
        # dict per number: a trace of 300,000 graphs holds as many numbers); a number with two
        # rows or more is a renamed graph.
        keys = [owner[row] << 32 | row for row in range(len(owner)) if owner[row] > 0]
        keys.sort()
        names = None
        first = 0
        for end in range(1, len(keys) + 1):
            if end < len(keys) and keys[end] >> 32 == keys[first] >> 32:
                continue
            if end - first > 1:
                if names is None:
                    names = list(table.index)  # by row: rows are numbered as names come
                group = [key & 0xFFFFFFFF for key in keys[first:end]]
                last = names[max(group, key=start.__getitem__)]
                for row in group:
                    if names[row] != last:
                        out[names[row]] = last
            first = end
        return out

    def range_count(self, domain=None):
        return sum(t.ranges() for k, t in self.stats.items() if domain is None or k[1] == domain)

    def nesting_line(self):
        if not self.problems:
            return None
        more = self.problem_count - 1
        return self.problems[0] + (f" (and {more} more)" if more else "")


def process_label(meta_value, path, name=None):
    rank = meta_value.get("rank") if isinstance(meta_value.get("rank"), dict) else None
    pid = meta_value.get("pid")
    parts = []
    if rank:
        kind = "local rank" if rank.get("variable") == "LOCAL_RANK" else "rank"
        parts.append(f"{kind} {rank.get('value')}")
    if name:
        parts.append(str(name))
    if pid is not None:
        parts.append(f"pid {pid}")
    try:
        here = socket.gethostname()
    except OSError:
        here = ""
    if meta_value.get("host") and meta_value.get("host") != here:
        parts.append(f"on {meta_value['host']}")
    label = " ".join(parts[:1]) + (f" ({', '.join(parts[1:])})" if len(parts) > 1 else "")
    return label or os.path.basename(path)


def pid_labels(scan):
    """{pid: label}: a merged trace names its processes in process_name events; a recorder
    trace is one process, named from its ferrumReplay object."""
    if scan.merged:
        return {pid: str(name) for pid, name in scan.process_names.items()}
    label = process_label(scan.meta, scan.path, scan.process_names.get(scan.meta.get("pid")))
    return {pid: label for pid, _ in list(scan.stats) + list(scan.gpu_stats)}


def pid_runs(scan):
    """{pid: the process's run} for each pid of a trace's events (a merged trace's pids are its
    own): (host, pid, recorder start, process start) as run_identities tells runs apart, or, for
    a process without a recorder start, (path, pid): its file's own."""
    m = scan.meta
    entries = {}  # pid in the events -> the object that names its run
    if scan.merged:
        for entry in m["merged"]:
            if isinstance(entry, dict) and _is_int(entry.get("mergedPid")):
                entries[entry["mergedPid"]] = entry
    elif m:
        entries[m.get("pid")] = m
    runs = {}
    for pid in {pid for pid, _ in scan.stats} | {pid for pid, _ in scan.gpu_stats}:
        found = run_identities(entries[pid])[0] if pid in entries else ()
        runs[pid] = min(found) if found else (scan.path, str(pid), None, None)
    return runs


def recorder_start_text(start):
    """A recorder start (originRealtimeNs, text) as UTC time to the nanosecond, or the text."""
    try:
        ns = int(start)
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ns // 10**9)) + \
            f".{ns % 10**9:09d} UTC"
    except (TypeError, ValueError, OverflowError, OSError):
        return str(start)


def process_row_labels(scans):
    """{(scan index, pid): label}, one label per process (pid_runs), for summary --by-process.
    Labels that coincide for two processes (one pid on one host: pid reuse, containers whose
    workload is pid 1) are told apart by the file, then the recorder start, the pid, the
    path: keyed by label, two runs' replays were summed into one row set."""
    runs, labels = {}, {}  # (scan index, pid) -> run; run -> [label, path]
    for index, scan in enumerate(scans):
        names = pid_labels(scan)
        for pid, run in pid_runs(scan).items():
            runs[(index, pid)] = run
            labels.setdefault(run, [names.get(pid, str(pid)), scan.path])
    steps = (lambda run, path: f" · {os.path.basename(path)}",
             lambda run, path: (f" · recorder start {recorder_start_text(run[2])}"
                                if run[2] is not None else ""),
             lambda run, path: f" · pid {run[1]}",
             lambda run, path: f" · {path}")
    for step in steps:
        groups = collections.defaultdict(list)
        for run, entry in labels.items():
            groups[entry[0]].append(run)
        for group in groups.values():
            suffixes = [step(run, labels[run][1]) for run in group]
            if len(set(suffixes)) > 1:  # a step that tells none of them apart adds nothing
                for run, suffix in zip(group, suffixes):
                    labels[run][0] += suffix
    return {key: labels[run][0] for key, run in runs.items()}


def process_keys(scan):
    """The processes a trace holds, as (host, pid, recorder start, process start): the
    recorder's own, or those a merged trace lists (older merged traces: the pids of its
    ranges)."""
    m = scan.meta
    if scan.merged:
        entries = [e for e in m["merged"] if isinstance(e, dict)]
        if entries and all("pid" in e for e in entries):
            return {(str(e.get("host")), str(e.get("pid")),
                     str((e.get("clock") or {}).get("originRealtimeNs")
                         if isinstance(e.get("clock"), dict) else None),
                     process_start_of(e)) for e in entries}
        return {(scan.path, str(pid), None, None) for pid, _ in scan.stats}
    clock = m.get("clock") if isinstance(m.get("clock"), dict) else {}
    if not m:
        return {(scan.path, None, None, None)}
    return {(str(m.get("host")), str(m.get("pid")), str(clock.get("originRealtimeNs")),
             process_start_of(m))}


def count_processes(scans):
    keys = set()
    for scan in scans:
        keys |= process_keys(scan)
    return len(keys)


def process_start_of(meta):
    """A trace's (or merged[] entry's) processStart: the process's start key
    (common/output_file.hpp: boot, PID namespace, start tick), or "" when it has none."""
    start = meta.get("processStart") if isinstance(meta, dict) else None
    return start if isinstance(start, str) else ""


def run_identities(meta):
    """(the processes a trace holds, as (host, pid, recorder start, process start); whether that
    is all it holds). A process without a recorder start has no identity: that start
    (originRealtimeNs, to the nanosecond) is what tells one run of a process from another, and two
    traces that share an identity hold the same run's data. The process start (processStart, ""
    in older traces) tells apart what the recorder start cannot: fork children inherit their
    parent's recorder start, and sandboxed workers forked into PID namespaces of their own are
    each pid 1 (review AA3)."""
    merged = meta.get("merged")
    entries = merged if isinstance(merged, list) else [meta]
    found, complete = set(), True
    for entry in entries:
        entry = entry if isinstance(entry, dict) else {}
        clock = entry.get("clock") if isinstance(entry.get("clock"), dict) else {}
        start = clock.get("originRealtimeNs")
        if start is not None and "pid" in entry:
            found.add((str(entry.get("host")), str(entry.get("pid")), str(start),
                       process_start_of(entry)))
        else:
            complete = False
    return found, complete


def distinct_runs(paths, metas):
    """The (path, meta) pairs to read, each process's run once. Another file that holds only
    runs a kept file holds too -- a byte copy, or one of the traces a merged trace was made of --
    is dropped with a note on stderr: read twice, its ranges would count twice and a check pass
    on a run's data doubled. Two files that share some runs but each hold others cannot be read
    once either way: an input error that names both."""
    ids, complete = zip(*[run_identities(meta) for meta in metas]) if metas else ((), ())
    holding = collections.defaultdict(list)  # run -> the files that hold it, in order
    for i, runs in enumerate(ids):
        for run in runs:
            holding[run].append(i)
    kept = []
    for i, path in enumerate(paths):
        # A file whose runs all lie within another's is read there: in the one holding the most
        # runs (the first of equals), which is itself never dropped. One that also holds a
        # process without an identity holds more than its runs: always read.
        others = ([j for j in holding[min(ids[i])] if j != i and ids[i] <= ids[j]]
                  if ids[i] and complete[i] else [])
        holder = max(others, key=lambda j: (len(ids[j]), not complete[j], -j), default=None)
        if holder is None or (len(ids[holder]) == len(ids[i]) and complete[holder] and
                              holder > i):
            kept.append(i)
            continue
        host, pid, start, _ = min(ids[i])
        what = (f"process {pid} on {quoted(host)} (recorder start {start})" if len(ids[i]) == 1
                else f"{len(ids[i])} processes")
        print(f"ferrum-replay: note: {quoted(path)} holds {what} that {quoted(paths[holder])} "
              "holds too (a copy, or a trace merged into it): read once", file=sys.stderr)
    # What is left shares no run unless two files overlap without either holding the other.
    owner = {}
    for i in kept:
        for run in sorted(ids[i]):
            if run in owner:
                host, pid, start, _ = run
                raise InputError(f"{quoted(paths[owner[run]])} and {quoted(paths[i])} both hold "
                                 f"process {pid} on {quoted(host)} (recorder start {start}), and "
                                 "each holds runs the other does not: give each run's trace once")
            owner[run] = i
    return [(paths[i], metas[i]) for i in kept]


def scan_all(paths, numbered=False):
    scans = [Scan(path, numbered) for path in distinct_inputs(paths)]
    kept = {path for path, _ in distinct_runs([s.path for s in scans], [s.meta for s in scans])}
    return [scan for scan in scans if scan.path in kept]


def sum_gpu(total, gpu):
    """Adds a trace's ferrumReplay.gpu block to `total` (None: no trace had one): counts add
    up, the alignment error is the largest."""
    if not isinstance(gpu, dict):
        return total
    total = dict(total or {"timed": 0, "inFlightAtExit": 0, "notTimed": 0, "alignErrorNs": 0})
    for key in ("timed", "inFlightAtExit", "notTimed"):
        value = gpu.get(key, 0)
        total[key] += value if _is_int(value) else 0
    value = gpu.get("alignErrorNs", 0)
    total["alignErrorNs"] = max(total["alignErrorNs"], value if _is_int(value) else 0)
    return total


def gpu_line(gpu):
    return (f"gpu: {gpu['timed']} replays timed, {gpu['inFlightAtExit']} in flight at exit, "
            f"{gpu['notTimed']} not timed, alignment error <= {gpu['alignErrorNs'] / 1e3:.3f} us")


def totals(scans):
    """Sums of the recorders' own counters over every trace."""
    out = {"ranges": 0, "rejectedPushes": 0, "popWithoutPush": 0, "popWrongDomain": 0,
           "openAtExit": 0, "endUnknownId": 0, "startOpenAtExit": 0, "marks": 0,
           "startEndRanges": 0, "without_summary": 0, "gpu": None}
    out.update({key: 0 for key, _ in DROPS})
    for scan in scans:
        m = scan.meta
        if not m:
            out["without_summary"] += 1
            continue
        out["gpu"] = sum_gpu(out["gpu"], m.get("gpu"))
        out["ranges"] += int(m.get("ranges", 0))
        out["rejectedPushes"] += int(m.get("rejectedPushes", 0))
        out["marks"] += int(m.get("marks", 0))
        out["startEndRanges"] += int(m.get("startEndRanges", 0))
        for key, _ in DROPS:
            out[key] += int(m.get(key, 0))
        for key, value in (m.get("protocolErrors") or {}).items():
            out[key] = out.get(key, 0) + int(value)
    return out


# ---- summary ----

def aggregate(scans, domain=None, by_process=False, gpu=False):
    """{(process label or "", domain): NameStats} of the ranges' CPU time, or with `gpu` of
    the GPU replays' GPU time (keyed by the domain of the ranges they time); by process, one
    label per process (process_row_labels). A group with one source shares that trace's table
    (nothing is copied); a second source makes it a table of its own."""
    table, owned = {}, set()
    labels = process_row_labels(scans) if by_process else None
    for index, scan in enumerate(scans):
        for (pid, cat), stats in (scan.gpu_stats if gpu else scan.stats).items():
            if domain is not None and cat != domain:
                continue
            key = (labels[(index, pid)] if by_process else "", cat)
            group = table.get(key)
            if group is None:
                table[key] = stats
                continue
            if key not in owned:
                mine = NameStats()
                mine.merge(group)
                table[key] = group = mine
                owned.add(key)
            group.merge(stats)
    return table


def cell(text):
    return printable(text) or '""'


STAT_COLUMNS = ["count", "total ms", "mean us", "min us", "p50 us", "p99 us", "max us"]


def stat_cells(stats, name):
    """The seven cells of STAT_COLUMNS for `name` in `stats` (a NameStats or None)."""
    found = stats.get(name) if stats is not None else None
    if not found or not found[0]:
        return ["0", "-", "-", "-", "-", "-", "-"]
    count, total, low, high = found
    p50, p99 = stats.percentiles(name)
    return [str(count), f"{total / 1e6:.3f}", f"{total / count / 1e3:.3f}", f"{low / 1e3:.3f}",
            f"{p50 / 1e3:.3f}", f"{p99 / 1e3:.3f}", f"{high / 1e3:.3f}"]


def format_table(table, by_process, gpu_table=None):
    """The table's lines, made one at a time (two passes: the column widths, then the lines),
    so that memory holds no per-row text. One column rule, the recorder's
    (recorder/summary_table.hpp): STAT_COLUMNS of the CPU ranges; then, when `gpu_table`
    holds any GPU time, the same statistics of the GPU time, each header prefixed "gpu "."""
    with_gpu = bool(gpu_table) and any(len(s) for s in gpu_table.values())
    header = (["process"] if by_process else []) + ["domain", "range"] + STAT_COLUMNS
    if with_gpu:
        header += [f"gpu {c}" for c in STAT_COLUMNS]
    text_cols = (4 if by_process else 3)  # left-aligned: process?, domain, range, count

    def rows():
        keys = set(table) | (set(gpu_table) if with_gpu else set())
        for key in sorted(keys):
            stats = table.get(key)
            gpu = gpu_table.get(key) if with_gpu else None
            first = ([cell(key[0])] if by_process else []) + [cell(key[1])]
            names = set(stats.index if stats is not None else ())
            if gpu is not None:
                names |= set(gpu.index)
            for name in sorted(names):
                r = first + [cell(name)] + stat_cells(stats, name)
                if with_gpu:
                    r += stat_cells(gpu, name)
                yield r

    widths = [len(h) for h in header]
    for r in rows():
        for i, text in enumerate(r):
            if len(text) > widths[i]:
                widths[i] = len(text)

    def line(r):
        cells = [r[i].ljust(widths[i] + 3) for i in range(text_cols)]
        cells += [r[i].rjust(widths[i] + (0 if i == text_cols else 4))
                  for i in range(text_cols, len(header))]
        return "".join(cells).rstrip()

    yield line(header)
    for r in rows():
        yield line(r)


# The recorder's protocol error counters (ferrumReplay.protocolErrors) as the tables word them.
PROTOCOL_ERRORS = (("popWithoutPush", "pop without push"),
                   ("popWrongDomain", "popped in wrong domain"),
                   ("openAtExit", "open at exit"),
                   ("endUnknownId", "end of an unknown start/end range"),
                   ("startOpenAtExit", "start/end range open at exit"))


# The recorder's counts of ranges it recorded and then gave up (ferrumReplay.dropped*), as the
# recorder's own table words them (recorder/summary_table.cpp).
DROPS = (("droppedForMemory", "beyond FERRUM_RECORD_MEMORY with nowhere to spill"),
         ("droppedBeyondDepth", "nested beyond the depth limit"),
         ("droppedInSignalHandlers", "recorded by a signal handler while its thread stored one"),
         ("droppedStartEndBeyondPairing", "start/end range halves beyond what the exit pairs"))


def drops_line(t):
    """'ranges dropped by the recorder: ...', or None when it dropped none."""
    parts = [f"{t[k]} {text}" for k, text in DROPS if t.get(k)]
    return ("ranges dropped by the recorder: " + ", ".join(parts)) if parts else None


def errors_line(t):
    parts = [f"{t[k]} {text}" for k, text in PROTOCOL_ERRORS if t.get(k)]
    return "protocol errors: " + (", ".join(parts) if parts else "none")


# The ranges dropped that a trace counts for its shim's domain apart (ferrumReplay.shimDomain).
# Those dropped for memory are judged for the whole process: when FERRUM_RECORD_MEMORY was full
# with nowhere to spill, the shim's ranges (and GPU replays) were as exposed as the program's.
SHIM_DROPS = ("droppedBeyondDepth", "droppedInSignalHandlers")
# Never the shim's, whatever the trace: NVTX start/end ranges, which the shim never makes. The
# program's own, noted and never judged: they failed every run with more start/end ranges than
# the exit pairs within FERRUM_RECORD_MEMORY (review NT-3).
PROGRAM_DROPS = ("droppedStartEndBeyondPairing",)
SHIM_ERRORS = ("popWithoutPush", "popWrongDomain", "openAtExit")
# The shim's ranges open on a thread still running when the recorder's report was taken: graph
# launches in flight as the process exited (a thread inside cudaGraphLaunch as main returned).
# Neither an imbalance nor a range dropped: those launches had not returned (review OO-2).
SHIM_IN_FLIGHT = "launchesInFlightAtExit"


def launches_in_flight(scans, domain=None):
    """The shim's launches in `domain` (None: whatever its domain) that were still in flight at
    exit, over the traces that count them (ferrumReplay.shimDomain.launchesInFlightAtExit)."""
    n = 0
    for scan in scans:
        shim = (scan.meta or {}).get("shimDomain")
        if isinstance(shim, dict) and (domain is None or shim.get("name") == domain):
            n += int(shim.get(SHIM_IN_FLIGHT, 0))
    return n


def in_flight_by_process(scans, domain):
    """{(scan index, the process's pid in that trace's events): the shim's launches in `domain`
    in flight at exit} (trace_processes' keys). A trace's own count is its process's; a merged
    trace's are in its merged[] entries, trusted only when they add up to its shimDomain's."""
    out = {}
    for index, scan in enumerate(scans):
        m = scan.meta or {}
        shim = m.get("shimDomain")
        if not (isinstance(shim, dict) and shim.get("name") == domain):
            continue
        total = int(shim.get(SHIM_IN_FLIGHT, 0))
        if not total:
            continue
        if not scan.merged:
            if _is_int(m.get("pid")):
                out[(index, m["pid"])] = total
            continue
        parts = {}
        for entry in m["merged"]:
            n = entry.get(SHIM_IN_FLIGHT) if isinstance(entry, dict) else None
            if _is_count(n) and n and _is_int(entry.get("mergedPid")) and \
                    entry.get("shimDomain") == domain:
                key = (index, entry["mergedPid"])
                parts[key] = parts.get(key, 0) + n
        if sum(parts.values()) == total:
            out.update(parts)
    return out


def in_flight_line(n, domain=None):
    """The words for `n` launches in flight at exit, as the recorder's table has them
    (summary_table.cpp)."""
    where = f" in domain {quoted(domain)}" if domain is not None else ""
    return (f"graph launches in flight at exit{where}: {n} (another thread was still inside "
            "the launch: not in the trace)")


def judged_counts(scans, domain):
    """({protocol error: n}, {drop: n}, own): the counts that judge the shim's ranges in
    `domain`, and whether they are that domain's own. Where a trace counts its shim's domain
    apart (ferrumReplay.shimDomain) and it is `domain`, those; else (an older trace, another
    domain asked) the whole process's, the program's own NVTX use included. The program's own
    habits -- an outer range left open at exit, `while (nvtxRangePop() >= 0)`, a daemon thread
    inside its range when main returns, pushes it leaks by the ten thousand, a sampling signal
    handler's ranges -- are not the shim's to answer for, and failed every such run (reviews
    LL-1, LL-5, OO-1)."""
    errors = {key: 0 for key, _ in PROTOCOL_ERRORS}
    drops = {key: 0 for key, _ in DROPS}
    own = True
    for scan in scans:
        meta = scan.meta or {}
        shim = meta.get("shimDomain")
        if domain is not None and isinstance(shim, dict) and shim.get("name") == domain:
            counts = shim.get("protocolErrors") or {}
            dropped = {key: shim.get(key, 0) if key in SHIM_DROPS else meta.get(key, 0)
                       for key in drops}
        else:
            counts, dropped, own = meta.get("protocolErrors") or {}, meta, False
        for key in errors:
            errors[key] += int(counts.get(key, 0))
        for key in drops:
            if key not in PROGRAM_DROPS:
                drops[key] += int(dropped.get(key, 0))
    return errors, drops, own


def shim_domains(metas):
    """The traces' shimDomain blocks where every one has one, all of one domain; else None."""
    shims = [(m or {}).get("shimDomain") for m in metas]
    if shims and all(isinstance(s, dict) for s in shims) and \
            len({s.get("name") for s in shims}) == 1:
        return shims
    return None


def whose_errors(metas):
    """' (none in the shim's domain D)' or ' (N of them in ...)', as the recorder's table says
    whose its protocol errors are (summary_table.cpp); '' where the traces do not tell."""
    shims = shim_domains(metas)
    if not shims:
        return ""
    n = sum(int(v) for s in shims for v in (s.get("protocolErrors") or {}).values())
    return (f" ({'none' if n == 0 else f'{n} of them'} in the shim's domain "
            f"{printable(shims[0]['name'])})")


def others_line(t):
    """Marks and start/end ranges: in the traces, never in the range tables (they have no
    push/pop duration); None when there are none."""
    if not t.get("marks") and not t.get("startEndRanges"):
        return None
    return f"also in the traces: {t['marks']} marks, {t['startEndRanges']} start/end ranges"


def by_graph(scans, domain, gpu=False):
    """aggregate()'s NameStats of `domain` over all processes, with each range under the name
    its graph was shown under last (Scan.renamed): a graph renamed after its first launches is
    one row, as the launch summary has it, not one per name it had. The GPU replays' names
    follow their ranges'."""
    renames = {}
    for index, scan in enumerate(scans):
        for pid, cat in scan.graphs:
            if cat == domain:
                renamed = scan.renamed(pid, cat)
                if renamed:
                    renames[(index, pid)] = renamed
    if not renames:
        return aggregate(scans, domain, gpu=gpu).get(("", domain)) or NameStats()
    table = NameStats()
    for index, scan in enumerate(scans):
        for (pid, cat), stats in (scan.gpu_stats if gpu else scan.stats).items():
            if cat != domain:
                continue
            renamed = renames.get((index, pid), {})
            for name, row in stats.index.items():
                table.add(renamed.get(name, name), stats.count[row], stats.total[row],
                          stats.low[row], stats.high[row], stats.histogram(row))
    return table


def untimed_in_processes(scans, domain, wanted, renamed=False):
    """{graph name: [process label, ...]}: the graphs of `domain` among `wanted` (a set of
    names, or a mapping: a graph is wanted by any of its names) that a process replayed (it has
    ranges of them) without a single GPU time, per process (F89's "a graph without GPU time never passes a GPU gate", process by
    process: one process timed and fast, another untimed and slow, and a mean over the timed
    one passed the whole run). With `renamed`, names as by_graph shows them (a graph renamed
    after its first launches is one graph). Only the wanted names are held: a trace of 200,000
    names costs no table of them here."""
    labels = None
    out = collections.defaultdict(list)
    for index, scan in enumerate(scans):
        for (pid, cat), stats in scan.stats.items():
            if cat != domain:
                continue
            gpu = scan.gpu_stats.get((pid, cat))
            shown = scan.renamed(pid, cat) if renamed else {}
            groups = set(shown.values())  # the last names of renamed graphs
            untimed, renamed_timed = [], collections.Counter()
            for name, row in stats.index.items():
                target = shown.get(name, name)
                if not stats.count[row] or (target not in wanted and name not in wanted):
                    continue
                found = gpu.get(name) if gpu is not None else None
                if target in groups:  # a renamed graph's rows (each of its names) summed first
                    renamed_timed[target] += found[0] if found else 0
                elif not found or not found[0]:
                    untimed.append(target)
            untimed += [name for name, count in renamed_timed.items() if not count]
            if untimed:
                labels = labels or process_row_labels(scans)
                for name in untimed:
                    out[name].append(labels[(index, pid)])
    return out


def untimed_text(name, processes, all_processes):
    """A graph of untimed_in_processes() as a message names it: with its processes, unless it
    was timed in none of the run's."""
    if len(processes) >= all_processes:
        return quoted(name)
    return f"{quoted(name)} (in {listed(quoted(p) for p in processes)})"


def numbered_ranges(scans, domain):
    """{(scan index, pid): Counter({graph number: ranges})} of `domain`'s ranges (0: ranges
    without one)."""
    out = collections.defaultdict(collections.Counter)
    for index, scan in enumerate(scans):
        for (pid, cat), graphs in scan.graphs.items():
            if cat != domain:
                continue
            counts, owner, ranges = out[(index, pid)], graphs.owner, scan.stats[(pid, cat)].count
            for row, category in enumerate(owner):
                if category >= 0:
                    counts[category] += ranges[row]
            for (_, category), n in graphs.mixed.items():
                counts[category] += n
    return out


def trace_processes(scans):
    """{pid a process ran with: {(scan index, its pid in that trace's events, its start key or
    "")}}: a merged trace renumbers pids two inputs share, and its merged[] entries say which
    was which. The start key (processStart, common/output_file.hpp) tells two runs of one pid
    apart (containers: every run's program may be pid 1)."""
    out = collections.defaultdict(set)
    for index, scan in enumerate(scans):
        m = scan.meta
        if scan.merged:
            for entry in m["merged"]:
                if (isinstance(entry, dict) and _is_int(entry.get("pid")) and
                        _is_int(entry.get("mergedPid"))):
                    out[entry["pid"]].add((index, entry["mergedPid"], process_start_of(entry)))
        elif m and _is_int(m.get("pid")):
            out[m["pid"]].add((index, m["pid"], process_start_of(m)))
    return out


def cmd_summary(args):
    scans = scan_all(args.traces)
    # Not a judge, but its table must not pass an earlier run's trace off as the last one's
    # quietly (check's and compare's rule: later_namesakes).
    later = later_namesakes(args.traces)
    if later:
        print(f"ferrum-replay summary: note: {len(later)} trace(s) of the same name written after "
              f"the one(s) given, not summed: {listed((quoted(p) for p in later), 3)}: the file "
              "at the name may be an earlier run's (pass every trace, or the directory's)",
              file=sys.stderr)
    table = aggregate(scans, args.domain, args.by_process)
    gpu_table = aggregate(scans, args.domain, args.by_process, gpu=True)
    t = totals(scans)
    n = sum(stats.ranges() for stats in table.values())
    where = f" in domain {cell(args.domain)}" if args.domain else ""
    count = count_processes(scans)
    print(f"ferrum-replay summary: {n} ranges{where} in {len(scans)} "
          f"trace{'s' if len(scans) != 1 else ''} ({count} process{'es' if count != 1 else ''})")
    if any(len(stats) for stats in list(table.values()) + list(gpu_table.values())):
        for line in format_table(table, args.by_process, gpu_table):
            print(line)
    if t["gpu"]:
        print(gpu_line(t["gpu"]))
    if others_line(t):
        print(others_line(t))
    line = errors_line(t)
    if any(t[key] for key, _ in PROTOCOL_ERRORS):
        line += whose_errors([scan.meta for scan in scans])
    print(line)
    if drops_line(t):
        print(drops_line(t))
    in_flight = launches_in_flight(scans)
    if in_flight:
        print(in_flight_line(in_flight))
    if t["rejectedPushes"]:
        print(f"rejected pushes: {t['rejectedPushes']}")
    for scan in scans:
        line = scan.nesting_line()
        if line:
            print(f"{printable(scan.path)}: ranges do not nest: {printable(line)}")
    return 0


# ---- compare ----

def trace_inputs(path, side, newest=False):
    """One side of compare: a trace file, or a directory of traces (its *.json files) of
    the last run recorded into it (last_run_only). A directory without one is an input
    error, and so is a NEWEST trace file of a run earlier than the last one into its
    directory: NEW must be the run just made."""
    if os.path.isdir(path):
        found = sorted(glob_all(os.path.join(glob.escape(path), "*.json")))
        if not found:
            raise InputError(f"{quoted(path)}: a directory without traces (*.json)")
        untrusted = untrusted_inputs(found) if newest else []
        if untrusted:
            raise InputError(f"{side}: {untrusted[0]}")
        records = {}
        kept, left = last_run_only(found, f"compare: {side}", records)
        untellable = max((earlier_record(p, records) for p in left), default=0)
        if not kept and untellable >= UNNOTED:
            # Its start could not be noted (mark_unnoted), or its note cannot be read: whether
            # it wrote any is unknown.
            raise InputError(f"{side} {quoted(path)} holds no trace of the last `ferrum-replay "
                             "record` into it that can be told to be its: "
                             + untold(untellable, quoted(path)))
        if not kept:
            silent = silent_output(left[0], records)
            raise InputError(f"{side} {quoted(path)} holds no trace of the last `ferrum-replay "
                             f"record` into it ({f'{silent}, ' if silent else ''}which wrote "
                             f"none): its {len(left)} trace{'s are' if len(left) != 1 else ' is'}"
                             " of earlier runs")
        if newest:
            refuse_merged_earlier(kept, side)
        return kept
    untrusted = untrusted_inputs([path]) if newest else []
    if untrusted:
        raise InputError(f"{side}: {untrusted[0]}")
    records = {}
    start = earlier_record(path, records) if newest else None
    judge = records.get(("judged in", os.path.realpath(path)))
    into = f"{quoted(judge)} (parts of this merged trace were there)" if judge else \
        "its directory"
    if start is not None and start >= UNNOTED:
        raise InputError(f"{side} {quoted(path)} cannot be told to be a trace of the last "
                         f"`ferrum-replay record` into {into}: " +
                         untold(start, quoted(judge or os.path.dirname(os.path.realpath(path)))))
    silent = silent_output(path, records) if start is not None else None
    if silent:
        raise InputError(f"{side} {quoted(path)} is an earlier run's trace: the last "
                         f"`ferrum-replay record` into {into}, {silent} (began "
                         f"{record_began(start)}), wrote no trace there")
    if start is not None:
        when = record_began(start)
        raise InputError(f"{side} {quoted(path)} is an earlier run's trace: it was written "
                         "before the last `ferrum-replay record` of its name (or, for a name "
                         f"no record gives, any) into {into} began ({when}), which "
                         "wrote none there")
    if newest:
        # A run that found the name taken within moments of the last one's exit wrote beside
        # it (NAME.<pid>.EXT): the file at the name is then the earlier run's (check's rule).
        later = later_namesakes([path])
        if later:
            raise InputError(f"{side} {quoted(path)}: {len(later)} trace(s) of the same name "
                             f"written after it: {listed((quoted(p) for p in later), 3)}: the "
                             "file at the name may be an earlier run's (give the newest, or the "
                             "directory of a `ferrum-replay record`)")
        refuse_merged_earlier([path], side)
    return [path]


def same_run(base_scans, new_scans):
    """Why NEW holds data of BASE's own run, or None. A gate that compares a run with itself
    passes whatever the code did: BASE given twice, a copy of it left where this run's trace
    should be (a run that wrote none), or a directory that still holds it. A process is its
    recorder's identity: host, pid and start (originRealtimeNs; without one, only the file)."""
    def identity(path):
        try:
            return file_identity(path)
        except OSError:
            return None
    base_files = {identity(scan.path): scan.path for scan in base_scans}
    for scan in new_scans:
        found = identity(scan.path)
        if found is not None and found in base_files:
            return f"{quoted(scan.path)} is the file {quoted(base_files[found])} of BASE"
    base_keys = {}
    for scan in base_scans:
        for key in process_keys(scan):
            if key[2] not in (None, "None"):
                base_keys[key] = scan.path
    for scan in new_scans:
        for key in sorted(process_keys(scan) & set(base_keys)):
            return (f"{quoted(scan.path)} holds process {key[1]} on {quoted(key[0])} of BASE's run "
                    f"(the same recorder start as in {quoted(base_keys[key])}): a copy of BASE's "
                    "data, not a new run")
    return None


def compare_side(scans, domain):
    """(CPU NameStats, GPU NameStats) of our domain over the traces of one side."""
    for scan in scans:
        if not scan.meta:
            raise InputError(f"{quoted(scan.path)}: not a ferrum-replay trace (no ferrumReplay "
                             "summary)")
    # By graph: a graph renamed in one run and not the other (named after a warm-up launch) is
    # one graph on both sides, not a "new" one and a slower one.
    return by_graph(scans, domain), by_graph(scans, domain, gpu=True)


def trace_problems(scans, balance=True, domain=None):
    """What makes a set of traces no fair ground for a verdict, one line each -- the same for
    every judge (`check`, and `compare` on either side: it applied none of these, review EE1):
    traces without the recorder's summary, unbalanced ranges, ranges dropped, a merge of an
    earlier run's traces, ranges that do not nest, and a trace changed since its recorder
    wrote it -- fewer range events, or fewer GPU replays, than its summary counts (F105: a
    trace filtered or edited since passed on what was left; the GPU replays of a slow graph
    taken out passed a GPU bound). Protocol errors and drops are those of `domain`, the shim's,
    where the traces count them apart (judged_counts), else the whole process's. `balance`:
    also unbalanced ranges and ranges that do not nest: `check` judges them (the shim's balance
    promise), `compare` judges times, and failed every program with its own outer range left
    open at exit since F199 (review HH-6)."""
    problems = []
    t = totals(scans)
    if t["without_summary"]:
        problems.append(f"{t['without_summary']} trace(s) without the recorder's summary")
    errors, drops, own = judged_counts(scans, domain)
    whose = f" in domain {quoted(domain)}" if own else ""
    if any(errors.values()) and balance:
        problems.append(f"unbalanced ranges{whose}: " +
                        errors_line(errors)[len("protocol errors: "):])
    if drops_line(drops):
        problems.append(drops_line(drops) + ": the profile is missing them")
    for scan in scans:
        n = merged_earlier(scan.meta)
        if n:
            problems.append(f"{quoted(scan.path)} merges {n} trace{'s' if n != 1 else ''} of "
                            "an earlier run than the last `ferrum-replay record` into "
                            f"{'their' if n != 1 else 'its'} directory (merge said so): "
                            "merge only the last run's traces")
            break
    for scan in scans if balance else ():
        line = scan.nesting_line()
        if line:
            problems.append(f"ranges do not nest in {quoted(os.path.basename(scan.path))}: "
                            f"{printable(line)}")
            break
    # The recorder's (and merge's) "ranges" counts the range events it wrote, and "gpu.timed"
    # the GPU replays (trace_writer.cpp): fewer held is a trace changed since.
    for scan in scans:
        meta = scan.meta or {}
        gpu = meta.get("gpu") if isinstance(meta.get("gpu"), dict) else {}
        said, held = meta.get("ranges"), scan.range_count()
        timed, replays = gpu.get("timed"), sum(t.ranges() for t in scan.gpu_stats.values())
        if _is_int(said) and said != held:
            problems.append(f"{quoted(os.path.basename(scan.path))} holds {held} ranges, "
                            f"its recorder wrote {said}: changed since")
            break
        if _is_int(timed) and timed != replays:
            problems.append(f"{quoted(os.path.basename(scan.path))} holds {replays} GPU "
                            f"replays, its recorder timed {timed}: changed since")
            break
    return problems


def cmd_compare(args):
    base_scans = scan_all(trace_inputs(args.base, "BASE"), numbered=True)
    base_cpu, base_gpu = compare_side(base_scans, args.domain)
    if not base_cpu.index and not base_gpu.index:
        # Nothing to hold NEW against: a gate that passes here guards nothing (a BASE recorded
        # under another FERRUM_REPLAY_DOMAIN, or from a run that launched no graph).
        raise InputError(f"BASE {quoted(args.base)} holds no range of the domain "
                         f"{quoted(args.domain)}: nothing to compare with")
    new_scans = scan_all(trace_inputs(args.new, "NEW", newest=True), numbered=True)
    why = same_run(base_scans, new_scans)
    if why:
        raise InputError(f"NEW is not a run of its own: {why}; comparing a run with itself "
                         "guards nothing")
    new_cpu, new_gpu = compare_side(new_scans, args.domain)
    # A graph some of NEW's processes replayed without GPU time: its NEW mean is of the others.
    new_untimed = untimed_in_processes(new_scans, args.domain, base_gpu.index, renamed=True)
    new_processes = len(process_row_labels(new_scans)) if new_untimed else 0
    rows, regressions, missing, untimed = [], [], [], []
    for name in sorted(set(base_cpu.index) | set(base_gpu.index) |
                       set(new_cpu.index) | set(new_gpu.index)):
        # GPU time where BASE has it for this graph, else the CPU launch time. A graph with GPU
        # time in BASE and none in NEW is no pass on its CPU time: a GPU slowdown is invisible
        # there (NEW recorded with --no-gpu-time, or none of its replays finished in time).
        kind = "gpu" if base_gpu.get(name) and base_gpu.get(name)[0] else "cpu"
        base = (base_gpu if kind == "gpu" else base_cpu).get(name)
        new = (new_gpu if kind == "gpu" else new_cpu).get(name)
        base_mean = base[1] / base[0] if base and base[0] else None
        new_mean = new[1] / new[0] if new and new[0] else None
        if base_mean is None and new_mean is None:
            continue
        if new_mean is None and kind == "gpu" and new_cpu.get(name) and new_cpu.get(name)[0]:
            change = "no GPU time"
            untimed.append(name)
        elif kind == "gpu" and name in new_untimed:
            change = f"no GPU time in {len(new_untimed[name])} of NEW's processes"
            untimed.append(name)
        elif new_mean is None:
            change = "missing"
            missing.append(name)
        elif base_mean is None:
            change = "new"
        elif base_mean == 0:
            change = "+0.0%" if new_mean == 0 else "+inf%"
            if new_mean > 0:
                regressions.append(name)
        else:
            pct = (new_mean - base_mean) / base_mean * 100
            change = f"{pct:+.1f}%"
            if pct > args.threshold:
                regressions.append(name)
                change += " !"
        rows.append([cell(name), kind,
                     str(base[0]) if base else "0",
                     f"{base_mean / 1e3:.3f}" if base_mean is not None else "-",
                     str(new[0]) if new else "0",
                     f"{new_mean / 1e3:.3f}" if new_mean is not None else "-", change])
    header = ["graph", "time", "base count", "base mean us", "new count", "new mean us",
              "change"]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("".join(r[i].ljust(widths[i] + 3) if i < 2 else r[i].rjust(widths[i] + 3)
                      for i in range(len(header))).rstrip())
    if any(r[1] == "cpu" for r in rows):
        print("time: gpu = GPU time per replay; cpu = CPU launch time (BASE has no GPU time "
              "for that graph)")
    problems = []
    if regressions:
        problems.append(f"{len(regressions)} graph{'s' if len(regressions) != 1 else ''} "
                        f"slower by more than {args.threshold:g}%: "
                        + listed(quoted(n) for n in regressions))
    if missing:
        problems.append(f"{len(missing)} graph{'s' if len(missing) != 1 else ''} of BASE "
                        "missing from NEW: " + listed(quoted(n) for n in missing))
    if untimed:
        problems.append(f"{len(untimed)} graph{'s' if len(untimed) != 1 else ''} with GPU time "
                        "in BASE without any in NEW, or in some of NEW's processes (GPU timing "
                        "off, a driver without events, or no replay of it finished before "
                        "exit): " + listed(untimed_text(n, new_untimed.get(n, ()), new_processes)
                                           for n in untimed))
    # Either side no fair ground (check's rules, trace_problems): ranges dropped (its means are
    # of a part of the run), unbalanced, changed since written...
    for side, scans in (("BASE", base_scans), ("NEW", new_scans)):
        problems += [f"{side}: {problem}"
                     for problem in trace_problems(scans, balance=False, domain=args.domain)]
    if problems:
        print("ferrum-replay compare: FAIL: " + "; ".join(problems))
        return 1
    print(f"ferrum-replay compare: OK: {len(rows)} graph{'s' if len(rows) != 1 else ''}, none "
          f"slower by more than {args.threshold:g}%")
    return 0


def _threshold(text):
    try:
        return plain_decimal(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a percentage >= 0 is needed, got {text!r}") from None


# ---- merge ----

def clock_of(m):
    clock = m.get("clock")
    return clock if isinstance(clock, dict) else {}


def alignment(metas):
    """Shift in microseconds to add to each trace's ts, how the traces were aligned, and the
    merged trace's own clock (the origin its ts count from).

    ts is relative to each trace's origin (a recorder's start, or a merged trace's). On one
    host the monotonic origins share a clock (exact); across hosts the wall-clock origins are
    used (as good as the hosts' clock sync). A merged input carries the clock of its origin,
    so merged traces merge again."""
    clocks = [clock_of(m) for m in metas]
    hosts = {m.get("host") for m in metas}
    if all(c.get("originMonotonicNs") is not None for c in clocks) and len(hosts) == 1 \
            and None not in hosts:
        key, how = "originMonotonicNs", "aligned by monotonic clock (one host)"
    elif all(c.get("originRealtimeNs") for c in clocks):
        why = ("several hosts" if len(hosts - {None}) > 1 else
               "a trace names no host" if None in hosts else "a trace has no monotonic origin")
        key, how = "originRealtimeNs", f"aligned by wall clock ({why})"
    else:
        return [0.0] * len(metas), "not aligned: a trace has no clock origin (older recorder)", None
    origins = [int(c[key]) for c in clocks]
    base = min(origins)
    first = clocks[origins.index(base)]
    clock = ({"originMonotonicNs": base, "originRealtimeNs": int(first["originRealtimeNs"])}
             if key == "originMonotonicNs" and first.get("originRealtimeNs") is not None
             else {key: base})
    return [(o - base) / 1000.0 for o in origins], how, clock


def read_metadata(path):
    value = tail_metadata(path)
    if value is None:  # not where the recorder puts it: read the whole file
        value = TraceReader(path).read(lambda batch: None).get("ferrumReplay")
    validate_meta(path, value)
    return value if isinstance(value, dict) else {}


def write_atomically(out, write):
    """Writes through a fresh, unpredictable temporary beside `out` (O_EXCL, never through a
    link someone planted), made 0644 less the umask, then renamed over `out`."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(out) + ".", suffix=".tmp",
                                   dir=os.path.dirname(out))
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o644 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            write(handle)
        os.replace(tmp, out)
        tmp = None
    except OSError as error:
        raise InputError(f"{quoted(out)}: cannot write: {error.strerror or error}") from error
    finally:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass


_DESCRIPTOR_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def descriptor_of(path):
    """The descriptor a path names by itself (/dev/stdout, /dev/fd/N, /proc/self/fd/N, also
    thread-self and this process's pid), or None: such a path is written through that
    descriptor of ours, never opened, created or renamed (as common/output_file.cpp does)."""
    if path in _DESCRIPTOR_NAMES:
        return _DESCRIPTOR_NAMES[path]
    for prefix in ("/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/",
                   f"/proc/{os.getpid()}/fd/"):
        if path.startswith(prefix):
            number = path[len(prefix):]
            if number.isascii() and number.isdigit() and len(number) <= 9:
                return int(number)
    return None


def _is_stream_mode(mode):
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def is_stream_target(path):
    """Whether `path` names a stream rather than a file to create: a descriptor path, or a
    path whose target (links followed) is a character device, a FIFO or a socket."""
    if descriptor_of(path) is not None:
        return True
    try:
        return _is_stream_mode(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def write_stream(out, write):
    """Writes to the stream `out` names, in place: a descriptor path through a duplicate of
    that descriptor (EBADF when it is not open for writing); anything else opened O_WRONLY
    without O_CREAT or O_TRUNC and O_NONBLOCK (a FIFO without a reader is ENXIO at once, not
    a wait), and still a stream once open. Nothing is created, renamed or truncated."""
    try:
        number = descriptor_of(out)
        if number is not None:
            flags = fcntl.fcntl(number, fcntl.F_GETFL)
            if flags & os.O_ACCMODE == os.O_RDONLY:
                raise OSError(errno.EBADF, "the descriptor is not open for writing")
            fd = os.dup(number)
        else:
            fd = os.open(out, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            try:
                if not _is_stream_mode(os.fstat(fd).st_mode):  # replaced meanwhile
                    raise OSError(errno.EINVAL, "no longer a device, FIFO or socket")
                os.set_blocking(fd, True)  # a reader is there: write as any tool into a pipe
            except BaseException:
                os.close(fd)
                raise
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            write(handle)
    except OSError as error:
        why = error.strerror or str(error)
        if error.errno == errno.ENXIO and number is None:
            why += " (a FIFO without a reader, or a socket)"
        raise InputError(f"{quoted(out)}: cannot write: {why}") from error


def write_output(out, write):
    """An output file of the Python tools: a device, FIFO, socket or descriptor path is
    written in place as a stream; anything else through a temporary renamed into place (a
    symbolic link at `out` is replaced, never followed)."""
    if is_stream_target(out):
        write_stream(out, write)
    else:
        write_atomically(out, write)


def merged_earlier(meta):
    """How many of the processes a merged trace holds merge found to be of an earlier run than
    the last `record` into their directory (cmd_merge: earlierRun)."""
    merged = meta.get("merged") if isinstance(meta, dict) else None
    return sum(1 for m in merged or () if isinstance(m, dict) and m.get("earlierRun") is True)


def refuse_merged_earlier(paths, side):
    """NEW must be the run just made: a merged trace of NEW holding an earlier run's traces is
    an input error (the scan reports a file it cannot read)."""
    for path in paths:
        try:
            n = merged_earlier(read_metadata(path))
        except (OSError, InputError):
            continue
        if n:
            raise InputError(f"{side} {quoted(path)} merges {n} trace{'s' if n != 1 else ''} of "
                             "an earlier run than the last `ferrum-replay record` into "
                             f"{'their' if n != 1 else 'its'} directory (merge said so)")


def cmd_merge(args):
    pattern = args.output
    expanded, unset = expand_output(pattern)
    if unset:
        print(f"ferrum-replay: {unset_warning(pattern, unset)}", file=sys.stderr)
    out = os.path.abspath(expanded)
    paths = distinct_inputs(args.traces)
    try:
        out_identity = file_identity(out)
    except OSError:
        out_identity = None
    for path in paths:
        try:
            if out_identity is not None and file_identity(path) == out_identity:
                raise InputError(f"the output {quoted(out)} is one of the inputs ({quoted(path)}):"
                                 " choose another -o")
        except OSError:
            pass
    if os.path.isdir(out):
        raise InputError(f"the output {quoted(out)} is a directory: name a file")
    kept = distinct_runs(paths, [read_metadata(path) for path in paths])
    paths, metas = [path for path, _ in kept], [meta for _, meta in kept]
    # A trace of an earlier run than the last `record` into its directory (a reused one, whose
    # last run wrote none) is merged, as merge reads what it is given, but the merged trace
    # names it (earlierRun): check fails on it and compare refuses it as NEW. Named by no note,
    # the merged file was judged as the last run's (merge -o runs/merged.json runs/*.json).
    earlier_inputs = set(last_run_only(paths)[1])
    if earlier_inputs:
        n = len(earlier_inputs)
        print(f"ferrum-replay: warning: {n} of the traces merged {'are' if n != 1 else 'is'} of "
              "an earlier run than the last `ferrum-replay record` into "
              f"{'their' if n != 1 else 'its'} directory: {quoted(sorted(earlier_inputs)[0])}; "
              "the merged trace says so, and check and compare refuse it", file=sys.stderr)
    shifts, how, clock = alignment(metas)
    # Non-ASCII names as UTF-8, as the recorder writes them: older viewers show \\u escapes
    # literally. Lone surrogates (from \\ud800-style escapes in a hand-made input) cannot be
    # UTF-8: those events keep ASCII escapes, so the output stays valid UTF-8 and valid JSON.
    utf8_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    ascii_dumps = json.JSONEncoder(separators=(",", ":")).encode

    def dumps(value):
        text = utf8_dumps(value)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return ascii_dumps(value)
        return text
    used_pids = set()
    merged, counted = [], {"ranges": 0, "processes": 0}
    foreign_ranges = [0] * len(paths)  # the range events of inputs whose block does not count them

    def write(handle):
        handle.write('{"traceEvents":[')
        first = [True]

        def emit(event):
            handle.write(("\n" if first[0] else ",\n") + dumps(event))
            first[0] = False

        for index, (path, m, shift) in enumerate(zip(paths, metas, shifts)):
            is_merged = "merged" in m
            rank = m.get("rank").get("value") if isinstance(m.get("rank"), dict) else None
            sort_index = int(rank) if rank is not None and str(rank).isdigit() else 100000 + index
            pid_map = {}
            base_label = f" · {os.path.basename(path)}"

            def new_pid(pid, first_event):
                mapped = pid
                if not _is_int(mapped) or mapped in used_pids:
                    mapped = 1_000_000 + index * 1000 + len(pid_map)
                    while mapped in used_pids:
                        mapped += 1
                pid_map[pid] = mapped
                used_pids.add(mapped)
                counted["processes"] += 1
                if not is_merged:
                    name = None
                    if first_event.get("ph") == "M" and first_event.get("name") == "process_name":
                        name = (first_event.get("args") or {}).get("name")
                    emit({"ph": "M", "name": "process_name", "pid": mapped, "tid": 0,
                          "args": {"name": process_label(m, path, name) + base_label}})
                    emit({"ph": "M", "name": "process_sort_index", "pid": mapped, "tid": 0,
                          "args": {"sort_index": sort_index}})
                return mapped

            seen_events = [0]

            def batch(events):
                start = seen_events[0]
                seen_events[0] += len(events)
                for offset, e in enumerate(events):
                    if type(e) is not dict:
                        continue
                    ph = e.get("ph")
                    if ph in ("X", "M", "i", "b", "e"):
                        validate_event(path, start + offset, e)
                    if "pid" in e:
                        pid = e["pid"]
                        try:
                            mapped = pid_map[pid]
                        except KeyError:
                            mapped = new_pid(pid, e)
                        except TypeError:  # an unhashable pid of a foreign event
                            continue
                        if not is_merged and ph == "M" and e.get("name") == "process_name":
                            continue  # replaced by the label above
                        e["pid"] = mapped
                    if ph == "X" and not str(e.get("cat", "")).endswith(",gpu"):
                        counted["ranges"] += 1
                        foreign_ranges[index] += not _is_int(m.get("ranges"))
                    if ph != "M" and "ts" in e:
                        # Every event with a time is on its trace's clock and moves by the one
                        # shift: ranges, GPU replays (",gpu": left behind, they sat seconds away
                        # from their launches), marks, start/end halves, counters, anything a
                        # tool added. Metadata has no time; a time we cannot move is refused.
                        if not _is_number(e["ts"]):
                            raise InputError(f"{quoted(path)}: event {start + offset}: ts is not "
                                             "a finite number")
                        if shift:
                            e["ts"] = round(float(e["ts"]) + shift, 3)
                    emit(e)

            top = TraceReader(path).read(batch)
            validate_meta(path, top.get("ferrumReplay"))
            if is_merged:
                for entry in m["merged"]:
                    entry = dict(entry)
                    if "mergedPid" in entry:
                        try:
                            entry["mergedPid"] = pid_map.get(entry["mergedPid"],
                                                             entry["mergedPid"])
                        except TypeError:
                            pass
                    if _is_number(entry.get("shiftUs")):
                        entry["shiftUs"] = round(entry["shiftUs"] + shift, 3)
                    if path in earlier_inputs:  # each part of a merged trace of an earlier run
                        entry["earlierRun"] = True
                    merged.append(entry)
            else:
                shim = m.get("shimDomain")
                flying = shim.get(SHIM_IN_FLIGHT, 0) if isinstance(shim, dict) else 0
                merged.append({"file": os.path.abspath(path), "pid": m.get("pid"),
                               "mergedPid": pid_map.get(m.get("pid")), "host": m.get("host"),
                               **({"processStart": m["processStart"]}
                                  if isinstance(m.get("processStart"), str) else {}),
                               # Its launches in flight at exit, judged per process (check).
                               **({"shimDomain": shim["name"], SHIM_IN_FLIGHT: flying}
                                  if flying else {}),
                               "rank": m.get("rank"), "clock": clock_of(m) or None,
                               "shiftUs": round(shift, 3),
                               **({"earlierRun": True} if path in earlier_inputs else {})})
        t = {"ranges": 0, "marks": 0, "startEndRanges": 0, "rejectedPushes": 0}
        t.update({key: 0 for key, _ in DROPS})
        errors = {key: 0 for key, _ in PROTOCOL_ERRORS}
        for index, m in enumerate(metas):
            for key in t:
                t[key] += int(m.get(key, 0))
            t["ranges"] += foreign_ranges[index]  # so that "ranges" counts what the file holds
            for key in errors:
                errors[key] += int((m.get("protocolErrors") or {}).get(key, 0))
        gpu = None
        for m in metas:
            gpu = sum_gpu(gpu, m.get("gpu"))
        hosts = {m.get("host") for m in metas}
        document = {
            "version": 1, "ranges": t["ranges"], "marks": t["marks"],
            "startEndRanges": t["startEndRanges"], "rejectedPushes": t["rejectedPushes"],
            "protocolErrors": errors,
            **{key: t[key] for key, _ in DROPS if t[key]},
            "domains": sorted({d for m in metas for d in (m.get("domains") or [])}),
            "alignment": how, "merged": merged,
        }
        if gpu:
            document["gpu"] = gpu
        # The shim's own counts (judged_counts), kept where every input counts them in
        # one domain; otherwise left out, and the judges read the whole processes' counts.
        shims = shim_domains(metas)
        if shims:
            document["shimDomain"] = {
                "name": shims[0]["name"],
                "protocolErrors": {key: sum(int((s.get("protocolErrors") or {}).get(key, 0))
                                            for s in shims)
                                   for key in SHIM_ERRORS}}
            for key in (*SHIM_DROPS, SHIM_IN_FLIGHT):
                dropped = sum(int(s.get(key, 0)) for s in shims)
                if dropped:
                    document["shimDomain"][key] = dropped
        if len(hosts) == 1 and None not in hosts:
            document["host"] = next(iter(hosts))
        if clock:
            document["clock"] = clock
        handle.write('\n],\n"displayTimeUnit":"ns",\n"ferrumReplay":' + dumps(document) + "}\n")

    write_output(out, write)
    print(f"ferrum-replay: merged {len(paths)} trace{'s' if len(paths) != 1 else ''} "
          f"({counted['ranges']} ranges, {len(merged)} process{'es' if len(merged) != 1 else ''};"
          f" {how}) into {quoted(out)}", file=sys.stderr)
    return 0


# ---- one recording session (the wrapper's record, ci-smoke-profile) ----

def pattern_globs(pattern, any_variable=False):
    """A recorder output pattern as globs: %p is any pid, and so is a %q{VAR} that is not set
    here (a launcher sets RANK for each process it starts, not for us) — with ANY_VARIABLE,
    every %q{VAR}, and %h (processes on other hosts); the rest expands as the recorder
    would. A name shared by processes, or taken by another file, gets a fresh name (text
    rules, section 2). A pattern ending in '/' is a directory of default-named traces. A
    %q{VAR} that is a whole directory component may be empty where the program runs (-o
    'out/%q{JOB}/' with JOB unset: out//NAME): that component is also matched as nothing."""
    # Literal pieces, and between each two the kind of placeholder: "p" (%p, %h), "v" (%q{VAR}).
    pieces, kinds, current, i = [], [], [], 0
    while i < len(pattern):
        close = pattern.find("}", i + 3) if pattern.startswith("%q{", i) else -1
        if pattern.startswith("%%", i):
            current.append("%%")
            i += 2
        elif pattern.startswith("%p", i) or (any_variable and pattern.startswith("%h", i)):
            pieces.append("".join(current))
            kinds.append("p")
            current = []
            i += 2
        elif close > 0 and _VARIABLE.match(pattern[i + 3:close]) and \
                (any_variable or pattern[i + 3:close] not in os.environ):
            pieces.append("".join(current))
            kinds.append("v")
            current = []
            i = close + 1
        else:
            current.append(pattern[i])
            i += 1
    pieces.append("".join(current))

    def text_of(drop_empty_components):
        out = glob.escape(expand_output(pieces[0])[0])
        k = 0
        while k < len(kinds):
            # A run of variables with nothing between them (%q{A}%q{B}) is one placeholder.
            run = k
            while run + 1 < len(kinds) and kinds[run + 1] == "v" and not pieces[run + 1]:
                run += 1
            piece = pieces[run + 1]
            whole = (not out or out.endswith("/")) and piece.startswith("/")
            if not (drop_empty_components and kinds[k] == "v" and whole and
                    all(kind == "v" for kind in kinds[k:run + 1])):
                out += "*" * (run - k + 1)
            elif not out and not pattern.startswith("/"):
                out = "."  # section 1: a relative pattern stays relative
            out += glob.escape(expand_output(piece)[0])
            k = run + 1
        return out
    variants = [text_of(False)]
    if text_of(True) != variants[0]:
        variants.append(text_of(True))
    if pattern.endswith("/"):
        return [v + "ferrum-replay.*" for v in variants]
    return [g for v in variants for g in (v, fresh_name(v, "*"))]


def glob_all(pattern):
    """glob.glob, names that start with '.' included: a %q{VAR} of an unset variable expands to
    '' (-o 'tr/%q{RANK}.%p.json' writes tr/.PID.json, -o '%q{NOPE}.json' writes .json), and
    Python's glob skips such names: record said no trace was written, compare of the directory
    found none. Every search for traces and their neighbours goes through here."""
    if sys.version_info >= (3, 11):
        return glob.glob(pattern, include_hidden=True)
    magic = re.compile(r"[*?[]")
    head, tail = os.path.split(pattern)
    if not magic.search(pattern):
        return [pattern] if os.path.lexists(pattern) else []
    found = []
    for directory in (glob_all(head) if head and magic.search(head) else [head]):
        try:
            names = os.listdir(directory or os.curdir)
        except OSError:
            continue
        found += [os.path.join(directory, name) for name in names
                  if fnmatch.fnmatchcase(name, tail)]
    return found


def has_pid(pattern):
    return "%p" in pattern.replace("%%", "")


def directory_part(pattern):
    """The pattern's directory, up to and with its last '/' ('' for a bare name)."""
    return pattern[:pattern.rfind("/") + 1]


def session_start_ns(stamp):
    """When the session began: the time the wrapper wrote into its stamp (ns, wall clock),
    else the stamp's modification time."""
    st = os.stat(stamp)
    try:
        with open(stamp, encoding="ascii") as handle:
            text = handle.read(64).strip()
        if text.isdigit():
            return int(text), st.st_mtime_ns
    except (OSError, ValueError):
        pass
    return st.st_mtime_ns, st.st_mtime_ns


def session_traces(stamp, pattern):
    """The traces of this session: a regular file matching the pattern that holds a
    ferrum-replay trace naming this session (one naming none: written since the stamp by a
    recorder started after the session began). A trace of an earlier run at the same name is
    never counted. With a fixed name, the .old
    beside each name counts too: a `record` of the same name started while this one ran moved
    this run's trace there (move_earlier_trace)."""
    return sorted(session_trace_moves(stamp, pattern))


def session_trace_moves(stamp, pattern):
    """session_traces as {path: whether it is a .old that another run moved it to}."""
    since, stamp_mtime = session_start_ns(stamp)
    found = {}
    globs = [(g, False) for g in pattern_globs(pattern)]
    if not pattern.endswith("/") and not has_pid(pattern):
        # First: NAME.* of a name without an extension matches NAME.old too.
        globs = [(g + ".old", True) for g, _ in globs] + globs
    for g, moved in globs:
        for path in glob_all(g):
            if path in found:
                continue
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or path.endswith(".tmp"):
                    continue
                m = tail_metadata(path)
            except (OSError, InputError):
                continue
            origin = clock_of(m).get("originRealtimeNs") if isinstance(m, dict) else None
            # A trace that names its session is this one's exactly when it names this stamp,
            # whatever its times say: a `record` of the same name that overlaps this one writes
            # traces as new as ours, and a file system's clock behind this host's (an NFS
            # server's) dated this run's trace before the stamp ("no trace was written ... the
            # file at NAME is an earlier run's"). Only a trace without one is judged by time.
            session = m.get("session") if isinstance(m, dict) else None
            if isinstance(session, str):
                if session == stamp:
                    found[path] = moved
            elif _is_int(origin) and origin >= since and st.st_mtime_ns >= stamp_mtime:
                found[path] = moved
    return found


# ---- the last `record` into a directory ----
# A directory collects every run recorded into it, and a run that launched nothing writes no
# trace there: a judge reading the directory (or a glob of it) afterwards would judge an
# earlier run's traces. So `record` notes in the directory it writes into, for each output
# name (as globs), when its last session began; check and compare leave out a trace of that
# name written before then by another session (docs/usage.md, "Checking a run"). Each user
# has a note of their own there (records_file): in a directory several users write into, no
# one's note can stand for, block or be replaced by another's, and a trace is judged by the
# note of the user it belongs to.
RECORDS_PREFIX = ".ferrum-replay-records."
RECORDS_LIMIT = 1 << 20      # bytes of a note (thousands of names); a larger file is not ours
RECORDS_LOCK_SECONDS = 10    # the longest a `record` waits for another one's note update
OVERLAP_KEPT = 256           # sessions of other hosts an entry keeps as maybe still running
# In `overlapping`, for the sessions it had no room for (note_record): any session not listed
# may have been running, and its traces are judged by their time, as in an older note.
OVERLAP_CUT = ("*", "")
# The start read from an empty note: a `record` began there whose note could not be written
# (mark_unnoted): every trace of its user there is judged an earlier run's.
UNNOTED = 1 << 63
# What earlier_record gives for every trace of a user whose note exists but cannot be read as
# one (cut short, over RECORDS_LIMIT, a FIFO, a link, another user's): which traces are the
# last run's cannot be told, so none is (judged, such a note made every run the last one's).
UNREADABLE = UNNOTED + 1


def record_began(start):
    """When the last `record` (of a note's entry) began, as messages say it."""
    if start >= UNREADABLE:
        return "unknown: its note cannot be read"
    if start >= UNNOTED:
        return "unknown: its start could not be noted there, a full disk? no python3?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start / 1e9))


def untold(start, where):
    """Why no trace in WHERE (a quoted directory) can be told to be its last run's, for a
    START of UNNOTED or UNREADABLE (earlier_record): the end of a judge's one line."""
    if start >= UNREADABLE:
        return (f"the note of `ferrum-replay record` runs in {where} ({RECORDS_PREFIX}UID) cannot "
                "be read as one (not a regular file of at most 1 MiB of its user's holding a "
                "note): which traces are the last run's cannot be told; remove it and record "
                "again")
    return (f"the last `ferrum-replay record` into {where} could not be noted there (a full "
            "disk or quota? no python3 3.7 or newer?): which traces are its cannot be told; "
            "record again once there is room, with python3")


def records_file(uid):
    """The name of user UID's note in a directory."""
    return f"{RECORDS_PREFIX}{uid}"


def output_globs(pattern, any_variable=False):
    """The file names (globs) a recorder output pattern writes, in its directory (with
    ANY_VARIABLE: whatever value each %q{VAR} has in the program's processes)."""
    name = pattern[len(directory_part(pattern)):]
    return pattern_globs(name, any_variable) if name else ["ferrum-replay.*"]


def trusted_owner(uid, directory):
    """Whether a file owned by UID in DIRECTORY may be taken for one written for this user:
    this user's, root's (a container writing as root into a bind mount), or the directory
    owner's (who may replace anything in it anyway). Another user's file in a directory not
    theirs (a shared, sticky /tmp) may have been planted there."""
    if uid in (os.geteuid(), 0):
        return True
    try:
        return os.stat(directory or ".").st_uid == uid
    except OSError:
        return False


def trace_owner(path):
    """The user PATH belongs to — the link's and its target's, where it is a link (both must be
    trusted) — as (link owner, file owner), or None where it cannot be read."""
    try:
        return os.lstat(path).st_uid, os.stat(path).st_uid
    except OSError:
        return None


def untrusted_inputs(paths):
    """Why each of PATHS (traces) cannot be judged as this run's, [] when all can: a trace
    another user left in a directory not theirs, or one whose user's note there is not that
    user's (planted: which of the user's traces are the last run's cannot be told)."""
    why, notes = [], set()
    for path in paths:
        owners = trace_owner(path)
        if owners is None:
            continue
        # A link in its directory, the trace it leads to in the trace's (earlier_record).
        places = (os.path.dirname(os.path.abspath(path)),
                  os.path.dirname(os.path.realpath(path)))
        for owner, directory in sorted(set(zip(owners, places))):
            if not trusted_owner(owner, directory):
                why.append(f"{quoted(path)} belongs to another user (uid {owner}) in a "
                           "directory not theirs: it may have been planted there")
        owner, directory = owners[1], places[1]
        if (directory, owner) in notes:
            continue
        notes.add((directory, owner))
        note = os.path.join(directory, records_file(owner))
        try:
            note_owner = os.lstat(note).st_uid
        except OSError:
            continue
        if note_owner != owner:
            why.append(f"{quoted(note)}, the note of uid {owner}'s runs, belongs to uid "
                       f"{note_owner}: which of {quoted(directory)}'s traces are the last run's "
                       "cannot be told")
    return why


def read_records(directory, uid=None):
    """[(globs, start ns, session, overlapping, host, any_value)] noted in DIRECTORY by user UID
    (this user by default; OVERLAPPING: the sessions of that name still running when it began,
    as [(session, host)], note_record; None in a note written before they were noted; HOST:
    where the session ran, '' when not noted; ANY_VALUE: the globs of the name with any value
    of its %q{VAR}s, None where they are the globs, note_record), or None when there is a
    file at that note's name that is not such a note: not a regular file (a link someone
    planted, a FIFO, a device), not UID's (planted), larger than a note gets, or not a note.
    [] when there is none. When names had to be dropped from a full note while traces of
    theirs were still there, one more entry (["*"], that time, "", None, "", None) makes every
    trace written before then an earlier run's: a judge fails rather than pass on it."""
    uid = os.geteuid() if uid is None else uid
    try:
        fd = os.open(os.path.join(directory, records_file(uid)),
                     os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return []
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > RECORDS_LIMIT or st.st_uid != uid:
            return None
        data = os.read(fd, RECORDS_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        value = json.loads(data.decode("utf-8")) if data else {}
    except (ValueError, RecursionError):
        return None
    entries = value.get("ferrumReplayRecords") if isinstance(value, dict) else None
    if not data:
        # Emptied by a `record` that could not write its entry (mark_unnoted): which traces
        # are the last run's cannot be told, so none is.
        return [(["*"], UNNOTED, "", None, "", None)]
    if not isinstance(entries, list):
        return None
    found = []
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        globs, start, session = entry.get("names"), entry.get("startNs"), entry.get("session")
        host = entry.get("host") if isinstance(entry.get("host"), str) else ""
        overlapping = entry.get("overlapping")
        any_value = entry.get("anyValueNames")
        if not (isinstance(any_value, list) and any_value and
                all(isinstance(g, str) for g in any_value)):
            any_value = None
        if isinstance(overlapping, list) and all(
                isinstance(o, list) and len(o) == 2 and all(isinstance(x, str) for x in o)
                for o in overlapping):
            overlapping = [tuple(o) for o in overlapping]
        else:
            overlapping = None
        if (isinstance(globs, list) and globs and all(isinstance(g, str) for g in globs)
                and _is_int(start) and start >= 0 and isinstance(session, str)):
            found.append((globs, start, session, overlapping, host, any_value))
    dropped = value.get("droppedBeforeNs")
    if _is_int(dropped) and dropped > 0:
        found.append((["*"], dropped, "", None, "", None))
    return found


def lock_note(directory, seconds=RECORDS_LOCK_SECONDS):
    """(descriptor, None) holding an exclusive flock on this user's lock file beside the note
    (records_file(uid) + ".lock", made readable by this user only, so that no other user can
    open it to hold it; not the directory itself, which anyone who can read it may lock — and a
    caller serialising jobs with `flock DIR` does); closing the descriptor releases it. (None,
    why) when it cannot be had within SECONDS (another `record` stopped while noting) or at all
    (a file there that is not this user's, a file system without locks: why None)."""
    path = os.path.join(directory, records_file(os.geteuid()) + ".lock")
    planted = (f"its lock file {quoted(path)} is a link, or not a file of this user's "
               "(planted there?)")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o600)
    except OSError as error:
        # A link at its name (O_NOFOLLOW) is said; a directory that refuses files is said by
        # the recorder, whose trace it refuses too.
        return None, (planted if error.errno == errno.ELOOP else None)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)  # planted by another user: not ours to lock
            return None, planted
    except OSError:
        os.close(fd)
        return None, None
    deadline, pause = time.monotonic() + seconds, 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd, None
        except OSError as error:
            busy = error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR)
            if not busy or time.monotonic() >= deadline:
                os.close(fd)
                return None, (f"another `record` held its lock for {seconds} s" if busy
                              else None)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def note_record(pattern, stamp):
    """Notes this session's start in the directory the pattern writes into (one expanded
    here: none when its directory holds %p or an unset %q{VAR}). Best effort: a directory
    that refuses it refuses the traces too, and the recorder says so. Runs that start at once
    (the ranks of a job, each its own `record`) take turns (lock_note): none loses
    another's entry. A name is dropped only while traces of it remain when the note is full
    (RECORDS_LIMIT), and then every trace written before it counts as an earlier run's."""
    directory = directory_part(pattern)
    if not directory or has_pid(directory):
        return
    try:
        # A stream (/dev/stdout, /dev/null, a FIFO) is written in place: no trace file lands
        # in its directory, which is none of ours (/dev).
        if not pattern.endswith("/") and not has_pid(pattern) and \
                is_stream_target(expand_output(pattern)[0]):
            return
        directory, unset = expand_output(directory)
        if unset or not os.path.isdir(directory):
            return
    except (OSError, InputError):
        return
    note_path = os.path.join(directory, records_file(os.geteuid()))
    # A run without a session (no temporary file could be made for its stamp: TMPDIR and /tmp
    # unusable, as on a read-only root file system) is noted by its start alone, now, before
    # its program runs: its traces name no session and are judged by their time (written
    # since: this run's), as is every other trace of the name written before it (earlier).
    # Emptying the note instead failed every correct run there, a fresh directory's too.
    start = time.time_ns()
    try:
        start = session_start_ns(stamp)[0] if stamp else start
    except OSError:
        pass
    lock, why = lock_note(directory)
    if why:
        print(f"ferrum-replay: warning: {quoted(directory)}: {why}: this run is noted without "
              "the lock (a run noting at the same moment may lose its entry)", file=sys.stderr)
    try:
        noted = read_records(directory)
        if noted is None:
            # A file of the user's (or another user's) at the note's name: never replaced.
            # Judges do not read it either, and judge no trace of this user's there (UNREADABLE).
            print(f"ferrum-replay: warning: {quoted(note_path)} is not a note of this user's "
                  "ferrum-replay: left as it is, and this run is not noted (until it is "
                  "removed, check fails and compare refuses on every trace of yours in the "
                  "directory: which are the last run's cannot be told)", file=sys.stderr)
            return
        dropped = max((n for g, n, s, *_ in noted if g == ["*"] and not s), default=0)
        if dropped >= UNNOTED:
            # The run that emptied the note (mark_unnoted) and every one before it: earlier.
            dropped = start
        globs = output_globs(pattern)
        # The sessions of this name still running now (a session is its wrapper's stamp, there
        # until the wrapper ends): their traces, written after this start, are as much the last
        # run's as this one's (the ranks of a job, each its own `record`). Every other
        # session's trace is an earlier run's, whatever its time says (earlier_record). A
        # session of another host (ranks on other nodes, a shared file system), or of another
        # mount namespace here (a container's own /tmp), cannot be seen running from here: it
        # is kept until a run where it ran finds it ended, at most OVERLAP_KEPT of them (its
        # traces still count only when written since).
        here = stamp_view()
        candidates = {(o, h or host) for g, _, s, running, host, _ in noted if g == globs
                      for o, h in [(s, host), *(running or ())]}
        overlapping = sorted((o, h) for o, h in candidates
                             if o.startswith("/") and o != stamp and
                             (h != here or os.path.lexists(o)))
        # Beyond OVERLAP_KEPT (the ranks of a large job, each its own `record`; sessions of
        # hosts no later run visits), the list is cut, this host's kept first, and says so
        # (OVERLAP_CUT): a session dropped from it may still be running, and its traces are
        # then judged by their time — never an earlier run's only for lack of room (a good
        # job of 300 ranks failed `check`). A cut stays with the name's later entries: what
        # was dropped is not known any more.
        cut = len(overlapping) > OVERLAP_KEPT or any(
            OVERLAP_CUT in (running or ()) for g, _, _, running, *_ in noted if g == globs)
        if len(overlapping) > OVERLAP_KEPT:
            overlapping = sorted(overlapping, key=lambda p: (p[1] == here, p))[-OVERLAP_KEPT:]
        if cut:
            overlapping.append(OVERLAP_CUT)
        # A %q{VAR} set here is part of the name, but a process of the run may have it set
        # otherwise (srun's tasks each their own SLURM_PROCID under a batch step's 0, a launcher
        # exporting RANK anew): its trace is of this name too, and one an earlier run left
        # under such a name is judged by these globs (earlier_record).
        any_value = output_globs(pattern, any_variable=True)
        new = (globs, start, stamp or "", overlapping, here,
               any_value if any_value != globs else None)
        kept = sorted((e for e in noted if e[0] != new[0] and
                       not (e[0] == ["*"] and not e[2])), key=lambda e: e[1])
        text = records_text(kept, new, dropped)
        if len(text) >= RECORDS_LIMIT:
            # Full: first the names of which no trace is left (nothing to leave out).
            try:
                names = os.listdir(directory)
            except OSError:
                names = []
            literal, sessions = set(names), {}
            kept = [e for e in kept if any_matches(e[0], names, literal) or
                    any_value_traces_left(e, directory, names, sessions)]
            text = records_text(kept, new, dropped)
        while len(text) >= RECORDS_LIMIT and kept:  # then the oldest, remembering when
            dropped = max(dropped, kept.pop(0)[1])
            text = records_text(kept, new, dropped)
        try:
            if len(text) >= RECORDS_LIMIT:
                raise InputError(f"{quoted(note_path)}: this run's entry is larger than a note gets")
            write_atomically(note_path, lambda h: h.write(text + "\n"))
        except InputError as error:
            mark_unnoted(note_path, error)
    finally:
        if lock is not None:
            os.close(lock)


def mark_unnoted(note_path, why):
    """This run could not be noted (WHY: a full disk or quota for the note's new copy, or an
    entry larger than a note gets): the note, left as it was, would name the run before as the
    last one, and a judge would pass on that run's traces as this one's, which wrote none. So
    the note is emptied in place,
    which needs no room (read_records: every trace of this user in the directory is then an
    earlier run's, until a `record` there is noted again): check fails, compare refuses."""
    try:
        fd = os.open(note_path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK |
                     os.O_CLOEXEC, 0o644)
    except OSError:
        fd = None
    emptied = False
    if fd is not None:
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.ftruncate(fd, 0)
                emptied = True
        except OSError:
            pass
        finally:
            os.close(fd)
    print(f"ferrum-replay: warning: {why}: this run is not noted: " + ("until a run is noted there, check and compare fail on every trace "
                          "of yours in its directory" if emptied else
                          "check and compare of its directory may judge an earlier run's traces "
                          "as this run's"), file=sys.stderr)


def any_value_traces_left(entry, directory, names, sessions):
    """Whether a trace of ENTRY's run is left in DIRECTORY (NAMES: its list) at a name only its
    any-value names match (a process that set the %q{VAR} otherwise): the entry still judges
    it (earlier_record), and without the entry it would be an earlier run's. Told by the
    session the trace names (SESSIONS: a cache by path); an entry without a session, by any
    such name. Read only when the note is full."""
    _, _, session, overlapping, _, any_value = entry
    if not any_value:
        return False
    runs = {session, *(o for o, _ in overlapping or ())} - {""}
    for glob_ in any_value:
        for name in fnmatch.filter(names, glob_):
            if not session:
                return True
            path = os.path.join(directory, name)
            if path not in sessions:
                sessions[path] = written_for(path)[1]
            if sessions[path] in runs:
                return True
    return False


def any_matches(globs, names, literal):
    """Whether any of NAMES (a directory's list; LITERAL: the same as a set) matches one of
    GLOBS: a glob without a wildcard (most names: a job's own file) is looked up, not matched
    against every name."""
    for glob_ in globs:
        if not any(c in glob_ for c in "*?["):
            if glob_ in literal:
                return True
        elif fnmatch.filter(names, glob_):
            return True
    return False


def stamp_view():
    """Where a session's stamp can be seen from: this host and mount namespace ('host' in the
    note; a container with the host's name, `docker --network host`, has a /tmp of its own)."""
    try:
        return f"{socket.gethostname()} {os.readlink('/proc/self/ns/mnt')}"
    except OSError:
        return socket.gethostname()


def view_host(view):
    """The host name of a stamp_view(): the part whose wall clock a note's start is on (every
    mount namespace of a host shares its clock)."""
    host, sep, _ = view.rpartition(" mnt:[")
    return host if sep else view


def records_text(kept, new, dropped):
    value = {"ferrumReplayRecords": [dict({"names": g, "startNs": n, "session": s},
                                          **({"host": h} if h else {}),
                                          **({} if o is None else
                                             {"overlapping": [list(p) for p in o]}),
                                          **({} if a is None else {"anyValueNames": a}))
                                     for g, n, s, o, h, a in [*kept, new]]}
    if dropped:
        value["droppedBeforeNs"] = dropped
    return json.dumps(value, ensure_ascii=True)


def earlier_record(path, records=None):
    """When the trace at PATH is of an earlier run than the last `record` of its name into its
    directory (by its user): that record's start (ns), else None. A trace that names its
    session is judged by it, not by its time alone: the last session's is that run's; one of a
    session still running when it began (`overlapping`) is that run's when written since; any
    other is an earlier run's, however new its time of change (a clock stepped back since, an
    NFS server's clock ahead of this host's, `cp -p`, an archive unpacked: an earlier run's
    trace passed `check` as the last run's). A trace without a session, a note without
    `overlapping` (an older one), or a session left out of a cut list (OVERLAP_CUT), is judged
    by its time: written before the last record began, it is an earlier run's. A trace whose
    name the entry's pattern gives only with another value of a %q{VAR} than `record` had
    (a process of the run set it otherwise) is an earlier run's when the session it names is
    no longer in the note (a later `record` of that output replaced its entry), or is there
    only as one still running when an entry's run began, the trace written before; one that
    names no session, when written before the run of every entry whose any-value names match
    it began, unless an entry's own names do. RECORDS: a cache of read_records by directory
    and user. A symbolic link is judged as the trace it leads to, in that trace's directory
    (`latest.json -> runs/ferrum-replay.PID.json` passed as the last run's, F104).

    Besides, every trace in a directory is an earlier run's when the last `record` into it
    left no trace there (silent_record: -o D/new.json after -o D/, F108), and when its user's
    note there exists but cannot be read (UNREADABLE, F109); a trace at a name no entry gives
    (a merged all.json, a copy latest.json) is judged by unnamed_earlier (F107)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    path = os.path.realpath(path)
    directory = os.path.dirname(path)
    if records is None:
        records = {}
    key = (directory, st.st_uid)  # the note of the user the trace belongs to
    if key not in records:
        records[key] = read_records(directory, st.st_uid)
    if records[key] is None:
        return UNREADABLE
    start = judged_by_note(path, st, records[key])
    if start is None:
        # Only a trace written before that record began: one written since is of a run that
        # was still going when it began (the other ranks of a job whose each rank runs its own
        # record, %q{RANK}: the rank that started last and launched nothing failed the job's
        # good traces, at random).
        silent = silent_record(directory, st.st_uid, records)
        if silent is not None and st.st_mtime_ns < silent[1]:
            return silent[1]
        start = parts_earlier(path, st, records)
    return start


def parts_earlier(path, st, records):
    """earlier_record of a merged trace at PATH (ST: its stat) by the directories of its parts
    other than its own (`merge -o merged/all.json traces/*.json`): an earlier run's when written
    before the last `record` of a part's name into the part's directory began, or before a last
    `record` there that left no trace (silent_record), or when the note there cannot be read
    (UNREADABLE). Judged by its own directory's note alone, such a merge passed `check` and
    `compare` as the last run's after a run into `traces/` that wrote none (F107). The directory
    that judged it is kept in RECORDS for messages (judged_in)."""
    block = trace_block(path)
    parts = block.get("merged") if isinstance(block, dict) else None
    names_by_dir = {}
    for part in parts if isinstance(parts, list) else ():
        file = part.get("file") if isinstance(part, dict) else None
        if isinstance(file, str) and os.path.isabs(file):
            directory = os.path.realpath(os.path.dirname(file))
            if directory != os.path.dirname(path):
                names_by_dir.setdefault(directory, set()).add(os.path.basename(file))
    late = []
    for directory, names in sorted(names_by_dir.items()):
        key = (directory, st.st_uid)
        if key not in records:
            records[key] = read_records(directory, st.st_uid)
        if records[key] is None:
            late.append((UNREADABLE, directory))
            continue
        for globs, start, session, _, _, any_value in records[key]:
            marks_all = globs == ["*"] and not session  # names dropped from a full note
            if st.st_mtime_ns < start and (marks_all or any(
                    fnmatch.fnmatchcase(n, g) for n in names for g in globs + (any_value or []))):
                late.append((start, directory))
        silent = silent_record(directory, st.st_uid, records)
        if silent is not None and st.st_mtime_ns < silent[1]:
            late.append((silent[1], directory))
    if not late:
        return None
    start, directory = max(late)
    records[("judged in", path)] = directory
    return start


def judged_in(path, records, real=False):
    """The directory whose note judged the trace at PATH an earlier run's (earlier_record with
    RECORDS): a merged trace's part's (parts_earlier), else its own — as given, for messages, or
    REAL: the directory of the file it is (a link's target's, whose note judged it)."""
    real_path = os.path.realpath(path)
    return records.get(("judged in", real_path),
                       os.path.dirname(real_path) if real else os.path.dirname(path) or ".")


def judged_by_note(path, st, entries):
    """earlier_record by the note's ENTRIES alone, for the trace at PATH (a real path; ST: its
    stat)."""
    name = os.path.basename(path)
    block = written = False  # the trace's block and session, read once (the tail that holds it)
    own_entry, any_value_starts, named = False, [], False
    for globs, start, session, overlapping, host, any_value in entries:
        if globs != ["*"] or session:  # (not the mark of dropped names or of an unnoted run)
            named = named or any(fnmatch.fnmatchcase(name, g) for g in globs + (any_value or []))
        if not any(fnmatch.fnmatchcase(name, g) for g in globs):
            if not any_value or not any(fnmatch.fnmatchcase(name, g) for g in any_value):
                continue
            if written is False:
                block = trace_block(path)
                written = block.get("session") if block else None
                written = written if isinstance(written, str) else None
            # (A name the entry's own globs miss: another run's of its own value, say a job
            # tag, is judged by its own entry, where its session still is.)
            if written is not None and not noted_session(entries, written, st.st_mtime_ns):
                return start
            any_value_starts.append((start, host))
            continue
        own_entry = True
        if written is False:
            block = trace_block(path)
            written = block.get("session") if block else None
            written = written if isinstance(written, str) else None
        if session and written == session:
            continue
        if overlapping is None or written is None:
            if st.st_mtime_ns < start or written is None and started_before(block, start, host):
                return start
        elif st.st_mtime_ns < start or written not in {o for o, _ in overlapping} and \
                OVERLAP_CUT not in overlapping:
            return start
    # A trace without a session (a run without a stamp, a recorder before sessions) that only
    # any-value names match, and no entry's own names: by its time, written before every such
    # entry's run began (the runs of a job tag's own entry, say, wrote theirs since).
    if written is None and not own_entry and any_value_starts and all(
            st.st_mtime_ns < start or started_before(block, start, host)
            for start, host in any_value_starts):
        return min(start for start, _ in any_value_starts)
    if not named:
        return unnamed_earlier(path, st, entries, trace_block(path) if block is False else block)
    return None


def unnamed_earlier(path, st, entries, block):
    """earlier_record of a ferrum-replay trace (BLOCK: its ferrumReplay block, None for a file
    that is not one) at a name no entry of its directory's note ENTRIES gives: a merged
    `all.json`, a copy `latest.json`, `cp` under any name. Such a file counted as the last
    run's whatever it held: merged after a run, it stood in for the next run that wrote none
    (F107). So it is judged by what it holds. A merged trace, by the parts it names
    (`merged[].file`) that were in this directory: an earlier run's when changed before the
    last `record` of such a part's name began (against the newest start of any name, a merge of
    two names' last runs failed once a third name was recorded). A trace of a process that says
    it was written for this directory, by the session it names, as at its own name: of a
    session the note names, that name's last run's; of any other, an earlier run's (a copy
    made since of an earlier trace). Any other, when changed before the last `record` into the
    directory began (the newest start noted): no file written before then holds that run's
    data. A merge made since of an earlier run's traces says so itself (earlierRun)."""
    starts = [start for globs, start, session, *_ in entries if globs != ["*"] or session]
    if block is None or not starts:
        return None
    newest = max(starts)
    parts = block.get("merged") if isinstance(block.get("merged"), list) else ()
    names = {os.path.basename(p["file"]) for p in parts if isinstance(p, dict) and
             isinstance(p.get("file"), str) and
             os.path.realpath(os.path.dirname(p["file"])) == os.path.dirname(path)}
    relevant = [start for globs, start, session, _, _, any_value in entries
                if (globs != ["*"] or session) and
                any(fnmatch.fnmatchcase(n, g) for n in names for g in globs + (any_value or []))]
    if relevant:
        late = [start for start in relevant if st.st_mtime_ns < start]
        return max(late) if late else None
    session, output = block.get("session"), block.get("output")
    if isinstance(session, str) and isinstance(output, str) and "merged" not in block and \
            os.path.realpath(os.path.dirname(output)) == os.path.dirname(path) and \
            not any(OVERLAP_CUT in (e[3] or ()) for e in entries):
        return None if noted_session(entries, session, st.st_mtime_ns) else newest
    return newest if st.st_mtime_ns < newest else None


def silent_record(directory, uid, records):
    """(output, start) of the last `record` into DIRECTORY by user UID (the newest start in
    that user's note; OUTPUT: its name as globs) when it left no trace there: its program
    launched nothing, under a name of its own (-o D/new.json after -o D/, or a changed -o
    between CI runs). Every trace of that user there is then an earlier run's — the earlier
    run of another name passed `check D/*.json` and `compare BASE D` as the last one (F108).
    None otherwise, and where that record is still running here (its session stamp is
    there): it has not written its trace yet (a record of another name into the directory,
    still going, failed every finished run's trace there). A trace it left is a ferrum-replay
    trace there at one of its names of its run (entry_run_trace). RECORDS: earlier_record's
    cache; the directory is listed once."""
    key = ("silent", directory, uid)
    if key not in records:
        records[key] = None
        entries = [e for e in records.get((directory, uid)) or () if e[0] != ["*"] or e[2]]
        newest = max(entries, key=lambda e: e[1]) if entries else None
        if newest and newest[2].startswith("/") and (newest[4] or stamp_view()) == stamp_view() \
                and os.path.lexists(newest[2]):
            newest = None  # still running: its traces are still to come
        try:
            names = os.listdir(directory) if newest else []
        except OSError:
            names = None  # not listed: which traces are there cannot be told (none said)
        if newest and names is not None:
            globs = newest[0] + (newest[5] or [])
            for name in names:
                if not any(fnmatch.fnmatchcase(name, g) for g in globs):
                    continue
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_uid == uid and \
                        entry_run_trace(newest, trace_block(path), st.st_mtime_ns):
                    break
            else:
                records[key] = (newest[0], newest[1])
    return records[key]


def entry_run_trace(entry, block, mtime_ns):
    """Whether a ferrum-replay trace (BLOCK: its ferrumReplay block, None for a file that is
    not one; changed at MTIME_NS) is of the run of the note's ENTRY, as judged_by_note counts
    one: naming its session, or one still running when it began (written since); naming none
    (or in a note without `overlapping`), written since it began by a recorder started since.
    Not a trace another entry's run wrote at a name this one's any-value names also match (a
    job tag's)."""
    _, start, session, overlapping, host, _ = entry
    if block is None:
        return False
    written = block.get("session") if isinstance(block.get("session"), str) else None
    if session and written == session:
        return True
    if mtime_ns < start:
        return False
    if written is None or overlapping is None:
        return not (written is None and started_before(block, start, host))
    return OVERLAP_CUT in overlapping or written in {o for o, _ in overlapping}


def silent_output(path, records=None):
    """For messages: where PATH (a trace) is judged an earlier run's because the last `record`
    into its directory left no trace there (silent_record), that record's -o, as
    -o 'DIR/NAME' (its file names as globs; 'DIR/' for the default names); else None."""
    try:
        uid = os.stat(path).st_uid
    except OSError:
        return None
    records = {} if records is None else records
    directory = judged_in(path, records, real=True)
    if (directory, uid) not in records:
        records[(directory, uid)] = read_records(directory, uid)
    if records[(directory, uid)] is None:
        return None
    silent = silent_record(directory, uid, records)
    if silent is None:
        return None
    name = "" if silent[0][0] == "ferrum-replay.*" else silent[0][0]
    given = os.path.dirname(path)  # as the user named it, where it is the trace's own
    if os.path.realpath(given or ".") != directory:
        given = directory
    return f"-o {quoted(os.path.join(given, name) if given else name or './')}"


def noted_session(entries, written, mtime_ns):
    """Whether a trace of session WRITTEN, changed at MTIME_NS, is of a run the note ENTRIES
    still name: an entry's own session, or one still running when an entry's run began
    (`overlapping`) when written since, as earlier_record judges a trace its globs match."""
    return any(written == session or mtime_ns >= start and
               written in {o for o, _ in overlapping or ()}
               for _, start, session, overlapping, *_ in entries)


def last_run_only(paths, what=None, records=None):
    """(PATHS less the traces of runs earlier than the last `record` into their directory,
    those traces): with WHAT, one note on stderr naming what was left out, where any is kept
    (with none, the judge's refusal says so). RECORDS: earlier_record's cache, to share."""
    kept, left, records = [], [], {} if records is None else records
    for path in paths:
        start = earlier_record(path, records)
        (kept if start is None else left).append((path, start))
    if left and kept and what:
        when = record_began(max(s for _, s in left))
        n = len(left)
        print(f"ferrum-replay: {what}: {n} trace{'s' if n != 1 else ''} of an earlier run left "
              f"out, written before the last `ferrum-replay record` into "
              f"{quoted(os.path.dirname(left[0][0]) or '.')} began ({when}): "
              f"{quoted(left[0][0])}{f' (and {n - 1} more)' if n > 1 else ''}",
              file=sys.stderr)
    return [p for p, _ in kept], [p for p, _ in left]


def cmd_written(args):
    for path in session_traces(args.since, args.pattern):
        print(printable(path))
    return 0


# The shim's running marker (shim/range/process_files.hpp): DIR/ferrum-replay.PID.running, or
# DIR/ferrum-replay.PID.N.running beside another process's of the same pid number, made at a
# process's first launch and removed by its exit hook; its first line names the program, its
# image and its PID namespace.
RUNNING_MARKER_NAME = re.compile(r"ferrum-replay\.(\d+)(?:\.\d+)?\.running")
RUNNING_MARKER = re.compile(
    r"ferrum-replay: running: pid=\d+ program=(\S*)(?: image=([0-9a-f]+):([0-9a-f]+))?"
    r"(?: pidns=([0-9a-f]+))?")


def own_pid_namespace():
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def process_state(pid, image=None, pid_namespace=None):
    """"elsewhere" when the marker's process is in another PID namespace than this one (a
    container sharing the run directory: its pid names another process here, or none), else
    whether process `pid` still runs the image that made its marker (True/False): it exists,
    is not a zombie (a worker killed while the parent that would reap it lingers is dead, and
    writes nothing any more), and runs the same program file (`image`: (device, inode), as the
    marker says; another one means it replaced itself with exec, and the old image's data is
    lost). Another user's process of that pid is not ours to judge: alive."""
    if pid_namespace and own_pid_namespace() not in (None, pid_namespace):
        return "elsewhere"
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            if handle.read().rpartition(b") ")[2][:1] == b"Z":
                return False
    except OSError:
        return True
    if image and image != (0, 0):
        try:
            st = os.stat(f"/proc/{pid}/exe")
        except OSError:
            return True
        return (st.st_dev, st.st_ino) == image
    return True


# The canary of a markers' directory the wrapper made, and its name once a process could not
# make its marker there (no space, no inode, a quota): common/output_file.hpp
# kMarkerCanarySuffix, kUnmarkedSuffix (the shim's marker stem, "ferrum-replay", + suffix).
MARKER_CANARY = "ferrum-replay.all-marked"
MARKER_UNMARKED = "ferrum-replay.unmarked"


def unmarked_processes(directory):
    """Whether a process of the run could not make its running marker in `directory`: one
    that then ended without its exit hook would be missing from every count, unseen."""
    return bool(directory) and os.path.lexists(os.path.join(directory, MARKER_UNMARKED))


UNMARKED_TEXT = ("a process of the run could not make its running marker (no space or no inode "
                 "left where the markers go, or a quota): had it ended without its launch "
                 "summary (killed, _exit, exec), nothing would show it")


def unfinished_processes(directory):
    """(pid, program, state) of each process whose running marker is left in `directory`, in
    pid order: it launched and did not reach its exit hook — lost (killed, _exit, exec: False),
    still running (True), or in another PID namespace, where this one cannot tell ("elsewhere",
    process_state). A marker killed before its line was written names no program."""
    found = []
    try:
        names = os.listdir(directory) if directory else []
    except OSError:
        names = []
    for name in names:
        match = RUNNING_MARKER_NAME.fullmatch(name)
        if not match:
            continue
        program, image, pid_namespace = "?", None, None
        try:
            # Not waited on, not followed: the shim makes a regular file; anything else there
            # (a FIFO: open() blocked the judge for ever) names no program, and still counts.
            with open_regular(os.path.join(directory, name), binary=True, what="a marker",
                              follow=False) as handle:
                line = RUNNING_MARKER.match(handle.readline(512).decode("utf-8", "replace"))
            if line:
                program = line[1]
                image = (int(line[2], 16), int(line[3], 16)) if line[2] else None
                pid_namespace = int(line[4], 16) if line[4] else None
        except (OSError, InputError):
            pass
        pid = int(match[1])
        found.append((pid, program, process_state(pid, image, pid_namespace)))
    return sorted(found, key=lambda entry: entry[:2])  # states (bool, "elsewhere") do not order


def privileged_program(path):
    """Why `path` would start in secure-execution mode for this user (docs/reliability.md: the
    shim and the recorder then do nothing), or None: set-user-ID to another user, set-group-ID
    to another group, or file capabilities."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_mode & stat.S_ISUID and st.st_uid != os.getuid():
        return "is set-user-ID"
    if st.st_mode & stat.S_ISGID and st.st_gid != os.getgid():
        return "is set-group-ID"
    try:
        if os.getxattr(path, "security.capability"):
            return "has file capabilities"
    except (OSError, AttributeError):
        pass
    return None


def cmd_record_report(args):
    """What the wrapper says after `record`: which traces this run wrote, or why none."""
    moves = session_trace_moves(args.since, args.pattern)
    traces = sorted(moves)
    status = args.status

    def note(text):
        print(f"ferrum-replay: {text}", file=sys.stderr)

    unfinished = unfinished_processes(args.running_dir)
    if unmarked_processes(args.running_dir):
        note(f"warning: {UNMARKED_TEXT}: which processes' traces are missing cannot be told")
    for pid, program, state in unfinished:
        if state == "elsewhere":
            note(f"process {pid} ({quoted(program)}) of another PID namespace launched CUDA "
                 "graphs and has not reached its exit hook: it ended without writing its trace "
                 "(killed by a signal, _exit, or replaced by exec), or it still runs")
        elif state:
            note(f"process {pid} ({quoted(program)}) launched CUDA graphs and was still running "
                 "when the program ended: its trace is written when it exits")
        else:
            note(f"process {pid} ({quoted(program)}) launched CUDA graphs and ended without "
                 "writing its trace (killed by a signal, _exit, or replaced by exec): its ranges "
                 "are missing")
    killed = None
    if status > 128 and status - 128 < 65:
        try:
            killed = f"signal {status - 128} ({signal.Signals(status - 128).name})"
        except ValueError:
            killed = f"signal {status - 128}"
    if not traces:
        target = directory = None
        try:
            if not args.pattern.endswith("/") and not has_pid(args.pattern):
                target = expand_output(args.pattern)[0]
            if directory_part(args.pattern) and not has_pid(directory_part(args.pattern)):
                directory = expand_output(directory_part(args.pattern))[0]
        except InputError:
            pass
        if target and is_stream_target(target):
            # Written in place as a stream (/dev/stdout, a FIFO): there is no file to name.
            return 0
        if target and os.path.isdir(target):
            note(f"no trace was written: {quoted(target)} is a directory (end -o with '/' to "
                 "write the traces into it)")
        elif directory and not os.path.isdir(directory):
            bare = directory.rstrip("/") or "/"
            if os.path.exists(bare):  # a file where the directory should be
                note(f"no trace was written: {quoted(bare)} is not a directory")
            else:
                note(f"no trace was written: the directory {quoted(bare)} does not exist"
                     + ("" if args.pattern.endswith("/") else
                        " (end -o with '/' to have a directory created)"))
        elif killed:
            note(f"no trace was written: the program was ended by {killed}; a process killed "
                 "by a signal writes no trace")
        elif unfinished:
            note("no trace was written: every process that launched a CUDA graph ended without "
                 "writing one, or is still running (above)")
        elif args.program and privileged_program(args.program):
            note(f"no trace was written: {quoted(args.program)} "
                 f"{privileged_program(args.program)}, so it runs with privileges its "
                 "environment's user does not have: the loader ignores LD_PRELOAD for it, and "
                 "ferrum-replay records nothing in such a process (docs/reliability.md); "
                 "profile a copy without them")
        else:
            note("no trace was written: no process of the program reached the shim's first "
                 "range (no CUDA graph launched, or the program replaced LD_PRELOAD / "
                 "NVTX_INJECTION64_PATH), or the recorder could not write it (see its message "
                 "above)")
        if target and os.path.isfile(target):
            # What a later `check` of that name would read is not this run's.
            written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(target).st_mtime))
            note(f"the file at {quoted(target)} is an earlier run's (written {written}), not "
                 "this one's")
        elif target and is_ferrum_trace(target + ".old"):
            note(f"an earlier run's trace is at {quoted(target + '.old')}")
        return 0
    if len(traces) == 1:
        note(f"trace: {quoted(traces[0])} (open it in https://ui.perfetto.dev or "
             "chrome://tracing)")
    else:
        note(f"{len(traces)} traces (one per process):")
        for path in traces:
            print(f"  {quoted(path)}", file=sys.stderr)
        note("one table: ferrum-replay summary <traces>; one timeline: ferrum-replay merge -o "
             "merged.json <traces>")
    moved = [path for path in traces if moves[path]]
    if moved:
        note(f"{'these traces were' if len(moved) > 1 else 'that trace was'} moved to "
             f"{'.old names' if len(moved) > 1 else quoted(moved[0])} by another `ferrum-replay "
             "record` of the same -o name, started while this run ran: read "
             f"{'them' if len(moved) > 1 else 'it'} there")
    if killed:
        note(f"the program was ended by {killed}: its processes that it killed wrote no trace")
    return 0


def cmd_record_output(args):
    """Before `record`: makes the directory of a pattern ending in '/', as it will expand
    (%h, %q{VAR} of this environment, %%); refuses a %p in the directory part (each process
    would write into a directory of its own pid, which nothing creates) and a pattern that
    names an existing directory without the trailing '/'; moves an earlier run's trace at a
    fixed name aside (move_earlier_trace); refuses a fixed directory part that is a file (no
    process could write its trace), and warns of one that does not exist yet. An unset %q{VAR} in the file name
    is not reported here: each process expands the pattern in its own environment (a
    launcher sets RANK for its children, not for us), and the recorder says so in the process
    where it is really unset."""
    pattern = args.pattern

    def refuse(text):
        print(f"ferrum-replay: record: {text}", file=sys.stderr)
        return 2

    directory = directory_part(pattern)
    if has_pid(directory):
        return refuse(f"-o {quoted(pattern)}: %p in the directory part expands per process, "
                      "to directories that do not exist: put %p in the file name "
                      "(-o DIR/NAME.%p.json) or leave it out (-o DIR/)")
    expanded, unset_here = expand_output(pattern, pid="0")
    if not pattern.endswith("/") and not has_pid(pattern) and os.path.isdir(expanded):
        if expanded.rstrip("/") == pattern.rstrip("/"):
            return refuse(f"-o {quoted(expanded)} is a directory: end it with '/' to write the "
                          "traces into it")
        # A pattern that expands to a directory (-o '%q{OUT}' with OUT unset or a directory):
        # both said, and what made it so.
        why = (f" ({', '.join(f'%q{{{n}}}' for n in unset_here)} not set here: empty)"
               if unset_here else "")
        return refuse(f"-o {quoted(pattern)} names the directory {quoted(expanded)}{why}: end "
                      "the pattern with '/' to write the traces into a directory, or give it a "
                      "file name")
    if pattern.endswith("/"):
        made, unset = expand_output(directory)
        if unset:
            print(f"ferrum-replay: warning: {', '.join(f'%q{{{n}}}' for n in unset)} in -o "
                  f"{quoted(pattern)} {'are' if len(unset) > 1 else 'is'} not set here: the "
                  f"directory made is {quoted(made)}; a process that has "
                  f"{'them' if len(unset) > 1 else 'it'} set writes into a directory that must "
                  "already exist", file=sys.stderr)
        try:
            os.makedirs(made, exist_ok=True)
        except OSError as error:
            return refuse(f"cannot create directory {quoted(made)}: "
                          f"{error.strerror or error}")
    else:
        # A fixed directory part (no placeholder but %%: the same in every process) that is not
        # a directory: no process could write its trace, which the report after the run said
        # (after a possibly long run): refused. One that does not exist yet is said before the
        # run, which goes on: the program may create it (`mkdir -p runs/exp1` in its own
        # start-up; refused, such a run never started). One with a placeholder may expand
        # otherwise per process (%q{RANK} of a launcher's child, %h of another node): left to
        # the recorder.
        fixed = (expand_output(directory)[0]
                 if directory and "%" not in directory.replace("%%", "") else "")
        if fixed and not os.path.isdir(fixed):
            bare = fixed.rstrip("/") or "/"
            if os.path.lexists(bare):
                return refuse(f"-o {quoted(pattern)}: {quoted(bare)} is not a directory")
            print(f"ferrum-replay: warning: -o {quoted(pattern)}: the directory {quoted(bare)} "
                  "does not exist: unless the program creates it, no trace can be written (create "
                  "it first, or end -o with '/' to have it created)", file=sys.stderr)
        move_earlier_trace(pattern)
    note_record(pattern, args.since)
    return 0


# The end of every trace the recorder writes (recorder/trace_writer.hpp, kTraceTrailer), and
# the start of the block that traces written before the trailer existed (and merge's) have in
# their last 64 KiB: the recorder's is_ferrum_trace_file, byte for byte.
TRACE_HEAD = b'{"traceEvents":['
TRACE_TRAILER = b',"writer":"ferrum-replay recorder"}}\n'
TRACE_MARKER = b'"ferrumReplay":{"version":'


def _trace_tail(path, whole_block=False):
    """The last 64 KiB of `path` when it is a regular file, not a symbolic link, holding a
    ferrum-replay trace, by the rule the recorder applies to what it may replace
    (is_ferrum_trace_file): the same bytes decide, so the wrapper never moves a file the
    recorder would keep. None otherwise. Never blocks on a FIFO or device. With
    `whole_block`, a tail long enough to hold the start of the ferrumReplay block too, read in
    growing steps up to 64 MiB: the block lists every domain and thread name, and outgrows
    64 KiB in a program of a few thousand domains — its session then went unread, and an
    earlier run's trace passed the judges as the last run's (F102)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or os.pread(fd, len(TRACE_HEAD), 0) != TRACE_HEAD:
            return None
        size = min(st.st_size, 65536)
        tail = os.pread(fd, size, st.st_size - size)
        ours = len(tail) == size and (tail.endswith(TRACE_TRAILER) or TRACE_MARKER in tail)
        if not ours:
            return None
        # (Up to 64 MiB: a block of 300,000 domains; a damaged file's tail is not read whole.)
        while whole_block and TRACE_MARKER not in tail and size < min(st.st_size, 64 << 20):
            size = min(st.st_size, size * 16, 64 << 20)
            tail = os.pread(fd, size, st.st_size - size)
            if len(tail) != size:
                return None
        return tail
    except OSError:
        return None
    finally:
        os.close(fd)


def is_ferrum_trace(path):
    """Whether `path` is a regular file, not a symbolic link, holding a ferrum-replay trace
    (_trace_tail). Reads 64 KiB at most."""
    return _trace_tail(path) is not None


def trace_block(path):
    """The ferrumReplay block of a ferrum-replay trace (trace_writer.hpp: last in the file), a
    dict; None for a file that is not one of ours. Reads the tail that holds it (64 KiB unless
    the block is larger)."""
    tail = _trace_tail(path, whole_block=True)
    at = tail.rfind(TRACE_MARKER) if tail else -1
    if at < 0:
        return None
    try:
        block, _ = _decoder.raw_decode(
            tail[at + len(b'"ferrumReplay":'):].decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    return block if isinstance(block, dict) else None


def written_for(path):
    """(output, session) of a ferrum-replay trace: the name its process was asked to write
    and the `record` session it ran in (the recorder writes both last in its block,
    trace_writer.hpp); None for what the trace does not say, (None, None) for a file that is
    not one of ours. Reads the block only (trace_block)."""
    block = trace_block(path) or {}
    output, session = block.get("output"), block.get("session")
    return (output if isinstance(output, str) else None,
            session if isinstance(session, str) else None)


def started_before(block, start, host):
    """Whether the recorder that wrote a trace's BLOCK started before START (ns, the wall clock
    of HOST, a note's stamp_view(), where a `record` began): its clock.originRealtimeNs, which
    the recorder took at its start, when the trace says it ran on HOST too (another host's clock
    may be ahead). A trace that names no session is otherwise judged by its time of change
    alone, which a clock, `cp -p`, `touch` or an NFS server can set ahead; its own start cannot
    be moved so."""
    if not isinstance(block, dict) or not host or block.get("host") != view_host(host):
        return False
    clock = block.get("clock")
    origin = clock.get("originRealtimeNs") if isinstance(clock, dict) else None
    return isinstance(origin, int) and not isinstance(origin, bool) and origin < start


def earlier_run_names(target):
    """The traces at the names a fixed -o name's processes write to: NAME itself, and the
    recorder's fresh names beside it (NAME.PID.EXT for a process that found a sibling's trace
    there, NAME.N.EXT and NAME.PID.N.EXT when those were taken; common/output_file.cpp) that
    say they were written for NAME. A file of that shape that the user named, or a trace
    written for another name (-o NAME.%p.json, -o NAME.1.json), is not one of them."""
    prefix, _, suffix = fresh_name(target, "\0").partition("\0")
    names = [target]
    for path in sorted(glob_all(glob.escape(prefix) + "*" + glob.escape(suffix))):
        if re.fullmatch(r"[0-9]+(\.[0-9]+)?", path[len(prefix):len(path) - len(suffix)]) and \
                written_for(path)[0] == target:
            names.append(path)
    return names


def move_earlier_trace(pattern):
    """Before `record` runs the program: an earlier run's traces at the names every process
    of this run writes to (a pattern without %p whose %q{VAR} are all set here: NAME and the
    recorder's fresh names beside it) each become NAME.old (perf's rule for perf.data),
    replacing an older .old of ours; one generation is kept. A run that then writes no trace
    leaves nothing at those names for `check`, `compare`, `summary` or a glob of them to take
    for this run's data. Anything else there (a file not ours, a link, a stream) is left as it
    is; so is a trace whose .old is not ours. A run of the same name that is still running
    finds its moved traces at .old (session_traces)."""
    if has_pid(pattern):
        return
    try:
        target, unset = expand_output(pattern)
    except InputError:
        return
    if unset or is_stream_target(target):
        return
    kept = []
    for path in earlier_run_names(target):
        if not is_ferrum_trace(path):
            continue
        old = path + ".old"
        try:
            there = os.lstat(old) if os.path.lexists(old) else None
            if there and not is_ferrum_trace(old):
                unreadable = not stat.S_ISLNK(there.st_mode) and not os.access(old, os.R_OK)
                kept.append((path, f"{quoted(old)} exists and " + (
                    "cannot be read" if unreadable else "is not a ferrum-replay trace")))
                continue
            here = os.lstat(path)
            if there and (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
                # Two links to one file: rename() would succeed and do nothing. The trace
                # stays readable at .old.
                os.unlink(path)
            else:
                os.rename(path, old)
        except FileNotFoundError:
            continue  # moved meanwhile by a `record` of the same name starting at once
        except OSError as error:
            kept.append((path, f"it cannot be renamed to {quoted(old)}: "
                               f"{error.strerror or error}"))
    if kept:
        path, why = kept[0]
        more = f" (and {len(kept) - 1} more such file{'s' if len(kept) > 2 else ''})" \
            if len(kept) > 1 else ""
        print(f"ferrum-replay: warning: {quoted(path)} holds an earlier run's trace, which was "
              f"not moved ({why}){more}: if this run writes no trace there, what is read there "
              "is not this run's", file=sys.stderr)


def cmd_expand(args):
    expanded, unset = expand_output(args.pattern)
    if unset and not args.quiet:
        print(f"ferrum-replay: {unset_warning(args.pattern, unset)}", file=sys.stderr)
    sys.stdout.buffer.write(_as_bytes(expanded) + b".")  # '.' keeps trailing newlines in $(...)
    return 0


def cmd_fresh(args):
    sys.stdout.buffer.write(_as_bytes(fresh_name(args.path, args.token)) + b".")
    return 0


def cmd_quote(args):
    print(" ".join(quoted(v) for v in args.values))
    return 0


# ---- nsys stats ----

def _col(row, *names):
    lowered = {(k or "").strip().lower(): v for k, v in row.items()}
    for n in names:
        if n.lower() in lowered:
            return lowered[n.lower()]
    return None


CSV_LIMIT = 256 << 20  # characters of one nsys stats table


def _read_csv(path):
    """The rows of an `nsys stats` table, read as every judge input is (open_regular: never a
    FIFO, a device or a directory) and refused beyond CSV_LIMIT, not cut short."""
    try:
        with open_regular(path, binary=True, what="an nsys stats table") as handle:
            data = handle.read(CSV_LIMIT + 1)
    except OSError as error:
        raise InputError(f"{quoted(path)}: cannot read: {error.strerror or error}") from error
    if len(data) > CSV_LIMIT:
        raise InputError(f"{quoted(path)}: more than {CSV_LIMIT >> 20} MiB: not an nsys stats "
                         "table")
    # A NUL (no NVTX name holds one: a file of zeros after a crash) is refused by csv before
    # Python 3.11 and read after: replaced, every Python reads the same.
    text = data.decode("utf-8", "replace").replace("\0", "\ufffd")
    # Some versions print a title line before the header: start at the header row.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Range" in line and "," in line:
            # A cell may be as long as the table (Nsight keeps an NVTX message whole): csv's
            # default limit of 128 KiB made a long range name a traceback (review EE3).
            csv.field_size_limit(CSV_LIMIT)
            try:
                return list(csv.DictReader(lines[i:]))
            except csv.Error as error:
                raise InputError(f"{quoted(path)}: not an nsys stats table ({error})") from error
    return []


def _domain_rows(rows, domain):
    """{range name: row} for our domain: nsys writes a range as "domain:name" (":name" for
    the default domain), or has a Domain column in some reports."""
    out = {}
    for row in rows:
        name = _col(row, "Range", "NVTX Range", "Name")
        if name is None:
            continue
        # The name exactly as the cell holds it: a range name may begin or end with spaces.
        dom = _col(row, "Domain")
        if dom is not None:
            if dom == domain:
                out[name] = row
        elif name.startswith(domain + ":"):
            out[name[len(domain) + 1:]] = row
    return out


def nsys_rows(stats_base, domain):
    """([(range, count, total_ns, avg_ns, min_ns, max_ns, gpu_total_ns, gpu_avg_ns)], problems)"""
    def find(report):
        hits = sorted(glob_all(glob.escape(stats_base) + f"_{report}*.csv"))
        return hits[0] if hits else None

    problems = []
    sum_file = find("nvtx_sum")
    if not sum_file:
        return [], [f"no nvtx_sum output ({stats_base}_nvtx_sum.csv): did nsys stats run?"]
    check_tables_of_report(stats_base)
    base = _domain_rows(_read_csv(sum_file), domain)
    proj_file = find("nvtx_gpu_proj_sum")
    proj = _domain_rows(_read_csv(proj_file), domain) if proj_file else {}
    if not proj_file:
        problems.append("no nvtx_gpu_proj_sum output: GPU times not shown")

    rows = []
    for name, row in sorted(base.items()):
        p = proj.get(name)
        count = _cell(row, sum_file, ("Instances", "Count"))
        rows.append((name, int(count or 0),
                     _time_ns(row, sum_file, "Total Time", "Total Time"),
                     _time_ns(row, sum_file, "Avg", "Average"),
                     _time_ns(row, sum_file, "Min", "Minimum"),
                     _time_ns(row, sum_file, "Max", "Maximum"),
                     _time_ns(p, proj_file, "Total Proj Time"), _time_ns(p, proj_file, "Proj Avg")))
    return rows, problems


# nsys stats names a time column by its unit, "Avg (ns)" — "(us)", "(ms)", "(s)" with
# --timeunit; older versions wrote "Average" in ns. A time is read in the unit its header says:
# read as ns whatever the unit, or as 0 when the column was not found, a 50 ms mean passed a
# 1 ms bound (F134).
TIME_UNITS_NS = {"ns": 1.0, "us": 1e3, "\u00b5s": 1e3, "ms": 1e6, "s": 1e9}
_TIME_HEADER = re.compile(r"(.*?) *\(([^()]*)\) *\Z")


def _cell(row, path, names):
    """A number of `row` from the first of `names` it has (None when none, or empty), in the
    form nsys writes ("1,234.5"); anything else — nan, inf, a sign, a word — is refused (one
    line naming the table), never read as no value."""
    value = _col(row, *names) if row else None
    if value is None or value.strip() == "":
        return None
    try:
        return plain_decimal(value.strip().replace(",", ""))
    except ValueError:
        raise InputError(f"{quoted(path)}: {quoted(names[0])} holds {quoted(value)}, not a "
                         "number of nsys stats") from None


def _time_ns(row, path, stem, old_name=None):
    """The time in column "STEM (UNIT)" of `row`, in ns (None where the table has no such column
    or the cell is empty); the old unit-less name is ns. A unit not known is refused."""
    if not row:
        return None
    for key in row:
        match = _TIME_HEADER.match((key or "").strip())
        if match and match[1].lower() == stem.lower():
            unit = TIME_UNITS_NS.get(match[2].strip().lower())
            if unit is None:
                raise InputError(f"{quoted(path)}: column {quoted(key)}: a time unit this "
                                 "reader does not know (ns, us, ms or s)")
            value = _cell(row, path, (key.strip(),))
            return None if value is None else value * unit
    value = _cell(row, path, (old_name,)) if old_name else None
    return value


# Beside the tables `nsys` made them of (BASE_ferrum_report.json): the report they are of, by
# its size and a digest of its first MiB. A report replaced since (nsys profile -f true, run by
# hand, without nsys stats) no longer matches: its earlier report's tables are never judged as
# its own. Content, not times: a copy, a download or `cp -r` gives files times in any order.
TABLES_OF_SUFFIX = "_ferrum_report.json"


def report_digest(report):
    """{"size": N, "head": sha256 of its first MiB} of an nsys report (InputError or OSError
    when it cannot be read)."""
    with open_regular(report, binary=True) as handle:
        size = os.fstat(handle.fileno()).st_size
        head = hashlib.sha256(handle.read(1 << 20)).hexdigest()
    return {"size": size, "head": head}


def start_key_parts(key):
    """(boot id, start tick) of a process start key (common/output_file.hpp: BOOT+PIDNS+TICKS;
    an older shim's BOOT+TICKS), or None for anything else (a tick of more than 20 digits)."""
    parts = key.split("+") if isinstance(key, str) else []
    if len(parts) < 2 or not parts[-1].isdigit() or len(parts[-1]) > 20:
        return None
    return parts[0], int(parts[-1])


def this_process_start():
    """(boot id, start tick) of this process, read as common::process_start_key reads them, or
    None where /proc cannot tell."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b") ", 1)[1].split()
        with open("/proc/sys/kernel/random/boot_id", "rb") as handle:
            boot = handle.read().strip().decode("ascii")
        return (boot if re.fullmatch(r"[0-9A-Fa-f-]+", boot) else "0"), int(fields[19])
    except (OSError, IndexError, ValueError, UnicodeDecodeError):
        return None


def session_token(stamp):
    """The session a process ran in, as its launch summary names it: "NAME@MTIME_NS" of the
    wrapper's session stamp (common::session_token's rule, common/output_file.hpp), or None."""
    name = os.path.basename(stamp or "")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name):
        return None
    try:
        return f"{name}@{os.stat(stamp).st_mtime_ns}"
    except OSError:
        return None


def note_tables_of_report(stats_base, report, since_tick=None, session=None):
    """Notes which report the tables at STATS_BASE were made of (after nsys stats wrote them),
    and, given when the `nsys` session began (SINCE_TICK: clock ticks after boot, taken by the
    wrapper before nsys started), the span in which its processes started: from then to this
    helper's own start, after nsys ended. `check --nsys-stats` takes no launch summary of a
    process that started outside it (another run's: review AA1). Given the session's stamp
    (SESSION), its token too: a summary that names another session is never this run's, also
    where two sessions overlap in time (review BB3)."""
    try:
        identity = {"ferrumReplayTablesOf": os.path.basename(report), **report_digest(report)}
        until = this_process_start()
        if since_tick is not None and until is not None:
            identity["session"] = {"boot": until[0], "fromTick": since_tick,
                                   "untilTick": until[1]}
            token = session_token(session)
            if token:
                identity["session"]["token"] = token
        write_atomically(stats_base + TABLES_OF_SUFFIX,
                         lambda handle: handle.write(json.dumps(identity) + "\n"))
    except (OSError, InputError) as error:
        print(f"ferrum-replay: note: which report the tables are of was not noted: {error}",
              file=sys.stderr)


def check_tables_of_report(stats_base):
    """InputError when the tables at STATS_BASE were noted as made of another report than the
    one beside them (STATS_BASE.nsys-rep). Tables made without the wrapper (no note), or with no
    report beside them, are taken as given. Returns the session noted with them ({"boot",
    "fromTick", "untilTick"}: note_tables_of_report), or None."""
    report = stats_base + ".nsys-rep"
    try:
        with open_regular(stats_base + TABLES_OF_SUFFIX, binary=True) as handle:
            noted = json.loads(handle.read(1 << 16).decode("utf-8", "replace"))
    except (OSError, InputError, ValueError, RecursionError):  # none noted (or unreadable)
        return None
    if not isinstance(noted, dict):
        return None
    if os.path.exists(report):
        try:
            identity = report_digest(report)  # (open_regular's InputError names it already)
        except OSError as error:
            raise InputError(f"{quoted(report)}: cannot read: "
                             f"{error.strerror or error}") from error
        if any(noted.get(key) != value for key, value in identity.items()):
            raise InputError(f"the tables at {quoted(stats_base)} were made of another report "
                             f"than {quoted(report)} (replaced since): an earlier report's, not "
                             "this one's (run nsys stats on it again)")
    session = noted.get("session")
    if (isinstance(session, dict) and isinstance(session.get("boot"), str) and
            _is_int(session.get("fromTick")) and _is_int(session.get("untilTick"))):
        return session
    return None


def cmd_nsys_table(args):
    note_tables_of_report(args.stats_base, args.report, args.since_tick, args.session)
    rows, problems = nsys_rows(args.stats_base, args.domain)
    print(f"ferrum-replay: Nsight Systems report {quoted(args.report)}", file=sys.stderr)
    for problem in problems:
        print(f"ferrum-replay: note: {problem}", file=sys.stderr)
    if not rows:
        print(f"ferrum-replay: WARNING: the report holds no range of domain '{args.domain}': the "
              "shim was not active in the profiled process(es). Check that nsys's -t includes "
              "nvtx, that the program launches CUDA graphs, and, for programs that fork before "
              "exec, add --trace-fork-before-exec=true.", file=sys.stderr)
        return 1

    def ms(v):
        return "-" if v is None else f"{v / 1e6:.3f}"

    def us(v):
        return "-" if v is None else f"{v / 1e3:.3f}"

    table = [["domain", "range", "count", "total ms", "mean us", "min us", "max us",
              "gpu total ms", "gpu mean us"]]
    for name, count, total, avg, low, high, gtotal, gavg in rows:
        table.append([args.domain, printable(name), str(count), ms(total), us(avg), us(low),
                      us(high), ms(gtotal), us(gavg)])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        line = "".join(r[i].ljust(widths[i] + 3) for i in range(3))
        line += "".join(r[i].rjust(widths[i] + (0 if i == 3 else 4)) for i in range(3, len(r)))
        print(line.rstrip(), file=sys.stderr)
    return 0


# ---- check (CI smoke) ----

EXPECT_FORMAT = ("'name-pattern min-count [max-cpu-mean-ms [max-gpu-mean-ms]]' ('-' for no "
                 "bound; or the bounds as max-cpu-mean-ms=MS, max-gpu-mean-ms=MS)")


EXPECT_LIMIT = 16 << 20  # characters of an expectations file


def names_matching(names, pattern):
    """The names an expectation's pattern stands for: the one range name equal to it, whatever
    characters it holds (`decode[bs=8]`, docs/naming.md's `{site} [{content}]`: brackets are a
    glob's class, and a graph's own name quoted matched nothing) — that name alone, never also
    the names its glob reading would match (`decode8`, whose ranges then bounded the mean);
    else the names it matches as a glob (`*`, `?`, `[...]`)."""
    names = list(names)
    if pattern in names:
        return {pattern}
    return {name for name in names if fnmatch.fnmatchcase(name, pattern)}


def parse_expectations(path, note_renames=True):
    """[(pattern, min_count, max_cpu_mean_ms or None, max_gpu_mean_ms or None, line number)]
    from lines `name-pattern min-count [max-cpu-mean-ms [max-gpu-mean-ms]]`; a bound is a
    number, '-' (none), or named: max-cpu-mean-ms=MS, max-gpu-mean-ms=MS. The old name
    max-mean-ms=MS is max-cpu-mean-ms (one deprecation line on stderr, unless not
    `note_renames`). Shell-like quoting for names with spaces; '#' starts a comment."""
    out, warned = [], False
    try:
        with open_regular(path, what="an expectations file") as handle:
            # Bounded, and refused beyond the bound: a file cut short would drop its last
            # expectations, or cut one into another (`* 1000000` read as `* 1`).
            text = handle.read(EXPECT_LIMIT + 1)
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{quoted(path)}: cannot read: "
                         f"{getattr(error, 'strerror', None) or error}") from error
    if len(text) > EXPECT_LIMIT:
        raise InputError(f"{quoted(path)}: more than {EXPECT_LIMIT >> 20} MiB: not an "
                         "expectations file")
    # A byte order mark, which some editors write first, is not part of line 1's pattern: kept,
    # it would make that pattern match nothing, and a bound with min-count 0 then never applies.
    lines = text[text.startswith("\ufeff"):].splitlines()
    for number, line in enumerate(lines, 1):
        try:
            words = shlex.split(line, comments=True)
        except ValueError as error:
            raise InputError(f"{quoted(path)} line {number}: {error}") from error
        if not words:
            continue
        bad = InputError(f"{quoted(path)} line {number}: expected {EXPECT_FORMAT} (quote a name "
                         f"with spaces), got {quoted(line.strip())}")
        if not 2 <= len(words) <= 4:
            raise bad
        bounds = {}
        for position, word in enumerate(words[2:]):
            key, sep, value = word.partition("=")
            if not sep:
                key, value = ("max-cpu-mean-ms", "max-gpu-mean-ms")[position], word
            elif key == "max-mean-ms":
                if note_renames and not warned:
                    print(f"ferrum-replay: note: {quoted(path)} line {number}: max-mean-ms is "
                          "now max-cpu-mean-ms (the CPU launch time; max-gpu-mean-ms bounds the "
                          "GPU time)", file=sys.stderr)
                    warned = True
                key = "max-cpu-mean-ms"
            if key not in ("max-cpu-mean-ms", "max-gpu-mean-ms") or key in bounds:
                raise bad
            bounds[key] = value
        try:
            minimum = plain_count(words[1])
            values = {key: plain_decimal(value) for key, value in bounds.items() if value != "-"}
        except ValueError:
            raise InputError(f"{quoted(path)} line {number}: min-count must be an integer >= 0 "
                             f"and each bound a number >= 0 (or '-') in "
                             f"{quoted(line.strip())}") from None
        out.append((words[0], minimum, values.get("max-cpu-mean-ms"),
                    values.get("max-gpu-mean-ms"), number))
    # A file given that holds none (a generating step that failed and left it empty) is a
    # mistake, as `--expect ""` is: the gate passed with nothing checked (F103).
    if not out:
        raise InputError(f"{quoted(path)}: holds no expectation (only blank lines and "
                         "comments): a gate that would check nothing")
    return out


# The shim's launch summary (shim/range/exit_summary.cpp): a title line (its wording is not
# relied on), the header "  graph  launches  failed  rejected  name", then one row per graph,
# "  %5u  %10llu  %8llu  %8llu  %s": the name is everything after exactly two spaces that
# follow the fourth number, to the end of the line (it may begin or end with spaces, hold '#'
# or look like numbers). Graphs destroyed long ago are one totals row, "-" for the ordinal.
# With GPU timing on (FERRUM_REPLAY_GPU_TIME), the header and every graph's row have seven GPU
# columns between "rejected" and the name ("gpu n" .. "max us", '-' where none); the header
# says which layout the rows have.
SUMMARY_ROW = re.compile(r" +(\d+) {2,}(\d+) {2,}(\d+) {2,}(\d+)  (.*)\Z", re.S)
SUMMARY_GPU_ROW = re.compile(
    r" +(\d+) {2,}(\d+) {2,}(\d+) {2,}(\d+) {2,}\d+(?: {2,}[-\d.]+){6}  (.*)\Z", re.S)
SUMMARY_RECYCLED = re.compile(r" +- {2,}(\d+) {2,}(\d+) {2,}(\d+)  \(\d+ earlier graphs?, destroyed\)\Z")
# The launches whose push the NVTX tool answered "after my report" (FERRUM_REPLAY_PUSH_AFTER_REPORT:
# a thread still launching while the process exited), none of them in its trace, by graph
# (shim/range/exit_summary.cpp): "launches after the NVTX tool's report: N (graph 1: 5, graph 2:
# 2, earlier graphs: 1)".
SUMMARY_AFTER_REPORT = re.compile(
    r" +launches after the NVTX tool's report: (\d{1,19}) \(((?:graph \d{1,10}: \d{1,19}(?:, )?)*)"
    r"(?:earlier graphs: (\d{1,19}))?\)\Z")
SUMMARY_HEADER = re.compile(r" *graph +launches +failed +rejected +(gpu n +gpu tot ms +mean us +min us"
                            r" +p50 us +p99 us +max us +)?name *\Z")


SUMMARY_LINE_LIMIT = 1 << 20  # bytes of a summary's line: a longer one is no row (1 MiB names)


# The process a summary counts: "(pid N, started KEY)" at the end of the line before its header
# (the one part of the title relied on): its pid and its start key (common/output_file.hpp), which
# the recorder's trace also carries (processStart). A title without the key (an older shim's, or
# /proc unreadable) is joined by pid alone; a table without either (a file a wrapper made) is
# joined with the traces by name alone.
# Then the wrapper's session it ran in, where it ran in one: ", session NAME@MTIME_NS"
# (session_token).
SUMMARY_PID = re.compile(r".*\(pid (\d+)(?:, started ([0-9A-Fa-f+-]+))?"
                         r"(?:, session ([A-Za-z0-9._-]+@\d+))?\) *\Z")


class LaunchTable:
    """One summary's table: the process it counts (None when its title does not say), its
    graphs' rows (`rows()`: (ordinal, name, launches, failed, rejected)), and the destroyed
    graphs' totals row, a Counter; and the launches after the NVTX tool's report
    (SUMMARY_AFTER_REPORT): `after_report` {ordinal: n}, the destroyed graphs' under None.
    Compact: a summary may have a row for each of 10^6 graphs."""

    __slots__ = ("pid", "start", "session", "path", "ordinals", "names", "launches", "failed",
                 "rejected", "recycled", "after_report")

    def __init__(self, pid, start=None, path=None, session=None):
        self.pid, self.start, self.path, self.session = pid, start, path, session
        self.ordinals, self.names = array("q"), []
        self.launches, self.failed, self.rejected = array("q"), array("q"), array("q")
        self.recycled = collections.Counter()
        self.after_report = {}

    def add(self, ordinal, name, launches, failed, rejected):
        self.ordinals.append(min(ordinal, 1 << 62))  # (a summary's numbers fit; a file's may not)
        self.names.append(name)
        self.launches.append(min(launches, 1 << 62))
        self.failed.append(min(failed, 1 << 62))
        self.rejected.append(min(rejected, 1 << 62))

    def rows(self):
        return zip(self.ordinals, self.names, self.launches, self.failed, self.rejected)

    def same_counts(self, other):
        return (self.ordinals == other.ordinals and self.names == other.names and
                self.launches == other.launches and self.failed == other.failed and
                self.rejected == other.rejected and self.recycled == other.recycled and
                self.after_report == other.after_report)


def read_launch_tables(paths):
    """The tables of the shim's exit summaries (FERRUM_REPLAY_SUMMARY), a list of LaunchTable.
    A process's table given twice (a byte copy of its summary beside it, in an artifact
    directory) is read once, with a note, as a trace's copy is (distinct_runs): summed twice it
    failed the correct run (review AA4). A process is its pid and start key, which no two
    processes share; two tables of one process that differ are an input error naming both."""
    tables = []
    for path in paths:
        before = len(tables)
        try:
            with open_regular(path, binary=True, what="a launch summary") as handle:
                read_launch_summary(handle, tables, path)
        except OSError as error:
            raise InputError(f"{quoted(path)}: cannot read: {error.strerror or error}") from error
        # A file named as a summary that holds none (empty, cut short, the trace given in its
        # place) is no "the shim wrote no summary": the cross-check asked for would be skipped,
        # and the verdict passed (review EE2). The shim writes no table without a row.
        if len(tables) == before:
            raise InputError(f"{quoted(path)}: holds no launch summary of the shim (no "
                             "'ferrum-replay launch summary' table): empty, cut short, or "
                             "another file")
        if any(not table.names and not any(table.recycled.values())
               for table in tables[before:]):
            raise InputError(f"{quoted(path)}: a launch summary in it has no row: cut short")
    kept, seen = [], {}
    for table in tables:
        key = (table.pid, table.start)
        first = seen.get(key) if table.start is not None else None
        if first is None:
            seen[key] = table
            kept.append(table)
        elif first.same_counts(table):
            print(f"ferrum-replay: note: {quoted(table.path)} holds the launch summary of process "
                  f"{table.pid} (started {table.start}) that {quoted(first.path)} holds too (a "
                  "copy): read once", file=sys.stderr)
        else:
            raise InputError(f"{quoted(first.path)} and {quoted(table.path)} both hold a launch "
                             f"summary of process {table.pid} (started {table.start}), with "
                             "different counts: give each process's summary once")
    return kept


def read_launch_summaries(paths):
    """({graph name: Counter(launches, failed, rejected)}, Counter of the destroyed graphs'
    totals row) summed over the shim's exit summaries (FERRUM_REPLAY_SUMMARY)."""
    return launches_by_name(read_launch_tables(paths))


def launches_by_name(tables):
    """read_launch_summaries' sums over `tables`."""
    graphs = collections.defaultdict(collections.Counter)
    recycled = collections.Counter()
    for table in tables:
        for _, name, launches, failed, rejected in table.rows():
            counts = graphs[name]
            counts["launches"] += launches
            counts["failed"] += failed
            counts["rejected"] += rejected
        recycled.update(table.recycled)
    return graphs, recycled


def read_launch_summary(handle, tables, path=None):
    """Adds one file's tables to `tables`, a line at a time, each at most SUMMARY_LINE_LIMIT
    bytes: memory is bounded by the graphs, not by the file (a sparse file of zeros has no line
    end)."""
    table = None
    row_layout = SUMMARY_ROW
    before = None  # the line before, read for a header's pid
    for line in iter(lambda: handle.readline(SUMMARY_LINE_LIMIT), b""):
        line = line.decode("utf-8", "replace")
        line = line[:-1] if line.endswith("\n") else line
        previous, before = before, line
        header = SUMMARY_HEADER.match(line)
        if header:
            pid = SUMMARY_PID.match(previous) if previous is not None else None
            if pid and len(pid[1]) > 19:  # (int() of thousands of digits raises: review CC3)
                raise InputError(f"{quoted(path or '')}: a launch summary's title names a pid of "
                                 f"{len(pid[1])} digits: not a pid")
            table = LaunchTable(int(pid[1]) if pid else None, pid[2] if pid else None, path,
                                pid[3] if pid else None)
            tables.append(table)
            row_layout = SUMMARY_GPU_ROW if header[1] else SUMMARY_ROW
            continue
        if table is None:
            continue
        row = row_layout.match(line)
        if row:
            table.add(int(row[1]), row[5], int(row[2]), int(row[3]), int(row[4]))
            continue
        row = SUMMARY_RECYCLED.match(line)
        if row:
            table.recycled["launches"] += int(row[1])
            table.recycled["failed"] += int(row[2])
            table.recycled["rejected"] += int(row[3])
            continue
        row = SUMMARY_AFTER_REPORT.match(line)
        if row:
            for ordinal, n in re.findall(r"graph (\d+): (\d+)", row[2]):
                key = min(int(ordinal), 1 << 62)
                table.after_report[key] = table.after_report.get(key, 0) + int(n)
            if row[3]:
                table.after_report[None] = table.after_report.get(None, 0) + int(row[3])
            continue
        table = None  # the table ended (another summary's title line, say)


def later_namesakes(paths):
    """Traces written after a given one under its fresh names (section 2 of text-rules.md:
    NAME.<pid>.EXT by another process of a job, NAME.<n>.EXT beside a file not replaced) that
    are not among `paths`. A later run that found the name taken within moments of the last
    one's exit writes beside it (a process cannot tell its start from that exit closer than a
    clock tick): the file at the name is then the earlier run's."""
    given = set()
    for path in paths:
        try:
            given.add(file_identity(path))
        except OSError:
            pass
    found = []
    # Each directory is listed once, its names indexed by the name they would be a fresh name
    # of (NAME.<n>.EXT -> NAME.EXT, NAME.<n> -> NAME): thousands of traces in one directory
    # were a glob of the whole directory each, seconds to minutes.
    indexes = {}

    def fresh_names_of(path):
        directory = os.path.dirname(path)
        if directory not in indexes:
            index = collections.defaultdict(list)
            try:
                names = os.listdir(directory or ".")
            except OSError:
                names = []
            for name in names:
                for match in (re.fullmatch(r"(.+)\.\d+(\.[^.]+)", name),
                              re.fullmatch(r"(.+)\.\d+", name)):
                    if match:
                        index[match[1] + (match[2] if match.lastindex == 2 else "")].append(name)
            indexes[directory] = index
        return [os.path.join(directory, name)
                for name in sorted(indexes[directory].get(os.path.basename(path), ()))]

    for path in paths:
        if os.path.islink(path):  # the trace's own fresh names, beside it (earlier_record)
            path = os.path.realpath(path)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        token = "FERRUMTOKEN"
        shape = re.escape(fresh_name(path, token)).replace(token, r"\d+")
        for candidate in fresh_names_of(path):
            if not re.fullmatch(shape, candidate):
                continue
            try:
                other = os.stat(candidate)
            except OSError:
                continue
            if (stat.S_ISREG(other.st_mode) and (other.st_dev, other.st_ino) not in given and
                    other.st_mtime_ns > st.st_mtime_ns and asked_for(candidate, path)):
                found.append(candidate)
    return found


def asked_for(candidate, path):
    """Whether CANDIDATE, a file at a fresh name of PATH, is a trace its process was asked to
    write at PATH (and wrote beside it): a ferrum-replay trace whose `output` has PATH's file
    name (an older recorder's, which does not say: taken to be). By name alone: the directory
    it names is where it was written, which a copy, a download or a container's mount moves
    (compared, it let a judge pass on a copied directory's earlier run). Any other file at such
    a name (a results.2025.json of the program's own, a trace recorded as run.2.json by its own
    -o) is no later run's trace of PATH: judging PATH failed on it."""
    if not is_ferrum_trace(candidate):
        return False
    output = written_for(candidate)[0]
    return output is None or os.path.basename(output) == os.path.basename(path)


def no_trace_failure(launch_summaries):
    """Why a run wrote no trace, as far as its launch summaries tell: where the shim counted
    launches, the recorder did not start in those processes -- not a workload that "made no
    CUDA call" (review NN-2: a recorder the loader could not map, blamed on the program)."""
    launched = 0
    try:
        for table in read_launch_tables(distinct_inputs(launch_summaries or [])):
            launched += sum(launches for _, _, launches, _, _ in table.rows())
    except InputError:
        pass  # said again, and failed on, where the summaries are judged
    if launched:
        return (f"no trace was written, though the shim counted {launched} launch"
                f"{'es' if launched != 1 else ''}: the recorder did not start in the workload's "
                "processes (NVTX ignores a tool it cannot load: a copy of another "
                "architecture, one on a file system mounted noexec, one needing a newer "
                "libstdc++ than the process has), or their environment dropped "
                "NVTX_INJECTION64_PATH")
    return ("no trace was written (the recorder never started: the workload made no CUDA call "
            "under the shim, or its environment dropped LD_PRELOAD / NVTX_INJECTION64_PATH)")


def cmd_check(args):
    if args.preflight:
        # ci-smoke-profile, before the workload runs (it may run for an hour): the expectations
        # file is read by the one parser, so that a typo in it fails the gate at once (the same
        # FAIL line), not after the run; and this helper runs at all. Nothing said when good:
        # the check after the run says it all again (its renamed-bound note included).
        if args.expect:
            parse_expectations(args.expect, note_renames=False)
        return 0
    domain = args.domain
    failures, notes = [], []
    in_flight = 0  # the shim's launches in flight at exit (launches_in_flight)
    # Nothing to judge at all is a command line missing its traces, not a run that wrote none
    # (ci-smoke-profile always gives --running-dir: there, no trace is the run's verdict).
    if not (args.traces or args.nsys_stats or args.running_dir is not None or
            args.launch_summary):
        print(f"{args.prog}: no traces given: name the traces to check (TRACE..., or "
              "--nsys-stats BASE) (see `ferrum-replay --help`)", file=sys.stderr)
        return 2
    # Traces beside --nsys-stats would be read and then not judged (every count comes from the
    # tables): an OK that reads as if they had been (review EE4). One or the other.
    if args.traces and args.nsys_stats:
        print(f"{args.prog}: give traces or --nsys-stats BASE, not both: with --nsys-stats the "
              "Nsight Systems tables are judged instead of traces", file=sys.stderr)
        return 2
    # A running directory given that cannot be read fails, as a missing --launch-summary does:
    # read as empty, it passed whatever the run left.
    if args.running_dir is not None:
        try:
            os.listdir(args.running_dir)
        except OSError as error:
            raise InputError(f"--running-dir {quoted(args.running_dir)}: cannot read: "
                             f"{error.strerror or error}") from error
    # First: a process whose counts are missing makes every count below incomplete; so does
    # one that could not say it ran (review DD-1).
    if unmarked_processes(args.running_dir):
        failures.append(f"{UNMARKED_TEXT}: the run's processes cannot all be vouched for")
    unfinished = unfinished_processes(args.running_dir)
    for pid, program, state in unfinished[:1]:
        more = (f" (and {len(unfinished) - 1} more such process"
                f"{'es' if len(unfinished) > 2 else ''})" if len(unfinished) > 1 else "")
        if state == "elsewhere":
            failures.append(f"process {pid} ({quoted(program)}) of another PID namespace "
                            "launched CUDA graphs and did not reach its exit hook (ended by a "
                            "signal, _exit or exec, or still running): its launches are not in "
                            f"the profile{more}")
        elif state:
            failures.append(f"process {pid} ({quoted(program)}) launched CUDA graphs and was "
                            "still running when the workload ended: its launches are not in the "
                            f"profile{more}")
        else:
            failures.append(f"process {pid} ({quoted(program)}) launched CUDA graphs and ended "
                            "without its launch summary (killed by a signal, _exit, or replaced "
                            "by exec; or its summary could not be written: a full disk, a file "
                            f"size limit): its launches are missing from the profile{more}")
    if not args.nsys_stats:
        later = later_namesakes(args.traces)
        if later:
            failures.append(f"{len(later)} trace(s) of the same name written after the one(s) "
                            f"given, not checked: {listed((quoted(p) for p in later), 3)}: "
                            "the file at the name may be an earlier run's (pass every trace, or "
                            "the directory's)")
    traces, earlier = args.traces, []
    if not args.nsys_stats:
        # Another user's trace or note in a directory not theirs is not this run's to judge.
        failures += untrusted_inputs(traces)
        # A trace of an earlier run than the last `record` of its name into its directory is
        # never judged: not when the last run wrote none (a reused directory), nor beside the
        # last run's (its counts would be added to them).
        records = {}
        current, earlier = last_run_only(traces, records=records)
        where = quoted(judged_in(earlier[0], records)) if earlier else ""
        unnoted = [(p, earlier_record(p, records)) for p in earlier]
        unnoted = [(p, s) for p, s in unnoted if s >= UNNOTED]
        # The last run into the directory wrote no trace there, under a name of its own too.
        silent = silent_output(earlier[0], records) if earlier else None
        if unnoted:
            # Its start could not be noted (mark_unnoted), or its note cannot be read: none of
            # its user's traces there can be told to be its.
            where = quoted(judged_in(unnoted[0][0], records, real=True))
            traces = current
            failures.append(untold(unnoted[0][1], where))
        elif earlier and not current:
            traces = []  # with --allow-no-ranges: the last run launched nothing, as allowed
            if not args.allow_no_ranges:
                failures.append(f"no trace of the last `ferrum-replay record` into {where}"
                                f"{f' ({silent})' if silent else ''}: the "
                                f"{len(earlier)} given {'are' if len(earlier) != 1 else 'is'} "
                                "of an earlier run (the last run wrote none)")
        elif earlier:
            failures.append(f"{len(earlier)} of the traces given {'are' if len(earlier) != 1 else 'is'} "
                            "of an earlier run than the last `ferrum-replay record` of "
                            f"{'their' if len(earlier) != 1 else 'its'} name into {where}"
                            f"{f' ({silent}, which wrote none)' if silent else ''}: "
                            f"{quoted(earlier[0])}{f' (and {len(earlier) - 1} more)' if len(earlier) > 1 else ''}"
                            ": pass only the last run's traces")
    scans = scan_all(traces, numbered=True)
    counts = NameStats()  # our domain's ranges, by name
    untimed_cpu = set()  # names of ranges whose table gave no CPU time (--nsys-stats)
    nsys_session = None  # when the report's `nsys` session ran (check_tables_of_report)
    if args.nsys_stats:
        rows, problems = nsys_rows(args.nsys_stats, domain)
        nsys_session = check_tables_of_report(args.nsys_stats)
        notes += problems
        for name, count, total, *_ in rows:
            counts.add(name, count, float(total or 0), 0.0, 0.0)
            if total is None and count:
                untimed_cpu.add(name)  # a time column of another name: never read as 0
        n_processes = None
    else:
        if not scans and not args.allow_no_ranges and not earlier:
            failures.append(no_trace_failure(args.launch_summary))
        counts = aggregate(scans, domain).get(("", domain)) or counts
        n_processes = count_processes(scans)
        failures += trace_problems(scans, domain=domain)
        # The program's own protocol errors and ranges dropped, not judged (judged_counts):
        # said, not hidden.
        errors, drops, own = judged_counts(scans, domain)
        all_ = totals(scans)
        program = {key: all_[key] - errors[key] for key, _ in PROTOCOL_ERRORS}
        if own and any(program.values()):
            notes.append(f"protocol errors of the program's own NVTX use outside domain "
                         f"{quoted(domain)}, not the shim's (not judged): "
                         f"{errors_line(program)[len('protocol errors: '):]}")
        program = {key: all_[key] - drops[key] for key, _ in DROPS}
        if own and drops_line(program):
            notes.append(f"{drops_line(program)}, of the program's own NVTX use outside domain "
                         f"{quoted(domain)}, not the shim's (not judged)")
        in_flight = launches_in_flight(scans, domain)
        if in_flight:
            notes.append(in_flight_line(in_flight, domain))
    total_ranges = counts.ranges()

    def ranges_named(name):
        found = counts.get(name)
        return found[0] if found else 0

    if total_ranges == 0 and not args.allow_no_ranges and (scans or args.nsys_stats):
        failures.append(f"no range of domain {quoted(domain)} was recorded: the workload "
                        "launched no CUDA graph, or the shim was not preloaded into it")

    # Every intercepted launch has its range: the shim's own count, when it wrote one.
    tables = read_launch_tables(distinct_inputs(args.launch_summary))
    recycled = collections.Counter()
    for table in tables:
        recycled.update(table.recycled)
    if any(table.names for table in tables) or recycled:
        rejected_by_tool = sum(int(scan.meta.get("rejectedPushes", 0)) for scan in scans)
        # Fewer ranges than launches: launches the profile lost. More: ranges no launch of the
        # shim's accounts for (another run's trace, or this run's launch summary missing).
        fewer, more = [], []
        # By graph where the process is known on both sides: a summary's row is the graph's
        # number, which its ranges carry as their category, in the process its title names. A
        # graph renamed after its first launches has one row under its last name and ranges under
        # each name it had: by name, its earlier ranges counted for no row and it "lacked" them
        # (F169). Its destroyed graphs' totals row accounts for the numbers no row has.
        # A summary's process is found under the pid it ran with, through a merge's renumbering;
        # one no trace holds fails: its launches have no range here (another run's summary beside
        # this run's traces, or a process that wrote none) — never matched by name instead.
        numbered = {} if args.nsys_stats else numbered_ranges(scans, domain)
        processes = {} if args.nsys_stats else trace_processes(scans)
        joined = set()  # the (trace index, event pid) of the processes joined by number
        unexplained = False  # ranges of numbers no row accounts for, in a joined process
        several = len({table.pid for table in tables}) > 1
        # Launches a process made as it exited, which its shim counted and its trace cannot hold,
        # exactly: those after the recorder's report (the recorder answered their pushes so, and
        # the shim's summary counts them by graph) and those in flight at exit (a thread inside
        # one as the recorder took its report: the trace counts them by process). A graph is
        # short by its launches after the report, the process by those plus its launches in
        # flight -- any other range lost, a push rejected, or a range too many fails. Nothing
        # more is allowed for: a launch the shim had counted and not yet had answered as its
        # summary read the row (a worker launching in a tight loop) fails the run, rarely, where
        # an allowance for it let any one lost range of the process pass (review TT-1). Per
        # process, as the traces and summaries tell it by pid and start: one process's launches
        # never account for another's loss, and a pid that ran several times gets none (TT-2).
        flying_in = {} if args.nsys_stats else in_flight_by_process(scans, domain)
        excused = []  # (launches short, of them in flight, launches after the report) per process
        exiting = 0   # what the processes not excused had of those: named in their failure
        for pid in sorted({table.pid for table in tables if table.pid is not None}):
            if args.nsys_stats:
                break
            candidates = processes.get(pid, set())
            if not candidates:
                failures.append(f"the launch summary of process {pid} matches no process of the "
                                "traces (another run's summary, or that process wrote no trace)")
                continue
            # Where both sides say when the process started, they must agree: an earlier run's
            # summary of the same pid (a container's pid 1) beside this run's trace passed on
            # its counts (review Y3). A side that does not say (an older shim or recorder)
            # matches by pid.
            known = {start for _, _, start in candidates}
            own = []
            for table in (t for t in tables if t.pid == pid):
                if table.start is None or "" in known or table.start in known:
                    own.append(table)
                else:
                    failures.append(
                        f"the launch summary of process {pid} (started {table.start}) matches no "
                        "process of the traces: the traces' process of that pid started at "
                        f"another time (another run's summary, or that run wrote no trace)")
            if not own:
                continue
            starts = {table.start for table in own}
            held = {(index, traced) for index, traced, start in candidates
                    if not start or None in starts or start in starts}
            joined |= held
            ranges, gone, rowed = collections.Counter(), collections.Counter(), 0
            for traced in held:  # two processes that ran with one pid (hosts, reuse): summed
                ranges.update(numbered.get(traced, {}))
            if len(own) == 1:  # the usual: one summary per process, each number once
                rows = own[0].rows()
            else:  # the same pid in several summaries (hosts): their rows summed per number
                summed = {}
                for table in own:
                    for ordinal, name, launches, _, refused_here in table.rows():
                        _, n, r = summed.get(ordinal, (name, 0, 0))
                        summed[ordinal] = (name, n + launches, r + refused_here)
                rows = ((o, name, n, 0, r) for o, (name, n, r) in sorted(summed.items()))
            where = f" (pid {pid})" if several else ""
            after_of = collections.Counter()
            for table in own:
                after_of.update(table.after_report)
            lacking, extra, short, residual, refusals = [], [], 0, 0, 0
            for ordinal, name, expected, _, refused_here in rows:
                got = ranges.get(ordinal, 0)
                rowed += got
                refusals += refused_here
                after = after_of.get(ordinal, 0)
                if got != expected:
                    (lacking if got < expected else extra).append(
                        f"{quoted(name)}{where}: {expected} launches, {got} ranges")
                    short += max(expected - got, 0)
                if after and expected - got < after:  # ranges the recorder said it left out
                    extra.append(f"{quoted(name)}{where}: {expected} launches, {got} ranges, "
                                 f"though {after} came after the recorder's report")
                residual += max(expected - got - after, 0)
            for table in own:
                gone.update(table.recycled)
            stray = sum(ranges.values()) - rowed != gone["launches"] - after_of.get(None, 0)
            unexplained |= stray
            flying = sum(flying_in.get(traced, 0) for traced in held)
            after = sum(after_of.values())
            one_run = len(held) == 1 and len(own) == 1
            if (flying or after) and one_run and not extra and not stray and not refusals and \
                    residual == flying:
                if lacking or after_of.get(None):
                    excused.append((short + after_of.get(None, 0), flying, after))
            else:
                fewer += lacking
                more += extra
                exiting += (flying + after) if lacking else 0
                if flying > residual and not extra:  # each was counted, and lacks its range
                    more.append(f"{flying} launches in flight at exit{where} (the trace's count), "
                                f"but only {residual} of the shim's lack their range")
        # By name for the rest: a summary whose title names no process (an older shim's, one a
        # wrapper wrote); and with Nsight Systems' tables, which have no numbers. Those have no
        # process either: where the wrapper noted when the report's session ran, a summary
        # whose process started outside it is another run's (review AA1: any run's summary
        # with the same names and counts passed), never joined by name.
        by_name = []
        for table in (t for t in tables if t.pid is None or args.nsys_stats):
            started = start_key_parts(table.start)
            # A summary that names another session is another run's. One that names none may
            # be this run's (a sandboxed program that cannot see the stamp, a launcher that
            # passes on only some variables: review CC1): judged by when it started, below.
            token = nsys_session.get("token") if nsys_session else None
            if isinstance(token, str) and table.session is not None and table.session != token:
                failures.append(
                    f"the launch summary of process {table.pid} (started {table.start}) is not "
                    f"of this report's run: it names another `nsys` session ({table.session}) "
                    "(another run's summary)")
                continue
            if nsys_session and started:
                same_boot = "0" in (started[0], nsys_session["boot"]) or \
                    started[0] == nsys_session["boot"]
                if not (same_boot and nsys_session["fromTick"] <= started[1] <=
                        nsys_session["untilTick"]):
                    failures.append(
                        f"the launch summary of process {table.pid} (started {table.start}) is "
                        "not of this report's run: its process started outside the `nsys` "
                        "session the tables were made from (another run's summary)")
                    continue
            by_name.append(table)
        rest, rest_recycled = launches_by_name(by_name)
        if joined:
            named = NameStats()
            for index, scan in enumerate(scans):
                for (pid, cat), stats in scan.stats.items():
                    if cat == domain and (index, pid) not in joined:
                        named.merge(stats)
        else:
            named = counts
        # A push the NVTX tool rejected is a launch without its range in the profile: never
        # excused (the verdict said "the shim's 8 launches all have their range" over 4).
        for name, c in sorted(rest.items()):
            expected = c["launches"]
            found = named.get(name)
            got = found[0] if found else 0
            # Graphs destroyed long ago are counted in one totals row, not by name: a name may
            # then have more ranges than its rows (the totals are compared below).
            if name and (got < expected or (got > expected and not rest_recycled)):
                (fewer if got < expected else more).append(
                    f"{quoted(name)}: {c['launches']} launches, {got} ranges")
        launches = sum(sum(t.launches) for t in tables) + recycled["launches"]
        rejected = sum(sum(t.rejected) for t in tables) + recycled["rejected"]
        # The totals: where graphs destroyed long ago (or unnamed) are counted in one row, and
        # for ranges of names no row of the summaries has (another run's graphs, say).
        excused_short = sum(short for short, _, _ in excused)
        if total_ranges + excused_short != launches and (
                unexplained or rest_recycled or any(not name for name in rest) or
                not (fewer or more)):
            (fewer if total_ranges < launches else more).append(
                f"{launches} launches, {total_ranges} ranges")
        refused = (f" ({rejected} of their pushes the NVTX tool rejected: FERRUM_RECORD_REJECT, "
                   "or a tool that refused them)" if rejected else "")
        flying = sum(f for _, f, _ in excused)
        after = sum(a for _, _, a in excused)
        if exiting and fewer:
            refused += (f" (the shim and the trace count {exiting} launches made as the process "
                        "exited -- in flight at exit, or after the recorder's report -- which do "
                        "not account for these)")
        for found, what, why in ((fewer, "launches without their range", refused),
                                 (more, "ranges without a launch the shim counted", "")):
            if found:
                failures.append(f"{what}: " + listed(found, separator="; ") + why)
        if not fewer and not more and rejected != rejected_by_tool and not args.nsys_stats:
            notes.append(f"the shim counted {rejected} rejected pushes, the recorder "
                         f"{rejected_by_tool}")
        launch_note = (f"the shim's {launches} launches all have their range" if not excused else
                       f"the shim's {launches} launches: {launches - excused_short} with their "
                       f"range, {excused_short} made as the process exited without one ({flying} "
                       f"in flight at exit, {after} after the recorder's report: end the threads "
                       "that launch before the process exits to have them)")
    elif args.require_launch_summary and total_ranges > 0:
        # Asked for, not written: the shim refused the setting (a path too long, say; its
        # message is above) or could not write. Passing would skip the one cross-check.
        failures.append("the shim wrote no launch summary (FERRUM_REPLAY_SUMMARY), though "
                        "ranges were recorded: launches cannot be cross-checked with ranges "
                        "(see the shim's message above)")
        launch_note = ""
    else:
        launch_note = "launch count not cross-checked (the shim wrote no FERRUM_REPLAY_SUMMARY)"

    expectations = parse_expectations(args.expect) if args.expect else []
    gpu_counts = None if args.nsys_stats else aggregate(scans, domain, gpu=True).get(("", domain))
    unapplied = []  # expectation lines whose bounds matched no range (min-count 0)
    for pattern, minimum, max_cpu, max_gpu, number in expectations:
        # Which names the pattern stands for is decided on the CPU ranges (every range has one),
        # and the same names are read for GPU time.
        chosen = names_matching((name for name, s in counts.items()), pattern)
        matched = [(name, s) for name, s in counts.items() if name in chosen]
        n = sum(s[0] for _, s in matched)
        total = sum(s[1] for _, s in matched)
        cpu_untold = sorted(name for name, s in matched if s[0] and name in untimed_cpu)
        if n < minimum:
            failures.append(f"expectation line {number}: {n} ranges match {quoted(pattern)}, "
                            f"expected at least {minimum}")
        elif n == 0 and (max_cpu is not None or max_gpu is not None):
            # Allowed not to run, so not a failure; but not "met" either: a bound that matched
            # nothing (a typo, a renamed graph) was never applied, and the verdict says so.
            unapplied.append(number)
            continue
        elif max_cpu is not None and cpu_untold:
            failures.append(f"expectation line {number}: max-cpu-mean-ms {max_cpu:g} for "
                            f"{quoted(pattern)}, but the Nsight Systems table gives no CPU time "
                            "(no 'Total Time' column) for " + listed(quoted(g) for g in cpu_untold))
        elif max_cpu is not None and n and total / n / 1e6 > max_cpu:
            failures.append(f"expectation line {number}: ranges matching {quoted(pattern)} "
                            f"take {total / n / 1e6:.3f} ms of CPU launch time on average, more "
                            f"than max-cpu-mean-ms {max_cpu:g}")
        if max_gpu is None:
            continue
        # A GPU bound never passes without GPU times to judge.
        gpu = [s for name, s in (gpu_counts.items() if gpu_counts else ()) if name in chosen]
        gn = sum(s[0] for s in gpu)
        # Assigned here, not in the elif below: the helper runs on Python 3.7 (docs/usage.md).
        # Per process: a graph timed in one process and not in another is untimed there.
        # Per graph, as compare decides it: a graph renamed after its first launches is one
        # graph, timed under either name (review HH-5: its sampled-out later replays failed it).
        untimed_where = ({} if args.nsys_stats else
                         untimed_in_processes(scans, domain, chosen, renamed=True))
        untimed = sorted(untimed_where)
        process_count = len(process_row_labels(scans)) if untimed else 0
        if args.nsys_stats:
            failures.append(f"expectation line {number}: max-gpu-mean-ms needs the recorder's "
                            "GPU times (run without --nsys)")
        elif gn == 0:
            failures.append(f"expectation line {number}: max-gpu-mean-ms {max_gpu:g} for "
                            f"{quoted(pattern)}, but the traces hold no GPU time for it (GPU "
                            "timing was off, the shim is older than GPU timing, or no replay "
                            "of it completed)")
        elif untimed:
            # A mean over the graphs that have GPU time says nothing of those that have none.
            failures.append(f"expectation line {number}: max-gpu-mean-ms {max_gpu:g} for "
                            f"{quoted(pattern)}, but {len(untimed)} graph"
                            f"{'s' if len(untimed) != 1 else ''} matching it "
                            f"{'have' if len(untimed) != 1 else 'has'} no GPU time, in the "
                            "whole run or in some of its processes (no replay of it was timed "
                            "there: GPU timing off, a driver without events, launched into a "
                            "stream capture, the pool exhausted, a shared stream; or none "
                            "finished before exit): "
                            + listed(untimed_text(n, untimed_where[n], process_count)
                                     for n in untimed))
        elif sum(s[1] for s in gpu) / gn / 1e6 > max_gpu:
            failures.append(f"expectation line {number}: replays matching {quoted(pattern)} "
                            f"take {sum(s[1] for s in gpu) / gn / 1e6:.3f} ms of GPU time on "
                            f"average, more than max-gpu-mean-ms {max_gpu:g}")

    for name, expected in args.expect_range:
        got = ranges_named(name)
        if got != expected:
            failures.append(f"{quoted(name)}: {got} ranges, expected {expected}")
    if args.expect_total is not None and total_ranges != args.expect_total:
        failures.append(f"{total_ranges} ranges, expected {args.expect_total}")
    if args.expect_counts is not None:
        got = sorted(counts.count)
        if got != sorted(args.expect_counts):
            failures.append(f"ranges per graph {got}, expected {sorted(args.expect_counts)} "
                            "(the replays the program made)")

    if failures:
        extra = f" (and {len(failures) - 1} more problem{'s' if len(failures) > 2 else ''})"
        print(f"{args.prog}: FAIL: {failures[0]}" + (extra if len(failures) > 1 else ""))
        for failure in failures[1:]:
            print(f"{args.prog}:   also: {failure}", file=sys.stderr)
        return 1
    where = f" in {n_processes} process{'es' if n_processes != 1 else ''}" \
        if n_processes is not None else " (Nsight Systems report)"
    balanced = ", balanced" if not args.nsys_stats else ""
    met_n = len(expectations) - len(unapplied)
    met = f"; {met_n} expectation{'s' if met_n != 1 else ''} met" if expectations else ""
    if unapplied:
        met += (f", {len(unapplied)} matched no range (line{'s' if len(unapplied) != 1 else ''} "
                f"{listed(str(n) for n in unapplied)}: min-count 0, bounds not applied)")
    # Graphs, not names: a graph renamed after its first launches is one (by_graph).
    graphs = len(counts) if args.nsys_stats else len(by_graph(scans, domain))
    print(f"{args.prog}: OK: {total_ranges} ranges of {graphs} "
          f"graph{'s' if graphs != 1 else ''}{where}{balanced}; {launch_note}{met}")
    for note in notes:
        print(f"{args.prog}: note: {note}", file=sys.stderr)
    return 0


def _count(text):
    try:
        return plain_count(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a count (digits) is needed, got {text!r}") from None


def _name_count(text):
    name, sep, count = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=COUNT, got {text!r}")
    try:
        return name, plain_count(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"COUNT must be an integer in {text!r}") from None


def _counts(text):
    _given(text)  # `--expect-counts "$COUNTS"` with COUNTS unset: a usage error, as for --expect
    try:
        return [plain_count(n.strip()) for n in text.split(",") if n.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N,N,... got {text!r}") from None


_PARSER = []


def main(argv=None):
    if not _PARSER:
        _PARSER.append(build_parser())
    # An argument no subcommand takes is said by that subcommand ("ferrum-replay check: ..."),
    # as every other usage error of it.
    args, unknown = _PARSER[0].parse_known_args(argv)
    if unknown:
        _PARSER[0].subcommands[args.command].error(
            "unrecognized arguments: " + " ".join(unknown))
    try:
        try:
            return args.run(args)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError,
                RecursionError) as error:  # a value the validation let through
            raise InputError(f"a trace holds a value of an unexpected kind ({type(error).__name__}: "
                             f"{printable(str(error), MESSAGE_LIMIT)})") from error
    except InputError as error:
        prog = getattr(args, "prog", "ferrum-replay")
        if args.command == "check":
            print(f"{prog}: FAIL: {error}")
            return 1
        print(f"ferrum-replay: {error}", file=sys.stderr)
        return 2


def _given(value):
    """An option's value, refused when empty: `check --expect "$EXPECT"` with EXPECT unset was
    taken for no --expect at all, and the gate passed with no expectation checked."""
    if not value:
        raise argparse.ArgumentTypeError("needs a value: it was given an empty one")
    return value


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line, `ferrum-replay CMD: ...`, exit 2: argparse printed its usage
    first, naming this helper and every internal subcommand the user never typed."""

    def error(self, message):
        print(f"{self.prog}: {printable(message, MESSAGE_LIMIT)} (see `ferrum-replay --help`)",
              file=sys.stderr)
        sys.exit(2)


def build_parser():
    # Subcommands' parsers take this class and name: "ferrum-replay summary".
    parser = OneLineParser(prog="ferrum-replay", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    parser.subcommands = sub.choices

    p = sub.add_parser("summary", help="per-range table of saved traces")
    p.add_argument("--domain", type=_given, help="only this domain ('global' = NVTX's default)")
    p.add_argument("--by-process", action="store_true", help="one row per process and range")
    p.add_argument("traces", nargs="+", metavar="TRACE")
    p.set_defaults(run=cmd_summary)

    p = sub.add_parser("compare", help="mean time per graph, BASE against NEW")
    p.add_argument("--threshold", type=_threshold, default=10.0, metavar="PCT",
                   help="fail when a graph's mean grew by more than PCT percent (default 10)")
    p.add_argument("--domain", type=_given, default=DEFAULT_DOMAIN, help=DOMAIN_HELP)
    p.add_argument("base", metavar="BASE", help="a trace, or a directory of traces")
    p.add_argument("new", metavar="NEW", help="a trace, or a directory of traces")
    p.set_defaults(run=cmd_compare)

    p = sub.add_parser("merge", help="one trace from several")
    p.add_argument("-o", "--output", type=_given, required=True,
                   help="output (%%p, %%h, %%q{VAR} expanded)")
    p.add_argument("traces", nargs="+", metavar="TRACE")
    p.set_defaults(run=cmd_merge)

    p = sub.add_parser("written", help="the traces of one recording session")
    p.add_argument("--since", required=True)
    p.add_argument("pattern")
    p.set_defaults(run=cmd_written)

    p = sub.add_parser("record-report", help=argparse.SUPPRESS)
    p.add_argument("--since", required=True)
    p.add_argument("--status", type=int, required=True)
    p.add_argument("--running-dir", help="the shim's running markers (FERRUM_REPLAY_RUNNING_DIR)")
    p.add_argument("--program", help="the program's file, as the wrapper found it")
    p.add_argument("pattern")
    p.set_defaults(run=cmd_record_report)

    p = sub.add_parser("record-output", help=argparse.SUPPRESS)
    p.add_argument("--since", help="the session's stamp: note its start in the directory")
    p.add_argument("pattern")
    p.set_defaults(run=cmd_record_output)

    p = sub.add_parser("expand", help=argparse.SUPPRESS)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("pattern")
    p.set_defaults(run=cmd_expand)

    p = sub.add_parser("fresh", help=argparse.SUPPRESS)
    p.add_argument("path")
    p.add_argument("token")
    p.set_defaults(run=cmd_fresh)

    p = sub.add_parser("quote", help=argparse.SUPPRESS)
    p.add_argument("values", nargs="*")
    p.set_defaults(run=cmd_quote)

    p = sub.add_parser("nsys-table", help="our rows of nsys stats CSV output")
    p.add_argument("--domain", type=_given, default=DEFAULT_DOMAIN, help=DOMAIN_HELP)
    p.add_argument("--stats-base", required=True)
    p.add_argument("--since-tick", type=int, help=argparse.SUPPRESS)
    p.add_argument("--session", help=argparse.SUPPRESS)
    p.add_argument("report")
    p.set_defaults(run=cmd_nsys_table)

    p = sub.add_parser("check", help="CI smoke verdict")
    p.add_argument("--prog", default="ferrum-replay check", help=argparse.SUPPRESS)
    p.add_argument("--preflight", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--domain", type=_given, default=DEFAULT_DOMAIN, help=DOMAIN_HELP)
    p.add_argument("--expect", type=_given, metavar="FILE",
                   help="lines 'name-pattern min-count [max-cpu-mean-ms [max-gpu-mean-ms]]' "
                        "(globs, # comments)")
    p.add_argument("--expect-range", action="append", default=[], type=_name_count,
                   metavar="NAME=COUNT", help="exactly COUNT ranges named NAME")
    p.add_argument("--expect-total", type=_count, metavar="N", help="exactly N ranges")
    p.add_argument("--expect-counts", type=_counts, metavar="N,N,...",
                   help="the ranges per name, in any order, are exactly these counts")
    p.add_argument("--launch-summary", action="append", type=_given, default=[], metavar="FILE",
                   help="the shim's exit summary (FERRUM_REPLAY_SUMMARY); repeatable")
    p.add_argument("--running-dir", type=_given, metavar="DIR",
                   help="the shim's running markers (FERRUM_REPLAY_RUNNING_DIR): fail on any "
                        "left, a process that launched and ended without writing its trace or "
                        "summary, or is still running (ci-smoke-profile)")
    p.add_argument("--require-launch-summary", action="store_true",
                   help="fail when ranges were recorded but no --launch-summary was written "
                        "(ci-smoke-profile: it asked the shim for them)")
    p.add_argument("--nsys-stats", type=_given, metavar="BASE",
                   help="check nsys stats CSV output (BASE_nvtx_sum.csv) instead of traces")
    p.add_argument("--allow-no-ranges", action="store_true",
                   help="pass when the run launched no CUDA graph (otherwise a FAIL)")
    p.add_argument("traces", nargs="*", metavar="TRACE")
    p.set_defaults(run=cmd_check)
    return parser


class _GuardedOutput:
    """Standard output that remembers its first write error (a full disk, /dev/full, a reader
    gone; none at all: closed, `>&-`) instead of raising it from the middle of a table: the
    command ends, then says so."""

    def __init__(self, stream):
        self.stream, self.error = stream, None

    def write(self, text):
        if self.error is None and text:
            try:
                if self.stream is None:  # (Python started without a descriptor 1)
                    raise OSError(errno.EBADF, os.strerror(errno.EBADF))
                return self.stream.write(text)
            except OSError as error:
                self.error = error
        return len(text)

    def flush(self):
        if self.error is None and self.stream is not None:
            try:
                self.stream.flush()
            except OSError as error:
                self.error = error

    def __getattr__(self, name):
        return getattr(self.stream, name)


def run_main():
    """main(), with standard output that fails said in one line instead of a traceback: exit 1
    (a verdict that was not written is no pass), never 0 — also when it was closed (`>&-`), as
    for any command whose output is written there. Text the locale's encoding cannot hold (a
    graph name in CJK under ISO-8859-1) is written escaped (\\uXXXX), not a failure."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):  # None (closed), or not a text stream
            pass
    out = sys.stdout = _GuardedOutput(sys.stdout)
    status = main()
    out.flush()
    if out.error is None:
        return status
    try:  # what is left in the stream's buffer goes nowhere at exit, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.stream.fileno())
    except (AttributeError, OSError, ValueError):
        pass
    if not isinstance(out.error, BrokenPipeError):  # a reader that left asked for no more
        reason = f": {out.error.strerror}" if out.error.strerror else ""
        print(f"ferrum-replay: cannot write to standard output{reason}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(run_main())
