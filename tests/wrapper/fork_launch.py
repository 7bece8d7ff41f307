#!/usr/bin/env python3
"""fork_launch.py: a process that forks without exec around CUDA graph launches, for the
multi-process recorder tests. Reaches the driver (libcuda.so.1: the stand-in here) through
ctypes, as Python bindings do.

  1. forks a child before touching CUDA (a worker pool started early): the child initialises
     CUDA itself, launches its graph --early times and exits;
  2. initialises CUDA, launches its graph --before times, then forks a second child that
     launches --child times and exits while the parent waits (the child exits first), and
     launches --after more times.
Children end with a normal exit (never os._exit), so that exit handlers run: the recorder
writes its trace from an exit handler. --child-end makes the second child end otherwise, after
its launches: `_exit` (os._exit), `kill` (SIGKILL to itself) or `exec` (replaced by
/bin/true); its status is then not held against the run (the parent exits 0). `linger`: it
sleeps 3 s, then exits normally, and the parent does not wait for it. `unreaped`: it is killed
(SIGKILL) as `kill`, but its parent is a keeper process (forked by the parent, launching
nothing) that lingers 3 s without reaping it: a zombie meanwhile. `exec-linger`: it replaces
itself with `sleep 3`, not waited for.

Usage: fork_launch.py [--early N] [--before N] [--child N] [--after N]
                      [--child-end exit|_exit|kill|exec|linger|unreaped|exec-linger]
Output (stdout), one line per process, in the order they finish:
  process=early pid=P launches=N
  process=child pid=P launches=N
  process=parent pid=P launches=N
Exit status: 0, 1 on a CUDA error, 3 when a child failed.
"""
import argparse
import ctypes
import os
import signal
import sys
import time

vp = ctypes.c_void_p


class Cuda:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuCtxCreate_v4.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_uint, ctypes.c_int]
        self.lib.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(vp), vp,
                                                          ctypes.c_ulonglong]
        self.lib.cuGraphAddEmptyNode.argtypes = [ctypes.POINTER(vp), vp, vp, ctypes.c_size_t]
        self.lib.cuGraphLaunch.argtypes = [vp, vp]
        self.lib.cuStreamSynchronize.argtypes = [vp]

    def check(self, result, call):
        if result != 0:
            print(f"error: {call} failed: {result}", file=sys.stderr, flush=True)
            sys.exit(1)

    def setup(self):
        lib = self.lib
        self.check(lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.ctx = vp()
        self.check(lib.cuCtxCreate_v4(ctypes.byref(self.ctx), None, 0, dev.value), "cuCtxCreate")
        self.stream = vp()
        self.check(lib.cuStreamCreate(ctypes.byref(self.stream), 1), "cuStreamCreate")
        graph, node, self.exec_ = vp(), vp(), vp()
        self.check(lib.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
        self.check(lib.cuGraphAddEmptyNode(ctypes.byref(node), graph, None, 0),
                   "cuGraphAddEmptyNode")
        self.check(lib.cuGraphInstantiateWithFlags(ctypes.byref(self.exec_), graph, 0),
                   "cuGraphInstantiateWithFlags")

    def launch(self, times):
        for _ in range(times):
            self.check(self.lib.cuGraphLaunch(self.exec_, self.stream), "cuGraphLaunch")
        self.check(self.lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        return times


def report(name, launches):
    print(f"process={name} pid={os.getpid()} launches={launches}", flush=True)


def wait(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main():
    parser = argparse.ArgumentParser()
    for name, default in (("early", 3), ("before", 4), ("child", 5), ("after", 6)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--child-end", choices=("exit", "_exit", "kill", "exec", "linger",
                                                  "unreaped", "exec-linger"),
                        default="exit")
    args = parser.parse_args()

    early = os.fork()
    if early == 0:
        cuda = Cuda()
        cuda.setup()
        report("early", cuda.launch(args.early))
        sys.exit(0)

    cuda = Cuda()
    cuda.setup()
    launches = cuda.launch(args.before)
    child = os.fork()
    if child == 0:
        if args.child_end == "unreaped" and os.fork() != 0:  # the keeper
            time.sleep(3)
            os._exit(0)
        report("child", cuda.launch(args.child))
        if args.child_end == "_exit":
            os._exit(0)
        elif args.child_end in ("kill", "unreaped"):
            os.kill(os.getpid(), signal.SIGKILL)
        elif args.child_end == "exec":
            os.execv("/bin/true", ["/bin/true"])
        elif args.child_end == "exec-linger":
            os.execv("/bin/sleep", ["sleep", "3"])
        elif args.child_end == "linger":
            time.sleep(3)
        sys.exit(0)
    # A lingering child (or keeper) is not waited for; one that did not exit normally was meant
    # not to.
    child_status = 0 if args.child_end in ("linger", "unreaped", "exec-linger") else wait(child)
    statuses = [child_status if args.child_end == "exit" else 0, wait(early)]
    launches += cuda.launch(args.after)
    report("parent", launches)
    return 3 if any(statuses) else 0


if __name__ == "__main__":
    sys.exit(main())
