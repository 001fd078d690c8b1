"""Write the hand-made offload traces used by the GC020/GC021 tests (tests/data/offload-*.json).

Each is a torch.profiler-style Chrome trace of two 1000 us steps on one "NVIDIA H200" (PCIe Gen5
x16: 63 GB/s per direction), laid out so every metric can be worked out by hand. Per step
(times in us from the step start; every op is launched 20 us before it starts unless said):

  pageable   kernel 0-300, DtoH pageable 300-500 (4 MB), kernel 500-700, HtoD pageable 700-900
             (4 MB), kernel 900-1000. Exposed copies 400 of 1000 us; 20 GB/s.
  saturated  kernel 0-350, DtoH pinned 350-450 (6 MB), kernel 450-800, HtoD pinned 800-900 (6 MB),
             kernel 900-1000. Exposed copies 200 of 1000 us; 60 GB/s (>= 80% of 63).
  exposed    as saturated with 2 MB per copy: pinned, 20 GB/s, exposed 200 of 1000 us.
  overlapped kernel 0-1000 on stream 7; DtoH pinned 100-300 and HtoD pinned 500-700 (4 MB each)
             on stream 8, under the kernel. Nothing exposed.
  hostopt    kernel 0-300 (forward+backward, labelled); gcdoctor/optimizer host range 300-950
             with a CPU op "cpu_adam_step" 300-900; HtoD pinned 900-950 (2 MB) launched at 905,
             kernel 950-1000 launched at 931. The device waits 300-900: 600 us of host wait.
  hostwait   as hostopt but with no CPU op at all (the host is idle while the device waits) and no
             copy: kernel 910-1000 launched at 905. 610 us of host wait, host not saturated.
  clean      kernels 0-500 and 500-1000 back to back, no copies.

Every trace has CPU ops covering the host time except where said, so the host looks saturated.
Run `python tests/data/make_offload_traces.py` to rewrite them.
"""
from __future__ import annotations

import json
from pathlib import Path

BASE = 1_000_000.0  # us
STEP_US = 1000.0
PID, TID, DEV = 100, 1, 0


class Trace:
    def __init__(self) -> None:
        self.events: list[dict] = [
            {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "ts": 0.0, "args": {"name": "python"}},
        ]
        self.corr = 0

    def _x(self, cat: str, name: str, ts: float, dur: float, pid: int, tid: int, args: dict | None = None) -> None:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3), "dur": round(dur, 3)}
        if args is not None:
            ev["args"] = args
        self.events.append(ev)

    def range(self, name: str, t0: float, t1: float) -> None:
        self._x("user_annotation", name, t0, t1 - t0, PID, TID, {})

    def cpu_op(self, name: str, t0: float, t1: float) -> None:
        self._x("cpu_op", name, t0, t1 - t0, PID, TID)

    def _launch(self, api: str, at: float) -> int:
        self.corr += 1
        self._x("cuda_runtime", api, at, 5.0, PID, TID, {"correlation": self.corr, "cbid": 211})
        return self.corr

    def kernel(self, t0: float, t1: float, stream: int = 7, launch_at: float | None = None) -> None:
        c = self._launch("cudaLaunchKernel", t0 - 20 if launch_at is None else launch_at)
        self._x("kernel", "gemm_kernel", t0, t1 - t0, DEV, stream, {"stream": stream, "correlation": c, "device": DEV})

    def memcpy(self, direction: str, host: str, nbytes: int, t0: float, t1: float, stream: int = 7,
               launch_at: float | None = None) -> None:
        name = {"HtoD": f"Memcpy HtoD ({host} -> Device)", "DtoH": f"Memcpy DtoH (Device -> {host})"}[direction]
        c = self._launch("cudaMemcpyAsync", t0 - 20 if launch_at is None else launch_at)
        self._x("gpu_memcpy", name, t0, t1 - t0, DEV, stream,
                {"stream": stream, "correlation": c, "device": DEV, "bytes": nbytes,
                 "memory bandwidth (GB/s)": nbytes / ((t1 - t0) * 1e3)})

    def write(self, path: Path) -> None:
        doc = {"schemaVersion": 1,
               "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150110011392,
                                     "computeMajor": 9, "computeMinor": 0}],
               "cuda_runtime_version": 12080, "host_name": "handmade", "displayTimeUnit": "ms",
               "traceEvents": self.events}
        path.write_text(json.dumps(doc, indent=0))


def steps(build) -> Trace:
    t = Trace()
    for s in range(2):
        b = BASE + s * STEP_US
        t.range(f"ProfilerStep#{s + 3}", b - 25, b + STEP_US - 25)
        build(t, b)
    return t


def pageable(t: Trace, b: float) -> None:
    t.cpu_op("aten::train_step", b - 25, b + 965)
    t.kernel(b, b + 300)
    t.memcpy("DtoH", "Pageable", 4_000_000, b + 300, b + 500)
    t.kernel(b + 500, b + 700)
    t.memcpy("HtoD", "Pageable", 4_000_000, b + 700, b + 900)
    t.kernel(b + 900, b + 1000)


def saturated(t: Trace, b: float) -> None:
    t.cpu_op("aten::train_step", b - 25, b + 965)
    t.kernel(b, b + 350)
    t.memcpy("DtoH", "Pinned", 6_000_000, b + 350, b + 450)
    t.kernel(b + 450, b + 800)
    t.memcpy("HtoD", "Pinned", 6_000_000, b + 800, b + 900)
    t.kernel(b + 900, b + 1000)


def exposed(t: Trace, b: float) -> None:
    t.cpu_op("aten::train_step", b - 25, b + 965)
    t.kernel(b, b + 350)
    t.memcpy("DtoH", "Pinned", 2_000_000, b + 350, b + 450)
    t.kernel(b + 450, b + 800)
    t.memcpy("HtoD", "Pinned", 2_000_000, b + 800, b + 900)
    t.kernel(b + 900, b + 1000)


def overlapped(t: Trace, b: float) -> None:
    t.cpu_op("aten::train_step", b - 25, b + 965)
    t.kernel(b, b + 1000)
    t.memcpy("DtoH", "Pinned", 4_000_000, b + 100, b + 300, stream=8)
    t.memcpy("HtoD", "Pinned", 4_000_000, b + 500, b + 700, stream=8)


def hostopt(t: Trace, b: float, busy_host: bool = True, copy: bool = True) -> None:
    t.range("gcdoctor/forward", b - 25, b + 280)
    if busy_host:
        t.cpu_op("aten::forward_backward", b - 25, b + 280)
    t.kernel(b, b + 300)
    t.range("gcdoctor/optimizer", b + 300, b + 950)
    if busy_host:
        t.cpu_op("cpu_adam_step", b + 300, b + 900)
        t.cpu_op("aten::copy_", b + 900, b + 965)
    if copy:
        t.memcpy("HtoD", "Pinned", 2_000_000, b + 900, b + 950, launch_at=b + 905)
        t.kernel(b + 950, b + 1000, launch_at=b + 931)
    else:
        t.kernel(b + 910, b + 1000, launch_at=b + 905)


def hostwait(t: Trace, b: float) -> None:
    hostopt(t, b, busy_host=False, copy=False)


def clean(t: Trace, b: float) -> None:
    t.cpu_op("aten::train_step", b - 25, b + 965)
    t.kernel(b, b + 500)
    t.kernel(b + 500, b + 1000)


TRACES = {"pageable": pageable, "saturated": saturated, "exposed": exposed, "overlapped": overlapped, "hostopt": hostopt,
          "hostwait": hostwait, "clean": clean}


def main() -> None:
    here = Path(__file__).resolve().parent
    for name, build in TRACES.items():
        steps(build).write(here / f"offload-{name}.json")


if __name__ == "__main__":
    main()
