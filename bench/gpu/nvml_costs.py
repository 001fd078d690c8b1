"""What each NVML read costs in CPU, and whether GPM's PCIe counters agree with real copies.

Run on a CUDA machine: python bench/gpu/nvml_costs.py --out DIR
Prints a table and writes DIR/nvml_costs.json:
- per call: mean thread CPU (us) and median wall time (us) over N calls spaced 50 ms apart (the
  sampler's spacing), with the GPU idle and while another process keeps it busy with matmuls;
- 20 Hz loops doing only one read per tick (thread CPU as % of one core, wake-ups included);
- GPM (GPU Performance Monitoring, Hopper+): PCIe TX/RX from two samples vs the bytes torch
  copied (pinned H2D and D2H), also while torch.profiler traces CUDA activity, beside the 32-bit
  byte-counter fields 197/198.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import pynvml as N

from gcdoctor.telemetry.nvml import FieldReader

FI_POWER, FI_TX, FI_RX = 186, 197, 198


def fields(h, ids):
    """The sampler's own prebuilt field-values call (gcdoctor.telemetry.nvml.FieldReader)."""
    return FieldReader(N, h, ids).read


class Gpm:
    """Two GPM samples, alternated: each read() takes one and computes metrics since the last."""

    def __init__(self, h, ids):
        self.h = h
        self.ids = list(ids)
        self.s = [N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()]
        self.get = N._nvmlGetFunctionPointer("nvmlGpmSampleGet")
        self.mget = N._nvmlGetFunctionPointer("nvmlGpmMetricsGet")
        self.mg = N.c_nvmlGpmMetricsGet_t()
        self.mg.version = N.NVML_GPM_METRICS_GET_VERSION
        self.mg.numMetrics = len(self.ids)
        for i, m in enumerate(self.ids):
            self.mg.metrics[i].metricId = m
        self.i = 0
        self._check(self.get(h, self.s[0]))

    def _check(self, ret):
        if ret != 0:
            raise N.NVMLError(ret)

    def sample_only(self):
        self.i ^= 1
        self._check(self.get(self.h, self.s[self.i]))

    def metrics(self):
        self.mg.sample1, self.mg.sample2 = self.s[self.i ^ 1], self.s[self.i]
        self._check(self.mget(ctypes.byref(self.mg)))
        return [(self.mg.metrics[k].nvmlReturn, self.mg.metrics[k].value) for k in range(len(self.ids))]

    def read(self):
        self.sample_only()
        return self.metrics()


def per_call(fn, n=60, spacing=0.05):
    out = {}

    def run():
        cpu, wall = [], []
        for _ in range(n):
            time.sleep(spacing)
            c0, w0 = time.thread_time(), time.perf_counter()
            fn()
            wall.append(time.perf_counter() - w0)
            cpu.append(time.thread_time() - c0)
        out["cpu_us"] = 1e6 * sum(cpu) / n
        out["wall_med_us"] = 1e6 * statistics.median(wall)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out


def loop_pct(fn, seconds=6.0, hz=20.0):
    """Thread CPU of a 20 Hz loop calling fn once per tick, as % of one core."""
    out = {}

    def run():
        ev = threading.Event()
        c0 = time.thread_time()
        t_end = time.monotonic() + seconds
        nxt = time.monotonic()
        while time.monotonic() < t_end:
            if fn is not None:
                fn()
            nxt += 1.0 / hz
            ev.wait(max(0.0, nxt - time.monotonic()))
        out["pct"] = 100.0 * (time.thread_time() - c0) / seconds
    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out["pct"]


BUSY = r"""
import torch, time, sys
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
t_end = time.time() + float(sys.argv[1])
while time.time() < t_end:
    for _ in range(8):
        b = a @ a
    torch.cuda.synchronize()
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=60)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    res: dict = {"driver": N.nvmlSystemGetDriverVersion(), "name": N.nvmlDeviceGetName(h),
                 "nvml_py": getattr(N, "__version__", None)}
    try:
        from importlib.metadata import version
        res["nvml_py"] = version("nvidia-ml-py")
    except Exception:  # noqa: BLE001
        pass
    try:
        sup = N.nvmlGpmQueryDeviceSupport(h)
        res["gpm_supported"] = int(sup.isSupportedDevice)
    except Exception as exc:  # noqa: BLE001
        res["gpm_supported"] = f"error: {exc}"
    try:
        res["gpm_streaming"] = N.nvmlGpmQueryIfStreamingEnabled(h)
    except Exception as exc:  # noqa: BLE001
        res["gpm_streaming"] = f"error: {exc}"
    print(json.dumps(res))

    G = N  # metric ids
    gpm_ids_pcie = [G.NVML_GPM_METRIC_PCIE_TX_PER_SEC, G.NVML_GPM_METRIC_PCIE_RX_PER_SEC]
    gpm_ids_all = gpm_ids_pcie + [G.NVML_GPM_METRIC_SM_UTIL, G.NVML_GPM_METRIC_SM_OCCUPANCY,
                                  G.NVML_GPM_METRIC_ANY_TENSOR_UTIL, G.NVML_GPM_METRIC_DRAM_BW_UTIL,
                                  G.NVML_GPM_METRIC_GRAPHICS_UTIL]
    gpm = gpm_all = None
    try:
        gpm = Gpm(h, gpm_ids_pcie)
        gpm_all = Gpm(h, gpm_ids_all)
        time.sleep(0.05)
        res["gpm_first_read"] = gpm_all.read()
    except Exception as exc:  # noqa: BLE001
        res["gpm_error"] = str(exc)
    try:
        gpm_cum = Gpm(h, [255, 256])
        time.sleep(0.05)
        res["gpm_cumulative_255_256"] = gpm_cum.read()
    except Exception as exc:  # noqa: BLE001
        res["gpm_cumulative_255_256"] = f"error: {exc}"
    print("gpm first read", res.get("gpm_first_read"), res.get("gpm_error"), res["gpm_cumulative_255_256"])

    last_ts = [0]

    def power_samples():
        typ, vals = N.nvmlDeviceGetSamples(h, N.NVML_TOTAL_POWER_SAMPLES, last_ts[0])
        if vals:
            last_ts[0] = vals[-1].timeStamp

    calls = {
        "fv[186]": fields(h, [FI_POWER]),
        "fv[197]": fields(h, [FI_TX]),
        "fv[198]": fields(h, [FI_RX]),
        "fv[197,198]": fields(h, [FI_TX, FI_RX]),
        "fv[186,197,198]": fields(h, [FI_POWER, FI_TX, FI_RX]),
        "util": lambda: N.nvmlDeviceGetUtilizationRates(h),
        "meminfo": lambda: N.nvmlDeviceGetMemoryInfo(h),
        "clock_sm": lambda: N.nvmlDeviceGetClockInfo(h, 1),
        "power_usage": lambda: N.nvmlDeviceGetPowerUsage(h),
        "getSamples(power)": power_samples,
    }
    if gpm is not None:
        calls["gpm sample"] = gpm.sample_only
        calls["gpm sample+metrics(2)"] = gpm.read
        calls["gpm sample+metrics(7)"] = gpm_all.read

    def metrics_only():
        gpm_all.metrics()
    if gpm_all is not None:
        calls["gpm metrics(7) only"] = metrics_only

    table = {}
    for state in ("idle", "busy"):
        proc = None
        if state == "busy":
            proc = subprocess.Popen([sys.executable, "-c", BUSY, "200"])
            time.sleep(8)
        for name, fn in calls.items():
            try:
                fn()
                table[f"{state} {name}"] = per_call(fn, n=args.calls)
            except Exception as exc:  # noqa: BLE001
                table[f"{state} {name}"] = {"error": str(exc)}
            print(f"{state:5s} {name:24s} {table[f'{state} {name}']}", flush=True)
        loops = {"nothing": None, "fv[186,197,198]": calls["fv[186,197,198]"], "fv[186]": calls["fv[186]"]}
        if gpm is not None:
            loops["gpm sample+metrics(2)"] = gpm.read
            loops["fv[186] + gpm(7)"] = lambda: (calls["fv[186]"](), gpm_all.read())
        for name, fn in loops.items():
            pct = loop_pct(fn)
            table[f"{state} loop20Hz {name}"] = {"pct_core": pct}
            print(f"{state:5s} 20 Hz loop {name:22s} {pct:.2f}% of one core", flush=True)
        if proc is not None:
            proc.kill()
            proc.wait()
    res["calls"] = table

    # streaming mode, if it exists
    if gpm is not None:
        try:
            N.nvmlGpmSetStreamingEnabled(h, 1)
            res["streaming_after_enable"] = N.nvmlGpmQueryIfStreamingEnabled(h)
            res["streaming gpm sample+metrics(2)"] = per_call(gpm.read, n=args.calls)
            N.nvmlGpmSetStreamingEnabled(h, 0)
        except Exception as exc:  # noqa: BLE001
            res["streaming"] = f"error: {exc}"
        print("streaming", res.get("streaming_after_enable"), res.get("streaming gpm sample+metrics(2)"),
              res.get("streaming"))

    # accuracy: pinned copies, GPM and byte counters every 50 ms, vs bytes torch copied
    import torch
    nbytes = 1 << 30
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    acc = {}
    for label, prof in (("plain", False), ("under torch.profiler", True)):
        for direction in ("h2d", "d2h"):
            ctx = None
            if prof:
                ctx = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                         torch.profiler.ProfilerActivity.CUDA])
                ctx.__enter__()
            fv = fields(h, [FI_TX, FI_RX])
            g = Gpm(h, gpm_ids_pcie)
            samples = []  # (t, gpm tx MiB/s, rx MiB/s, fv tx raw, rx raw)
            stop = threading.Event()

            def sampler():
                prev = [None, None]
                tot = [0, 0]
                while not stop.is_set():
                    t = time.monotonic()
                    m = g.read()
                    arr = fv()
                    raw = [arr[0].value.ullVal, arr[1].value.ullVal]
                    for k in range(2):
                        if prev[k] is not None:
                            tot[k] += (raw[k] - prev[k]) % (1 << 32)
                        prev[k] = raw[k]
                    samples.append((t, m[0][1], m[1][1], tot[0], tot[1], m[0][0], m[1][0]))
                    stop.wait(0.05)
            th = threading.Thread(target=sampler)
            th.start()
            time.sleep(0.3)
            torch.cuda.synchronize()
            t0 = time.monotonic()
            reps = 24
            for _ in range(reps):
                if direction == "h2d":
                    dev.copy_(host, non_blocking=True)
                else:
                    host.copy_(dev, non_blocking=True)
            torch.cuda.synchronize()
            t1 = time.monotonic()
            time.sleep(0.3)
            stop.set()
            th.join()
            if ctx is not None:
                ctx.__exit__(None, None, None)
            copied = reps * nbytes
            # integrate GPM rates (MiB/s over each interval) over all samples
            gtx = grx = 0.0
            for a, b in zip(samples, samples[1:]):
                dt = b[0] - a[0]
                gtx += b[1] * 1048576 * dt
                grx += b[2] * 1048576 * dt
            busy = [s for s in samples if t0 < s[0] <= t1]
            r = {"copied_GB": copied / 1e9, "torch_GBs": copied / (t1 - t0) / 1e9,
                 "gpm_tx_GB": gtx / 1e9, "gpm_rx_GB": grx / 1e9,
                 "fv_tx_GB": samples[-1][3] / 1e9, "fv_rx_GB": samples[-1][4] / 1e9,
                 "gpm_peak_rx_GBs": max(s[2] for s in samples) * 1048576 / 1e9,
                 "gpm_peak_tx_GBs": max(s[1] for s in samples) * 1048576 / 1e9,
                 "gpm_errors": sorted({(s[5], s[6]) for s in samples}),
                 "samples": len(samples), "in_copy": len(busy)}
            acc[f"{label} {direction}"] = r
            print(f"{label} {direction}: {json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()})}",
                  flush=True)
    res["accuracy"] = acc
    with open(os.path.join(args.out, "nvml_costs.json"), "w") as fh:
        json.dump(res, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
