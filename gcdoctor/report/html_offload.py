"""report.html: the offload section (step time, copy time and PCIe throughput per variant)."""
from __future__ import annotations

from typing import Any

from gcdoctor.facts import Facts
from gcdoctor.report.html_parts import (Raw, bullets, by_unit, details, fbytes, figure, figures, fnum, fpct, fshare,
                                        generic_block, kv, para, section, table)
from gcdoctor.report.svg import Bar, HLine, bar_plot, color_for, esc


def _peak(facts: Facts, variants: list[Any]) -> float | None:
    """The link's peak per direction: from the variants, else the environment, else telemetry."""
    for v in variants:
        if getattr(v, "pcie_peak_gbs", None):
            return v.pcie_peak_gbs
    if facts.environment.pcie_peak_gbs:
        return facts.environment.pcie_peak_gbs
    return facts.telemetry.pcie_link_peak_gbs if facts.telemetry is not None else None


def _plots(facts: Facts, ran: list[Any], reference: str) -> list[str]:
    figs = []
    step = [Bar(v.variant, v.step_ms, color_for(v.variant, i), inner=v.exposed_copy_ms) for i, v in enumerate(ran)]
    ref = next((v for v in ran if v.variant == reference), None)
    figs.append(figure(bar_plot(step, title="Step time per offload variant", x_label="median step (ms)",
                                x_fmt=lambda x: f"{x:,.0f}" if x >= 10 else f"{x:.2g}", inner_label="exposed copies",
                                ref=HLine(ref.step_ms, f"{reference} {ref.step_ms:,.0f} ms") if ref and ref.step_ms
                                else None),
                       "Median step time; the dark part is copy time with no kernel beside it (exposed copies), "
                       "where the trace had device events."))
    copies = [Bar(v.variant, v.copy_ms, color_for(v.variant, i), inner=v.exposed_copy_ms)
              for i, v in enumerate(ran) if v.copy_ms]
    figs.append(figure(bar_plot(copies, title="Host-device copy time per step", x_label="ms per step",
                                inner_label="exposed"),
                       "Host <-> device copies per step from the trace; dark: exposed (no kernel running)."))
    peak = _peak(facts, ran)
    bw = []
    for i, v in enumerate(ran):
        c = color_for(v.variant, i)
        bw += [Bar(f"{v.variant} H2D copy", v.h2d_copy_gbs, c), Bar(f"{v.variant} D2H copy", v.d2h_copy_gbs, c),
               Bar(f"{v.variant} PCIe rx mean", v.pcie_rx_gbs_mean, c),
               Bar(f"{v.variant} PCIe tx mean", v.pcie_tx_gbs_mean, c)]
    figs.append(figure(bar_plot(bw, title="PCIe throughput per variant", x_label="GB/s (1 GB = 1e9 B)",
                                ref=HLine(peak, f"link peak {peak:.0f} GB/s") if peak else None,
                                x_fmt=lambda x: f"{x:.3g}"),
                       "Copy bandwidth while copying (trace: bytes / copy time) and the link's mean throughput over "
                       "the measured steps (telemetry; rx = host to device)."))
    return figs


def offload_section(facts: Facts) -> str:
    o = facts.offload
    if o is None:
        return ""
    variants = getattr(o, "variants", None)
    if variants is None:  # a shape this writer does not know
        return section("offload", "Offload", generic_block(o, "offload", facts.unavailable))
    if not variants:
        return ""
    reference = getattr(o, "reference", "gc")
    ran = [v for v in variants if getattr(v, "step_ms", None) is not None]
    lead = (f"Checkpointing with CPU offload, variant by variant, at batch {o.batch_size}, sequence {o.seq_len}, "
            f"{o.n_layers} layers, {o.dtype}; {o.measure_steps} measured steps after {o.warmup_steps} warm-up; "
            f"slowdown against \u201c{reference}\u201d. Copy numbers are per step.")
    rows, ids = [], []
    for v in variants:
        if v.skipped:
            rows.append([v.variant, v.on_host or "", f"skipped: {v.skipped}"] + [""] * 11)
        else:
            m = v.measurement
            step = fnum(v.step_ms) if v.step_ms is not None else (f"OOM ({m.oom_phase})" if m and not m.fits else None)
            rows.append([v.variant, v.on_host or "", step, fpct(v.slowdown_pct, signed=True),
                         fbytes(v.peak_allocated_bytes), fbytes(v.host_rss_max_bytes), fnum(v.copy_ms, 2),
                         fnum(v.exposed_copy_ms, 2), by_unit("h2d_copy_gbs", v.h2d_copy_gbs),
                         by_unit("d2h_copy_gbs", v.d2h_copy_gbs), fshare(v.pageable_share),
                         by_unit("pcie_rx_gbs_mean", v.pcie_rx_gbs_mean), fpct(v.util_pct_mean),
                         fshare(v.stall_share)])
        ids.append(v.variant)
    main = table(["variant", "on the host", "step ms", "vs " + reference, "device peak", "host RSS max",
                  "copy ms", "exposed copy ms", "H2D GB/s", "D2H GB/s", "pageable", "PCIe rx mean",
                  "device util", "stall share"], rows, numeric_from=2, ids=ids, drop_empty=True)
    described = [(v.variant, f"{v.description} Checkpoints: {v.checkpointing or '—'}; optimizer: "
                              f"{v.optimizer or '—'}" + (f"; pinned host memory: {'yes' if v.pin_memory else 'no'}"
                                                          if v.pin_memory is not None else ""))
                 for v in variants]
    checks = []
    for v in variants:
        c = getattr(v, "ckpt_check", None)
        if c is None:
            continue
        verdict = {True: "verified", False: "NOT verified", None: "could not be checked"}[c.verified]
        checks.append(f"<h4>{esc(v.variant)}: checkpoints on the host {esc(verdict)}</h4>" + kv([
            ("how", ": ".join(x for x in (c.method, c.detail) if x) or None),
            ("expected per step", fbytes(c.expected_offload_bytes_per_step)),
            ("device -> host in the trace", fbytes(c.trace_d2h_bytes_per_step)),
            ("DeepSpeed's counters", fbytes(c.ds_offloaded_bytes_per_step)),
            ("held after forward (this / gc on device)",
             f"{fbytes(c.saved_after_forward_bytes)} / {fbytes(c.saved_after_forward_gc_bytes)}")]))
    env = [x for x in (
        f"DeepSpeed {o.deepspeed}" if o.deepspeed else "",
        f"CPU Adam {'prebuilt' if o.cpu_adam_prebuilt else 'JIT-built'}"
        + (f", loaded in {o.cpu_adam_load_s:.1f} s" if o.cpu_adam_load_s is not None else "")
        if o.cpu_adam_prebuilt is not None else "",
        f"{o.host_cpus} host CPUs" if o.host_cpus else "") if x]
    notes = list(o.notes) + [f"{v.variant}: {n}" for v in variants for n in v.notes]
    return section("offload", "Offload: copy time and PCIe throughput", figures(*_plots(facts, ran, reference)),
                   main, para("; ".join(env), "small"), details("What each variant does", kv(described)),
                   Raw("".join(checks)), bullets(notes, "notes"), lead=lead)
