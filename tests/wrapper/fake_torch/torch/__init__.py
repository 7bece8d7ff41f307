"""A stand-in for PyTorch, just enough of it for tests/wrapper/torch_graphs.py (the script
scripts/gpu-smoke runs on a GPU machine) to run here, where there is no GPU and no PyTorch: the
names the script calls (torch.ones, torch.cuda.Stream, torch.cuda.stream, torch.cuda.graph,
torch.cuda.CUDAGraph with replay(), torch.cuda.synchronize, Tensor.fill_/numel, == and .all()).
A tensor holds one value (every element of the script's tensors is equal); work done while a
graph captures is recorded and done again by each replay, into the same tensors, as a CUDA
graph replays its kernels. FAKE_TORCH_CUDA=0 makes torch.cuda.is_available() False, and
FAKE_TORCH_CUDA=not-under-shim False only where the shim is in LD_PRELOAD. It launches
nothing: what it checks is the script's own flow, not the shim."""
import contextlib
import os

_capturing = []  # the graph being captured, if any


class Tensor:
    def __init__(self, value, size):
        self.value, self.size = float(value), size

    def _op(self, compute):
        out = Tensor(compute(self.value), self.size)
        if _capturing:
            _capturing[-1]._work.append(lambda: setattr(out, "value", compute(self.value)))
        return out

    def __mul__(self, other):
        return self._op(lambda v: v * other)

    def __add__(self, other):
        return self._op(lambda v: v + other)

    def __eq__(self, other):
        return _Bool(self.value == other)

    __hash__ = object.__hash__

    def fill_(self, value):
        self.value = float(value)
        return self

    def numel(self):
        return self.size


class _Bool:
    def __init__(self, value):
        self.value = value

    def all(self):
        return self

    def __bool__(self):
        return self.value


def ones(size, device=None):
    assert device == "cuda", device
    return Tensor(1.0, size)


class _Cuda:
    class Stream:
        def wait_stream(self, other):
            pass

    class CUDAGraph:
        def __init__(self):
            self._work = []

        def replay(self):
            for step in self._work:
                step()

    @staticmethod
    def is_available():
        mode = os.environ.get("FAKE_TORCH_CUDA", "1")
        if mode == "not-under-shim":  # a PyTorch the shim broke
            return "libferrum-replay" not in os.environ.get("LD_PRELOAD", "")
        return mode != "0"

    @staticmethod
    def current_stream():
        return _Cuda.Stream()

    @staticmethod
    @contextlib.contextmanager
    def stream(stream):
        yield stream

    @staticmethod
    @contextlib.contextmanager
    def graph(graph):
        _capturing.append(graph)
        try:
            yield graph
        finally:
            _capturing.pop()

    @staticmethod
    def synchronize():
        pass


cuda = _Cuda()
