"""Where the 20 Hz sampler's CPU goes, tick by tick: capture (the driver call), processing
(decode, store, stream, on_sample), and the rest (wake-up, sleep, loop), as % of one core.

    python bench/sampler_split.py [--seconds 8] [--busy] [--batch N ...] [--out FILE]

On a CUDA machine it uses NVML; elsewhere an NVML stand-in whose field-values call is a real C
call (usleep(0)) through the same prebuilt ctypes path, so the Python side is what it measures.
--busy runs synchronised bf16 matmuls in the main thread meanwhile (CUDA only), as training does.
Variants: the sampler as diagnose runs it (CSV stream + events.jsonl line per sample) with each
--batch size, the sampler without writers, and a bare 20 Hz loop doing only the tick's
field-values call (the floor).
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gcdoctor.run.events import TelemetrySampled, event_to_json  # noqa: E402
from gcdoctor.telemetry import TelemetrySampler, open_sources  # noqa: E402
from gcdoctor.telemetry.host import HostSource  # noqa: E402
from gcdoctor.telemetry.nvml import NvmlSource  # noqa: E402


def fake_nvml():
    """pynvml with its C entry points replaced by usleep(0): real ctypes calls, no driver."""
    import types

    import pynvml

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    ns = types.SimpleNamespace(**{k: getattr(pynvml, k) for k in dir(pynvml) if not k.startswith("__")})
    ns._nvmlGetFunctionPointer = lambda name: libc.usleep
    ns.nvmlInit = ns.nvmlShutdown = lambda: None
    ns.nvmlSystemGetDriverVersion = lambda: "fake"
    ns.nvmlDeviceGetCount = lambda: 1
    ns.nvmlDeviceGetHandleByIndex = lambda i: 0
    ns.nvmlDeviceGetName = lambda h: "fake"
    ns.nvmlDeviceGetUUID = lambda h: "GPU-fake"
    for f in ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration"):
        setattr(ns, f, lambda h: 5)
    for f in ("nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth"):
        setattr(ns, f, lambda h: 16)
    ns.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=50, memory=10)
    ns.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=1, total=2)
    ns.nvmlDeviceGetClockInfo = lambda h, c: 1980
    ns.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0

    def fields(h, ids):
        arr = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for i, f in enumerate(ids):
            arr[i].fieldId, arr[i].valueType, arr[i].timestamp = f, 1, int(time.monotonic() * 1e6)
        return arr
    ns.nvmlDeviceGetFieldValues = fields
    return ns


def sources(gpu: bool):
    if gpu:
        return open_sources("cuda", 0)
    return [NvmlSource(0, nvml=fake_nvml()), HostSource()]


def run_variant(gpu: bool, seconds: float, batch: int | None, writers: bool, tmp: Path) -> dict:
    split = {"capture": 0.0, "process": 0.0}
    fh = open(tmp / "events.jsonl", "w") if writers else None  # noqa: SIM115

    def on_sample(t, v):
        if fh is not None:
            fh.write(event_to_json(TelemetrySampled(t, v)) + "\n")

    s = TelemetrySampler(sources(gpu), rate_hz=20.0, on_sample=on_sample,
                         stream_path=(tmp / "telemetry.csv") if writers else None)
    cap, proc = s._capture, s._process_pending

    def timed(fn, key):
        def wrapper():
            c0 = time.thread_time()
            fn()
            split[key] += time.thread_time() - c0
        return wrapper
    s._capture, s._process_pending = timed(cap, "capture"), timed(proc, "process")
    s.start()
    if batch is not None:
        s.batch = batch
    time.sleep(0.5)
    c0, split0, w0 = s.thread_cpu_s, dict(split), time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - w0
    total = s.thread_cpu_s - c0
    s.stop()
    if fh is not None:
        fh.close()
    cap_s, proc_s = split["capture"] - split0["capture"], split["process"] - split0["process"]
    return {"batch": s.batch if batch is None else batch, "writers": writers,
            "total_pct": round(100 * total / wall, 3), "capture_pct": round(100 * cap_s / wall, 3),
            "process_pct": round(100 * proc_s / wall, 3),
            "rest_pct": round(100 * (total - cap_s - proc_s) / wall, 3)}


def bare(gpu: bool, seconds: float) -> float:
    src = [x for x in sources(gpu) if isinstance(x, NvmlSource)][0]
    src.set_rate_hz(20.0)
    src.reset()
    tick = src.devices[0].tick
    out = {}

    def loop():
        c0 = time.thread_time()
        nxt = time.monotonic()
        end = nxt + seconds
        while time.monotonic() < end:
            tick.capture()
            nxt += 0.05
            time.sleep(max(0.0, nxt - time.monotonic()))
        out["pct"] = 100 * (time.thread_time() - c0) / seconds
    th = threading.Thread(target=loop)
    th.start()
    th.join()
    src.close()
    return round(out["pct"], 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--busy", action="store_true")
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 4, 20])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    gpu = False
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        pass
    stop = threading.Event()
    worker = None
    if args.busy and gpu:
        def busy():
            a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
            while not stop.is_set():
                for _ in range(4):
                    torch.mm(a, a)
                torch.cuda.synchronize()
        worker = threading.Thread(target=busy)
        worker.start()
        time.sleep(1.0)
    tmp = Path(tempfile.mkdtemp(prefix="gcdoctor-split-"))
    rows = [{"variant": "bare field-values loop", "total_pct": bare(gpu, args.seconds)}]
    print(json.dumps(rows[-1]), flush=True)
    for b in args.batch:
        rows.append({"variant": "diagnose-like (CSV + events.jsonl)", **run_variant(gpu, args.seconds, b, True, tmp)})
        print(json.dumps(rows[-1]), flush=True)
    rows.append({"variant": "no writers", **run_variant(gpu, args.seconds, None, False, tmp)})
    print(json.dumps(rows[-1]), flush=True)
    stop.set()
    if worker is not None:
        worker.join()
    if args.out:
        args.out.write_text(json.dumps({"gpu": gpu, "busy": args.busy and gpu, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
