"""Small synthetic torch.profiler (Kineto) traces of host-side causes of device idle, each with its
truth written beside it, for the cases no CPU recording can show (a device, ROCm and old Kineto
spellings, several streams, ranks, dropped events, graph replays).

The events follow what Kineto writes: complete events (`ph: X`) with `cat` cpu_op / user_annotation
/ cuda_runtime / kernel / gpu_memcpy (older Kineto: Operator / Runtime / Kernel / Memcpy), `ts` and
`dur` in microseconds with three decimals, `args` with `External id`, `correlation`, `stream`,
`device`, `cbid`; `ac2g` flow events from each launch to its device op; process and thread
metadata (`ph: M`); `deviceProperties`, `baseTimeNanoseconds` and `schemaVersion` at the top level.
The device model is simple and exact: an op starts at the latest of its launch call's start plus 5
us, the end of the previous op on its stream, and any dependency given; the truth of each sample
is worked out from that construction, not read back from gcdoctor.

    python tests/kineto_synth.py samples/traces/host-causes      # writes <name>.json.gz + .truth.json
"""
from __future__ import annotations

import gzip
import json
import sys
from contextlib import contextmanager
from pathlib import Path

US = 1000  # ns
MS = 1000 * US
T0 = 5_000 * MS  # first host event (Kineto writes ts relative to baseTimeNanoseconds)
LAT = 5 * US  # launch call start -> op start on an idle device

KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float>>"
GEMM = "ampere_sgemm_128x64_tn"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _ts(ns: int) -> float:
    return round(ns / 1000, 3)


class Trace:
    """One process's trace being built; the host thread's clock is `now` (ns)."""

    def __init__(self, vendor: str = "cuda", old: bool = False, pid: int = 4242, rank: int | None = None):
        self.vendor, self.old, self.pid, self.tid, self.rank = vendor, old, pid, pid, rank
        self.now = T0
        self.events: list[dict] = []
        self.stream_free: dict[int, int] = {}
        self.corr = 0
        self.ext = 0
        self.cat = {"cpu": "Operator" if old else "cpu_op", "ann": "Operator" if old else "user_annotation",
                    "rt": "Runtime" if old else "cuda_runtime", "kernel": "Kernel" if old else "kernel",
                    "memcpy": "Memcpy" if old else "gpu_memcpy"}

    # -- host ------------------------------------------------------------------------------------
    def _x(self, cat: str, name: str, start: int, end: int, pid: int, tid: int, args: dict) -> dict:
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": _ts(start),
             "dur": _ts(end - start), "args": args}
        self.events.append(e)
        return e

    @contextmanager
    def op(self, name: str, cat: str = "cpu", pad: int = 2 * US):
        """A host range around what the body does (a cpu op, or a user annotation with cat='ann')."""
        start = self.now
        self.now += pad
        self.ext += 1
        ext = self.ext
        yield
        self.now += pad
        self._x(self.cat[cat], name, start, self.now, self.pid, self.tid,
                {"External id": ext, "Record function id": 0, "Ev Idx": len(self.events)})

    def python(self, ns: int) -> None:
        self.now += ns

    def call(self, name: str, ns: int, corr: int | None = None) -> dict:
        """A runtime call of `ns` on the host thread."""
        args = {"External id": self.ext, "cbid": 0}
        if corr is not None:
            args["correlation"] = corr
        e = self._x(self.cat["rt"], name, self.now, self.now + ns, self.pid, self.tid, args)
        self.now += ns
        return e

    # -- device ----------------------------------------------------------------------------------
    def _device_op(self, cat: str, name: str, corr: int, issued: int, dur: int, stream: int,
                   after: int = 0, record: bool = True, extra: dict | None = None, until: int = 0) -> int:
        start = max(issued + LAT, self.stream_free.get(stream, 0), after)
        end = max(start + dur, until)
        self.stream_free[stream] = end
        if record:
            args = {"External id": self.ext, "queued": 0, "device": 0, "context": 1, "stream": stream,
                    "correlation": corr, **(extra or {})}
            self._x(self.cat[cat], name, start, end, 0, stream, args)
            self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid, "ts": _ts(issued),
                                "cat": "ac2g", "name": "ac2g"})
            self.events.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": _ts(start),
                                "cat": "ac2g", "name": "ac2g", "bp": "e"})
        return end

    def launch(self, dur: int, name: str = KERNEL, stream: int = 7, call: str | None = None,
               call_ns: int = 4 * US, after: int = 0, record: bool = True, joined: bool = True,
               until: int = 0) -> int:
        """Launch a kernel of `dur` ns; returns its end. record=False drops its device record (a
        sampled trace); joined=False drops its correlation (no launch record joins it)."""
        self.corr += 1
        c = self.corr
        call = call or ("hipLaunchKernel" if self.vendor == "rocm" else "cudaLaunchKernel")
        issued = self.now
        self.call(call, call_ns, c)
        extra = {"grid": [128, 1, 1], "block": [256, 1, 1], "registers per thread": 32, "shared memory": 0}
        return self._device_op("kernel", name, c if joined else 10**6 + c, issued, dur, stream, after,
                               record, extra, until)

    def graph(self, kernels: list[int], stream: int = 7, call: str | None = None) -> int:
        """Replay a graph: one launch call, its kernels back to back, all with its correlation."""
        self.corr += 1
        c = self.corr
        call = call or ("hipGraphLaunch" if self.vendor == "rocm" else "cudaGraphLaunch")
        issued = self.now
        self.call(call, 10 * US, c)
        end = 0
        for d in kernels:
            end = self._device_op("kernel", GEMM, c, issued, d, stream)
        return end

    def blocking_copy(self, host_ns: int, dur: int, call: str, nbytes: int = 1 << 20, stream: int = 7) -> int:
        """A synchronous device-to-host copy: the call stages for host_ns (the device op runs at its
        end, after the stream's earlier work), then returns when the copy is done."""
        self.corr += 1
        c = self.corr
        start = self.now
        end = self._device_op("memcpy", "Memcpy DtoH (Device -> Pageable)", c, start + host_ns - LAT, dur, stream,
                              extra={"bytes": nbytes, "memory bandwidth (GB/s)": 1.0})
        self._x(self.cat["rt"], call, start, end + 2 * US, self.pid, self.tid,
                {"External id": self.ext, "cbid": 0, "correlation": c})
        self.now = end + 2 * US
        return end

    def sync(self, call: str | None = None) -> None:
        """Wait for every stream: the call returns 2 us after the last op ends."""
        call = call or ("hipDeviceSynchronize" if self.vendor == "rocm" else "cudaDeviceSynchronize")
        done = max([self.now, *self.stream_free.values()])
        self.call(call, done + 2 * US - self.now)

    # -- the file --------------------------------------------------------------------------------
    def write(self, path: Path) -> None:
        meta = [{"name": "process_name", "ph": "M", "ts": _ts(T0), "pid": self.pid, "tid": 0,
                 "args": {"name": "python"}},
                {"name": "process_name", "ph": "M", "ts": _ts(T0), "pid": 0, "tid": 0,
                 "args": {"name": "GPU 0"}}]
        top = {"schemaVersion": 1,
               "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X" if self.vendor == "rocm" else
                                     "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85899345920}],
               "baseTimeNanoseconds": 1_700_000_000_000_000_000}
        if self.rank is not None:
            top["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": 2}
        top["traceEvents"] = meta + sorted(self.events, key=lambda e: (e["ts"], e["ph"]))
        top["traceName"] = path.name
        text = json.dumps(top, indent=1).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
            gz.write(text)


# -- the samples ---------------------------------------------------------------------------------

def _elementwise_ops(t: Trace, n: int, host_ns: int, kernel_ns: int, name: str = "aten::add") -> None:
    for _ in range(n):
        with t.op(name, pad=(host_ns - 4 * US) // 2):
            t.launch(kernel_ns)


def sync_then_python() -> tuple[Trace, dict]:
    t = Trace()
    for s in range(3):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            for _ in range(20):  # 20 x 1 ms of device work, issued in 0.2 ms
                with t.op("aten::mm", pad=3 * US):
                    t.launch(1 * MS, GEMM)
            t.sync()  # torch.cuda.synchronize(): waits ~20 ms
            t.python(60 * MS)  # pure Python after it (a metric loop, logging)
    return t, {
        "what": "each step: 20 ms of device work, torch.cuda.synchronize(), then 60 ms of pure Python",
        "truth": "the device idles ~75% of each step while the host runs Python after the sync; the host sits in "
                 "the sync only while the device is busy, so removing it would not hide the Python (the host's "
                 "60 ms exceed the device's 20 ms)",
        "fires": ["GC025"], "silent": ["GC022", "GC021", "GC024", "GC023"],
        "headline": {"GC025": "waits on Python between ops 7"},
        "shares": {"python": [0.72, 0.76], "sync": [0.0, 0.01]}}


def item_then_logger() -> tuple[Trace, dict]:
    t = Trace()
    for s in range(4):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            for _ in range(20):
                with t.op("aten::mm", pad=3 * US):
                    t.launch(1 * MS, GEMM)
            with t.op("aten::item"), t.op("aten::_local_scalar_dense"):
                t.launch(2 * US, "Memcpy DtoH (Device -> Pinned)", call="cudaMemcpyAsync")
                t.call("cudaStreamSynchronize", max(t.stream_free.values()) + 2 * US - t.now)
            t.python(2 * MS)  # a logger after .item()
    return t, {
        "what": "each step: 20 ms of device work, loss.item(), then 2 ms of logging",
        "truth": "the .item() sync exposes the 2 ms of logging each step (~9%): without the sync the host would "
                 "have run ahead and the device's 20 ms would have hidden it",
        "fires": ["GC022"], "silent": ["GC025", "GC021", "GC028"],
        "headline": {"GC022": "cudaStreamSynchronize under aten::item"},
        "shares": {"python": [0.08, 0.10], "sync": [0.0, 0.01]}}


def one_kernel_step() -> tuple[Trace, dict]:
    t = Trace()
    for s in range(3):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            with t.op("aten::mm"):
                t.launch(2 * MS, GEMM)
            t.python(411 * MS)
    return t, {"what": "three 413 ms steps with one 2 ms kernel each",
               "truth": "too little device work to judge: no host cause may be named",
               "fires": ["GC026"], "silent": ["GC021", "GC022", "GC023", "GC024", "GC025", "GC028", "GC029"],
               "headline": {"GC026": "too little device work to judge"}}


def unjoined() -> tuple[Trace, dict]:
    t = Trace()
    for s in range(3):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            for i in range(6):
                with t.op("aten::add", pad=20 * US):
                    t.launch(300 * US, joined=(s == 0 and i == 0))
            t.python(5 * MS)
    return t, {"what": "18 device ops, 17 without a launch record (no correlation)",
               "truth": "when the host issued the ops is unknown: too little to judge, not 'host late, in Python'",
               "fires": ["GC026"], "silent": ["GC021", "GC022", "GC025", "GC028"],
               "headline": {"GC026": "too little device work to judge"}}


def trailing_empty_step() -> tuple[Trace, dict]:
    t = Trace()
    for s in range(3):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            for _ in range(10):
                with t.op("aten::mm", pad=3 * US):
                    t.launch(1 * MS, GEMM)
            t.sync("cudaStreamSynchronize")
    with t.op("ProfilerStep#3", cat="ann", pad=24 * US):  # the range after the last prof.step()
        pass
    return t, {"what": "three device-bound steps, then the 49 us range the profiler opens after the last step",
               "truth": "the trailing range has no device work: left out, neither steady nor warm-up; the three "
                        "steps are device-bound and nothing fires (not 'Python 100%')",
               "fires": [], "silent": ["GC025", "GC028", "GC026", "GC021"], "steps": [0, 1, 2]}


def other_process_steps() -> tuple[Trace, dict]:
    t = Trace()
    _elementwise_ops(t, 40, 30 * US, 100 * US)
    t.python(1 * MS)
    _elementwise_ops(t, 40, 30 * US, 100 * US)
    for s in range(3):  # a data-loading worker process profiled into the same file
        t._x("user_annotation", f"ProfilerStep#{s}", T0 + s * MS, T0 + s * MS + 900 * US, 777, 777, {})
        t._x("cpu_op", "aten::empty", T0 + s * MS + 10 * US, T0 + s * MS + 20 * US, 777, 777, {})
    return t, {"what": "a device-bound loop without steps; another process's ProfilerStep ranges in the file",
               "truth": "the other process's steps bound nothing of this work: the whole trace is judged; the "
                        "device is busy, nothing fires",
               "fires": [], "silent": ["GC021", "GC022", "GC025", "GC026", "GC028"], "steps": []}


def python_plus_dispatch() -> tuple[Trace, dict]:
    t = Trace()
    for s in range(4):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            _elementwise_ops(t, 100, 40 * US, 35 * US)  # host 40 us per op, kernel 35 us: 5 us gaps
            t.python(900 * US)  # per-step Python (a metric, a log line): the device has run dry
    return t, {"what": "a host-bound loop: 100 small ops per step (host 40 us, kernel 35 us), then 0.9 ms of Python",
               "truth": "the host keeps the device idle ~28% of each step: ~10% dispatch (100 launch-scale gaps) "
                        "and ~18% Python; neither crosses its own line (20%), together they do",
               "fires": ["GC028"], "silent": ["GC021", "GC025", "GC022", "GC024", "GC023"],
               "headline": {"GC028": "the device waits on the host 2"},
               "shares": {"python": [0.17, 0.2], "dispatch": [0.09, 0.12]}}


def queued_streams() -> tuple[Trace, dict]:
    t = Trace()
    for s in range(3):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            start = t.now
            for i in range(10):  # all issued at once; each waits on an event from the copy stream,
                # which a peer fills 1 ms apart (P2P): the first ms and 0.4 ms of each later one idle, queued
                with t.op("aten::add", pad=3 * US):
                    t.call("cudaStreamWaitEvent", 2 * US)
                    t.launch(600 * US, after=start + (i + 1) * MS)
            t.sync("cudaStreamSynchronize")
    return t, {"what": "two streams: every compute kernel waits on an event the other stream records 1 ms apart",
               "truth": "the device idles ~43% with work already issued: a stream/event dependency, not the host",
               "fires": ["GC029"], "silent": ["GC021", "GC022", "GC025", "GC028"],
               "headline": {"GC029": "with work already issued"}, "shares": {"queued": [0.4, 0.45]}}


def sampled() -> tuple[Trace, dict]:
    t = Trace()
    for s in range(3):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            for i in range(30):
                with t.op("aten::mm", pad=3 * US):
                    t.launch(200 * US, GEMM, record=(i % 5 != 0 and i % 5 != 3))  # 40% of records dropped
            t.sync("cudaStreamSynchronize")
    return t, {"what": "a device-bound loop whose profiler dropped 40% of the kernel records",
               "truth": "a sampled trace: the launch calls name ops that are missing, so the device's idle is "
                        "overcounted; the coverage rule says so",
               "fires": ["GC026"], "silent": [], "headline": {"GC026": "a sampled trace"}}


def first_launch_oneoff() -> tuple[Trace, dict]:
    t = Trace()
    with t.op("aten::empty"):
        t.call("cudaMalloc", 60 * US)
    with t.op("aten::add"):  # the first launch loads the module: 1.41 ms in cudaLaunchKernel
        t.launch(20 * US, call_ns=1410 * US)
    for _ in range(6):
        with t.op("aten::add", pad=22 * US):
            t.launch(20 * US)
    t.sync("cudaStreamSynchronize")
    return t, {"what": "a .item()-style micro-benchmark: 7 tiny kernels, the first launch takes 1.41 ms",
               "truth": "one gap holds most of the host time: a one-off (first launch), not dispatch overhead",
               "fires": ["GC028"], "silent": ["GC021", "GC025", "GC022"],
               "headline": {"GC028": "a one-off, not a stall"}, "severity": {"GC028": "info"}}


def init_then_work() -> tuple[Trace, dict]:
    t = Trace()
    t.call("cudaGetDeviceCount", 8 * US)
    t.python(600 * MS)  # building the model, reading the data: nothing recorded
    for _ in range(200):
        with t.op("aten::mm", pad=5 * US):
            t.launch(400 * US, GEMM)
    t.sync("cudaStreamSynchronize")
    return t, {"what": "no steps: 600 ms of unrecorded initialisation, then 80 ms of device-bound work",
               "truth": "the window is the host's span, so the initialisation is seen; it is one gap: a one-off",
               "fires": ["GC028"], "silent": ["GC025", "GC021"], "headline": {"GC028": "a one-off, not a stall"},
               "window_ms": [680, 700]}


def _rocm_steps(t: Trace, loader: str) -> None:
    with t.op("ProfilerStep#0", cat="ann"):  # warm-up: allocations and module loading
        t.call("hipMalloc", 3 * MS)
        t.call("hipModuleLoadData", 5 * MS)
        for _ in range(20):
            with t.op("aten::mm", pad=3 * US):
                t.launch(500 * US, GEMM, call="hipExtModuleLaunchKernel")
        t.sync("hipStreamSynchronize")
    for s in range(1, 4):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            with t.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", cat=loader):
                t.python(30 * MS)
            for i in range(20):
                with t.op("aten::mm", pad=3 * US):
                    t.launch(500 * US, GEMM, call="hipModuleLaunchKernel" if i % 2 else "hipExtModuleLaunchKernel")
            t.sync("hipStreamSynchronize")


def rocm_dataloader() -> tuple[Trace, dict]:
    t = Trace(vendor="rocm")
    _rocm_steps(t, "ann")
    return t, {"what": "ROCm: hipModuleLaunchKernel/hipExtModuleLaunchKernel launches, a 30 ms DataLoader wait "
                       "per step; step 0 allocates and loads modules",
               "truth": "the launches are launches, not module loading: steps 1-3 are steady, the device waits on "
                        "the DataLoader ~75% of each",
               "fires": ["GC024"], "silent": ["GC021", "GC023", "GC026"], "steps": [1, 2, 3],
               "headline": {"GC024": "waits on the DataLoader"}}


def old_kineto_dataloader() -> tuple[Trace, dict]:
    t = Trace(old=True)
    for s in range(3):
        with t.op(f"ProfilerStep#{s}", cat="cpu"):
            with t.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", cat="cpu"):
                t.python(32 * MS)
            for _ in range(20):
                with t.op("aten::mm", pad=3 * US):
                    t.launch(500 * US, GEMM)
            t.sync("cudaStreamSynchronize")
    return t, {"what": "older Kineto (Operator/Runtime/Kernel): enumerate(DataLoader) is an Operator; 32 ms per step",
               "truth": "the device waits on the DataLoader (~75%), not on dispatch",
               "fires": ["GC024"], "silent": ["GC021", "GC025"], "headline": {"GC024": "waits on the DataLoader"}}


def graph_blocking_copy() -> tuple[Trace, dict]:
    t = Trace(vendor="rocm")
    for s in range(3):
        with t.op(f"ProfilerStep#{s}", cat="ann"):
            t.graph([500 * US] * 30)  # 15 ms of replayed work
            with t.op("aten::to"), t.op("aten::copy_"):
                t.blocking_copy(40 * MS, 200 * US, "hipMemcpyWithStream")  # pageable staging: 40 ms
            t.python(1 * MS)
    return t, {"what": "ROCm: each step replays a graph (15 ms) then copies to pageable memory with "
                       "hipMemcpyWithStream, the host staging for 40 ms",
               "truth": "the device waits on the blocking copy (~60%): a sync, not dispatch; no CUDA-graph advice "
                        "for a step that replays graphs",
               "fires": ["GC022"], "silent": ["GC021"], "headline": {"GC022": "hipMemcpyWithStream"},
               "no_advice": "CUDA graphs"}


def ddp_ranks() -> list[tuple[Trace, dict]]:
    out = []
    for rank in range(2):
        t = Trace(pid=4000 + rank, rank=rank)
        t0 = T0
        for s in range(4):
            t.now = max(t.now, t0)
            with t.op(f"ProfilerStep#{s}", cat="ann"):
                if rank == 1:
                    t.python(30 * MS)  # rank 1 prepares its batch in Python: the straggler
                for _ in range(20):
                    with t.op("aten::mm", pad=3 * US):
                        t.launch(1 * MS, GEMM)
                # the all-reduce ends when both ranks joined: rank 0 waits inside it
                joined = t0 + 30 * MS + 20 * MS + 200 * US
                with t.op("c10d::allreduce_"):  # on the NCCL stream, after the compute (an event wait)
                    t.launch(0, ALLREDUCE, stream=13, after=t.stream_free[7], until=joined + 5 * MS)
                t.sync("cudaStreamSynchronize")
            t0 = t.now + 100 * US
        out.append((t, {}))
    truth = {"what": "DDP, 2 ranks: rank 1 runs 30 ms of Python before its 20 ms of compute; the all-reduce "
                     "(not overlapped) ends 5 ms after both joined",
             "truth": "rank 0 waits inside its all-reduce ~35 ms of a ~55 ms step (exposed communication, ~64%); "
                      "rank 1 is the straggler (Python)",
             "fires": {"rank/0": ["GC061"], "rank/1": ["GC025", "GC027"]}}
    out[0] = (out[0][0], truth)
    return out


SAMPLES = {f.__name__.replace("_", "-"): f for f in (
    sync_then_python, item_then_logger, one_kernel_step, unjoined, trailing_empty_step, other_process_steps, python_plus_dispatch,
    queued_streams, sampled, first_launch_oneoff, init_then_work, rocm_dataloader, old_kineto_dataloader,
    graph_blocking_copy)}


def write_all(out: Path) -> list[Path]:
    paths = []
    for name, make in SAMPLES.items():
        t, truth = make()
        t.write(out / f"{name}.json.gz")
        (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        paths.append(out / f"{name}.json.gz")
    ranks = ddp_ranks()
    for r, (t, _) in enumerate(ranks):
        t.write(out / "ddp" / f"rank-{r}.json.gz")
    (out / "ddp.truth.json").write_text(json.dumps(ranks[0][1], indent=1) + "\n")
    return paths


if __name__ == "__main__":
    write_all(Path(sys.argv[1] if len(sys.argv) > 1 else "samples/traces/host-causes"))
