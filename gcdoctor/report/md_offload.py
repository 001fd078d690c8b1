"""report.md section of the offload probe: each variant's time, memory and copies side by side,
then PCIe and host load, then the check that DeepSpeed's cpu_checkpointing really offloaded."""
from __future__ import annotations

from gcdoctor.engine import Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.offload import OffloadFacts, OffloadVariant
from gcdoctor.report.format import md_table, num

MIB, GIB = 2**20, 2**30
TIME_HEADERS = ["variant", "step ms", "vs gc", "fwd / bwd / opt ms", "opt share", "device peak GiB",
                "kept after fwd MiB", "host RSS GiB (max)", "host states GiB"]
COPY_HEADERS = ["variant", "HtoD MiB/step", "DtoH MiB/step", "copy ms/step", "exposed ms/step", "overlap",
                "pageable", "copy GB/s HtoD / DtoH", "stall", "host wait"]
LINK_HEADERS = ["variant", "PCIe RX GB/s mean / max", "PCIe TX GB/s mean / max", "link peak GB/s",
                "device util % mean / min", "CPU % host / busiest core / process"]


def _f(x: float | None, digits: int = 1, scale: float = 1.0) -> str:
    return "—" if x is None else f"{x / scale:,.{digits}f}"


def _share(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _pair(a: float | None, b: float | None, digits: int = 1) -> str:
    return "—" if a is None and b is None else f"{_f(a, digits)} / {_f(b, digits)}"


def _not_run(v: OffloadVariant) -> str:
    if v.skipped:
        return f"skipped: {v.skipped}"
    m = v.measurement
    return f"OOM ({m.oom_phase})" if m is not None and not m.fits else "not measured"


def time_row(v: OffloadVariant) -> list[str]:
    if not v.ran:
        return [v.variant, _not_run(v)] + ["—"] * (len(TIME_HEADERS) - 2)
    vs = "—" if v.slowdown_pct is None else f"{v.slowdown_pct:+.0f}%"
    phases = f"{_f(v.forward_ms)} / {_f(v.backward_ms)} / {_f(v.optimizer_ms)}"
    return [v.variant, num(v.step_ms), vs, phases, _share(v.optimizer_share), _f(v.peak_allocated_bytes, 2, GIB),
            _f(v.saved_after_forward_bytes, 1, MIB), _f(v.host_rss_max_bytes or v.host_rss_after_bytes, 2, GIB),
            _f(v.host_state_bytes, 2, GIB)]


def copy_row(v: OffloadVariant) -> list[str]:
    if not v.ran or v.copy_ms is None:
        return [v.variant] + ["—"] * (len(COPY_HEADERS) - 1)
    return [v.variant, _f(v.h2d_bytes, 1, MIB), _f(v.d2h_bytes, 1, MIB), _f(v.copy_ms, 2), _f(v.exposed_copy_ms, 2),
            _share(v.copy_overlap_share), _share(v.pageable_share), _pair(v.h2d_copy_gbs, v.d2h_copy_gbs),
            _share(v.stall_share), _share(v.host_wait_share)]


def link_row(v: OffloadVariant) -> list[str]:
    if not v.ran:
        return [v.variant] + ["—"] * (len(LINK_HEADERS) - 1)
    cpu = f"{_f(v.cpu_pct_mean, 0)} / {_f(v.cpu_max_core_pct_mean, 0)} / {_f(v.proc_cpu_pct_mean, 0)}"
    return [v.variant, _pair(v.pcie_rx_gbs_mean, v.pcie_rx_gbs_max), _pair(v.pcie_tx_gbs_mean, v.pcie_tx_gbs_max),
            _f(v.pcie_peak_gbs), _pair(v.util_pct_mean, v.util_pct_min, 0), cpu]


def _check_lines(o: OffloadFacts) -> list[str]:
    v = o.get("deepspeed-ckpt-cpu")
    ck = v.ckpt_check if v is not None else None
    if ck is None:
        return []
    state = {True: "yes", False: "NO: the checkpoints stayed on the device", None: "not checked"}[ck.verified]
    lines = ["", f"**Did DeepSpeed's cpu_checkpointing put the checkpoints on the host?** {state}."]
    if ck.method:
        lines[-1] += f" By {ck.method}."
    if ck.detail:
        lines.append(ck.detail[0].upper() + ck.detail[1:] + ".")
    return lines


def offload_section(facts: Facts, verdicts: list[Verdict]) -> str:
    o = facts.offload
    if o is None:
        return ""
    lines = ["## Offload: checkpointing with CPU offload", "",
             f"Batch {o.batch_size}, sequence {o.seq_len}, {o.n_layers} layers, {o.dtype}; each row is the median of "
             f"{o.measure_steps} steps after {o.warmup_steps} warm-up step(s). Copies, overlap and stall shares come "
             "from the two profiled steps' trace (per step); PCIe, utilisation and CPU from telemetry over the "
             "measured steps. Stall = host-device copies with no kernel beside them + device idle waiting for the "
             "host, as a share of the device's time.", ""]
    lines += [f"- `{v.variant}`: {v.description}. On the host: {v.on_host}. Checkpointing: `{v.checkpointing or '—'}`"
              + (f". Optimizer: {v.optimizer}" if v.optimizer else "")
              + (f". DeepSpeed config: `{v.ds_config}`" if v.ds_config else "") for v in o.variants]
    lines += ["", "### Time and memory", "", md_table(TIME_HEADERS, [time_row(v) for v in o.variants])]
    if any(v.copy_ms is not None for v in o.variants):
        lines += ["", "### Copies and stalls (trace)", "", md_table(COPY_HEADERS, [copy_row(v) for v in o.variants])]
    else:
        lines += ["", "Copies and stalls: no device trace: " + _why_no_trace(facts, o) + "."]
    if any(v.pcie_rx_gbs_mean is not None or v.cpu_pct_mean is not None for v in o.variants):
        lines += ["", "### PCIe and host load (telemetry)", "", md_table(LINK_HEADERS, [link_row(v) for v in o.variants])]
    lines += _check_lines(o)
    ds = [f"DeepSpeed {o.deepspeed}" if o.deepspeed else "DeepSpeed not importable"]
    if o.dist_backend:
        ds.append(f"process group {o.dist_backend}")
    if o.cpu_adam_load_s is not None:
        how = "prebuilt" if o.cpu_adam_prebuilt else ("cached JIT build" if o.cpu_adam_cached else "compiled now")
        ds.append(f"CPU Adam op loaded in {o.cpu_adam_load_s:.1f} s ({how})")
    lines += ["", "- " + ", ".join(ds)]
    lines += [f"- {n}" for n in o.notes]
    for v in o.variants:
        lines += [f"- {v.variant}: {n}" for n in v.notes]
    return "\n".join(lines)


def _why_no_trace(facts: Facts, o: OffloadFacts) -> str:
    for v in o.variants:
        tm = facts.trace.get(v.trace_key) if v.trace_key else None
        if tm is not None and tm.device_unavailable:
            return tm.device_unavailable
    return facts.unavailable.get("trace.offload/gc") or "not profiled"
