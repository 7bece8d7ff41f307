#!/usr/bin/env python3
"""docs/architecture.md's map names every source file, so that a newcomer who reads it finds
each one: every unit (a source file with its header) of shim/FOLDER/ in the file column of the
folder table's row for shim/FOLDER/; every unit of recorder/ and common/ in that folder's entry
of the "## Layout" block, every script of scripts/ in the scripts/ entry and every folder of
tests/ in the tests/ entry. A unit is named as an entry names a file -- `stem.*`, `stem.cpp`,
`stem.hpp` (`a_{x,y}.S` stands for both) --, not by a word that happens to be its stem
elsewhere (review HH-1: `clock` was "named" by "the one clock of every bound", `build` by
`meson.build`). Files added without their line (F154's, F160's, F162's) fell out of the map
unseen: the Layers drawing is read by layering_check.py, the rest was not. Out of scope: bench/,
demo/, python/, include/ (one or two files each, named in their one line).

  tests/map_check.py [ROOT]
  tests/map_check.py --self-test [ROOT]   each of a few entries removed must fail the check
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


def names_file(text, stem):
    """`stem.*`, `stem.cpp`, `stem.hpp`... as a name, not the end of a longer one."""
    suffixes = "|".join(re.escape(s) for s in (".*",) + SOURCE_SUFFIXES)
    return re.search(r"(?<![\w./-])" + re.escape(stem) + r"(?:" + suffixes + r")(?![\w])",
                     text) is not None


def names_word(text, word):
    """`word` as a name of its own (a script, `folder/`), not part of a longer one."""
    return re.search(r"(?<![\w./-])" + re.escape(word) + r"(?![\w.-])", text) is not None


def units(folder):
    return sorted({os.path.splitext(n)[0] for n in os.listdir(folder)
                   if n.endswith(SOURCE_SUFFIXES)})


def layout_entries(doc):
    """{"recorder/": its text, ...}: the Layout block's entries, each from its line at column 0
    to the next."""
    block = doc[doc.index("## Layout"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    entries, current = {}, None
    for line in block.splitlines():
        if line[:1] not in ("", " "):
            current = line.split()[0]
            entries[current] = line[len(current):]
        elif current:
            entries[current] += "\n" + line
    return entries


def missing_from(root, doc):
    """What the map `doc` does not name of the tree at `root`."""
    doc = expand_braces(doc)
    entries = layout_entries(doc)
    missing = []
    shim = os.path.join(root, "shim")
    for folder in sorted(os.listdir(shim)):
        path = os.path.join(shim, folder)
        if not os.path.isdir(path):
            continue
        row = re.search(r"^\| \[`shim/" + re.escape(folder) + r"/`\].*$", doc, re.M)
        if row is None:  # a folder without a row: named, and its files, in Layout's shim/ entry
            entry = entries.get("shim/", "")
            if not names_word(entry, folder + "/"):
                missing.append(f"shim/{folder}/ (no row in the folder table, not in Layout)")
            missing += [f"shim/{folder}/{u}" for u in units(path)
                        if not names_file(entry, u) and not names_file(entry, f"{folder}/{u}")]
            continue
        files = row[0].rstrip(" |").rsplit("|", 1)[-1]  # the row's last column: its files
        missing += [f"shim/{folder}/{u}" for u in units(path) if not names_file(files, u)]
    for folder in ("recorder", "common"):
        entry = entries.get(folder + "/", "")
        missing += [f"{folder}/{u}" for u in units(os.path.join(root, folder))
                    if not names_file(entry, u)]
    scripts = os.path.join(root, "scripts")
    missing += [f"scripts/{n}" for n in sorted(os.listdir(scripts))
                if n not in ("meson.build", "__pycache__")
                and not names_word(entries.get("scripts/", ""), n)]
    tests = os.path.join(root, "tests")
    missing += [f"tests/{n}/" for n in sorted(os.listdir(tests))
                if os.path.isdir(os.path.join(tests, n)) and n != "__pycache__"
                and not names_word(entries.get("tests/", ""), n + "/")]
    return missing


# Entries whose removal must fail the check (each once): a unit of recorder/ whose stem is a
# word of the prose too, one of common/, a script whose name ends another file's, a shim row's
# file, a test folder.
SELF_TEST_REMOVALS = ("settings.*, clock.* (tick clock), ", "monotonic_clock.hpp",
                      " build, test, bench", "`exit_summary.*`, ", "fuzz/, ")


def main():
    args = sys.argv[1:]
    self_test = args[:1] == ["--self-test"]
    root = (args[1:] if self_test else args)[:1] or ["."]
    root = root[0]
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as handle:
        doc = handle.read()
    if self_test:
        failures = 0
        for removed in SELF_TEST_REMOVALS:
            if removed not in doc:
                print(f"map self-test: {removed!r} is no longer in the map: update the test")
                failures += 1
            elif not missing_from(root, doc.replace(removed, " test, bench" if
                                                   removed == " build, test, bench" else "", 1)):
                print(f"map self-test: the map without {removed!r} still passed")
                failures += 1
        print(f"map self-test: {'FAIL' if failures else 'ok'}: {len(SELF_TEST_REMOVALS)} removals")
        return 1 if failures else 0
    missing = missing_from(root, doc)
    for item in missing:
        print(f"map: {item} is not named in docs/architecture.md")
    print(f"map: {'FAIL' if missing else 'ok'}: {len(missing)} file(s) missing from the map")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
