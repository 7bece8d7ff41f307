#!/usr/bin/env python3
"""The C++ implementation of the text rules (common/text_rules.cpp, used by the shim and the
recorder) against the one table of cases, tests/cases/text_rules.json (docs/text-rules.md).

    test_text_rules_cpp.py PROBE      (PROBE: tests/common/text_rules_probe, built by meson)

Every case of every section is run; each mismatch is printed; exit 1 if any.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def hx(text):
    data = text.encode() if isinstance(text, str) else text
    return data.hex() or "-"


def unhex(field):
    return b"" if field == "-" else bytes.fromhex(field)


def main():
    probe = sys.argv[1]
    with open(os.path.join(ROOT, "tests", "cases", "text_rules.json"), encoding="utf-8") as f:
        table = json.load(f)
    context = table["expand_context"]
    lines, expected = [], []
    for name, value in context["env"].items():
        lines.append(f"env {hx(name)} {hx(value)}")
        expected.append(("env", name, "ok"))
    for case in table["expand"]:
        lines.append(f"expand {context['pid']} {hx(context['host'])} {hx(case['pattern'])}")
        expected.append(("expand", case["pattern"], case))
    for case in table["fresh"]:
        lines.append(f"fresh {hx(case['path'])} {hx(case['token'])}")
        expected.append(("fresh", case["path"], case))
    limit = table["printable_limit"]
    for case in table["printable"]:
        lines.append(f"printable {limit} {case['in_hex'] or '-'}")
        expected.append(("printable", case["in_hex"], case))
    for case in table["domain"]:
        lines.append(f"domain {case['in_hex'] or '-'}")
        expected.append(("domain", case["in_hex"], case))

    run = subprocess.run([probe], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         timeout=60, check=False)
    replies = run.stdout.splitlines()
    if run.returncode != 0 or len(replies) != len(lines):
        print(f"probe failed: exit {run.returncode}, {len(replies)} replies for {len(lines)} "
              f"cases\n{run.stderr}")
        return 1

    failures = 0
    for (kind, key, case), reply in zip(expected, replies):
        shown = key if len(key) < 60 else key[:57] + "..."
        if kind == "env":
            ok, got, want = reply == "ok", reply, "ok"
        elif kind == "expand":
            if case.get("error"):
                ok, got, want = reply == "error", reply, "error"
            else:
                fields = reply.split(" ")
                got = reply
                want = (case["out"], case["unset"])
                ok = (len(fields) == 3 and fields[0] == "ok"
                      and unhex(fields[1]).decode("utf-8", "replace") == case["out"]
                      and [n for n in unhex(fields[2]).decode().split(", ") if n] == case["unset"])
                if len(fields) == 3:
                    got = (unhex(fields[1]).decode("utf-8", "replace"), unhex(fields[2]).decode())
        elif kind == "domain":
            fields = reply.split(" ")
            got = (unhex(fields[0]).decode("utf-8", "replace"), fields[-1])
            want = (case["out"], "problem" if case["problem"] else "ok")
            ok = len(fields) == 2 and got == want
        else:
            got = unhex(reply).decode("utf-8", "replace") if reply != "error" else reply
            want = case["out"]
            ok = got == want
        if not ok:
            failures += 1
            print(f"FAIL {kind} {shown!r}: got {str(got)[:120]!r}, want {str(want)[:120]!r}")
    total = len(expected)
    print(f"{total - failures}/{total} text-rule cases pass (C++)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
