#!/usr/bin/env python3
"""A mutation fuzzer for the trace readers of scripts/ferrum_replay_traces.py (`summary`,
`merge`, `check`), standard library only (no atheris needed).

Each iteration takes a seed trace (tests/fuzz/corpus/fuzz_traces/, plus what earlier runs
found interesting), mutates it — bytes (flips, inserts, cuts, splices) or JSON structure
(values of every type swapped in, keys dropped, events duplicated, absurd numbers, deep
nesting, invalid UTF-8) — and runs the commands in-process on it. The property: each command
ends with its documented exit status (0, 1 for a failed check, 2 for unusable input, with one
message naming the file) and never with an uncaught exception; a merge that succeeds writes
valid JSON that summary reads, check judges and merge merges again (and refuses as its own
output). A failing input is saved as <grown>/crash-<hash>.json with its traceback; copied to
tests/fuzz/regressions/fuzz_traces/ it is replayed first on every run.

  fuzz_traces.py --seconds S --corpus DIR --grown DIR [--regressions DIR] [--seed N]
                 [--known FILE] [--collect]
"""
import argparse
import contextlib
import fnmatch
import hashlib
import io
import json
import os
import random
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ferrum_replay_traces as traces  # noqa: E402

INTERESTING = [0, -1, 1, 2 ** 31, 2 ** 63, 2 ** 64 + 1, -2 ** 63, 1e308, -1e-308, 0.5,
               float("nan"), float("inf"), "", "x", "0", "ferrum-replay", "global", "X", "M",
               "i", "b", "e", "0x1",
               "\u202e\ud83d\ude80", "\x00\x1b[2J", None, True, False, [], {}, [1], {"a": 1}]
KEYS = ["traceEvents", "ferrumReplay", "ph", "name", "cat", "ts", "dur", "pid", "tid", "args",
        "depth", "payload", "category", "ranges", "rejectedPushes", "protocolErrors",
        "popWithoutPush", "popWrongDomain", "openAtExit", "domains", "host", "clock",
        "originMonotonicNs", "originRealtimeNs", "rank", "variable", "value", "version",
        "displayTimeUnit", "merged", "alignment", "id", "s", "marks", "startEndRanges",
        "endUnknownId", "startOpenAtExit", "categoryName", "shimDomain", "launchesInFlightAtExit"]


def random_value(rng, depth=0):
    choice = rng.random()
    if choice < 0.6 or depth > 3:
        return rng.choice(INTERESTING)
    if choice < 0.8:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(KEYS): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def nodes(value, path=()):
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from nodes(child, path + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from nodes(child, path + (index,))


def set_at(root, path, value):
    if not path:
        return value
    parent = root
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return root


def mutate_json(rng, document):
    all_nodes = list(nodes(document))
    for _ in range(rng.randint(1, 4)):
        path, node = rng.choice(all_nodes)
        action = rng.random()
        if action < 0.45:
            document = set_at(document, path, random_value(rng))
        elif action < 0.6 and isinstance(node, dict) and node:
            del node[rng.choice(list(node))]
        elif action < 0.75 and isinstance(node, dict):
            node[rng.choice(KEYS)] = random_value(rng)
        elif action < 0.9 and isinstance(node, list) and node:
            node.append(json.loads(json.dumps(rng.choice(node))))  # a duplicate event
        elif isinstance(node, list):
            node.insert(0, random_value(rng))
        all_nodes = list(nodes(document))
    text = json.dumps(document, allow_nan=True)
    if rng.random() < 0.02:  # deep nesting somewhere
        depth = rng.choice([100, 1000, 100000])
        text = text.replace("[", "[" * depth + "0" + "]" * depth + ",", 1)
    return text.encode("utf-8", "surrogatepass")


def mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        action = rng.random()
        if not data:
            data += bytes([rng.randrange(256)])
        elif action < 0.3:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif action < 0.5:
            at = rng.randrange(len(data))
            data[at:at] = rng.choice([b"\xff", b"\xc3", b"\x00", b"{", b"]", b"\"", b",", b"1e999",
                                      b"NaN", b"-", b"\\u0000", b"\\ud800"])
        elif action < 0.7:
            at = rng.randrange(len(data))
            del data[at:at + rng.randint(1, 64)]
        elif action < 0.8:
            del data[rng.randrange(len(data)):]
        else:
            at, length = rng.randrange(len(data)), rng.randint(1, 256)
            chunk = data[at:at + length]
            to = rng.randrange(len(data))
            data[to:to] = chunk
    return bytes(data)


def mutate(rng, data):
    if rng.random() < 0.6:
        try:
            return mutate_json(rng, json.loads(data))
        except (ValueError, RecursionError):
            pass
    return mutate_bytes(rng, data)


def signature(problem):
    """Where a finding happened: the exception type and the innermost function of the traces module in
    the traceback (or the first line of the problem), so one bug counts once."""
    lines = problem.splitlines()
    where = [l.strip() for l in lines if "ferrum_replay_traces.py" in l and ", in " in l]
    last = lines[-1].split(":")[0] if lines else ""
    if not where:
        return lines[0] if lines else "?"
    return f"{last} in {where[-1].rsplit(', in ', 1)[1]}"


def run_commands(path, other, tmp):
    """Runs the commands on `path`; returns None when all behaved, else a description."""
    out = os.path.join(tmp, "merged.json")
    commands = [
        ["summary", path],
        ["summary", "--by-process", "--domain", "ferrum-replay", path, other],
        ["merge", "-o", out, path, other],
        ["check", "--expect-total", "3", "--expect-range", "graph 1=2", path],
        ["check", "--expect-counts", "1,2", "--allow-no-ranges", path],
    ]
    for argv in commands:
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                status = traces.main(argv)
        except SystemExit as done:
            status = done.code
        except BaseException:  # noqa: BLE001 - that is the finding
            return f"{' '.join(argv[:1])}: uncaught exception\n{traceback.format_exc()}"
        if status not in (0, 1, 2):
            return f"{argv[0]}: exit status {status!r}\n{sink.getvalue()}"
        if argv[0] == "merge" and status == 0:
            try:
                with open(out, encoding="utf-8") as handle:
                    json.load(handle)
            except (OSError, ValueError) as error:
                return f"merge wrote an unreadable trace: {error}"
            # A merged trace reads and merges again; its own output is never an input.
            again = os.path.join(tmp, "merged2.json")
            for argv2, want in ((["summary", out], (0,)), (["check", out], (0, 1)),
                                (["merge", "-o", again, out, other], (0,)),
                                (["merge", "-o", out, out, other], (2,))):
                sink = io.StringIO()
                try:
                    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                        status2 = traces.main(argv2)
                except BaseException:  # noqa: BLE001 - that is the finding
                    return f"{argv2[0]} of a merged trace: uncaught exception\n" \
                        f"{traceback.format_exc()}"
                if status2 not in want:
                    return (f"{' '.join(argv2[:2])} of a merged trace: exit {status2}, "
                            f"expected {want}\n{sink.getvalue()}")
    return None


def load_dir(directory):
    found = []
    if directory and os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            with open(os.path.join(directory, name), "rb") as handle:
                found.append(handle.read())
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--grown", required=True)
    parser.add_argument("--regressions")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--known", help="file of known finding signatures (one per line, "
                        "'# ...' comments): inputs that hit them are counted, not failed")
    parser.add_argument("--collect", action="store_true",
                        help="go on after a finding and list each distinct one")
    args = parser.parse_args()
    os.makedirs(args.grown, exist_ok=True)
    rng = random.Random(args.seed)
    seeds = load_dir(args.corpus)
    if not seeds:
        raise SystemExit(f"no seeds in {args.corpus}")
    pool = seeds + [d for d in load_dir(args.grown) if not d.startswith(b"crash")]

    with tempfile.TemporaryDirectory(prefix="ferrum-fuzz-traces-") as tmp:
        other = os.path.join(tmp, "other.json")
        with open(other, "wb") as handle:
            handle.write(seeds[0])
        path = os.path.join(tmp, "input.json")

        def attempt(data):
            with open(path, "wb") as handle:
                handle.write(data)
            return run_commands(path, other, tmp)

        for data in load_dir(args.regressions):
            problem = attempt(data)
            if problem:
                print(f"regression input fails again:\n{problem}")
                return 1

        known = set()
        if args.known and os.path.exists(args.known):
            with open(args.known) as handle:
                known = {l.split("#")[0].strip() for l in handle} - {""}
        known_hits = {}
        new_findings = {}
        executions = 0
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            data = mutate(rng, rng.choice(pool))
            problem = attempt(data)
            executions += 1
            if problem:
                where = signature(problem)
                if any(fnmatch.fnmatchcase(where, pattern) for pattern in known):
                    known_hits[where] = known_hits.get(where, 0) + 1
                    continue
                if where in new_findings:
                    continue
                digest = hashlib.sha1(data).hexdigest()
                saved = os.path.join(args.grown, f"crash-{digest}.json")
                with open(saved, "wb") as handle:
                    handle.write(data)
                with open(saved + ".txt", "w") as handle:
                    handle.write(problem)
                new_findings[where] = saved
                print(f"finding after {executions} executions ({where}), input saved to "
                      f"{saved}:\n{problem}")
                if not args.collect:
                    break
            # Keep some valid-but-odd inputs around to mutate further.
            elif executions % 50 == 0 and len(pool) < 500:
                pool.append(data)
        for where, count in sorted(known_hits.items()):
            print(f"known finding hit {count} times: {where}")
        if new_findings:
            print(f"{len(new_findings)} new findings in {executions} executions:")
            for where, saved in new_findings.items():
                print(f"  {where}    {saved}")
            return 1
        print(f"{executions} executions in {args.seconds:g} s"
              + (f", {sum(known_hits.values())} inputs hit known findings" if known_hits else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
