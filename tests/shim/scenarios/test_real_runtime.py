"""Real CUDA programs built by nvcc (static runtime, -cudart shared, --default-stream
per-thread), run under the shim.

With a GPU they are the end-to-end test: one balanced range per replay. Without one they
fail inside NVIDIA's runtime, and must fail exactly the same way under the shim. Run over
the stand-in driver, the real runtime gets as far as fetching its driver table, and the
shim's debug log must show that it answered the runtime's self-query and wrapped
cuGraphLaunch for flags 0 and 2 in that table — the route every nvcc-built program uses.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (expect, expect_balanced, expect_one_range_per_launch, main,  # noqa: E402
                     run)

REPLAYS = 10


def program(variable):
    path = os.environ.get(variable)
    return path if path and os.path.exists(path) else None


def library_path(with_standin):
    # The real libcudart.so.13 must win over the stand-in runtime that shares STANDIN_DIR.
    parts = [os.environ["CUDA_LIB_DIR"]]
    if with_standin:
        parts.append(os.environ["STANDIN_DIR"])
    return ":".join(parts)


def check(variable):
    path = program(variable)
    if not path:
        return "skip: no nvcc when the build was configured (a CUDA toolkit builds these programs)"
    argv = [path, str(REPLAYS)]
    bare = run(argv, preload=False, record=False,
               env={"LD_LIBRARY_PATH": library_path(with_standin=False)})
    if bare.returncode == 0:  # a GPU and its driver: the end-to-end check
        shimmed = run(argv, env={"LD_LIBRARY_PATH": library_path(with_standin=False)})
        expect(shimmed.returncode == 0 and shimmed.stdout == bare.stdout, "output changed", shimmed)
        expect_one_range_per_launch(shimmed, REPLAYS)
        expect_balanced(shimmed)
        return None
    # No GPU: identical failure without any driver, and over the stand-in driver.
    for with_standin in (False, True):
        env = {"LD_LIBRARY_PATH": library_path(with_standin)}
        bare = run(argv, preload=False, record=False, env=env)
        shimmed = run(argv, record=False, env=env)
        for field in ("returncode", "stdout", "stderr"):
            expect(getattr(bare, field) == getattr(shimmed, field),
                   f"{field} differs under the shim (stand-in driver: {with_standin}):\n"
                   f"without:\n{bare.describe()}", shimmed)
    # With an NVTX tool attached, as under Nsight Systems or the recorder (without one the
    # shim hands out the genuine functions: nothing to wrap).
    logged = run(argv, env={"LD_LIBRARY_PATH": library_path(with_standin=True),
                            "FERRUM_REPLAY_LOG": "debug"})
    log = logged.stderr
    expect("self-query: answered with a wrapper of cuGetProcAddress_v2" in log,
           "the real runtime's self-query at 12000 was not answered by the shim", logged)
    for flags in ("0", "2"):
        expect(re.search(rf'cuGetProcAddress\("cuGraphLaunch", \d+, flags {flags}\): wrapped', log),
               f"cuGraphLaunch (flags {flags}) was not wrapped in the real runtime's table", logged)
    return None


def static_runtime():
    """nvcc's default: libcudart_static.a linked in, cudaGraphLaunch a hidden symbol."""
    return check("REAL_STATIC_RUNTIME")


def shared_runtime():
    return check("REAL_SHARED_RUNTIME")


def per_thread_default_stream():
    return check("REAL_PER_THREAD_STREAM")


SCENARIOS = {f.__name__: f for f in (static_runtime, shared_runtime, per_thread_default_stream)}

if __name__ == "__main__":
    main(SCENARIOS)
