#!/usr/bin/env python3
"""The shim exports exactly what its tables declare.

Exported = every row of shim/hooks/hooked_functions.def, the functions of the public header
(include/ferrum_replay/*.h), and the loader's dlsym/dlvsym/dlopen (shim/loader_stubs_*.S) and dlclose (loader_hooks.cpp),
and the C library's longjmp family (jump_hooks.cpp).
Checked against the built library's dynamic symbols (`nm -D --defined-only`) and against
shim/hooks/exports.map, the version script that decides them.

  tests/exports_check.py SOURCE_ROOT LIBFERRUM_REPLAY_SO
"""
import glob
import os
import re
import subprocess
import sys

LOADER = {"dlsym", "dlvsym", "dlopen", "dlclose"}
# The C library's non-local jumps (shim/hooks/jump_hooks.cpp): a jump out of a graph call.
JUMPS = {"longjmp", "_longjmp", "siglongjmp", "__longjmp_chk"}


def table_names(root):
    text = open(os.path.join(root, "shim", "hooks", "hooked_functions.def"), encoding="utf-8").read()
    return set(re.findall(r"^HOOK\(\s*\w+\s*,\s*\w+\s*,\s*(\w+)\s*,", text, re.M))


def public_names(root):
    names = set()
    for header in glob.glob(os.path.join(root, "include", "ferrum_replay", "*.h")):
        text = open(header, encoding="utf-8").read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # usage examples live in comments
        names |= set(re.findall(r"^\s*(?:\w+\s+\**)+?(ferrum_replay_\w+)\s*\(", text, re.M))
    return names


def map_names(root):
    text = open(os.path.join(root, "shim", "hooks", "exports.map"), encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    glob_part = text.split("global:")[1].split("local:")[0]
    return set(re.findall(r"(\w+)\s*;", glob_part))


def dynamic_names(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def compare(what, got, want):
    ok = True
    if got - want:
        print(f"exports: {what} has names no table declares: {sorted(got - want)}")
        ok = False
    if want - got:
        print(f"exports: {what} lacks declared names: {sorted(want - got)}")
        ok = False
    return ok


def main(root, library):
    table = table_names(root)
    if len(table) < 10:
        print(f"exports: only {len(table)} rows read from hooked_functions.def")
        return 1
    want = table | public_names(root) | LOADER | JUMPS
    ok = compare("exports.map", map_names(root), want)
    ok = compare(os.path.basename(library), dynamic_names(library), want) and ok
    print(f"exports: {len(want)} names ({len(table)} hooked, the public API, the loader's): "
          + ("match" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
