"""report.md section of the granularity probe: the device's launch cost, then each workload's
checkpointing variants side by side, with the best trade-off named."""
from __future__ import annotations

from gcdoctor.engine import Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.granularity import (BEST_MIN_SAVING_PCT, BEST_MIN_TIME_ADDED_PCT, GranularityGroup,
                                        GranularityVariant, LaunchCost)
from gcdoctor.report.format import md_table, num

MIB = 2**20
VARIANT_HEADERS = ["variant", "checkpointed", "regions/step (ops inside)", "recomputed ops/step", "step ms", "time added",
                   "kept for backward MiB", "saved vs none", "fwd+bwd peak above start MiB", "step peak MiB (phase)",
                   "kernels/step", "device idle", "mean kernel us", "recompute share"]


def _mib(n: int | float | None) -> str:
    return "—" if n is None else f"{n / MIB:,.1f}"


def _share(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.0f}%"


def _regions(v: GranularityVariant) -> str:
    if v.regions_per_step is None:
        return "—"
    return f"{v.regions_per_step:,}" + (f" ({v.checkpointed_ops_per_step:,})" if v.checkpointed_ops_per_step else "")


def variant_row(v: GranularityVariant) -> list[str]:
    if not v.fits:
        m = v.measurement
        why = f"OOM ({m.oom_phase})" if m is not None and not m.fits else "not measured"
        return [v.variant, v.description, _regions(v), num(v.recomputed_ops_per_step), why] + ["—"] * 9
    saved = "—" if v.memory_saved_bytes is None else (
        f"{_mib(v.memory_saved_bytes)} MiB ({v.memory_saved_pct:.0f}%)" if v.memory_saved_pct is not None
        else f"{_mib(v.memory_saved_bytes)} MiB")
    peak = _mib(v.peak_allocated_bytes) + (f" ({v.peak_phase})" if v.peak_phase else "")
    return [v.variant, v.description, _regions(v), num(v.recomputed_ops_per_step), num(v.step_ms),
            _signed(v.time_added_pct), _mib(v.saved_activation_bytes), saved, _mib(v.activation_peak_bytes), peak,
            num(v.kernels_per_step, 0), _share(v.device_idle_share), num(v.kernel_mean_us), _share(v.recompute_share)]


def launch_lines(lc: LaunchCost | None, facts: Facts) -> list[str]:
    if lc is None:
        return ["Launch cost: not measured (" + facts.missing_reason("granularity.launch") + ")."]
    if lc.graph_replay_us_per_op is not None:
        graph = [f"{lc.graph_replay_us_per_op:.2f} us", f"{lc.graph_api} of {lc.graph_ops:,} ops, x{lc.graph_replays}"]
    else:
        graph = ["—", "not measured: " + facts.missing_reason("granularity.launch.graph_replay_us_per_op")]
    rows = [["tiny-kernel launch (synchronised wall / launch)", f"{num(lc.launch_us, 2)} us",
             f"median of {lc.repeats} loops of {lc.launches:,} launches"],
            ["host enqueue per launch call", f"{num(lc.enqueue_us, 2)} us", "host time before the final synchronise"],
            ["device graph replay, per op"] + graph,
            ["checkpoint region, host cost", f"{num(lc.region_fixed_us, 0)} us + {num(lc.region_per_op_us, 0)} us "
             "per op inside", "line through the regions below (extra time minus recomputed launches)"]]
    for p in lc.region_points:
        ops = f"{p.forward_ops} op{'s' if p.forward_ops != 1 else ''}"
        rows.append([f"  region '{p.name}' ({ops}, {p.recomputed_ops} recomputed)", f"{num(p.extra_us, 0)} us",
                     f"fwd+bwd {num(p.checkpoint_us, 0)} us checkpointed vs {num(p.plain_us, 0)} us plain, "
                     f"x{p.reps or lc.region_reps}, median of {lc.repeats}"])
    lines = ["### Device launch cost (measured)", "", md_table(["what", "cost", "how"], rows), ""]
    lines += [f"- {n}" for n in lc.notes]
    return lines


BEST_RULE = (f"the best trade-off is the checkpointing variant with the most activation memory saved per percent "
             f"of step time added, among those saving at least {BEST_MIN_SAVING_PCT:.0f}% of the activations (time "
             f"added below {BEST_MIN_TIME_ADDED_PCT:.0f}% counts as {BEST_MIN_TIME_ADDED_PCT:.0f}%)")


def best_line(g: GranularityGroup) -> str:
    best = g.best_tradeoff()
    if best is None:
        return f"**Best trade-off:** no variant saves {BEST_MIN_SAVING_PCT:.0f}% of the activations."
    return (f"**Best trade-off: {best.variant}** ({best.description}): saves {_mib(best.memory_saved_bytes)} MiB "
            f"({best.memory_saved_pct:.0f}%) of activations for {best.time_added_pct:+.0f}% step time.")


def granularity_section(facts: Facts, verdicts: list[Verdict]) -> str:
    g = facts.granularity
    if g is None:
        return ""
    st = facts.settings
    lines = ["## Checkpointing granularity", "",
             f"Each variant: median of {g.measure_steps} synchronised steps after {g.warmup_steps} warm-up step(s) "
             f"(forward, loss, backward, {st.optimizer} step), dtype {st.dtype}. Checkpointing: {g.checkpoint_api}. "
             "Time added and memory saved are against the same workload without checkpointing. Kept for backward = "
             "allocated after forward and loss minus before the forward (what checkpointing changes; memory saved is "
             "measured on it); fwd+bwd peak above start = the forward+backward peak minus what was allocated before "
             "the forward (it includes gradients, which set it on small models); step peak includes the optimizer step. "
             "Kernels, idle share, kernel duration and recompute share come from the profiled steps' trace. "
             f"In each group, {BEST_RULE}.", ""]
    lines += launch_lines(g.launch, facts) + [""]
    for grp in g.groups:
        lines += [f"### {grp.name}: {grp.description}", "",
                  f"Batch {grp.batch_size}, {grp.tokens_per_step:,} tokens per step, hidden size {grp.hidden_size}.", "",
                  md_table(VARIANT_HEADERS, [variant_row(v) for v in grp.variants]), "", best_line(grp), ""]
        fired = [v for v in verdicts if v.code == "GC010" and v.status == "fired"
                 and v.subject.startswith(grp.name + "/")]
        lines += [f"- GC010 [{v.severity}] {v.headline}" for v in fired]
        if fired:
            lines.append("")
    lines += [f"- {n}" for n in g.notes]
    return "\n".join(lines).rstrip() + "\n"
