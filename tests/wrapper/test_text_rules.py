#!/usr/bin/env python3
"""The Python implementation of docs/text-rules.md (scripts/ferrum_replay_traces.py:
expand_output, fresh_name, printable) against every case of tests/cases/text_rules.json, and
the wrapper's use of it (its hidden `expand`, `fresh` and `quote` subcommands, which
scripts/ferrum-replay calls instead of a shell copy of the rules).

    test_text_rules.py            (meson: suite workflow, test 'workflow text_rules')
"""
import json
import os
import subprocess
import sys

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
    for failure in failures:
        print(f"FAIL {failure}")
    total = (len(CASES["expand"]) + len(CASES["fresh"]) + len(CASES["printable"]) +
             len(CASES["domain"]))
    print(f"{'FAIL' if failures else 'ok'}   text rules: {total} cases, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
