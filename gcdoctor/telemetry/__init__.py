"""Telemetry sampled alongside every measured step: device, PCIe, host CPU and memory.

    sources = open_sources("cuda", device_index=0)        # NVML + psutil, or reasons why not
    with TelemetrySampler(sources, rate_hz=20, on_sample=forward) as sampler:
        t0 = time.monotonic(); step(); t1 = time.monotonic()
        per_step = sampler.summarize(t0, t1)               # {series: SeriesSummary}
    sampler.write_csv(run_dir / "telemetry.csv"); facts.telemetry = sampler.facts()

Series: `gpuN.` + util_pct, mem_util_pct, mem_used_bytes, mem_total_bytes, pcie_tx_gbs
(device -> host), pcie_rx_gbs (host -> device), power_w, sm_clock_mhz, throttle_reasons; host:
cpu_pct, cpu_max_core_pct, cpu_iowait_pct, proc_cpu_pct, proc_rss_bytes, host_mem_used_bytes.
What each counter measures: docs/telemetry.md. No torch here.
"""
from gcdoctor.telemetry.base import (
    DEVICE_SERIES, HOST_SERIES, Source, SourceUnavailable, UnavailableSource, device_series,
)
from gcdoctor.telemetry.pcie import PCIE_GBS_PER_LANE, link_peak_gbs
from gcdoctor.telemetry.sampler import TelemetrySampler, devices_from_static, open_sources

__all__ = [
    "DEVICE_SERIES", "HOST_SERIES", "PCIE_GBS_PER_LANE", "Source", "SourceUnavailable",
    "TelemetrySampler", "UnavailableSource", "device_series", "devices_from_static", "link_peak_gbs",
    "open_sources",
]
