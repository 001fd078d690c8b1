"""GC040 pcie-saturated-idle."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.monitor import TelemetryWindow
from gcdoctor.rules._telemetry_windows import collect, device_keys, pcie_peak_gbs


def pcie_saturated_while_idle(util_pct: float | None, tx_gbs: float | None, rx_gbs: float | None,
                              peak_gbs: float | None, t: dict[str, float]) -> bool | None:
    """True when the link runs near its peak in either direction while the device is mostly idle.

    None when it cannot be told (no utilisation, no PCIe reading, or an unknown link peak).
    """
    rates = [r for r in (tx_gbs, rx_gbs) if r is not None]
    if util_pct is None or not rates or not peak_gbs:
        return None
    return util_pct < t["idle_util_pct"] and max(rates) >= t["pcie_busy_pct"] / 100.0 * peak_gbs


class PcieSaturatedIdleRule(Rule):
    """What it checks:
    From telemetry alone (`gcdoctor monitor`, or a followed run): whether a device spends
    seconds with its PCIe link near the link's peak, in either direction, while its utilisation
    is low. One verdict per device.

    Why it matters:
    A device that waits on host-device copies does no training. This is the signature of CPU
    offload (DeepSpeed ZeRO-Offload optimizer or parameter traffic, activation offload with
    save_on_cpu) when the copies are not overlapped with compute: ZeRO-Offload has been seen to
    turn a 0.5 s step into 7 s with the GPU idle more than 60% of the time (DeepSpeed ZenFlow blog).
    Caveat: NVML utilisation counts a kernel running in the sample period, and has been seen to
    read 100% during a pure host-to-device copy; where it does, this rule cannot see the stall
    and the step-level probes (gcdoctor diagnose) must.

    Evidence:
    Seconds in the condition and their share of the monitored time, the mean of the busier
    PCIe direction and the device utilisation during those seconds, and the link's peak
    (per direction, from its generation and width).

    How to fix:
    Overlap the copies with compute (pinned host memory and non_blocking copies on a side
    stream; DeepSpeed `overlap_comm`, `pin_memory`); offload less (optimizer only, not
    parameters; fewer checkpointed activations on the CPU); raise the batch so each copy
    amortises over more compute; check the link runs at its full generation and width.
    """

    code = "GC040"
    slug = "pcie-saturated-idle"
    title = "PCIe saturated while the device idles"
    requires = ("monitor.windows",)
    topic = "monitor"
    defaults = {
        # copies reach about 80-90% of the encoded link peak (TLP headers, flow control; see
        # gcdoctor/telemetry/pcie.py): at 80% the link is as busy as it gets
        "pcie_busy_pct": 80.0,
        # Nsight Systems flags GPU time utilisation < 50% (docs/references.md section 5); under 30% the
        # device mostly waits, with room for NVML's coarse 1/6-1 s utilisation window
        "idle_util_pct": 30.0,
        # NVML utilisation is averaged over up to 1 s (docs/references.md section 6): a stall must last
        # several windows to be a stall and not a copy burst between steps
        "min_seconds": 3.0,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        if facts.monitor is None:
            return [self.inconclusive(facts.missing_reason("monitor.windows"))]
        windows = facts.monitor.windows
        keys = device_keys(facts)
        if not keys:
            return [self.inconclusive("no device telemetry was recorded (host only)")]
        out = []
        for key in keys:
            peak = pcie_peak_gbs(facts, key)
            if peak is None:
                out.append(self.inconclusive("the PCIe link peak of the device is unknown", subject=key))
                continue

            def cond(w: TelemetryWindow, key: str = key, peak: float = peak) -> bool | None:
                return pcie_saturated_while_idle(w.values.get(f"{key}.util_pct"), w.values.get(f"{key}.pcie_tx_gbs"),
                                                 w.values.get(f"{key}.pcie_rx_gbs"), peak, t)

            ep = collect(windows, cond)
            if not ep.observed_seconds:
                out.append(self.inconclusive("no window had both utilisation and PCIe readings", subject=key))
                continue
            tx, rx = ep.mean(f"{key}.pcie_tx_gbs"), ep.mean(f"{key}.pcie_rx_gbs")
            busier = max((x for x in (tx, rx) if x is not None), default=None)
            direction = "device to host" if (tx or 0) >= (rx or 0) else "host to device"
            util = ep.mean(f"{key}.util_pct")
            ev = [Evidence("time in the condition", ep.seconds, "s"),
                  Evidence("share of the monitored time", ep.share_pct, "%"),
                  Evidence(f"PCIe {direction} during it (mean)", busier, "GB/s"),
                  Evidence("PCIe link peak per direction", peak, "GB/s"),
                  Evidence("device utilisation during it (mean)", util, "%")]
            if ep.seconds >= t["min_seconds"]:
                share = 100.0 * busier / peak if busier is not None else 0.0
                out.append(self.fired(
                    "warning", f"{key}: PCIe {direction} at {share:.0f}% of the link for {ep.seconds:.0f} s while "
                    f"the device was busy only {util:.0f}% of the time", ev,
                    "The link is saturated and the device waits: copies between host and device are on the "
                    "critical path, as with CPU offload (ZeRO-Offload, activation offload) whose copies are "
                    "not overlapped with compute.",
                    "Overlap copies with compute (pinned memory, non_blocking copies on a side stream, DeepSpeed "
                    "overlap_comm/pin_memory); offload less; raise the batch to amortise each copy; check the "
                    "link runs at full generation and width.", subject=key))
            else:
                out.append(self.passed(f"{key}: no sustained PCIe saturation while the device idled", ev[:2],
                                       subject=key))
        return out
