"""CPU cost of the live dashboard inside the measuring process (diagnose runs the TUI and the
training in one process, so the UI's work competes with the step's Python).

    python bench/tui_overhead.py [--seconds 10] [--size 160x48]

Feeds the app what a GPU diagnose run emits (20 Hz telemetry samples with 15 series, a step
every 0.5 s, a measurement row every 2 s) from a thread, headless, and reports the process's
CPU time per wall second with and without the app attached.
"""
from __future__ import annotations

import argparse
import asyncio
import threading
import time

from gcdoctor.run.events import MeasurementRecorded, ProbeStarted, RunStarted, StepMeasured, TelemetrySampled
from gcdoctor.tui.app import DashboardApp
from gcdoctor.tui.sources import Source

SERIES = {f"gpu0.{s}": 1.0 for s in ("util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes", "pcie_tx_gbs",
                                      "pcie_rx_gbs", "power_w", "sm_clock_mhz", "throttle_reasons")}
SERIES.update({s: 1.0 for s in ("cpu_pct", "cpu_max_core_pct", "cpu_iowait_pct", "proc_cpu_pct", "proc_rss_bytes",
                                "host_mem_used_bytes")})


class Feeder(Source):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def start(self, sink, on_done) -> None:
        threading.Thread(target=self.run, args=(sink, on_done), daemon=True).start()

    def run(self, sink, on_done=lambda: None) -> None:
        sink(RunStarted("/tmp/x", "diagnose", {"model": "llama3-8b", "probes": ["sweep"], "warmup_steps": 1,
                                               "measure_steps": 3},
                        {"device_kind": "cuda", "total_memory_bytes": 150e9, "pcie_peak_gbs": 63.0}))
        sink(ProbeStarted("sweep", "batch sweep"))
        t0 = time.monotonic()
        i = 0
        while (t := time.monotonic()) - t0 < self.seconds:
            sink(TelemetrySampled(t, {k: (i % 100) * v for k, v in SERIES.items()}))
            if i % 10 == 0:
                sink(StepMeasured("sweep", "gc", 4, (i // 10) % 4, 120.0))
            if i % 40 == 39:
                sink(MeasurementRecorded("sweep", {"variant": "gc", "batch": i, "fits": True, "step_ms": 120.0}))
            i += 1
            time.sleep(0.05)
        self.done.set()
        on_done()


def cpu_per_second(fn) -> float:
    c0, w0 = time.process_time(), time.monotonic()
    fn()
    return 100.0 * (time.process_time() - c0) / (time.monotonic() - w0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--size", default="160x48")
    args = ap.parse_args()
    cols, _, rows = args.size.partition("x")

    def bare() -> None:
        Feeder(args.seconds).run(lambda ev: None)

    def with_app() -> None:
        async def go() -> None:
            feeder = Feeder(args.seconds)
            app = DashboardApp(feeder)
            async with app.run_test(size=(int(cols), int(rows))):
                while not feeder.done.is_set():
                    await asyncio.sleep(0.1)
        asyncio.run(go())

    base, ui = cpu_per_second(bare), cpu_per_second(with_app)
    print(f"{'feeder alone':24s} {base:6.1f} % of one core")
    print(f"{'feeder + dashboard':24s} {ui:6.1f} % of one core  ({args.size}, {args.seconds:g} s)")
    print(f"{'dashboard cost':24s} {ui - base:6.1f} % of one core")


if __name__ == "__main__":
    main()
