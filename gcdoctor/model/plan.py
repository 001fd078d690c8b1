"""`gcdoctor plan`: predicted peak memory versus batch size, with and without layer
checkpointing, the largest batch each way, and what does not fit and why. No torch, no
device: it sizes batches for cards you do not have. Defaults are the ones `diagnose` runs,
so a prediction can be checked against a measurement of the same configuration.
"""
from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from gcdoctor.model import fitting as F
from gcdoctor.model import memory as M
from gcdoctor.errors import UserError
from gcdoctor.model.registry import load_spec

DEFAULT_SEQ_LEN = 4096
DEFAULT_DTYPE = "bf16"
DEFAULT_OPTIMIZER = "adamw"
GC_MODES = ("no_gc", "gc")
WIDTH = 80  # the text fits an 80-column terminal
_LABEL = {"no_gc": "no GC", "gc": "GC"}

_UNITS = {
    "": 1, "b": 1,
    "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
    "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40,
}
_MEMORY_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_memory(text: str | int | float) -> int:
    """Bytes of device memory: gcdoctor.config.parse_size (the one size parser), at least 1 MiB."""
    from gcdoctor.config import parse_size
    return parse_size(text, "--device-memory", minimum=2 ** 20)


def _gib(n: int | float) -> str:
    """GiB with one decimal; MiB or KiB below 1 GiB so small models do not read as 0.0."""
    from gcdoctor.units import fmt_bytes
    return fmt_bytes(n, gib_digits=1)


_CATEGORY = {"params": "params", "optimizer_states": "optimizer states", "grads": "grads",
             "activations": "activations", "logits_loss": "logits and fp32 loss", "transients": "transients",
             "workspace": "kernel workspaces", "inputs": "inputs"}


def _card(nbytes: int) -> str:
    """The card's size as the user would say it: GB when it is a whole number of GB."""
    if nbytes % 10 ** 9 == 0:
        return f"{nbytes // 10 ** 9} GB"
    if nbytes % M.GiB == 0:
        return f"{nbytes // M.GiB} GiB"
    return f"{nbytes / 1e9:.1f} GB"


def _modes(gc_modes: Any) -> list[str]:
    if gc_modes is None:
        return list(GC_MODES)
    items = gc_modes.split(",") if isinstance(gc_modes, str) else list(gc_modes)
    aliases = {"no_gc": "no_gc", "nogc": "no_gc", "off": "no_gc", "gc": "gc", "on": "gc"}
    out = []
    for item in items:
        key = str(item).strip().lower().replace("-", "_")
        if key not in aliases:
            raise UserError(f"--gc {item!r}: use no_gc, gc or both (no_gc,gc)")
        if aliases[key] not in out:
            out.append(aliases[key])
    if not out:
        raise UserError("--gc: give at least one of no_gc, gc")
    return [m for m in GC_MODES if m in out]


def _table_batches(max_by_mode: dict[str, int]) -> list[int]:
    """Powers of two up to past the largest fitting batch, plus each largest batch and the next."""
    top = max([b for b in max_by_mode.values()] + [1])
    batches = {1, 2}
    b = 1
    while b <= 2 * top:
        batches.add(b)
        b *= 2
    for mb in max_by_mode.values():
        if mb:
            batches.update((mb, mb + 1))
    return sorted(batches)[:16]


def _why_not(pred: M.Prediction, usable: int) -> str:
    """One line: what makes this configuration's peak exceed the usable memory."""
    st = pred.states
    if st.total_bytes > usable:
        return (f"model states alone ({_gib(st.total_bytes)}: params {_gib(st.param_bytes)}, grads "
                f"{_gib(st.grad_bytes)}, optimizer {_gib(st.optimizer_state_bytes + st.master_weight_bytes)}) "
                f"exceed the usable {_gib(usable)}")
    peak = pred.peak
    parts = sorted(peak.breakdown.items(), key=lambda kv: -kv[1])
    named = ", ".join(f"{_CATEGORY.get(k, k)} {_gib(v)}" for k, v in parts if v >= 0.05 * peak.bytes)
    if peak.bytes <= usable:
        return (f"peak {_gib(peak.bytes)} at {peak.where} ({named}) is within the usable {_gib(usable)}, but the "
                "replayed allocator cannot place it: cached blocks and pages in pieces (fragmentation)")
    line = f"peak {_gib(peak.bytes)} at {peak.where} ({named}) exceeds the usable {_gib(usable)}"
    if peak.breakdown.get("logits_loss", 0) > peak.breakdown.get("activations", 0):
        line += "; the fp32 loss, not the layers, sets it (a fused or chunked cross-entropy removes most of it)"
    elif peak.where == "optimizer step":
        line += "; the optimizer step sets it (grads plus foreach AdamW's temporary copy)"
    return line


def _from_args(args: Any) -> dict[str, Any]:
    """run_plan's keyword arguments from the CLI's argparse namespace (`gcdoctor plan ...`)."""
    master = getattr(args, "master_weights", None)
    return {
        "model": getattr(args, "model", None), "device_memory": getattr(args, "device_memory", None),
        "seq_len": getattr(args, "seq_len", None), "dtype": getattr(args, "dtype", None),
        "optimizer": getattr(args, "optimizer", None), "layers": getattr(args, "layers", None),
        "gc_modes": getattr(args, "gc", None), "as_json": bool(getattr(args, "json", False)),
        "device": getattr(args, "device", None) or "auto",
        "master_weights": master in (True, "fp32"), "batch_sizes": getattr(args, "batch_sizes", None),
        # --device as typed: a named card (a hardware preset) also gets the step-time prediction
        "card": getattr(args, "device", None), "launch_us": getattr(args, "launch_us", None),
        "granularity_run": getattr(args, "granularity_run", None),
        "shard": getattr(args, "shard", None), "reshard_after_forward": not getattr(args, "no_reshard", False),
    }


def _device(device: str | None) -> tuple[str, Any]:
    """(backend kind, preset or None) from --device: cpu, cuda[:N], musa[:N], auto, or a card name."""
    from gcdoctor.model import hardware
    dev = (device or "auto").strip().lower()
    kind = dev.partition(":")[0]
    if kind == "auto":
        return "cuda", None
    if kind in M.DEVICE_KINDS:
        return kind, None
    spec = hardware.preset(dev)  # a one-line error naming the cards otherwise
    return spec.kind, spec


def _batch_list(batch_sizes: Any) -> list[int] | None:
    if batch_sizes is None:
        return None
    items = batch_sizes.split(",") if isinstance(batch_sizes, str) else list(batch_sizes)
    try:
        out = sorted({int(str(x).strip()) for x in items if str(x).strip()})
    except ValueError:
        raise UserError(f"--batch-sizes {batch_sizes!r}: expected comma-separated positive integers") from None
    if not out or out[0] < 1:
        raise UserError(f"--batch-sizes {batch_sizes!r}: expected comma-separated positive integers")
    from gcdoctor.config import MAX_BATCH
    if out[-1] > MAX_BATCH:  # the bound diagnose holds to
        raise UserError(f"--batch-sizes: {out[-1]:,} is beyond {MAX_BATCH:,}, the largest batch gcdoctor sizes")
    return out


def run_plan(model: Any = None, device_memory: str | int | None = None, seq_len: int | None = None,
             dtype: str | None = None, optimizer: str | None = None, layers: int | None = None,
             gc_modes: Any = None, as_json: bool = False, device: str = "cuda", master_weights: bool = False,
             batch_sizes: Any = None, card: str | None = None, launch_us: float | None = None,
             granularity_run: str | None = None, shard: int | None = None,
             reshard_after_forward: bool = True) -> tuple[str, dict]:
    """Predict peak memory vs batch size on a card; return (text, data).

    `device` is cpu, cuda, musa or a card of gcdoctor.model.hardware.PRESETS (`mtt-s4000`, `h200`, ...),
    whose memory is used unless `device_memory` is given. `model` may also be the CLI's argparse
    namespace. Defaults are diagnose's: on a device llama3-8b, bf16, seq 4096; on the CPU
    tiny-llama, fp32, seq 128; AdamW. `text` is the human table (or the JSON text when
    `as_json`); `data` always holds the same content as a dict, including `max_batch_no_gc` and
    `max_batch_gc` (the default caching allocator, a fresh process; 0: not even batch 1 fits;
    None: that mode was not asked for), `max_batch_by_allocator`, and `fit_options` when
    checkpointing cannot make batch 1 fit.
    """
    if model is not None and hasattr(model, "device_memory"):
        return run_plan(**_from_args(model))
    device_arg = device
    device, preset = _device(device)
    on_cpu = device == "cpu"
    model, seq_len, dtype, optimizer = _defaults(on_cpu, model, seq_len, dtype, optimizer)
    _check_args(device_memory, preset, seq_len, shard, batch_sizes, launch_us, layers, dtype, optimizer)
    modes = _modes(gc_modes)
    capacity = parse_memory(device_memory) if device_memory is not None else preset.capacity_bytes
    spec = load_spec(model, layers)
    sizing = _Sizing(spec, seq_len, dtype, optimizer, device, master_weights)
    sizing.workload(1, "no_gc").check()
    usable = M.usable_bytes(capacity, device)
    allocators = ("default",) if on_cpu else M.ALLOCATORS
    best_by = {a: {m: F.max_batch_fresh(spec, capacity, seq_len, dtype, optimizer, m == "gc", device, a,
                                        master_weights=master_weights) for m in modes} for a in allocators}
    batches = _batch_list(batch_sizes) or _table_batches({f"{a}/{m}": v for a, by in best_by.items()
                                                          for m, v in by.items()})
    rows = [_point(sizing, b, m, allocators, capacity, usable) for b in batches for m in modes]
    reasons = []
    for m in modes:
        b = best_by[allocators[-1]][m] + 1
        reasons.append({"variant": m, "batch_size": b, "why": _why_not(sizing.predict(b, m), usable)})
    data = _plan_data(sizing, preset, capacity, usable, sizing.predict(1, modes[0]))
    data.update({"max_batch_no_gc": best_by["default"].get("no_gc"), "max_batch_gc": best_by["default"].get("gc"),
                 "max_batch_by_allocator": best_by, "points": rows, "does_not_fit": reasons,
                 "exact": spec.model_type in M.EXACT_TYPES, "fit_options": []})
    if not any(best_by[allocators[-1]].values()) and not master_weights:
        from gcdoctor.facts.serde import to_dict
        opts = M.fit_options(spec, seq_len, usable, dtype, device)
        data["fit_options"] = [dict(to_dict(o), fits=o.fits) for o in opts]
    step_lines = _step_time(data, spec, seq_len, dtype, card or (device_arg if preset is not None else None),
                            launch_us, granularity_run)
    if shard is not None:  # states sharded over N devices: a rank's view (gcdoctor.model.sharding)
        from gcdoctor.model import sharding
        data["sharded"] = sharding.plan_section(spec, usable, seq_len, dtype, optimizer, device, master_weights,
                                                shard, reshard_after_forward, modes, batches)
    if as_json:
        return json.dumps(data, indent=1), data
    text = _render(data, modes, batches, rows, allocators)
    if shard is not None:
        from gcdoctor.model import sharding
        text += "\n" + "\n".join(sharding.render_plan(data["sharded"], modes, _LABEL))
    return text + "".join("\n" + line for line in step_lines), data


def _defaults(on_cpu: bool, model: Any, seq_len: Any, dtype: str | None,
              optimizer: str | None) -> tuple[Any, Any, str, str]:
    """diagnose's defaults for what is not given: on a device llama3-8b, bf16, seq 4096; on the CPU
    tiny-llama, fp32, seq 128; AdamW."""
    model = model or ("tiny-llama" if on_cpu else "llama3-8b")
    if seq_len is None:
        seq_len = 128 if on_cpu else DEFAULT_SEQ_LEN
    return model, seq_len, dtype or ("fp32" if on_cpu else DEFAULT_DTYPE), optimizer or DEFAULT_OPTIMIZER


def _check_args(device_memory: Any, preset: Any, seq_len: Any, shard: Any, batch_sizes: Any, launch_us: Any,
                layers: Any, dtype: str, optimizer: str) -> None:
    """run_plan's one-line refusals, in the order it gives them, before any sizing."""
    if device_memory is None and preset is None:
        raise UserError("--device-memory is required (e.g. 48GB, 80GiB or 141e9), or name a card with --device "
                        "(e.g. mtt-s4000, h200)")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise UserError(f"--seq-len {seq_len!r}: must be a positive integer")
    if shard is not None and not (isinstance(shard, int) and 1 <= shard <= 4096):  # diagnose's --nproc bound
        raise UserError(f"--shard {shard!r}: use 1 to 4,096 devices")
    _batch_list(batch_sizes)  # refused before the seconds of sizing, not after
    if launch_us is not None and not (isinstance(launch_us, (int, float)) and 0 < launch_us <= 100_000):
        raise UserError(f"--launch-us {launch_us:g}: use a launch cost between 0 and 100000 microseconds"
                        if isinstance(launch_us, (int, float)) else f"--launch-us {launch_us!r}: expected a number")
    from gcdoctor.config import MAX_LAYERS, MAX_SEQ_LEN
    if seq_len > MAX_SEQ_LEN:  # the bound diagnose holds to
        raise UserError(f"--seq-len {seq_len:,}: use at most {MAX_SEQ_LEN:,} tokens")
    if layers is not None and not (isinstance(layers, int) and 1 <= layers <= MAX_LAYERS):
        raise UserError(f"--layers {layers!r}: use 1 to {MAX_LAYERS:,} layers")
    if dtype not in M.DTYPE_BYTES:
        raise UserError(f"--dtype {dtype!r}: use one of {', '.join(M.DTYPE_BYTES)}")
    if optimizer not in M.OPTIMIZERS:
        raise UserError(f"--optimizer {optimizer!r}: use one of {', '.join(M.OPTIMIZERS)}")


@dataclass(frozen=True)
class _Sizing:
    """What every predicted point of a plan shares: the model and the step's settings."""

    spec: Any
    seq_len: int
    dtype: str
    optimizer: str
    device: str
    master_weights: bool

    def workload(self, batch: int, mode: str) -> M.Workload:
        return M.Workload(batch, self.seq_len, self.dtype, self.optimizer, mode == "gc", self.device,
                          self.master_weights)

    def predict(self, batch: int, mode: str) -> M.Prediction:
        return M.predict(self.spec, self.workload(batch, mode))


def _point(sizing: _Sizing, b: int, m: str, allocators: tuple[str, ...], capacity: int,
           usable: int) -> dict[str, Any]:
    """One row of the table: the predicted peak of batch `b` in mode `m`, and whether each allocator fits it."""
    p = sizing.predict(b, m)
    row: dict[str, Any] = {"batch_size": b, "variant": m, "peak_bytes": p.peak_bytes, "peak_phase": p.peak_phase,
                           "peak_where": p.peak.where,
                           "activations_after_forward_bytes": p.activations_after_forward_bytes}
    for a in allocators:
        key = "fits" if a == "default" else f"fits_{a}"
        if p.peak_bytes > usable:
            row[key] = False  # no allocator fits more than it can reserve
        else:
            row[key] = F.fit(sizing.spec, sizing.workload(b, m), capacity, a).fits
    return row


def _card_data(preset: Any) -> dict[str, Any] | None:
    if preset is None:
        return None
    return {"name": preset.name, "source": preset.source, "notes": preset.notes, "bf16_tflops": preset.bf16_tflops,
            "memory_bandwidth_gbs": preset.memory_bandwidth_gbs, "pcie_gbs": preset.pcie_gbs}


def _margins(on_cpu: bool) -> dict[str, Any]:
    if on_cpu:
        return {"context_bytes": 0, "context_source": None, "allocator": None}
    return {"context_bytes": M.DEVICE_CONTEXT_BYTES, "context_source": M.CONTEXT_SOURCE,
            "allocator": "replayed for a fresh process (gcdoctor.model.allocator)"}


def _plan_data(sizing: _Sizing, preset: Any, capacity: int, usable: int, p1: M.Prediction) -> dict[str, Any]:
    """The plan's settings, card and per-model sizes (the keys before the batch results)."""
    spec, seq_len, dtype = sizing.spec, sizing.seq_len, sizing.dtype
    st = M.model_states(spec, dtype, sizing.optimizer, sizing.device, sizing.master_weights)
    return {
        "model": spec.name, "source": spec.source, "n_params": st.n_params, "n_layers": spec.n_layers,
        "seq_len": seq_len, "dtype": dtype, "optimizer": sizing.optimizer, "device": sizing.device,
        "card": _card_data(preset), "master_weights": sizing.master_weights,
        "device_memory_bytes": capacity, "usable_bytes": usable,
        "margins": _margins(sizing.device == "cpu"),
        "model_state_bytes": {"params": st.param_bytes, "grads": st.grad_bytes,
                              "optimizer_states": st.optimizer_state_bytes,
                              "master_weights": st.master_weight_bytes, "total": st.total_bytes},
        "per_sample_bytes": {"layer_activations": p1.layer_activation_bytes * spec.n_layers,
                             "checkpoint_residue": M.checkpoint_residue_bytes_per_token(spec, dtype)
                             * seq_len * spec.n_layers,
                             "loss_block": p1.loss_block_bytes},
    }


def _step_time(data: dict, spec: Any, seq_len: int, dtype: str, card: str | None, launch_us: float | None,
               granularity_run: str | None) -> list[str]:
    """Beside memory, the predicted step time per checkpointing granularity on a named card
    (gcdoctor/model/steptime.py); nothing for a device kind."""
    from gcdoctor.model import steptime
    lines, step = steptime.section(spec, seq_len, dtype, card, launch_us, granularity_run)
    if step is None:
        return []
    data["step_time"] = step
    if not data.get("max_batch_gc") and not data.get("max_batch_no_gc"):
        lines.append("  (no batch fits this card's memory with these settings: see above)")
    return [""] + lines


_MARK = {(True, True): " ", (False, True): "e", (False, False): "x", (True, False): "d"}


def _render(data: dict, modes: list[str], batches: list[int], rows: list[dict], allocators: tuple[str, ...]) -> str:
    ms = data["model_state_bytes"]
    ps = data["per_sample_bytes"]
    opt = {"adamw": "AdamW", "sgd": "SGD"}.get(data["optimizer"], data["optimizer"])
    card = data["card"]
    where = f"{card['name']}: " if card else ""
    lines = [
        f"gcdoctor plan: {data['model']} ({data['n_params'] / 1e9:.2f} B params, {data['n_layers']} layers), "
        f"{data['dtype']}, {opt}{' + fp32 master weights' if data['master_weights'] else ''}, "
        f"seq {data['seq_len']}",
        f"{where}card {_card(data['device_memory_bytes'])}"
        + ("" if _card(data["device_memory_bytes"]).endswith("GiB") else f" = {_gib(data['device_memory_bytes'])}")
        + "; the allocator "
        f"can reserve {_gib(data['usable_bytes'])}"
        + (f" (minus {data['margins']['context_bytes'] // M.MiB} MiB outside it, {data['margins']['context_source']})"
           if data["margins"]["context_bytes"] else ""),
        f"model states {_gib(ms['total'])}: params {_gib(ms['params'])} + grads {_gib(ms['grads'])} + "
        f"optimizer {_gib(ms['optimizer_states'] + ms['master_weights'])}",
        f"per sample: activations {_gib(ps['layer_activations'])} without GC, {_gib(ps['checkpoint_residue'])} "
        f"with GC; logits and fp32 loss {_gib(ps['loss_block'])}",
        "",
    ]
    head = f"{'batch':>6}" + "".join(f"  {('peak ' + _LABEL[m]):>18}" for m in modes)
    lines.append(head)
    by = {(r["batch_size"], r["variant"]): r for r in rows}
    for b in batches:
        cells = []
        for m in modes:
            r = by[(b, m)]
            mark = _MARK[(r["fits"], r.get("fits_expandable", r["fits"]))]
            cells.append(f"  {_gib(r['peak_bytes']):>16} {mark}")
        lines.append(f"{b:>6}" + "".join(cells))
    if len(allocators) > 1:
        lines.append("(x: does not fit; e: fits only with expandable_segments:True; d: only with the default "
                     "allocator; peaks are allocated bytes; fits replay the caching allocator"
                     + (", assumed the same as CUDA's for MUSA)" if data["device"] == "musa" else ")"))
    else:
        lines.append("(x: does not fit; peaks include params, grads, optimizer states and every transient)")
    lines.append("")
    for a in allocators:
        label = "" if len(allocators) == 1 else (" (default allocator)" if a == "default" else
                                                 " (expandable_segments:True)")
        for m in modes:
            mb = data["max_batch_by_allocator"][a][m]
            lines.append(f"largest batch {_LABEL[m]:>5}{label}: " + (str(mb) if mb else "none fits"))
    lines.append("")
    for r in data["does_not_fit"]:
        lines.append(f"{_LABEL[r['variant']]} batch {r['batch_size']}: {r['why']}")
    if data["fit_options"]:
        lines += ["", "what would fit (predicted; largest batches from the allocated peak, with GC / without):"]
        for o in data["fit_options"]:
            lines.append(f"  {o['label']}: peak {_gib(o['peak_bytes_batch1_gc'])} at batch 1 with GC; largest "
                         f"batch {o['max_batch_gc'] or 'none'} / {o['max_batch_no_gc'] or 'none'}"
                         + (f"; {o['host']}" if o["host"] else ""))
            lines.append(f"      {o['settings']}")
    if not data["exact"]:
        lines.append(f"note: model type of {data['model']} is approximated by a Llama layer")
    return "\n".join(textwrap.fill(line, WIDTH, subsequent_indent="      ", break_on_hyphens=False)
                     if len(line) > WIDTH else line for line in lines)
