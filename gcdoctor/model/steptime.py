"""Predicted step time per checkpointing granularity on a card we do not have (`gcdoctor plan
--device CARD`): scaled from a granularity run on another device by the card's published peak
FLOP/s and memory bandwidth, with a launch cost that is measured on the card, given, or a range.
A prediction, printed with every input. No torch. Method: docs/granularity.md, "What-if".

From the reference run, per variant of its `model` group: the device time of the forward and
backward's matrix kernels (GEMMs, attention), of their other kernels and of the optimizer step;
launches and host issue time of the forward+backward and of the optimizer (the launch-cost
what-if of gcdoctor.trace.launch_response). On the card:

    device = matrix x flops ratio x peak_ref / peak + other x activations ratio x bw_ref / bw
             + optimizer x params ratio x bw_ref / bw
    launches = forward+backward launches x layers ratio + optimizer launches x params ratio
    host = (host work besides launching, scaled the same way) + launches x launch cost
    step = max(device, host) + what the reference's step had beyond both (latencies)

The ratios are the plan's model, sequence and batch over the reference's (FLOPs per step,
layers x tokens x hidden, parameters, layers). The host CPU is taken to be the reference's.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcdoctor.errors import UserError

WHATIF_LAUNCH_US = (20.0, 50.0, 100.0)  # the launch costs shown when the card's is not known
REFERENCE_RUN = "samples/h200-llama3-8b-diagnose"


@dataclass
class RefVariant:
    variant: str
    step_ms: float
    host_issue_ms: float
    launches: float
    matmul_ms: float
    other_ms: float
    optimizer_device_ms: float
    optimizer_launches: float
    optimizer_host_ms: float


@dataclass
class Reference:
    """The granularity run a prediction is scaled from."""

    source: str
    device_name: str
    bf16_tflops: float | None
    fp32_tflops: float | None
    bandwidth_gbs: float | None
    launch_us: float
    model: str
    n_layers: int
    seq_len: int
    batch_size: int
    dtype: str
    variants: list[RefVariant] = field(default_factory=list)

    def get(self, variant: str) -> RefVariant | None:
        return next((v for v in self.variants if v.variant == variant), None)


# The recorded H200 run (samples/h200-llama3-8b-diagnose: torch 2.11.0+cu130, driver 580.159.04),
# its what-if computed from its traces: reference_from_facts() of that run, rounded to 0.01
# (tests/test_steptime.py checks the two agree).
H200_REFERENCE = Reference(
    source="a recorded NVIDIA H200 run of Llama-3-8B (2026-11-30)", device_name="NVIDIA H200", bf16_tflops=989.0,
    fp32_tflops=67.0, bandwidth_gbs=4800.0, launch_us=8.66, model="llama3-8b", n_layers=4, seq_len=4096,
    batch_size=1, dtype="bf16", variants=[RefVariant(*row) for row in (
        # variant, step, host issue, launches, matmul, other, optimizer device, optimizer launches, host
        ("none", 96.62, 18.73, 1382.0, 48.26, 19.85, 25.47, 736.0, 5.75),
        ("layer", 109.62, 41.03, 1546.0, 56.52, 23.71, 25.47, 736.0, 5.02),
        ("every-2", 104.30, 28.24, 1464.0, 52.45, 21.83, 25.44, 736.0, 7.87),
        ("every-4", 100.76, 22.71, 1423.0, 50.88, 20.99, 25.63, 736.0, 6.43),
        ("selective-mlp", 105.39, 25.34, 1406.0, 52.92, 20.33, 25.36, 736.0, 6.73),
        ("selective-attn", 101.25, 30.62, 1446.0, 51.32, 21.32, 25.65, 736.0, 8.57),
        ("sub-layer", 106.37, 31.86, 1470.0, 56.19, 21.85, 25.78, 736.0, 6.76),
        ("fine", 97.24, 36.89, 1382.0, 48.08, 19.82, 25.59, 736.0, 4.08),
    )])


def reference_from_facts(facts: Any, source: str) -> Reference:
    """A Reference from a granularity run's facts (their what-if filled in)."""
    g = facts.granularity
    group = g.group("model") if g is not None else None
    if group is None or g.launch is None or g.launch.launch_us is None:
        raise UserError(f"{source}: no granularity model group or launch cost in this run")
    if g.emulation is not None:
        raise UserError(f"{source}: an emulated launch cost (--emulate-launch-us) is no device's own; use a native run")
    env = facts.environment
    rows = []
    for v in group.variants:
        w = v.whatif
        if w is None or not v.fits or w.matmul_ms is None or w.host_issue_ms is None or not w.launches_per_step:
            continue
        rows.append(RefVariant(v.variant, v.step_ms, w.host_issue_ms, w.launches_per_step, w.matmul_ms, w.other_ms,
                               w.optimizer_device_ms, w.optimizer_launches, w.optimizer_host_ms))
    if not rows:
        raise UserError(f"{source}: no profiled model variant with a trace-based what-if (was it run with --no-profile?)")
    name = facts.model.name if facts.model is not None else ""
    return Reference(source=source, device_name=env.device_name, bf16_tflops=env.peak_bf16_tflops,
                     fp32_tflops=env.peak_fp32_tflops, bandwidth_gbs=env.memory_bandwidth_gbs,
                     launch_us=g.launch.launch_us, model=name, n_layers=group.n_layers, seq_len=group.seq_len,
                     batch_size=group.batch_size, dtype=group.dtype, variants=rows)


def load_reference(run_dir: str | Path | None) -> Reference:
    """The built-in H200 reference, or a granularity run directory (`--granularity-run`)."""
    if run_dir is None:
        return H200_REFERENCE
    from gcdoctor.facts import Facts
    from gcdoctor.trace.launch_response import fill_whatif
    path = Path(run_dir)
    if not (path / "facts.json").is_file():
        raise UserError(f"--granularity-run {run_dir}: not a gcdoctor run directory (no facts.json)")
    try:
        facts = Facts.load(path / "facts.json")
    except (ValueError, TypeError, KeyError) as exc:
        raise UserError(f"--granularity-run {run_dir}: not a valid gcdoctor facts file ({exc})") from None
    if facts.granularity is not None and not any(
            v.whatif is not None for grp in facts.granularity.groups for v in grp.variants):
        fill_whatif(facts, path)
    return reference_from_facts(facts, str(run_dir))


@dataclass
class Prediction:
    variant: str
    launch_us: float
    device_ms: float
    host_ms: float
    launches: float
    step_ms: float
    break_even_launch_us: float | None
    overhead_pct: float | None = None  # over "none" at the same launch cost


def _peak(fp32_tflops: float | None, bf16_tflops: float | None, dtype: str, what: str) -> float:
    v = fp32_tflops if dtype == "fp32" else bf16_tflops
    if not v:
        raise UserError(f"{what}: no published {'fp32' if dtype == 'fp32' else 'bf16'} rate, so no step-time "
                        "prediction")
    return float(v)


def predict(ref: Reference, card: Any, model_spec: Any, ref_spec: Any, seq_len: int, batch_size: int,
            dtype: str, launch_us: list[float]) -> tuple[list[Prediction], dict[str, float]]:
    """Predictions per variant and launch cost, and the scale factors used."""
    peak = _peak(card.fp32_tflops, card.bf16_tflops, dtype, "the card")
    peak_ref = _peak(ref.fp32_tflops, ref.bf16_tflops, dtype, ref.device_name)
    if not card.memory_bandwidth_gbs or not ref.bandwidth_gbs:
        raise UserError("no published memory bandwidth for the card or the reference device: no step-time prediction")
    flops = model_spec.flops_per_token(seq_len) * batch_size * seq_len
    flops_ref = ref_spec.flops_per_token(ref.seq_len) * ref.batch_size * ref.seq_len
    act = model_spec.n_layers * model_spec.hidden_size * batch_size * seq_len
    act_ref = ref_spec.n_layers * ref_spec.hidden_size * ref.batch_size * ref.seq_len
    f = {"flops": flops / flops_ref, "activations": act / act_ref,
         "params": model_spec.param_count() / ref_spec.param_count(), "layers": model_spec.n_layers / ref_spec.n_layers,
         "compute": peak_ref / peak, "bandwidth": ref.bandwidth_gbs / card.memory_bandwidth_gbs}
    out: list[Prediction] = []
    for v in ref.variants:
        device = (v.matmul_ms * f["flops"] * f["compute"] + v.other_ms * f["activations"] * f["bandwidth"]
                  + v.optimizer_device_ms * f["params"] * f["bandwidth"])
        fb_launches = v.launches - v.optimizer_launches
        launches = fb_launches * f["layers"] + v.optimizer_launches * f["params"]
        # host work besides launching: what the host spent per step less its launches at the reference's cost
        # (a part may come out negative: multi-tensor launches cost the host less than the tiny launch measured)
        fb_work = v.host_issue_ms - v.optimizer_host_ms - fb_launches * ref.launch_us / 1e3
        opt_work = v.optimizer_host_ms - v.optimizer_launches * ref.launch_us / 1e3
        work = max(fb_work * f["layers"] + opt_work * f["params"], 0.0)
        rest = max(v.step_ms - max(v.matmul_ms + v.other_ms + v.optimizer_device_ms, v.host_issue_ms), 0.0)
        # the launch cost at which the host's issue time reaches the step (as the facts' break-even)
        be = (device + rest - work) * 1e3 / launches if launches else None
        for x in launch_us:
            host = work + launches * x / 1e3
            out.append(Prediction(v.variant, x, device, host, launches, max(device, host) + rest,
                                  None if be is None or be <= 0 else be))
    none = {p.launch_us: p.step_ms for p in out if p.variant == "none"}
    for p in out:
        if none.get(p.launch_us):
            p.overhead_pct = 100.0 * (p.step_ms / none[p.launch_us] - 1.0)
    return out, f


def resolve_card(device: str | None) -> Any:
    """The card `--device` names (a hardware preset, or a device name gcdoctor.model.hardware knows), or None
    for a device kind (cpu, cuda, musa) that names no card."""
    from gcdoctor.model import hardware
    if not device or device.partition(":")[0] in ("auto", "cpu", "cuda", "musa"):
        return None
    preset = getattr(hardware, "PRESETS", {}).get(device.lower())
    return preset or hardware.lookup(device)


def section(model_spec: Any, seq_len: int, dtype: str, device: str | None, launch_us: float | None = None,
            granularity_run: str | None = None, batch_size: int = 1) -> tuple[list[str], dict[str, Any] | None]:
    """plan's step-time lines and data for `device`, or ([], None) when it names no card."""
    from gcdoctor.model.registry import load_spec
    card = resolve_card(device)
    if card is None:
        if launch_us is not None or granularity_run is not None:
            raise UserError("--launch-us and --granularity-run need --device CARD (e.g. mtt-s4000) to predict "
                            "step times for")
        return [], None
    ref = load_reference(granularity_run)
    try:
        ref_spec = load_spec(ref.model, layers=ref.n_layers)
    except UserError as exc:
        raise UserError(f"the reference run's model {ref.model!r} cannot be loaded: {exc}") from None
    name = getattr(card, "name", "") or device
    same = ref.device_name and (ref.device_name.lower() in str(name).lower() or str(name).lower() in
                                ref.device_name.lower())
    if launch_us is not None:
        if not 0 < launch_us <= 100_000:
            raise UserError(f"--launch-us {launch_us:g}: use a launch cost between 0 and 100000 microseconds")
        points, how = [float(launch_us)], "given with --launch-us"
    elif same:
        points, how = [ref.launch_us], f"measured on this card ({ref.source})"
    else:
        points, how = list(WHATIF_LAUNCH_US), ("not known for this card: give --launch-us N, measured on the "
                                               "card by `gcdoctor diagnose --probes granularity`")
    preds, f = predict(ref, card, model_spec, ref_spec, seq_len, batch_size, dtype, points)
    data = {"card": name, "peak_tflops": _peak(card.fp32_tflops, card.bf16_tflops, dtype, "the card"), "bandwidth_gbs": card.memory_bandwidth_gbs,
            "launch_us": points, "launch_source": how, "reference": ref.source, "reference_device": ref.device_name,
            "reference_config": f"{ref.model}, {ref.n_layers} layers, seq {ref.seq_len}, batch {ref.batch_size}, "
                                f"{ref.dtype}", "batch_size": batch_size, "seq_len": seq_len, "scale": f,
            "predictions": [p.__dict__ for p in preds], "kind": "prediction"}
    return _render(data, preds), data


def _render(d: dict[str, Any], preds: list[Prediction]) -> list[str]:
    f = d["scale"]
    text = [
        f"Predicted step time per checkpointing granularity on {d['card']} (a prediction, not a measurement), "
        f"batch {d['batch_size']}, seq {d['seq_len']}.",
        f"Inputs: {d['peak_tflops']:g} TFLOP/s and {d['bandwidth_gbs']:g} GB/s published; launch cost "
        + ", ".join(f"{x:g}" for x in d["launch_us"]) + f" us ({d['launch_source']}); scaled from "
        f"{d['reference_device']}, {d['reference_config']} ({d['reference']}): device time x"
        f"{f['compute'] * f['flops']:.1f} for matrix kernels, x{f['bandwidth'] * f['activations']:.1f} for the rest, "
        f"x{f['bandwidth'] * f['params']:.1f} for the optimizer; launches x{f['layers']:g} (optimizer "
        f"x{f['params']:.2f}); the host CPU taken as the reference's, and the same share of peak reached.",
        "Step ms (vs none) per launch cost; break-even: the launch cost from which the host, not the device, "
        "sets the step.",
    ]
    lines = []
    for t in text:
        lines += textwrap.wrap(t, 78, subsequent_indent="  ")
    points = d["launch_us"]
    head = f"  {'variant':15s}" + "".join(f"{f'{x:g} us':>17s}" for x in points) + f"{'break-even':>12s}"
    lines.append(head)
    by = {(p.variant, p.launch_us): p for p in preds}
    for v in dict.fromkeys(p.variant for p in preds):
        cells = []
        for x in points:
            p = by[(v, x)]
            cells.append(f"{p.step_ms:>9,.0f} ({'—' if p.overhead_pct is None else f'{round(p.overhead_pct):+d}%':>5s})")
        be = by[(v, points[0])].break_even_launch_us
        lines.append(f"  {v:15s}" + "".join(f"{c:>17s}" for c in cells)
                     + f"{'—' if be is None else f'{be:,.0f} us':>12s}")
    return lines
