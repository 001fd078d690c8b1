"""Section: checkpointing with CPU offload, variant by variant (step time, copies, PCIe, host load)."""
from __future__ import annotations

from pathlib import Path

from gcdoctor.facts import Facts, OffloadFacts
from gcdoctor.facts.offload import OffloadVariant
from gcdoctor.report.model import Column, Key, Section, Table
from gcdoctor.report.svg import Bar, HLine, bar_plot, color_for

COLUMNS = [Column("variant", key=True), Column("on the host", "text"), Column("result", "text"),
           Column("step", "ms", compare=True), Column("vs reference", "pct+", compare=True),
           Column("fwd", "ms"), Column("bwd", "ms"), Column("opt", "ms"), Column("optimizer share", "share"),
           Column("device peak", "bytes", compare=True), Column("kept after forward", "bytes"),
           Column("host RSS max", "bytes"), Column("host states", "bytes")]
COPY_COLUMNS = [Column("variant", key=True), Column("HtoD/step", "bytes"), Column("DtoH/step", "bytes"),
                Column("copies", "ms", compare=True), Column("exposed copies", "ms", compare=True),
                Column("overlap", "share"), Column("pageable", "share"), Column("HtoD copy", "GB/s"),
                Column("DtoH copy", "GB/s"), Column("stall", "share", compare=True), Column("host wait", "share")]
LINK_COLUMNS = [Column("variant", key=True), Column("PCIe RX mean", "GB/s"), Column("PCIe RX max", "GB/s"),
                Column("PCIe TX mean", "GB/s"), Column("PCIe TX max", "GB/s"), Column("link peak", "GB/s"),
                Column("device util mean", "pct"), Column("device util min", "pct"), Column("host CPU", "pct"),
                Column("busiest core", "pct"), Column("process CPU", "pct")]


def _variants(facts: Facts) -> list[OffloadVariant]:
    return facts.offload.variants if facts.offload is not None else []


def _result(v) -> str:
    if v.skipped:
        return f"skipped: {v.skipped}"
    m = v.measurement
    if v.ran:
        return "ran"
    return f"OOM ({m.oom_phase})" if m is not None and not m.fits else "not measured"


def _rows(facts: Facts) -> list[list]:
    return [[v.variant, v.on_host or None, _result(v), v.step_ms, v.slowdown_pct, v.forward_ms, v.backward_ms,
             v.optimizer_ms, v.optimizer_share, v.peak_allocated_bytes, v.saved_after_forward_bytes,
             v.host_rss_max_bytes or v.host_rss_after_bytes, v.host_state_bytes] for v in _variants(facts)]


def _copy_rows(facts: Facts) -> list[list]:
    return [[v.variant, v.h2d_bytes, v.d2h_bytes, v.copy_ms, v.exposed_copy_ms, v.copy_overlap_share,
             v.pageable_share, v.h2d_copy_gbs, v.d2h_copy_gbs, v.stall_share, v.host_wait_share]
            for v in _variants(facts) if v.ran and v.copy_ms is not None]


def _link_rows(facts: Facts) -> list[list]:
    return [[v.variant, v.pcie_rx_gbs_mean, v.pcie_rx_gbs_max, v.pcie_tx_gbs_mean, v.pcie_tx_gbs_max,
             v.pcie_peak_gbs, v.util_pct_mean, v.util_pct_min, v.cpu_pct_mean, v.cpu_max_core_pct_mean,
             v.proc_cpu_pct_mean] for v in _variants(facts)
            if v.ran and (v.pcie_rx_gbs_mean is not None or v.cpu_pct_mean is not None)]


def _what_rows(facts: Facts) -> list[list]:
    return [[v.variant, v.description, v.checkpointing or None, v.optimizer or None, v.pin_memory, v.ds_config]
            for v in _variants(facts)]


def _check_rows(facts: Facts) -> list[list]:
    rows = []
    for v in _variants(facts):
        c = v.ckpt_check
        if c is None:
            continue
        rows.append([v.variant, c.expected_offload_bytes_per_step, c.trace_d2h_bytes_per_step,
                     c.ds_offloaded_bytes_per_step, c.saved_after_forward_bytes, c.saved_after_forward_gc_bytes,
                     c.detail or None])
    return rows


SLOW_LINK_COLUMNS = [Column("variant", key=True), Column("link", key=True), Column("HtoD copy", "GB/s"),
                     Column("DtoH copy", "GB/s"), Column("copies", "ms"), Column("exposed copies", "ms", compare=True),
                     Column("exposed if the overlap scaled", "ms"), Column("step", "ms", compare=True),
                     Column("vs reference", "pct+", compare=True), Column("stall", "share")]


def _slow_link_rows(facts: Facts) -> list[list]:
    return [[v.variant, w.link, w.h2d_gbs, w.d2h_gbs, w.copy_ms, w.exposed_copy_ms,
             w.exposed_copy_ms_if_overlap_scales, w.step_ms, w.slowdown_pct, w.stall_share]
            for v in _variants(facts) for w in v.link_whatif]


def _slow_link_caption(o: OffloadFacts) -> str:
    eff = "" if o.link_efficiency is None else f" ({100 * o.link_efficiency:.0f}% of this link's peak reached here)"
    text = ("Predicted, not measured: the same copies per step on a slower host link, at the bandwidth such a link "
            f"allows{eff}; copy time beyond the compute it overlapped here is exposed (docs/offload.md, What-if).")
    c = o.link_check
    if c is not None and c.prediction is not None and c.error_pct is not None:
        text += (f" Checked: {c.source}'s copies at {c.target}'s measured bandwidth predict "
                 f"{c.prediction.step_ms:,.0f} ms; {c.target} measured {c.measured_step_ms:,.0f} ms "
                 f"({c.error_pct:+.1f}%).")
    return text


def _tables(facts: Facts) -> list[Table]:
    o = facts.offload
    if o is None:
        return []
    slow = ([Table("offload-slower-link", SLOW_LINK_COLUMNS, _slow_link_rows, title="What-if: a slower host link",
                   caption=_slow_link_caption(o))]
            if any(v.link_whatif for v in o.variants) else [])
    return [
        Table("offload", COLUMNS, _rows, caption=f"Against {o.reference!r}: layer checkpointing with "
                                                 "everything on the device."),
        Table("offload-copies", COPY_COLUMNS, _copy_rows, title="Copies and stalls (trace, per step)",
              caption="Stall = host-device copies with no kernel beside them + device idle waiting for the host, "
                      "as a share of the device's time."),
        *slow,
        Table("offload-link", LINK_COLUMNS, _link_rows, title="PCIe and host load (telemetry over the measured steps)"),
        Table("offload-checkpoints", [Column("variant", key=True), Column("expected to the host/step", "bytes"),
                                      Column("device to host in the trace/step", "bytes"),
                                      Column("DeepSpeed's counters/step", "bytes"),
                                      Column("held after forward", "bytes"),
                                      Column("held after forward, gc on device", "bytes"), Column("readings", "text")],
              _check_rows, title="Did DeepSpeed's cpu_checkpointing put the checkpoints on the host?",
              caption="The readings; the offload rule (GC020) judges them."),
        Table("offload-variants", [Column("variant", key=True), Column("what it does", "text"),
                                   Column("checkpointing", "text"), Column("optimizer", "text"),
                                   Column("pinned host memory", "text"), Column("DeepSpeed config", "text")],
              _what_rows, title="What each variant does", fold=True),
    ]


def _keys(facts: Facts) -> list[Key]:
    o = facts.offload
    if o is None:
        return []
    out = []
    if o.deepspeed:
        out.append(Key("deepspeed", "DeepSpeed", o.deepspeed))
    if o.dist_backend:
        out.append(Key("dist-backend", "process group", o.dist_backend))
    if o.cpu_adam_load_s is not None:
        how = "prebuilt" if o.cpu_adam_prebuilt else ("cached JIT build" if o.cpu_adam_cached else "compiled now")
        out.append(Key("cpu-adam", "DeepSpeed CPU Adam op", f"loaded in {o.cpu_adam_load_s:.1f} s ({how})"))
    if o.host_cpus:
        out.append(Key("host-cpus", "host CPUs", o.host_cpus, "int"))
    return out


def _peak(facts: Facts) -> float | None:
    for v in _variants(facts):
        if v.pcie_peak_gbs:
            return v.pcie_peak_gbs
    if facts.environment.pcie_peak_gbs:
        return facts.environment.pcie_peak_gbs
    return facts.telemetry.pcie_link_peak_gbs if facts.telemetry is not None else None


def _plots(facts: Facts, run_dir: Path | None) -> list[tuple[str, str]]:
    o = facts.offload
    if o is None:
        return []
    ran = [v for v in o.variants if v.step_ms is not None]
    figs = []
    step = [Bar(v.variant, v.step_ms, color_for(v.variant, i), inner=v.exposed_copy_ms) for i, v in enumerate(ran)]
    ref = next((v for v in ran if v.variant == o.reference), None)
    figs.append((bar_plot(step, title="Step time per offload variant", x_label="median step (ms)",
                          x_fmt=lambda x: f"{x:,.0f}" if x >= 10 else f"{x:.2g}", inner_label="exposed copies",
                          ref=HLine(ref.step_ms, f"{o.reference} {ref.step_ms:,.0f} ms") if ref and ref.step_ms
                          else None),
                 "Median step time; the dark part is copy time with no kernel beside it (exposed copies), where the "
                 "trace had device events."))
    copies = [Bar(v.variant, v.copy_ms, color_for(v.variant, i), inner=v.exposed_copy_ms)
              for i, v in enumerate(ran) if v.copy_ms]
    figs.append((bar_plot(copies, title="Host-device copy time per step", x_label="ms per step",
                          inner_label="exposed"),
                 "Host <-> device copies per step from the trace; dark: exposed (no kernel running)."))
    peak = _peak(facts)
    bw = []
    for i, v in enumerate(ran):
        c = color_for(v.variant, i)
        bw += [Bar(f"{v.variant} H2D copy", v.h2d_copy_gbs, c), Bar(f"{v.variant} D2H copy", v.d2h_copy_gbs, c),
               Bar(f"{v.variant} PCIe rx mean", v.pcie_rx_gbs_mean, c),
               Bar(f"{v.variant} PCIe tx mean", v.pcie_tx_gbs_mean, c)]
    figs.append((bar_plot(bw, title="PCIe throughput per variant", x_label="GB/s (1 GB = 1e9 B)",
                          ref=HLine(peak, f"link peak {peak:.0f} GB/s") if peak else None, x_fmt=lambda x: f"{x:.3g}"),
                 "Copy bandwidth while copying (trace: bytes / copy time) and the link's mean throughput over the "
                 "measured steps (telemetry; rx = host to device)."))
    return figs


def _lead(facts: Facts) -> str:
    o = facts.offload
    if o is None:
        return ""
    return (f"Checkpointing with CPU offload, variant by variant, at batch {o.batch_size}, sequence {o.seq_len}, "
            f"{o.n_layers} layers, {o.dtype}; median of {o.measure_steps} steps after {o.warmup_steps} warm-up. "
            "Copies, overlap and stall come from the two profiled steps' trace; PCIe, utilisation and CPU from "
            "telemetry over the measured steps.")


def _notes(facts: Facts) -> list[str]:
    o = facts.offload
    if o is None:
        return []
    return list(o.notes) + [f"{v.variant}: {n}" for v in o.variants for n in v.notes]


SECTION = Section(
    id="offload", title="Offload: checkpointing with CPU offload", facts="offload",
    present=lambda f: f.offload is not None and bool(f.offload.variants),
    lead=_lead, keys=_keys, tables=_tables, plots=_plots, notes=_notes, topics=("offload",))
