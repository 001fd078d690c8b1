"""What the telemetry sampler costs, and a PCIe demonstration.

    python bench/telemetry_cost.py [--out DIR] [--seconds N] [--rates 20,50] [--no-gpu]
    python bench/telemetry_cost.py --pcie-demo --out DIR [--pcie-mode auto|counters|throughput]

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


def read_cost_us(kind: str, reads: int = 200) -> dict[str, float]:
    """Median wall time of one read() of each source, in microseconds."""
    out = {}
    for src in open_sources(kind, 0):
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


def cpu_cost(kind: str, rate_hz: float, seconds: float, events_path: Path | None = None) -> dict:
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
        from gcdoctor.events import TelemetrySampled, event_to_json

        fh = open(events_path, "w")  # noqa: SIM115

        def on_sample(t: float, values: dict) -> None:
            fh.write(event_to_json(TelemetrySampled(t, values)) + "\n")

    sources = open_sources(kind, 0)
    sampler = TelemetrySampler(sources, rate_hz=rate_hz, on_sample=on_sample)
    sampler.start()
    t_before = thread_cpu_s()
    c0, w0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    c1, w1 = time.process_time(), time.monotonic()
    t_after = thread_cpu_s()
    sampler.stop()
    if fh is not None:
        fh.close()
    wall = w1 - w0
    threads = {k: round(100.0 * (t_after[k] - t_before.get(k, 0.0)) / wall, 3) for k in t_after}
    f = sampler.facts()
    return {
        "rate_hz": rate_hz, "seconds": round(wall, 2), "samples": f.samples, "events_jsonl": fh is not None,
        "achieved_rate_hz": round(f.achieved_rate_hz or 0, 2), "missed_ticks": f.missed_ticks,
        "sources": f.sources, "series": len(f.series),
        "process_cpu_pct": round(100.0 * (c1 - c0) / wall, 3),
        "idle_baseline_cpu_pct": round(idle_pct, 3),
        "sampler_cost_pct_of_core": round(100.0 * (c1 - c0) / wall - idle_pct, 3),
        "per_thread_pct_of_core": threads,
        "self_reported_overhead_pct": round(f.overhead_cpu_pct or 0.0, 3),
        "cpu_us_per_sample": round(1e6 * (c1 - c0) / max(f.samples, 1), 1),
    }


def gpu_ab(rate_hz: float, blocks: int, steps: int, n: int) -> dict:
    """Median step time of a fixed matmul workload without (A) and with (B) the sampler."""
    import torch

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
    for i in range(2 * blocks):
        arm = "off" if i % 2 == 0 else "on"
        sampler = None
        if arm == "on":
            sampler = TelemetrySampler(open_sources("cuda", 0), rate_hz=rate_hz, on_sample=lambda t, v: None)
            sampler.start()
            time.sleep(0.2)  # let the pollers settle into their rhythm
        times = [step() for _ in range(steps)]
        if sampler is not None:
            sampler.stop()
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
    }


def pcie_demo(out: Path, rate_hz: float, pcie_mode: str, size_mib: int, phase_s: float) -> dict:
    """Idle and copy phases; PCIe series per phase beside the copy rate torch measured."""
    import torch

    dev = torch.device("cuda", 0)
    n = size_mib * 2**20
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(n, dtype=torch.uint8)
    gpu = torch.empty(n, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    sources = open_sources("cuda", 0, pcie_mode=pcie_mode)
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
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--phase-seconds", type=float, default=2.0)
    args = ap.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"machine": machine(), "argv": sys.argv[1:]}
    if args.pcie_demo:
        out = args.out or Path("pcie-demo")
        out.mkdir(parents=True, exist_ok=True)
        result["pcie_demo"] = pcie_demo(out, 20.0, args.pcie_mode, args.copy_mib, args.phase_seconds)
        (out / "result.json").write_text(json.dumps(result, indent=1))
        return
    kind = device_kind(args.no_gpu)
    result["device_kind"] = kind
    result["read_cost_us"] = read_cost_us(kind)
    print(f"machine: {result['machine']['cpu']} ({result['machine']['logical_cpus']} logical CPUs), sources for {kind}")
    print("median read() wall time per source (us):", result["read_cost_us"])
    result["cpu"] = []
    for rate in [float(r) for r in args.rates.split(",")]:
        ev = args.out / f"events-{rate:g}hz.jsonl" if (args.events_jsonl and args.out) else None
        r = cpu_cost(kind, rate, args.seconds, ev)
        result["cpu"].append(r)
        print(f"{rate:5.0f} Hz{' +events.jsonl' if ev else ''}  {r['samples']} samples in {r['seconds']} s ({r['achieved_rate_hz']} Hz achieved), "
              f"sources {'+'.join(r['sources'])}: process CPU {r['process_cpu_pct']}% - idle {r['idle_baseline_cpu_pct']}% "
              f"= {r['sampler_cost_pct_of_core']}% of one core; threads {r['per_thread_pct_of_core']}; "
              f"self-reported {r['self_reported_overhead_pct']}%; {r['cpu_us_per_sample']} us CPU/sample")
    if kind == "cuda":
        g = gpu_ab(20.0, args.blocks, args.steps, args.matmul_n)
        result["gpu_ab"] = g
        print(f"step time ({g['workload']}, {g['device']}): off {g['median_step_ms_off']} ms "
              f"(p10-p90 {g['p10_p90_ms_off']}), on {g['median_step_ms_on']} ms (p10-p90 {g['p10_p90_ms_on']}), "
              f"diff {g['diff_pct']}%, block spread off {g['block_spread_pct_off']}%")
    if args.out:
        (args.out / "telemetry_cost.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
