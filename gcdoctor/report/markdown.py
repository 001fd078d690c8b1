"""report.md: the bottom line first, then the evidence section by section, then the environment."""
from __future__ import annotations

from typing import Callable

from gcdoctor.engine import Verdict
from gcdoctor.facts import Facts
from gcdoctor.report.md_watch import watch_section
from gcdoctor.report.format import gib, md_table, num
from gcdoctor.report.md_granularity import granularity_section
from gcdoctor.report.md_jitter import jitter_section
from gcdoctor.report.md_offload import offload_section
from gcdoctor.report.sweep import SWEEP_HEADERS, sweep_rows

SEVERITY_MARK = {"critical": "CRITICAL", "warning": "WARNING", "info": "note", "ok": "ok", "inconclusive": "?"}


def bottom_line(facts: Facts, verdicts: list[Verdict]) -> str:
    fired = [v for v in verdicts if v.status == "fired"]
    lines = ["## Bottom line", ""]
    if not fired:
        lines.append("No rule fired: checkpointing behaves as expected for what was measured.")
    for v in fired:
        lines.append(f"### [{SEVERITY_MARK[v.severity]}] {v.code} {v.headline}")
        if v.subject:
            lines.append(f"*Subject:* {v.subject}")
        lines.append("")
        lines += [f"- {e.text()}" for e in v.evidence]
        lines += ["", f"**Why.** {v.explanation}", "", f"**What to do.** {v.recommendation}", ""]
    return "\n".join(lines)


def sweep_section(facts: Facts, verdicts: list[Verdict]) -> str:
    s = facts.sweep
    if s is None:
        return ""
    lines = ["## Batch sweep: checkpointing off (no_gc) and on (gc)", "",
             f"Checkpointing: `{s.gc_api}`. Each row is the median of {facts.settings.measure_steps} synchronised "
             f"steps after {facts.settings.warmup_steps} warm-up step(s): forward, loss, backward, "
             f"{facts.settings.optimizer} step. Sequence length {facts.settings.seq_len}, dtype {facts.settings.dtype}. "
             "Activations = peak minus model states (parameters, gradients, optimizer states).", ""]
    if s.max_batch:
        for variant in ("no_gc", "gc"):
            b = s.max_batch.get(variant)
            capped = " (search capped by --max-batch)" if s.max_batch_capped.get(variant) else ""
            lines.append(f"- largest batch, {variant}: {b if b is not None else 'none fits'}{capped}")
        lines.append("")
    lines.append(md_table(SWEEP_HEADERS, sweep_rows(facts)))
    return "\n".join(lines)


def profiler_section(facts: Facts, verdicts: list[Verdict]) -> str:
    if not facts.profiler_overhead:
        return ""
    rows = [[p.variant, p.batch_size, num(p.unprofiled_step_ms), num(p.profiled_step_ms),
             "—" if p.overhead_pct is None else f"{p.overhead_pct:+.1f}%"] for p in facts.profiler_overhead]
    return "\n".join(["## Profiler overhead", "",
                      "Verdicts use unprofiled step times; traces are in `traces/` (open in ui.perfetto.dev).", "",
                      md_table(["window", "batch", "unprofiled ms", "profiled ms", "overhead"], rows)])


def rules_section(facts: Facts, verdicts: list[Verdict]) -> str:
    rows = [[v.code, v.slug, v.status, v.headline] for v in verdicts if v.status != "fired"]
    if not rows:
        return ""
    return "\n".join(["## Rules that passed or could not run", "", md_table(["code", "rule", "status", "detail"], rows)])


def environment_section(facts: Facts, verdicts: list[Verdict]) -> str:
    e, st, m = facts.environment, facts.settings, facts.model
    rows = [["device", f"{e.device_name} ({e.device_kind})"], ["device memory", f"{gib(e.total_memory_bytes)} GiB"],
            ["driver", e.driver or "—"], ["runtime", e.runtime or "—"], ["torch", e.torch or "—"],
            ["transformers", e.transformers or "—"], ["deepspeed", e.deepspeed or "—"],
            ["torch_musa", e.torch_musa or "—"], ["python", e.python or "—"], ["gcdoctor", e.gcdoctor or "—"],
            ["host", f"{e.host} ({e.cpu_count} CPUs, {gib(e.host_memory_bytes, 0)} GiB)"]]
    bare = st.command == "analyze" and m is None  # a bare trace: only what the trace holds
    if bare:
        rows = [r for r in rows if r[0] != "host"] + ([["host", e.host]] if e.host else [])
    if m is not None:
        rows.insert(0, ["model", f"{m.name} ({m.source}), {m.n_layers}/{m.n_layers_full} layers, "
                               f"{m.n_params / 1e9:.2f} B params, {m.dtype}, attention {m.attn_implementation}"])
    if not (st.command == "analyze" and m is None):  # a bare trace has no gcdoctor settings
        rows.append(["settings", f"seq {st.seq_len}, {st.dtype}, {st.optimizer}, {st.warmup_steps} warm-up + "
                                 f"{st.measure_steps} measured steps, probes {', '.join(st.probes)}"])
    rows.append(["run", "analyze of a profiler trace" if bare else f"started {st.started_at}, wall {st.wall_s} s"
                        + (", INTERRUPTED: partial results" if st.interrupted else "")
                        + (f", error: {st.error}" if st.error else "")])
    if facts.unavailable:
        rows += [[f"not measured: {k}", v] for k, v in sorted(facts.unavailable.items())]
    return "\n".join(["## Environment", "", md_table(["", ""], rows)])


SECTIONS: list[Callable[[Facts, list[Verdict]], str]] = [
    bottom_line, watch_section, sweep_section, granularity_section, offload_section, jitter_section, profiler_section, rules_section,
    environment_section,
]


def render_markdown(facts: Facts, verdicts: list[Verdict]) -> str:
    m = facts.model
    title = f"# gcdoctor report: {m.name if m else 'trace'} on {facts.environment.device_name or 'unknown device'}"
    parts = [title]
    if facts.settings.interrupted:
        parts.append("> The run was interrupted: what follows is what was measured before it stopped.")
    parts += [s for s in (fn(facts, verdicts) for fn in SECTIONS) if s]
    return "\n\n".join(parts) + "\n"
