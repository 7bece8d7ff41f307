#!/usr/bin/env python3
"""What loading the shim costs a process that never uses CUDA, in what the loader must do.

The shim is preloaded into every process of a container (shells, compilers, /bin/true); its
start-up cost over an empty preloaded library is issue 14's target (docs/performance.md,
"Start-up"). Timings are too noisy to fail a test on, but what makes them is visible in the
built library (readelf), and each check here was a measured cost:

  - two LOAD segments, one executable and one writable (-z noseparate-code): each more is a
    mapping and its teardown, 13-25 us of /bin/true's start-to-exit (four, and not checked,
    when built with -Dseparate-code=true);
  - the writable segment is mapped from the file in full (file size = memory size): no
    anonymous mapping for .bss and no zeroing of a page at load (shim/hooks/file_backed_bss.ld);
  - the loader's relocations write at most 2 pages (copy-on-write faults), as an empty
    library's do: the RELRO page, and the page of .got.plt and the start of .data;
  - at most 256 relative relocations (1,249 when each file kept its own copy of NVTX's
    globals; --gc-sections; 250 before F173's hook of cuCtxFromGreenCtx and two optional driver
    functions, a name each);
  - no DT_FINI (crti's empty _fini, called at exit, faulted in the last page of .text);
  - no symbol bound at load but the toolchain's own (crtstuff's): each GLOB_DAT is a lookup
    through every library at every start (functions bind lazily, at their first call);
  - .bss starts in a page the relocations write: crtstuff's destructor reads its first
    bytes at every exit, a fault of its own anywhere else (so .data must stay small).

  tests/load_cost_check.py LIBFERRUM_REPLAY_SO [b_sanitize] [b_coverage] [separate_code]

Skipped (77) in sanitizer and coverage builds, whose instrumentation adds data and relocations,
and when the shim was linked without the .bss script (a linker other than GNU ld or lld:
shim/meson.build), whose loads cost more by design.
"""
import re
import subprocess
import sys

MAX_WRITTEN_PAGES = 2
MAX_LOAD_SEGMENTS = 2
MAX_RELATIVE = 256
PAGE = 4096


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True,
                          text=True).stdout


def load_segments(library):
    return [line.split() for line in readelf("-l", library).splitlines()
            if line.split()[:1] == ["LOAD"]]


def writable_load(library):
    for line in readelf("-l", library).splitlines():
        fields = line.split()
        if fields[:1] == ["LOAD"] and "W" in "".join(fields[6:-1]):
            return int(fields[4], 16), int(fields[5], 16)  # file size, memory size
    raise SystemExit(f"load cost: {library} has no writable LOAD segment")


# Bound at load in any library built by GCC or Clang (crtstuff, -pg hooks, __cxa_finalize).
TOOLCHAIN_DATA_SYMBOLS = {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable",
                          "__gmon_start__", "__cxa_finalize"}


def relocation_targets(library):
    """(address, type, symbol) of each dynamic relocation; symbol "" for none."""
    targets = []
    for line in readelf("-r", library).splitlines():
        fields = line.split()
        if len(fields) >= 3 and re.fullmatch(r"[0-9a-f]{16}", fields[0]):
            symbol = fields[4].split("@")[0] if len(fields) >= 5 else ""
            targets.append((int(fields[0], 16), fields[2], symbol))
    return targets


def section_address(library, name):
    for line in readelf("-S", library).splitlines():
        fields = line.replace("[ ", "[").split()
        if len(fields) > 3 and fields[1] == name:
            return int(fields[3], 16)
    return None


def dynamic_tags(library):
    return set(re.findall(r"\((\w+)\)", readelf("-d", library)))


def main(library, sanitize="none", coverage="false", separate_code="false"):
    if sanitize != "none" or coverage == "true":
        print("load cost: instrumented build, not checked")
        return 77
    if ".ferrum_replay_end" not in readelf("-S", library):
        print("load cost: linked without shim/hooks/file_backed_bss.ld (not GNU ld or lld), "
              "not checked")
        return 77
    ok = True
    segments = load_segments(library)
    if separate_code != "true" and len(segments) > MAX_LOAD_SEGMENTS:
        print(f"load cost: {len(segments)} LOAD segments, at most {MAX_LOAD_SEGMENTS} (one"
              " executable, one writable): linked without -z noseparate-code?")
        ok = False
    file_size, memory_size = writable_load(library)
    if file_size != memory_size:
        print(f"load cost: the writable segment is {memory_size} bytes, {file_size} from the file:"
              " .bss gets an anonymous mapping and a zeroed page at every load")
        ok = False
    targets = relocation_targets(library)
    pages = sorted({address // PAGE for address, _, _ in targets})
    if len(pages) > MAX_WRITTEN_PAGES:
        print(f"load cost: relocations write {len(pages)} pages at load "
              f"({', '.join(hex(p * PAGE) for p in pages)}), at most {MAX_WRITTEN_PAGES}")
        ok = False
    bss = section_address(library, ".bss")
    if bss is not None and bss // PAGE not in pages:
        print(f"load cost: .bss starts at {bss:#x}, in a page no relocation writes: a fault at"
              " every exit")
        ok = False
    relative = sum(1 for _, kind, _ in targets if kind.endswith("_RELATIVE"))
    if relative > MAX_RELATIVE:
        print(f"load cost: {relative} relative relocations, at most {MAX_RELATIVE}")
        ok = False
    bound = sorted({symbol for _, kind, symbol in targets
                    if kind.endswith(("_GLOB_DAT", "_64", "_ABS64")) and symbol
                    and symbol not in TOOLCHAIN_DATA_SYMBOLS})
    if bound:
        print(f"load cost: {', '.join(bound)} bound at load (a symbol lookup at every start): "
              "read it through a function instead")
        ok = False
    if "FINI" in dynamic_tags(library):
        print("load cost: DT_FINI is set: the loader calls _fini at every exit")
        ok = False
    print(f"load cost: {len(segments)} LOAD segments; writable segment {file_size}/{memory_size}"
          " bytes from the file, "
          f"{len(pages)} pages written by {len(targets)} relocations ({relative} relative): "
          + ("ok" if ok else "TOO COSTLY"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
