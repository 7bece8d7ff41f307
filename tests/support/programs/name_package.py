#!/usr/bin/env python3
"""name_package.py: names CUDA graphs with the ferrum_replay Python package (python/), every
form, launching them through the driver with ctypes (on the stand-in, or a real driver).

Graph i (in this order, from 0) is launched i + 1 times, so that a trace's count of a name
tells which graph carried it:
  0  name(FakeCUDAGraph)          "by raw_cuda_graph_exec"  (an object like torch.cuda.CUDAGraph)
  1  name(ctypes.c_void_p)        "by c_void_p"
  2  name(int)                    "by int"
  3  with graph_name("scoped"):   "scoped"
  4    nested graph_name("inner"): "inner"
  5  @graph_name("decorated")     "decorated"
  6  with graph_name("torch order"), FakeTorchGraph(): instantiated by the inner __exit__,
                                  "torch order" (the documented order)
  7  with FakeTorchGraph(), graph_name("wrong order"): popped before the instantiation: not
                                  named by the scope (its call site)
  8  no name                      (its call site)

Output: `available=<True|False>`, `named=<name()'s answers, comma-separated>`,
`typeerrors=<count of the 10 bad calls that raised TypeError: a float, a str, an object,
numbers that are not integers but have __int__ (Decimal 1.5, Decimal NaN, Fraction 3/2: truncated
they named graph 1), an object whose repr raises (the message must not need it), objects whose
__index__ raises RuntimeError or ValueError, or whose .value raises OverflowError (its own error is
not passed on)>`,
`unready=<name()'s answers for graph objects with no executable graph yet: one whose
raw_cuda_graph_exec() raises RuntimeError, as PyTorch's does before instantiate(), and one whose
raw_cuda_graph_exec attribute itself raises (a property, a lazy proxy)>`, `rejected=<count of the 4 bad
values refused as they must be: a handle 2**64 above graph 8's and a negative one
(OverflowError), a name with a NUL given to name() and to graph_name() (ValueError)>`,
`null=<name()'s answer for a null handle, 0>`, `launches=<N> failed=<F>`.
Exit status 0, or 1 on a CUDA error.

    PYTHONPATH=python python3 name_package.py
"""
import decimal
import fractions
import os
import sys

import ferrum_replay

# The example's driver set-up (examples/name_graphs_ctypes.py): open_driver(), instantiate().
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "examples"))
import name_graphs_ctypes as example  # noqa: E402

cuda = None


def instantiate():
    return example.instantiate(cuda)[1]


class FakeCUDAGraph:
    """What torch.cuda.CUDAGraph exposes (PyTorch 2.7+): the exec handle as an int."""

    def __init__(self, exec_):
        self._exec = exec_

    def raw_cuda_graph_exec(self):
        return self._exec.value


class UninstantiatedCUDAGraph:
    """torch.cuda.CUDAGraph(keep_graph=True) after capture, before instantiate()."""

    def raw_cuda_graph_exec(self):
        raise RuntimeError("You cannot access the raw cudaGraphExec_t instance until "
                           "instantiate() has been called")


class UnreadyProxy:
    """A lazy proxy of a graph not made yet: reading the attribute raises."""

    @property
    def raw_cuda_graph_exec(self):
        raise RuntimeError("the graph is not captured yet")


class FakeTorchGraph:
    """Like torch.cuda.graph(g): captures on entry, instantiates when its block exits."""

    def __init__(self, into):
        self.into = into

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.into.append(instantiate())
        return False


def main():
    global cuda
    cuda = example.open_driver()

    execs = [instantiate() for _ in range(3)]
    named = [ferrum_replay.name(FakeCUDAGraph(execs[0]), "by raw_cuda_graph_exec"),
             ferrum_replay.name(execs[1], "by c_void_p"),
             ferrum_replay.name(execs[2].value, "by int")]
    with ferrum_replay.graph_name("scoped"):
        execs.append(instantiate())
        with ferrum_replay.graph_name("inner"):
            execs.append(instantiate())

    @ferrum_replay.graph_name("decorated")
    def decorated():
        return instantiate()
    execs.append(decorated())
    with ferrum_replay.graph_name("torch order"), FakeTorchGraph(execs):
        pass
    with FakeTorchGraph(execs), ferrum_replay.graph_name("wrong order"):
        pass
    execs.append(instantiate())

    typeerrors = 0
    class ReprRaises:
        def __repr__(self):
            raise RuntimeError("no repr")

    class IndexRaises:
        def __index__(self):
            raise RuntimeError("no index")

    class IndexValueError:  # the types name() keeps for its own refusals (review JJ2)
        def __index__(self):
            raise ValueError("not ready")

    class ValueOverflows:
        @property
        def value(self):
            raise OverflowError("released")

    for bad in (1.5, "0x1234", object(), decimal.Decimal("1.5"), decimal.Decimal("NaN"),
                fractions.Fraction(3, 2), ReprRaises(), IndexRaises(), IndexValueError(),
                ValueOverflows()):
        try:
            ferrum_replay.name(bad, "bad")
        except TypeError:
            typeerrors += 1

    # Never wrapped or cut: refused, with or without the shim; graph 8 keeps its call site.
    rejected = 0
    for call, error in ((lambda: ferrum_replay.name(execs[8].value + 2**64, "wrapped"),
                         OverflowError),
                        (lambda: ferrum_replay.name(-1, "negative"), OverflowError),
                        (lambda: ferrum_replay.name(execs[8].value, "cut\0here"), ValueError),
                        (lambda: ferrum_replay.graph_name(b"cut\0here"), ValueError)):
        try:
            call()
        except error:
            rejected += 1

    launches = failed = 0
    for index, exec_ in enumerate(execs):
        for _ in range(index + 1):
            launches += 1
            failed += cuda.cuGraphLaunch(exec_, None) != 0
    example.check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    print(f"available={ferrum_replay.available()}")
    print("named=" + ",".join(str(n) for n in named))
    print(f"typeerrors={typeerrors}")
    print(f"rejected={rejected}")
    print(f"null={ferrum_replay.name(0, 'null')}")
    unready = [ferrum_replay.name(graph, "unready")
               for graph in (UninstantiatedCUDAGraph(), UnreadyProxy())]
    print("unready=" + ",".join(str(n) for n in unready))
    print(f"launches={launches} failed={failed}", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
