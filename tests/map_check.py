#!/usr/bin/env python3
"""docs/architecture.md's map names every source file, so that a newcomer who reads it finds
each one: every unit (a source file with its header) of shim/FOLDER/ in the folder table's row
for shim/FOLDER/; every unit of recorder/ and common/, every script of scripts/ and every folder
of tests/ in the "## Layout" block. Files added without their line (F154's, F160's, F162's) fell
out of the map unseen: the Layers drawing is read by layering_check.py, the rest was not.

  tests/map_check.py [ROOT]
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".c", ".def", ".S")


def expand_braces(text):
    """`loader_stubs_{x86_64,aarch64}.S` as the two names it stands for."""
    pattern = re.compile(r"([\w.-]*)\{([^{}]*)\}([\w.*-]*)")
    while True:
        match = pattern.search(text)
        if not match:
            return text
        words = " ".join(match[1] + part + match[3] for part in match[2].split(","))
        text = text[:match.start()] + words + text[match.end():]


def named(text, name):
    return re.search(r"(?<![\w/])" + re.escape(name) + r"(?![\w-])", text) is not None


def units(folder):
    return sorted({os.path.splitext(n)[0] for n in os.listdir(folder)
                   if n.endswith(SOURCE_SUFFIXES)})


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as handle:
        doc = expand_braces(handle.read())
    layout = doc[doc.index("## Layout"):]
    missing = []
    shim = os.path.join(root, "shim")
    for folder in sorted(os.listdir(shim)):
        path = os.path.join(shim, folder)
        if not os.path.isdir(path):
            continue
        row = re.search(r"^\| \[`shim/" + re.escape(folder) + r"/`\].*$", doc, re.M)
        if row is None:
            if not named(layout, folder + "/"):
                missing.append(f"shim/{folder}/ (no row in the folder table, not in Layout)")
            continue
        missing += [f"shim/{folder}/{u}" for u in units(path) if not named(row[0], u)]
    for folder in ("recorder", "common"):
        missing += [f"{folder}/{u}" for u in units(os.path.join(root, folder))
                    if not named(layout, u)]
    scripts = os.path.join(root, "scripts")
    missing += [f"scripts/{n}" for n in sorted(os.listdir(scripts))
                if n not in ("meson.build", "__pycache__") and not named(layout, n)]
    tests = os.path.join(root, "tests")
    missing += [f"tests/{n}/" for n in sorted(os.listdir(tests))
                if os.path.isdir(os.path.join(tests, n)) and n != "__pycache__"
                and not named(layout, n + "/")]
    for item in missing:
        print(f"map: {item} is not named in docs/architecture.md")
    print(f"map: {'FAIL' if missing else 'ok'}: {len(missing)} file(s) missing from the map")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
