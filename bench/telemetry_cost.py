"""What the telemetry sampler costs, and a PCIe demonstration.

    python bench/telemetry_cost.py [--out DIR] [--seconds N] [--rates 20,50] [--no-gpu] [--pcie-poll-hz HZ]
    python bench/telemetry_cost.py --pcie-demo --out DIR [--pcie-mode auto|counters|throughput]
    python bench/telemetry_cost.py --fake-nvml [--fake-call-us 20] --seconds 10   # no GPU needed
    ... [--slow-hz 5]   # slow series (NVML util/memory/clock/reasons, psutil) rate; 0 = every tick

--pcie-poll-hz 50 forces the PCIe byte counters into their own 50 Hz thread (the design before
the tick fix); the default reads them in the sampler's tick. --compare-poller runs the CPU part
both ways. --fake-nvml replaces NVML by a stand-in whose every call spins for --fake-call-us of
CPU (the driver's share), so the Python side of both designs can be compared on any machine.
On a GPU the CPU part also times each NVML call the sampler makes (mean CPU and wall us, calls
spaced like the sampler's) and splits each thread's CPU into user and system time.

1. CPU cost: the process's CPU time over N seconds with the sampler running (main thread
   asleep), minus the same without it, as % of one core; plus the sampler thread's and the
   poller threads' own CPU clocks, and the wall time of one read of each source.
2. Step time (CUDA only): a fixed GPU workload (synchronised bf16 matmuls), interleaved A/B
   blocks without and with the sampler (sources opened fresh for each B block, so nothing of
   the telemetry runs in A blocks). Reports the median step time of each and the block spread.
3. --pcie-demo (CUDA only): idle, pinned H2D copies, idle, pinned D2H copies, idle, pageable
   H2D copies; prints the PCIe RX/TX series per phase next to the copy rate torch achieved,
   and writes telemetry.csv, phases.json and telemetry_facts.json to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gcdoctor.facts.serde import to_dict  # noqa: E402
from gcdoctor.telemetry import TelemetrySampler, UnavailableSource, open_sources  # noqa: E402


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import psutil

    return {"host": platform.node(), "cpu": cpu, "logical_cpus": os.cpu_count(),
            "python": platform.python_version(), "psutil": psutil.__version__,
            "kernel": platform.release()}


def device_kind(no_gpu: bool) -> str:
    if no_gpu:
        return "cpu"
    probe = open_sources("cuda", 0, include_host=False)
    ok = not isinstance(probe[0], UnavailableSource)
    for s in probe:
        s.close()
    return "cuda" if ok else "cpu"


def thread_cpu_s(prefix: str = "gcdoctor-") -> dict[str, float]:
    """CPU seconds of live threads whose name starts with prefix (Linux per-thread clocks)."""
    out = {}
    for th in threading.enumerate():
        if th.name.startswith(prefix) and th.ident is not None:
            try:
                out[th.name] = time.clock_gettime(time.pthread_getcpuclockid(th.ident))
            except (OSError, AttributeError):
                pass
    return out


class SpinNvml:
    """NVML stand-in for CPU-only runs: every call spins `call_us` of CPU, as a driver ioctl does.

    One H200 with a Gen5 x16 link; the PCIe byte counters advance 1 GB/s RX, 0.25 GB/s TX on the
    monotonic clock, with NVML-style microsecond timestamps.
    """

    class NVMLError(Exception):
        pass

    def __init__(self, call_us: float) -> None:
        from types import SimpleNamespace

        self._ns = SimpleNamespace
        self.call_s = call_us * 1e-6
        self.calls = 0

    def _spin(self) -> None:
        self.calls += 1
        end = time.thread_time() + self.call_s
        while time.thread_time() < end:
            pass

    def _fv(self, field_id: int, value: int, ts: int):
        return self._ns(fieldId=field_id, timestamp=ts, nvmlReturn=0, valueType=1, value=self._ns(uiVal=value))

    def nvmlInit(self): pass  # noqa: E704
    def nvmlShutdown(self): pass  # noqa: E704
    def nvmlSystemGetDriverVersion(self): return "fake"  # noqa: E704
    def nvmlDeviceGetCount(self): return 1  # noqa: E704
    def nvmlDeviceGetHandleByIndex(self, i): return ("fake", i)  # noqa: E704
    def nvmlDeviceGetName(self, h): return "fake H200"  # noqa: E704
    def nvmlDeviceGetUUID(self, h): return "GPU-fake"  # noqa: E704
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h): return 5  # noqa: E704
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h): return 5  # noqa: E704
    def nvmlDeviceGetCurrPcieLinkWidth(self, h): return 16  # noqa: E704
    def nvmlDeviceGetMaxPcieLinkWidth(self, h): return 16  # noqa: E704

    def nvmlDeviceGetUtilizationRates(self, h):
        self._spin()
        return self._ns(gpu=50, memory=20)

    def nvmlDeviceGetMemoryInfo(self, h):
        self._spin()
        return self._ns(used=80 * 10**9, total=150 * 10**9)

    def nvmlDeviceGetClockInfo(self, h, clock):
        self._spin()
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._spin()
        return 0

    def nvmlDeviceGetFieldValues(self, h, ids):
        self._spin()
        t = time.monotonic()
        ts = int(t * 1e6)
        vals = {186: 500_000, 197: int(0.25e9 * t) % 2**32, 198: int(1e9 * t) % 2**32}
        return [self._fv(i, vals[i], ts) for i in ids]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return []


def make_sources(kind: str, pcie_poll_hz: float | None, fake_call_us: float | None = None) -> list:
    """The sources the bench measures: the real ones, or NVML replaced by SpinNvml."""
    if fake_call_us is None:
        return open_sources(kind, 0, pcie_poll_hz=pcie_poll_hz, pcie_mode=PCIE_MODE, slow_hz=SLOW_HZ)
    from gcdoctor.telemetry.host import HostSource
    from gcdoctor.telemetry.nvml import NvmlSource

    return [NvmlSource(0, nvml=SpinNvml(fake_call_us), pcie_poll_hz=pcie_poll_hz, slow_hz=SLOW_HZ),
            HostSource(slow_hz=SLOW_HZ)]


def thread_user_sys_s() -> dict[str, tuple[float, float]]:
    """(user, system) CPU seconds of live gcdoctor- threads, from /proc/self/task/TID/stat (ticks)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for th in threading.enumerate():
        if th.name.startswith("gcdoctor-") and th.native_id is not None:
            try:
                fields = open(f"/proc/self/task/{th.native_id}/stat").read().rsplit(")", 1)[1].split()
                out[th.name] = (int(fields[11]) / tick, int(fields[12]) / tick)
            except (OSError, IndexError, ValueError):
                pass
    return out


def nvml_call_cost(calls: int = 100, spacing_s: float = 0.01) -> dict[str, dict[str, float]]:
    """Mean CPU and wall microseconds of each NVML call the sampler makes, calls spaced like ticks.

    Mean, not median: a call that is cheap most of the time and costly now and then (a driver
    refresh, a firmware round trip) costs its mean. Spaced, not back to back: a driver may cache.
    """
    import pynvml as nvml

    from gcdoctor.telemetry.nvml import FieldReader

    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    cases = {
        "GetUtilizationRates": lambda: nvml.nvmlDeviceGetUtilizationRates(h),
        "GetMemoryInfo": lambda: nvml.nvmlDeviceGetMemoryInfo(h),
        "GetClockInfo(SM)": lambda: nvml.nvmlDeviceGetClockInfo(h, 1),
        "GetCurrentClocksEventReasons": lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "GetPowerUsage": lambda: nvml.nvmlDeviceGetPowerUsage(h),
        "FieldValues[186] (pynvml wrapper)": lambda: nvml.nvmlDeviceGetFieldValues(h, [186]),
        "FieldValues[197,198] (pynvml wrapper)": lambda: nvml.nvmlDeviceGetFieldValues(h, [197, 198]),
        "FieldValues[186,197,198] (prebuilt array)": FieldReader(nvml, h, [186, 197, 198]).read,
    }
    out = {}
    for name, fn in cases.items():
        cpu = wall = 0.0
        try:
            for _ in range(calls):
                c0, w0 = time.thread_time(), time.perf_counter()
                fn()
                cpu += time.thread_time() - c0
                wall += time.perf_counter() - w0
                time.sleep(spacing_s)
        except Exception as exc:  # noqa: BLE001
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        out[name] = {"cpu_us": round(1e6 * cpu / calls, 1), "wall_us": round(1e6 * wall / calls, 1)}
    nvml.nvmlShutdown()
    return out


def read_cost_us(kind: str, reads: int = 200, pcie_poll_hz: float | None = None,
                 fake_call_us: float | None = None) -> dict[str, float]:
    """Median wall time of one read() of each source, in microseconds."""
    out = {}
    for src in make_sources(kind, pcie_poll_hz, fake_call_us):
        if isinstance(src, UnavailableSource):
            continue
        src.reset()
        times = []
        for _ in range(reads):
            t0 = time.perf_counter()
            src.read()
            times.append((time.perf_counter() - t0) * 1e6)
            time.sleep(0.002)
        out[src.name] = round(statistics.median(times), 1)
        src.close()
    return out


PCIE_MODE = "auto"  # set from --pcie-mode for the CPU-cost part too
SLOW_HZ: float | None = 5.0  # set from --slow-hz (0 on the command line: every tick)


def cpu_cost(kind: str, rate_hz: float, seconds: float, events_path: Path | None = None,
             pcie_poll_hz: float | None = None, fake_call_us: float | None = None) -> dict:
    """Process CPU over `seconds` with the sampler at rate_hz, and the idle baseline.

    With events_path, every sample is also written as a TelemetrySampled JSON line, as the
    session's run-directory writer does with events.jsonl (the cost of the whole path).
    """
    c0, w0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    idle_pct = 100.0 * (time.process_time() - c0) / (time.monotonic() - w0)

    on_sample = lambda t, v: None  # noqa: E731
    fh = None
    if events_path is not None:
        from gcdoctor.run.events import TelemetrySampled, event_to_json

        fh = open(events_path, "w")  # noqa: SIM115

        def on_sample(t: float, values: dict) -> None:
            fh.write(event_to_json(TelemetrySampled(t, values)) + "\n")

    sources = make_sources(kind, pcie_poll_hz, fake_call_us)
    sampler = TelemetrySampler(sources, rate_hz=rate_hz, on_sample=on_sample)
    sampler.start()
    t_before, us_before = thread_cpu_s(), thread_user_sys_s()
    c0, w0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    c1, w1 = time.process_time(), time.monotonic()
    t_after, us_after = thread_cpu_s(), thread_user_sys_s()
    pcie_counter = next((v for k, v in sampler._static.items() if k.endswith(".pcie_counter")), None)
    sampler.stop()
    if fh is not None:
        fh.close()
    wall = w1 - w0
    threads = {k: round(100.0 * (t_after[k] - t_before.get(k, 0.0)) / wall, 3) for k in t_after}
    f = sampler.facts()
    user_sys = {k: [round(100.0 * (us_after[k][i] - us_before.get(k, (0.0, 0.0))[i]) / wall, 2) for i in (0, 1)]
                for k in us_after}
    return {
        "pcie_poll_hz": pcie_poll_hz, "pcie_counter": pcie_counter, "fake_nvml_call_us": fake_call_us,
        "rate_hz": rate_hz, "seconds": round(wall, 2), "samples": f.samples, "events_jsonl": fh is not None,
        "achieved_rate_hz": round(f.achieved_rate_hz or 0, 2), "missed_ticks": f.missed_ticks,
        "sources": f.sources, "series": len(f.series),
        "process_cpu_pct": round(100.0 * (c1 - c0) / wall, 3),
        "idle_baseline_cpu_pct": round(idle_pct, 3),
        "sampler_cost_pct_of_core": round(100.0 * (c1 - c0) / wall - idle_pct, 3),
        "per_thread_pct_of_core": threads,
        "per_thread_user_sys_pct_of_core": user_sys,
        "self_reported_overhead_pct": round(f.overhead_cpu_pct or 0.0, 3),
        "cpu_us_per_sample": round(1e6 * (c1 - c0) / max(f.samples, 1), 1),
    }


def gpu_ab(rate_hz: float, blocks: int, steps: int, n: int, out: Path | None = None) -> dict:
    """Median step time of a fixed matmul workload without (A) and with (B) the sampler.

    The B blocks run the sampler as a diagnose session does: the series streamed to a CSV file
    and every sample written as an events.jsonl line (into `out`, else a temporary directory).
    Each B block also gives the sampler's own CPU (its thread plus any reader catch-up) as % of
    one core while the GPU trains: the cost that matters for measured steps.
    """
    import tempfile

    import torch

    from gcdoctor.run.events import TelemetrySampled, event_to_json

    tmp = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="gcdoctor-bench-"))

    dev = torch.device("cuda", 0)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)

    def step() -> float:
        t0 = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    for _ in range(20):
        step()
    per_block: dict[str, list[float]] = {"off": [], "on": []}
    all_steps: dict[str, list[float]] = {"off": [], "on": []}
    cost_on: list[float] = []
    for i in range(2 * blocks):
        arm = "off" if i % 2 == 0 else "on"
        sampler = fh = None
        if arm == "on":
            fh = open(tmp / "events-ab.jsonl", "w")  # noqa: SIM115

            def on_sample(t: float, values: dict, fh=fh) -> None:
                fh.write(event_to_json(TelemetrySampled(t, values)) + "\n")

            sampler = TelemetrySampler(open_sources("cuda", 0, slow_hz=SLOW_HZ), rate_hz=rate_hz,
                                       on_sample=on_sample, stream_path=tmp / "telemetry-ab.csv")
            sampler.start()
            time.sleep(0.2)  # let the sampler settle into its rhythm
            cpu0 = sampler.thread_cpu_s + sampler.reader_cpu_s
            w0 = time.monotonic()
        times = [step() for _ in range(steps)]
        if sampler is not None:
            cost_on.append(100.0 * (sampler.thread_cpu_s + sampler.reader_cpu_s - cpu0) / (time.monotonic() - w0))
            sampler.stop()
            fh.close()
        per_block[arm].append(statistics.median(times))
        all_steps[arm] += times
    off, on = statistics.median(all_steps["off"]), statistics.median(all_steps["on"])
    q = lambda xs, p: sorted(xs)[int(p * (len(xs) - 1))]  # noqa: E731
    return {
        "workload": f"4x bf16 mm {n}x{n} per step, synchronised", "rate_hz": rate_hz,
        "blocks_per_arm": blocks, "steps_per_block": steps, "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "median_step_ms_off": round(off, 4), "median_step_ms_on": round(on, 4),
        "diff_pct": round(100.0 * (on / off - 1.0), 3),
        "p10_p90_ms_off": [round(q(all_steps["off"], 0.1), 4), round(q(all_steps["off"], 0.9), 4)],
        "p10_p90_ms_on": [round(q(all_steps["on"], 0.1), 4), round(q(all_steps["on"], 0.9), 4)],
        "block_medians_ms_off": [round(x, 4) for x in per_block["off"]],
        "block_medians_ms_on": [round(x, 4) for x in per_block["on"]],
        "block_spread_pct_off": round(100.0 * (max(per_block["off"]) / min(per_block["off"]) - 1), 3),
        "sampler_cpu_pct_of_core_per_on_block": [round(x, 3) for x in cost_on],
        "sampler_cpu_pct_of_core_on_median": round(statistics.median(cost_on), 3),
        "sampler_cpu_pct_of_core_on_mean": round(statistics.mean(cost_on), 3),
        "on_blocks_write": "telemetry CSV stream + events.jsonl line per sample (as a diagnose session)",
    }


def pcie_demo(out: Path, rate_hz: float, pcie_mode: str, size_mib: int, phase_s: float,
              pcie_poll_hz: float | None = None) -> dict:
    """Idle and copy phases; PCIe series per phase beside the copy rate torch measured."""
    import torch

    dev = torch.device("cuda", 0)
    n = size_mib * 2**20
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(n, dtype=torch.uint8)
    gpu = torch.empty(n, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    sources = open_sources("cuda", 0, pcie_mode=pcie_mode, pcie_poll_hz=pcie_poll_hz)
    sampler = TelemetrySampler(sources, rate_hz=rate_hz, stream_path=out / "telemetry.csv")
    phases = []

    def phase(name: str, copy=None) -> None:
        t0 = time.monotonic()
        copies = 0
        while time.monotonic() - t0 < phase_s:
            if copy is None:
                time.sleep(0.01)
            else:
                copy()
                torch.cuda.synchronize()
                copies += 1
        t1 = time.monotonic()
        phases.append({"phase": name, "t0": t0, "t1": t1,
                       "torch_copy_gbs": round(copies * n / (t1 - t0) / 1e9, 2) if copy else None})

    with sampler:
        phase("idle")
        phase("h2d_pinned", lambda: gpu.copy_(pinned, non_blocking=True))
        phase("idle")
        phase("d2h_pinned", lambda: pinned.copy_(gpu, non_blocking=True))
        phase("idle")
        phase("h2d_pageable", lambda: gpu.copy_(pageable))
        phase("idle")
    for p in phases:
        summary = sampler.summarize(p["t0"], p["t1"])
        for s in ("gpu0.pcie_rx_gbs", "gpu0.pcie_tx_gbs", "gpu0.util_pct", "gpu0.power_w", "cpu_max_core_pct"):
            if s in summary:
                p[s] = to_dict(summary[s])
    facts = sampler.facts()
    (out / "phases.json").write_text(json.dumps(phases, indent=1))
    (out / "telemetry_facts.json").write_text(json.dumps(to_dict(facts), indent=1))
    print(f"\nPCIe demo ({pcie_mode}), {size_mib} MiB copies, {phase_s:g} s phases, sampler {rate_hz:g} Hz")
    print(f"{'phase':<14}{'torch GB/s':>11}{'RX mean':>9}{'RX max':>8}{'TX mean':>9}{'TX max':>8}{'n':>5}")
    for p in phases:
        rx, tx = p.get("gpu0.pcie_rx_gbs", {}), p.get("gpu0.pcie_tx_gbs", {})
        fmt = lambda v: "   -" if v is None else f"{v:.2f}"  # noqa: E731
        print(f"{p['phase']:<14}{fmt(p['torch_copy_gbs']):>11}{fmt(rx.get('mean')):>9}{fmt(rx.get('max')):>8}"
              f"{fmt(tx.get('mean')):>9}{fmt(tx.get('max')):>8}{rx.get('n', 0):>5}")
    diag = {k: v for k, v in facts.static.items() if "pcie" in k}
    print("link/counter:", json.dumps(diag))
    print("unavailable:", json.dumps(facts.unavailable))
    return {"phases": phases, "pcie_static": diag}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="directory for results (JSON, CSV)")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds per CPU measurement")
    ap.add_argument("--rates", default="20", help="comma-separated sampling rates for the CPU part")
    ap.add_argument("--no-gpu", action="store_true", help="skip NVML and the GPU parts")
    ap.add_argument("--events-jsonl", action="store_true",
                    help="also write each sample as an events.jsonl line (needs --out)")
    ap.add_argument("--blocks", type=int, default=8, help="A/B blocks per arm (GPU part)")
    ap.add_argument("--steps", type=int, default=40, help="steps per block (GPU part)")
    ap.add_argument("--matmul-n", type=int, default=8192)
    ap.add_argument("--pcie-demo", action="store_true", help="only the PCIe demonstration")
    ap.add_argument("--pcie-mode", default="auto", choices=["auto", "counters", "throughput"])
    ap.add_argument("--pcie-poll-hz", type=float, default=None,
                    help="PCIe byte counters in their own thread at this rate (default: in the sampler's tick)")
    ap.add_argument("--compare-poller", action="store_true",
                    help="CPU part twice: counters in a 50 Hz thread (before the tick fix), then in the tick")
    ap.add_argument("--fake-nvml", action="store_true", help="NVML stand-in spinning --fake-call-us per call")
    ap.add_argument("--fake-call-us", type=float, default=20.0,
                    help="CPU per fake NVML call (H200: 5 calls of the sampler's read took 106 us)")
    ap.add_argument("--slow-hz", type=float, default=5.0,
                    help="rate of the slow series (NVML util/memory/clock/reasons, psutil); 0: every tick")
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--phase-seconds", type=float, default=2.0)
    args = ap.parse_args()
    global PCIE_MODE, SLOW_HZ
    PCIE_MODE = args.pcie_mode
    SLOW_HZ = args.slow_hz or None
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"machine": machine(), "argv": sys.argv[1:]}
    if args.pcie_demo:
        out = args.out or Path("pcie-demo")
        out.mkdir(parents=True, exist_ok=True)
        result["pcie_demo"] = pcie_demo(out, 20.0, args.pcie_mode, args.copy_mib, args.phase_seconds,
                                         args.pcie_poll_hz)
        (out / "result.json").write_text(json.dumps(result, indent=1))
        return
    fake_us = args.fake_call_us if args.fake_nvml else None
    kind = "cuda" if args.fake_nvml else device_kind(args.no_gpu)
    result["device_kind"] = kind + (f" (fake NVML, {fake_us:g} us CPU per call)" if fake_us is not None else "")
    result["read_cost_us"] = read_cost_us(kind, pcie_poll_hz=args.pcie_poll_hz, fake_call_us=fake_us)
    print(f"machine: {result['machine']['cpu']} ({result['machine']['logical_cpus']} logical CPUs), "
          f"sources for {result['device_kind']}")
    print("median read() wall time per source (us):", result["read_cost_us"])
    if kind == "cuda" and fake_us is None:
        result["nvml_call_cost_us"] = nvml_call_cost()
        print("NVML calls, mean per call (100 calls, 10 ms apart):")
        for name, c in result["nvml_call_cost_us"].items():
            print(f"  {name:<44} {c.get('cpu_us', '-'):>8} us CPU {c.get('wall_us', '-'):>8} us wall {c.get('error', '')}")
    result["cpu"] = []
    poll_modes = [50.0, None] if args.compare_poller else [args.pcie_poll_hz]
    for rate, poll_hz in [(float(r), p) for r in args.rates.split(",") for p in poll_modes]:
        ev = args.out / f"events-{rate:g}hz.jsonl" if (args.events_jsonl and args.out) else None
        r = cpu_cost(kind, rate, args.seconds, ev, pcie_poll_hz=poll_hz, fake_call_us=fake_us)
        result["cpu"].append(r)
        print(f"PCIe counters: {r['pcie_counter']}")
        print(f"{rate:5.0f} Hz{' +events.jsonl' if ev else ''}  {r['samples']} samples in {r['seconds']} s ({r['achieved_rate_hz']} Hz achieved), "
              f"sources {'+'.join(r['sources'])}: process CPU {r['process_cpu_pct']}% - idle {r['idle_baseline_cpu_pct']}% "
              f"= {r['sampler_cost_pct_of_core']}% of one core; threads {r['per_thread_pct_of_core']}; "
              f"user/sys {r['per_thread_user_sys_pct_of_core']}; "
              f"self-reported {r['self_reported_overhead_pct']}%; {r['cpu_us_per_sample']} us CPU/sample")
    if kind == "cuda" and fake_us is None:
        g = gpu_ab(20.0, args.blocks, args.steps, args.matmul_n, args.out)
        result["gpu_ab"] = g
        print(f"step time ({g['workload']}, {g['device']}): off {g['median_step_ms_off']} ms "
              f"(p10-p90 {g['p10_p90_ms_off']}), on {g['median_step_ms_on']} ms (p10-p90 {g['p10_p90_ms_on']}), "
              f"diff {g['diff_pct']}%, block spread off {g['block_spread_pct_off']}%")
        print(f"sampler CPU while the GPU steps (CSV + events.jsonl, as diagnose): median "
              f"{g['sampler_cpu_pct_of_core_on_median']}% of one core, mean {g['sampler_cpu_pct_of_core_on_mean']}%, "
              f"per block {g['sampler_cpu_pct_of_core_per_on_block']}")
    if args.out:
        (args.out / "telemetry_cost.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
