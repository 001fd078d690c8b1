"""Cost of writing one telemetry sample as an events.jsonl line: the msgspec fast path that
gcdoctor.run.events.event_to_json takes for TelemetrySampled, against the generic path (dataclass
walk + json.dumps) every other event takes. Median of 7 runs of 20,000 encodes, warm.

    python bench/event_encode.py
"""
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gcdoctor.run.events import TelemetrySampled, event_to_json  # noqa: E402
from gcdoctor.facts.serde import to_dict  # noqa: E402

# the 17 series of a one-GPU NVML + psutil sampler, one missing
values = {f"gpu0.{s}": 100.0 + i for i, s in enumerate(
    ("util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes", "pcie_tx_gbs", "pcie_rx_gbs", "power_w",
     "sm_clock_mhz", "throttle_reasons"))}
values.update({s: 10.0 + i for i, s in enumerate(("cpu_pct", "cpu_max_core_pct", "cpu_iowait_pct", "proc_cpu_pct",
                                                   "proc_rss_bytes", "host_mem_used_bytes"))})
values["gpu0.power_w"] = None
ev = TelemetrySampled(1234.5, values)


def per_call_us(fn, n=20000):
    runs = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)


fast = per_call_us(lambda: event_to_json(ev, wall=1.7e9))
generic = per_call_us(lambda: json.dumps({"type": "TelemetrySampled", "wall": 1.7e9, **to_dict(ev)}))
print(f"events.jsonl line for one telemetry sample: msgspec path {fast:.1f} us, generic path {generic:.1f} us")
