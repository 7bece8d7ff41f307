"""The stand-in driver's graph introspection (issue 4's content names read graphs through it),
and the test programs' options that give graphs kernel nodes and names. No shim here: these
check what the shim will be reading, so a content-name test can trust its input.

- graph_introspect: graph_introspect's report of a graph with kernel nodes, over the stand-in
  (the same program prints the same lines over NVIDIA's driver, first and stand-in: lines
  aside — it is the oracle for the stand-in's fidelity on a GPU machine).
- *_kernels: --kernels/--graph-kernels in each driver-API program, checked through
  FERRUM_STANDIN_INSTANTIATE_LOG (one line per instantiation with the kernel names).
- runtime_rejects_kernels: runtime programs add no kernel nodes and say so.
- naming_without_shim: --name-graphs without the shim is skipped (`names: absent`).
- demo_kernels: the demo's graphs as the driver sees them.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import expect, main, path_of, run  # noqa: E402

EXPECTED_INTROSPECTION = """\
driver: stand-in
cuModuleGetFunction(decode): CUDA_ERROR_NOT_FOUND
cuFuncGetName: prefill_attention _Z6decodePfi
cuLibraryGetKernel(prefill_attention): CUDA_ERROR_NOT_FOUND
cuKernelGetName: sampling; cuFuncGetName(cuKernelGetFunction): sampling
cuGraphGetNodes(NULL): count=7
cuGraphGetNodes(2 slots): numNodes=2
cuGraphGetNodes(10 slots): numNodes=7 rest NULL=yes
every added node listed: yes
node 0: type=5 cuGraphKernelNodeGetParams_v2=CUDA_ERROR_INVALID_VALUE
node 1: type=2 cuGraphKernelNodeGetParams_v2=CUDA_ERROR_INVALID_VALUE
node 2: type=0 v2: func=prefill_attention kern=null grid=2,1,1 block=64,1,1 kernelParams=copied ptr+0,7; v1: func=prefill_attention
node 3: type=0 v2: func=_Z6decodePfi kern=null grid=1,1,1 block=1,1,1 extra size=16 ptr+0,9; v1: func=_Z6decodePfi
node 4: type=0 v2: func=null kern=sampling grid=1,1,1 block=1,1,1 kernelParams=copied ptr+0; v1: func=sampling
node 5: type=0 v2: func=prefill_attention kern=null grid=1,1,1 block=32,1,1 kernelParams=copied ptr+0,7; v1: func=prefill_attention
node 6: type=5 cuGraphKernelNodeGetParams_v2=CUDA_ERROR_INVALID_VALUE
invalid: cuFuncGetName(NULL, f)=CUDA_ERROR_INVALID_VALUE cuFuncGetName(&n, NULL)=CUDA_ERROR_INVALID_VALUE cuKernelGetName(&n, NULL)=CUDA_ERROR_INVALID_VALUE cuGraphGetNodes(g, n, NULL)=CUDA_ERROR_INVALID_VALUE cuGraphNodeGetType(n, NULL)=CUDA_ERROR_INVALID_VALUE
broken PTX: CUDA_ERROR_INVALID_PTX, error log written
PTX without .version: CUDA_ERROR_INVALID_PTX
cuGetProcAddress(cuFuncGetName, 12030): CUDA_SUCCESS status=0
cuGetProcAddress(cuFuncGetName, 12020): CUDA_ERROR_NOT_FOUND status=2
cuGetProcAddress(cuKernelGetName, 12030): CUDA_SUCCESS status=0
cuGraphKernelNodeGetParams @11000 and @12000 differ: yes
cuGetProcAddress(cuGraphGetNodes, 12000): CUDA_SUCCESS
cuGetProcAddress(cuGraphNodeGetType, 12000): CUDA_SUCCESS
cuGetProcAddress(cuModuleLoadData, 12000): CUDA_SUCCESS
cuGetProcAddress(cuModuleGetFunction, 12000): CUDA_SUCCESS
cuGetProcAddress(cuLibraryGetKernel, 12000): CUDA_SUCCESS
stand-in: @11000 is cuGraphKernelNodeGetParams: yes, @12000 is _v2: yes
instantiated and launched
stand-in: after unloading and destroying: cuFuncGetName=CUDA_ERROR_INVALID_VALUE cuKernelGetName=CUDA_ERROR_INVALID_VALUE cuGraphNodeGetType=CUDA_ERROR_INVALID_VALUE
"""


def graph_introspect():
    done = run([path_of("GRAPH_INTROSPECT")], preload=False, record=False)
    expect(done.returncode == 0, "graph_introspect failed", done)
    got, want = done.stdout.splitlines(), EXPECTED_INTROSPECTION.splitlines()
    for number, (g, w) in enumerate(zip(got, want), 1):
        expect(g == w, f"line {number}:\n  got:      {g}\n  expected: {w}", done)
    expect(len(got) == len(want), f"{len(got)} lines, expected {len(want)}", done)


def instantiations(argv, extra_env=None):
    """Runs argv without the shim; returns (Run, the stand-in's instantiate log lines)."""
    with tempfile.TemporaryDirectory(prefix="ferrum-introspect-") as tmp:
        log = os.path.join(tmp, "instantiate.log")
        done = run(argv, preload=False, record=False,
                   env={"FERRUM_STANDIN_INSTANTIATE_LOG": log, **(extra_env or {})})
        lines = open(log).read().splitlines() if os.path.exists(log) else []
    return done, lines


def check_kernel_options(variable):
    argv = [path_of(variable), "--graphs", "3", "--iters", "4", "--reinstantiate", "2",
            "--kernels", "rmsnorm*2,_Z6decodePf", "--graph-kernels", "prefill;;decode*3,sample"]
    done, lines = instantiations(argv)
    expect(done.returncode == 0 and done.program_counts()["launches"] == 12, "program failed",
           done)
    common = "rmsnorm,rmsnorm,_Z6decodePf"
    graphs = [("7", "4", common + ",prefill"), ("6", "3", common),
              ("10", "7", common + ",decode,decode,decode,sample")]
    want = [f"instantiate={round_ * 3 + g + 1} nodes={n} kernel_nodes={k} kernels={names}"
            for round_ in range(2) for g, (n, k, names) in enumerate(graphs)]
    expect(lines == want, "instantiations:\n  " + "\n  ".join(lines) + "\nexpected:\n  " +
           "\n  ".join(want), done)


def driver_kernels():
    check_kernel_options("LAUNCH_DRIVER")


def driver_ptsz_kernels():
    check_kernel_options("LAUNCH_DRIVER_PTSZ")


def dlopen_driver_kernels():
    check_kernel_options("LAUNCH_DLOPEN_DRIVER")


def procaddress_kernels():
    check_kernel_options("LAUNCH_PROCADDRESS")


def without_kernels():
    """Without the options the graphs are as before: three nodes, no kernel."""
    done, lines = instantiations([path_of("LAUNCH_DRIVER"), "--graphs", "2", "--iters", "1"])
    want = [f"instantiate={i} nodes=3 kernel_nodes=0 kernels=" for i in (1, 2)]
    expect(done.returncode == 0 and lines == want, f"instantiations: {lines}", done)


def runtime_rejects_kernels():
    for variable in ("LAUNCH_RUNTIME", "LAUNCH_STATIC_RUNTIME", "LAUNCH_ENTRY_POINT"):
        done = run([path_of(variable), "--kernels", "rmsnorm"], preload=False, record=False)
        expect(done.returncode == 2 and "adds no kernel nodes" in done.stderr,
               "--kernels was not refused", done)
    done = run([path_of("LAUNCH_DRIVER"), "--kernels", "9lives"], preload=False, record=False)
    expect(done.returncode == 2 and "not a PTX identifier" in done.stderr,
           "a bad kernel name was not refused", done)


def naming_without_shim():
    """--name-graphs looks the naming function up and, without the shim, skips it."""
    for variable in ("LAUNCH_DRIVER", "LAUNCH_RUNTIME", "LAUNCH_STATIC_RUNTIME"):
        done = run([path_of(variable), "--name-graphs", "step", "--name-from-threads",
                    "--reinstantiate", "3", "--iters", "6"], preload=False, record=False)
        expect(done.returncode == 0 and "names: absent\n" in done.stdout
               and done.program_counts()["launches"] == 12, "naming without the shim", done)
    done = run([sys.executable, path_of("LAUNCH_CTYPES"), "--name-graphs", "py"],
               preload=False, record=False)
    expect(done.returncode == 0 and "names: absent\n" in done.stdout, "ctypes naming", done)


def demo_kernels():
    done, lines = instantiations([path_of("DEMO"), "--requests", "1", "--decode-steps", "4"])
    expect(done.returncode == 0, "demo failed", done)
    layers = lambda attention: ",".join(["rmsnorm", attention] * 4) + ",sampling"  # noqa: E731
    want = [f"instantiate=1 nodes=15 kernel_nodes=9 kernels={layers('prefill_attention')}"] + [
        f"instantiate={i} nodes=15 kernel_nodes=9 kernels={layers('decode_attention')}"
        for i in range(2, 6)]
    expect(lines == want, "demo instantiations:\n  " + "\n  ".join(lines), done)
    expect("graphs: prefill (named by call site), decode batch 1, decode batch 2, decode batch 4, "
           "decode batch 8 (not named: ferrum-replay is not loaded)\n" in done.stdout,
           "demo's graphs line", done)
    expect("replays: prefill=1 decode batch 1=1 decode batch 2=1 decode batch 4=1 "
           "decode batch 8=1\n" in done.stdout, "demo's replays line", done)


SCENARIOS = {f.__name__: f for f in (
    graph_introspect, driver_kernels, driver_ptsz_kernels, dlopen_driver_kernels,
    procaddress_kernels, without_kernels, runtime_rejects_kernels, naming_without_shim,
    demo_kernels)}

if __name__ == "__main__":
    main(SCENARIOS)
