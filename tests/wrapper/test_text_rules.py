#!/usr/bin/env python3
"""The Python implementation of docs/text-rules.md (scripts/ferrum_replay_traces.py:
expand_output, fresh_name, printable) against every case of tests/cases/text_rules.json, and
the wrapper's use of it (its hidden `expand`, `fresh` and `quote` subcommands, which
scripts/ferrum-replay calls instead of a shell copy of the rules), and the wrapper's one sh
stand-in for printable text where no python3 runs (`_quote`).

    test_text_rules.py            (meson: suite workflow, test 'workflow text_rules')
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HELPER = os.path.join(ROOT, "scripts", "ferrum_replay_traces.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ferrum_replay_traces as rules  # noqa: E402

with open(os.path.join(ROOT, "tests", "cases", "text_rules.json"), encoding="utf-8") as handle:
    CASES = json.load(handle)

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def short(text):
    return text if len(text) < 60 else text[:40] + f"...({len(text)} chars)"


def helper(*args, env=None):
    return subprocess.run([sys.executable, HELPER, *args], capture_output=True,
                          env=env, check=False)


def test_expand():
    context = CASES["expand_context"]
    for case in CASES["expand"]:
        pattern = case["pattern"]
        try:
            out, unset = rules.expand_output(pattern, pid=context["pid"], host=context["host"],
                                             env=context["env"])
        except rules.InputError as error:
            check(case.get("error"), f"expand {short(pattern)!r}: unexpected error {error}")
            continue
        check(not case.get("error"), f"expand {short(pattern)!r}: no error, expected one")
        if case.get("error"):
            continue
        check(out == case["out"], f"expand {short(pattern)!r}: {short(out)!r}, "
                                  f"expected {short(case['out'])!r}")
        check(unset == case["unset"], f"expand {short(pattern)!r}: unset {unset}, "
                                      f"expected {case['unset']}")


def test_domain():
    for case in CASES["domain"]:
        raw = bytes.fromhex(case["in_hex"])
        name, problem = rules.domain_name(raw.decode("utf-8", "surrogateescape"))
        check(name == case["out"] and bool(problem) == case["problem"],
              f"domain {raw!r}: {name!r} ({problem}), expected {case['out']!r} "
              f"({'a problem' if case['problem'] else 'no problem'})")


def test_expand_through_the_wrapper_entry():
    """What the sh wrapper runs: `expand PATTERN` prints the expansion and a '.', warns once
    on stderr naming each unset variable, and exits 2 (one line) when it is too long."""
    context = CASES["expand_context"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **context["env"],
           "FERRUM_REPLAY_PID": str(context["pid"])}
    for case in CASES["expand"]:
        if "%h" in case["pattern"]:
            continue  # this host's name, not the table's
        done = helper("expand", "--", case["pattern"], env=env)
        if case.get("error"):
            check(done.returncode == 2 and done.stdout == b"" and
                  len(done.stderr.splitlines()) == 1,
                  f"wrapper expand {short(case['pattern'])!r}: exit 2 and one line expected, "
                  f"got {done.returncode} {done.stderr[:200]!r}")
            continue
        check(done.returncode == 0 and done.stdout == case["out"].encode() + b".",
              f"wrapper expand {short(case['pattern'])!r}: {done.stdout[:80]!r}")
        warned = done.stderr.decode()
        check(len(warned.splitlines()) == (1 if case["unset"] else 0) and
              all(f"%q{{{name}}}" in warned for name in case["unset"]),
              f"wrapper expand {case['pattern']!r}: warning {warned!r}, unset {case['unset']}")


def test_fresh():
    for case in CASES["fresh"]:
        out = rules.fresh_name(case["path"], case["token"])
        check(out == case["out"], f"fresh {case['path']!r} {case['token']}: {out!r}, "
                                  f"expected {case['out']!r}")
        done = helper("fresh", "--", case["path"], case["token"])
        check(done.stdout == case["out"].encode() + b".", f"wrapper fresh {case['path']!r}")


def test_printable():
    limit = CASES["printable_limit"]
    check(limit == rules.MESSAGE_LIMIT, f"limit {rules.MESSAGE_LIMIT}, the rule says {limit}")
    for case in CASES["printable"]:
        raw = bytes.fromhex(case["in_hex"])
        out = rules.printable(raw, limit)
        check(out == case["out"], f"printable {short(case['in_hex'])}: {short(out)!r}, "
                                  f"expected {short(case['out'])!r}")
        # The same bytes as a file name (undecodable bytes as Python holds them).
        as_text = raw.decode("utf-8", "surrogateescape")
        check(rules.printable(as_text, limit) == case["out"],
              f"printable of text {short(case['in_hex'])}")
        if b"\x00" not in raw:  # argv cannot hold NUL
            done = helper("quote", "--", as_text)
            check(done.stdout.decode() == f"'{case['out']}'\n",
                  f"wrapper quote {short(case['in_hex'])}: {done.stdout[:80]!r}")


def ascii_stand_in(raw, limit):
    """What the wrapper's sh stand-in for section 3 shows where no python3 runs: sh cannot tell
    well-formed UTF-8 from a lone C1 byte, so every byte outside printable ASCII is '?' (never
    more kept than the rule keeps); the same limit and '...'."""
    text = "".join(chr(b) if 0x20 <= b <= 0x7E else "?" for b in raw)
    return text if len(text) <= limit else text[:limit] + "..."


def test_printable_without_python(tmp):
    """The wrapper's `_quote` (which ci-smoke-profile and gpu-smoke call) on a PATH of the
    wrapper's own tools and no python3: one line, in single quotes, only printable ASCII, cut
    at the limit -- a lone 0x9B (an 8-bit terminal's escape) and a 100 KB value reached the
    terminal raw and whole from three sh copies of a control-characters-only rule."""
    limit = CASES["printable_limit"]
    wrapper = os.path.join(ROOT, "scripts", "ferrum-replay")
    with open(wrapper, encoding="utf-8") as handle:
        tools = re.search(r"^need_tools (.*)$", handle.read(), re.M).group(1).split()
    bin_dir = os.path.join(tmp, "bin")
    os.mkdir(bin_dir)
    for tool in tools:
        os.symlink(shutil.which(tool), os.path.join(bin_dir, tool))
    env = {"PATH": bin_dir}
    cases = [bytes.fromhex(case["in_hex"]) for case in CASES["printable"]]
    cases += [b"\x9b5\x9b[31mX", b"9" * 100000 + b"x", b"a'b\nc"]
    for raw in cases:
        if b"\x00" in raw:  # argv cannot hold NUL
            continue
        done = subprocess.run(["/bin/sh", wrapper, "_quote", raw], capture_output=True,
                              env=env, check=False)
        want = f"'{ascii_stand_in(raw, limit)}'\n".encode()
        check(done.returncode == 0 and done.stdout == want,
              f"wrapper _quote without python3 {short(raw.hex())}: {done.stdout[:80]!r}, "
              f"expected {want[:80]!r} ({done.stderr[:200]!r})")
    for case in CASES["printable"]:  # where the table's answer is ASCII, the same answer
        raw = bytes.fromhex(case["in_hex"])
        if raw.isascii() and case["out"].isascii() and b"\x00" not in raw:
            check(f"'{ascii_stand_in(raw, limit)}'" == f"'{case['out']}'",
                  f"the sh stand-in and the table differ on ASCII {short(case['in_hex'])}")


def test_literal_pattern():
    """Section 1: a literal path handed on as a pattern has every '%' doubled and expands to
    itself -- in Python and in the sh wrapper (its hidden `_literal`, which ci-smoke-profile
    calls)."""
    context = CASES["expand_context"]
    paths = [case["pattern"] for case in CASES["expand"] if not case.get("error")]
    paths += ["/tmp/x%p", "%", "%%", "a%q{RANK}b", "/dir with space/%h%%%p/", "[*?]%\\",
              "plain/path"]
    wrapper = os.path.join(ROOT, "scripts", "ferrum-replay")
    for path in paths:
        pattern = rules.literal_pattern(path)
        out, unset = rules.expand_output(pattern, pid=context["pid"], host=context["host"],
                                         env=context["env"])
        check(out == path and not unset, f"literal {short(path)!r} expands to {short(out)!r}")
        done = subprocess.run([wrapper, "_literal", path], capture_output=True, check=False)
        check(done.returncode == 0 and done.stdout == pattern.encode(),
              f"wrapper _literal {short(path)!r}: {done.stdout[:80]!r}, expected {pattern!r}")


def main():
    for test in (test_expand, test_domain, test_expand_through_the_wrapper_entry, test_fresh,
                 test_printable, test_literal_pattern):
        test()
    with tempfile.TemporaryDirectory(prefix="ferrum-text-rules-") as tmp:
        test_printable_without_python(tmp)
    for failure in failures:
        print(f"FAIL {failure}")
    total = (len(CASES["expand"]) + len(CASES["fresh"]) + len(CASES["printable"]) +
             len(CASES["domain"]))
    print(f"{'FAIL' if failures else 'ok'}   text rules: {total} cases, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
