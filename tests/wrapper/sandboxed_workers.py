#!/usr/bin/env python3
"""sandboxed_workers.py: a parent that launches CUDA graphs, then starts workers the way a
sandboxing launcher does (bwrap, nsjail): each through a helper that enters a PID namespace of
its own (unshare(CLONE_NEWPID)) and forks the worker, which is then pid 1 there. The workers are
forked together, so that they start within one clock tick: pid 1 each, with the recorder start
they inherited from the parent and, but for the PID namespace, one process start. Each worker
launches its own graph and exits normally. Reaches the driver through ctypes (fork_launch.Cuda).

Usage: sandboxed_workers.py [--workers N] [--launches N]
  the parent launches --launches times; worker i launches --launches + 1 + i times.
Output (stdout), one line per process: process=worker|parent pid=P launches=N
Exit status: 0; 1 on a CUDA error; 3 when a worker failed; 77 when no PID namespace can be made
here (not root, or namespaces disabled): the caller skips.
"""
import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fork_launch import Cuda, report, wait  # noqa: E402

CLONE_NEWPID = 0x20000000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--launches", type=int, default=2)
    args = parser.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)

    cuda = Cuda()
    cuda.setup()
    launches = cuda.launch(args.launches)
    helpers = []
    for index in range(args.workers):
        helper = os.fork()
        if helper == 0:  # launches nothing: leaves with _exit, writing nothing
            if libc.unshare(CLONE_NEWPID) != 0:
                os._exit(77)
            worker = os.fork()
            if worker == 0:
                report("worker", cuda.launch(args.launches + 1 + index))
                sys.exit(0)
            os._exit(wait(worker))
        helpers.append(helper)
    statuses = [wait(helper) for helper in helpers]
    if 77 in statuses:
        return 77
    report("parent", launches)
    return 3 if any(statuses) else 0


if __name__ == "__main__":
    sys.exit(main())
