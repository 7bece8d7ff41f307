#!/usr/bin/env python3
"""The shim's include graph stays shallow and one-way (docs/architecture.md, "Layers").

A unit is a source file with its header (shim/range/graph_registry.cpp and .hpp are one unit).
Every `#include "..."` from one unit of the component to another is one step; includes inside
a folder count too. Fails (exit 1), printing the offending chain, when:
  - two units include each other, or any longer cycle exists;
  - the longest chain holds more than --max-units units;
  - for shim/: a unit is not drawn in the code block of docs/architecture.md's "## Layers"
    (each line's units `folder/name`, a line beginning `->` one level lower, other lines
    continuing the level above them), is drawn twice, or includes a unit of its own level or a
    higher one. The drawing is the rule, read here: it cannot fall behind the tree.

  tests/layering_check.py [--max-units N] [--component DIR]... [ROOT]
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".c", ".def", ".S")


def unit_of(path):
    base, ext = os.path.splitext(path)
    return base if ext in SOURCE_SUFFIXES else None


def component_graph(root, component):
    """{unit: set(units it includes)} for the units under root/component, by relative path."""
    top = os.path.join(root, component)
    files = []
    for folder, _, names in os.walk(top):
        files += [os.path.join(folder, n) for n in names if n.endswith(SOURCE_SUFFIXES)]
    units = {unit_of(os.path.relpath(f, root)) for f in files}
    graph = {u: set() for u in units}
    for f in files:
        rel = os.path.relpath(f, root)
        me = unit_of(rel)
        with open(f, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        for name in INCLUDE.findall(text):
            # As the compiler searches: beside the including file, then the component's root.
            for candidate in (os.path.join(os.path.dirname(rel), name),
                              os.path.join(component, name)):
                target = unit_of(os.path.normpath(candidate))
                if target in units and os.path.exists(os.path.join(root, os.path.normpath(candidate))):
                    if target != me:
                        graph[me].add(target)
                    break
    return graph


def find_cycle(graph):
    state = {}
    stack = []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state:
                found = visit(v)
                if found:
                    return found
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state:
            found = visit(u)
            if found:
                return found
    return None


def longest_chain(graph):
    memo = {}

    def chain(u):
        if u not in memo:
            best = []
            for v in graph[u]:
                c = chain(v)
                if len(c) > len(best):
                    best = c
            memo[u] = [u] + best
        return memo[u]

    return max((chain(u) for u in sorted(graph)), key=len, default=[])


DRAWN_UNIT = re.compile(r"\b[a-z_]+/[a-z0-9_]+\b")


def drawn_levels(root):
    """{unit (shim/folder/name): level (0 = the top)} from docs/architecture.md's "## Layers"
    drawing, and a list of problems (a unit drawn twice; no drawing)."""
    path = os.path.join(root, "docs", "architecture.md")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        return {}, [f"cannot read {path}: {error.strerror}"]
    section = text.split("\n## Layers\n", 1)
    blocks = section[1].split("```")[1:2] if len(section) == 2 else []
    if not blocks:
        return {}, ["docs/architecture.md has no code block under '## Layers'"]
    levels, problems, level = {}, [], -1
    for line in blocks[0].strip("\n").splitlines():
        if level < 0 or line.lstrip().startswith("->"):
            level += 1
        for name in DRAWN_UNIT.findall(line):
            unit = "shim/" + name
            if unit in levels:
                problems.append(f"{name} is drawn twice")
            levels[unit] = level
    return levels, problems


def drawing_problems(root, graph):
    levels, problems = drawn_levels(root)
    if not levels and not problems:
        problems.append("its code block under '## Layers' draws no unit")
    for unit in sorted(graph):
        if unit not in levels:
            problems.append(f"{unit[len('shim/'):]} is not drawn (add it to the level below "
                            "every unit that includes it)")
    for unit in sorted(levels):
        if unit not in graph:
            problems.append(f"{unit[len('shim/'):]} is drawn but is no unit of shim/")
    for unit in sorted(graph):
        for target in sorted(graph[unit]):
            if unit in levels and target in levels and levels[target] <= levels[unit]:
                problems.append(f"{unit[len('shim/'):]} (level {levels[unit] + 1}) includes "
                                f"{target[len('shim/'):]} (level {levels[target] + 1}): not "
                                "a lower level")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--component", action="append", default=None)
    parser.add_argument("--max-units", type=int, default=5)
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    ok = True
    for component in args.component or ["shim"]:
        graph = component_graph(root, component)
        if not graph:
            print(f"layering: {component}/ holds no source files")
            ok = False
            continue
        cycle = find_cycle(graph)
        if cycle:
            print(f"layering: {component}/: include cycle: " + " -> ".join(cycle))
            ok = False
            continue
        chain = longest_chain(graph)
        verdict = "ok" if len(chain) <= args.max_units else f"FAIL (at most {args.max_units})"
        print(f"layering: {component}/: {len(graph)} units, longest chain {len(chain)} units, "
              f"{verdict}: " + " -> ".join(chain))
        ok = ok and len(chain) <= args.max_units
        if component == "shim":
            problems = drawing_problems(root, graph)
            for problem in problems:
                print(f"layering: docs/architecture.md's drawing: {problem}")
            ok = ok and not problems
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
