"""GC041 device-starving-cpu."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.monitor import TelemetryWindow
from gcdoctor.rules._telemetry_windows import collect, device_keys

GB = 1e9


def device_starving(util_pct: float | None, mem_used_bytes: float | None, cpu_max_core_pct: float | None,
                    proc_cpu_pct: float | None, t: dict[str, float]) -> bool | None:
    """True when a device holding a job's memory idles while a CPU core (or the job) is saturated.

    None when it cannot be told (no utilisation, or no CPU reading at all).
    """
    if util_pct is None or (cpu_max_core_pct is None and proc_cpu_pct is None):
        return None
    if mem_used_bytes is not None and mem_used_bytes < t["min_job_memory_gb"] * GB:
        return False  # nothing resident: an idle device is just idle
    cpu_hot = ((cpu_max_core_pct is not None and cpu_max_core_pct >= t["core_busy_pct"])
               or (proc_cpu_pct is not None and proc_cpu_pct >= t["proc_busy_pct"]))
    return util_pct < t["idle_util_pct"] and cpu_hot


class DeviceStarvingCpuRule(Rule):
    """What it checks:
    From telemetry alone (`gcdoctor monitor`, or a followed run): whether a device that holds a
    job's memory spends seconds mostly idle while a CPU core is saturated (or, for a followed
    run, while the training process uses a full core). One verdict per device.

    Why it matters:
    The device is waiting for the host: a data loader doing its work in the main process, a
    tokenizer or augmentation on the critical path, a CPU optimizer step (ZeRO-Offload), or
    Python overhead launching many small kernels. Checkpointing cannot help and adds work;
    the fix is on the host. A single core near 100% is the usual sign of one Python thread
    (the GIL) setting the pace. Caveat: the monitor sees the whole host, so another process
    saturating a core also matches; check the job's own CPU use (top -p PID).

    Evidence:
    Seconds in the condition and their share of the monitored time, the device utilisation,
    the busiest core and (for a followed run) the training process's CPU during those seconds.

    How to fix:
    Move data loading to worker processes (DataLoader num_workers, pin_memory, prefetch_factor)
    and pre-tokenize; use a fused or GPU optimizer instead of a CPU one where memory allows;
    cut per-step Python work (fewer, larger checkpoint regions; CUDA graphs or torch.compile).
    """

    code = "GC041"
    slug = "device-starving-cpu"
    title = "Device starving while the CPU is saturated"
    requires = ("monitor.windows",)
    topic = "monitor"
    defaults = {
        # the same idle line as GC040: under 30% utilisation the device mostly waits
        "idle_util_pct": 30.0,
        # a core above 95% is a thread that never pauses: one Python thread holding the GIL
        "core_busy_pct": 95.0,
        # the job's own CPU, 100 = one full core (psutil's convention)
        "proc_busy_pct": 95.0,
        # more than a bare CUDA context (0.3-0.6 GB, docs/references.md section 6): a job is resident
        "min_job_memory_gb": 1.0,
        # as GC040: several 1 s windows, not one slow batch
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
            def cond(w: TelemetryWindow, key: str = key) -> bool | None:
                v = w.values
                return device_starving(v.get(f"{key}.util_pct"), v.get(f"{key}.mem_used_bytes"),
                                       v.get("cpu_max_core_pct"), v.get("proc_cpu_pct"), t)

            ep = collect(windows, cond)
            if not ep.observed_seconds:
                out.append(self.inconclusive("no window had both device utilisation and CPU readings", subject=key))
                continue
            util, core, proc = ep.mean(f"{key}.util_pct"), ep.mean("cpu_max_core_pct"), ep.mean("proc_cpu_pct")
            ev = [Evidence("time in the condition", ep.seconds, "s"),
                  Evidence("share of the monitored time", ep.share_pct, "%"),
                  Evidence("device utilisation during it (mean)", util, "%"),
                  Evidence("busiest CPU core during it (mean)", core, "%")]
            if proc is not None:
                ev.append(Evidence("training process CPU during it (100 = one core)", proc, "%"))
            if ep.seconds >= t["min_seconds"]:
                hot = f"a CPU core at {core:.0f}%" if core is not None else f"the job's CPU at {proc:.0f}%"
                out.append(self.fired(
                    "warning", f"{key}: the device was busy only {util:.0f}% of the time for {ep.seconds:.0f} s "
                    f"while {hot}: it is waiting for the host", ev,
                    "A saturated core beside an idle device means the host sets the pace: data loading or "
                    "tokenizing in the main process, a CPU optimizer step, or Python overhead per kernel. "
                    "Checkpointing cannot help here.",
                    "Use DataLoader workers (num_workers, pin_memory, prefetch_factor) and pre-tokenize; prefer a "
                    "fused GPU optimizer to a CPU one where memory allows; cut per-step Python work (larger "
                    "checkpoint regions, CUDA graphs, torch.compile).", subject=key))
            else:
                out.append(self.passed(f"{key}: the device was not left waiting on a saturated CPU", ev[:2],
                                       subject=key))
        return out
