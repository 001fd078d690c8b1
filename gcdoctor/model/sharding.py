"""Model states per rank when they are sharded over N devices (FSDP2, DeepSpeed ZeRO-3), and the
per-rank peak that follows from an unsharded prediction. No torch: `gcdoctor plan --shard N` sizes
a sharded job before it runs, and the sharded-states rule checks a measured one against it.

Per parameter tensor (the model's exact shapes, gcdoctor.model.memory's layout):
- FSDP2 shards dim 0 and pads it: every rank stores ceil(dim0 / N) rows (torch's FSDPParam pads
  the local shard so that all-gather inputs are equal; the DTensor is a view of the unpadded part).
- ZeRO-3 partitions the flattened tensor into N equal, padded pieces; tensors under
  stage3_param_persistence_threshold elements (DeepSpeed's default 1e5) stay whole on every rank.
Gradients and optimizer states follow their parameter. Transient: the gathered (unsharded)
parameters. The units are gcdoctor's FSDP2 wrapping (probes/_sharding.py): one per decoder layer,
and the root (embedding, final norm, LM head), which stays gathered through the whole forward (its
embedding opens it, its LM head closes it) and again through the backward. With
reshard_after_forward (FSDP2's default, ZeRO-3's release) a layer is gathered for its forward and
again for its backward: the root, the running and the prefetched layer, plus one unit's unsharded
gradients before its reduce-scatter, are live at once. Without it every unit stays gathered from
its forward to its backward: the whole model's parameters, plus one unit's gradients.
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any

from gcdoctor.model import memory as M
from gcdoctor.errors import UserError

FSDP2, ZERO3 = "fsdp2", "zero3"
STRATEGIES = (FSDP2, ZERO3)
ZERO3_PERSISTENCE_THRESHOLD = 100_000  # DeepSpeed stage3_param_persistence_threshold default (elements)


@dataclass(frozen=True)
class Tensor:
    unit: str  # "root" or "layer<i>"
    rows: int  # dim 0
    numel: int


def param_tensors(spec: Any) -> list[Tensor]:
    """Every parameter tensor of the model as built, with its FSDP unit: the same shapes as
    gcdoctor.model.memory's parameter count (biases as tensors of their own)."""
    d = M._dims(spec, M.Workload(1, 1))
    out = [Tensor("root", d.V, d.V * d.h)]  # embedding [V, h]
    for i in range(d.L):
        u = f"layer{i}"
        mats = [(d.q, d.h), (d.kv, d.h), (d.kv, d.h), (d.h, d.q), (d.f, d.h), (d.f, d.h), (d.h, d.f)]
        out += [Tensor(u, r, r * c) for r, c in mats]  # q, k, v, o, gate, up, down: [out, in]
        if d.qkv_bias:
            out += [Tensor(u, d.q, d.q), Tensor(u, d.kv, d.kv), Tensor(u, d.kv, d.kv)]
        if d.o_bias:
            out.append(Tensor(u, d.h, d.h))
        if d.mlp_bias:
            out += [Tensor(u, d.f, d.f), Tensor(u, d.f, d.f), Tensor(u, d.h, d.h)]
        out += [Tensor(u, d.h, d.h), Tensor(u, d.h, d.h)]  # the two RMSNorm weights
    out.append(Tensor("root", d.h, d.h))  # final norm
    if not d.tied:
        out.append(Tensor("root", d.V, d.V * d.h))  # LM head [V, h]
    return out


def local_elements(t: Tensor, world_size: int, strategy: str = FSDP2) -> int:
    """Elements rank 0 (the fullest rank) stores of tensor `t`, padding included."""
    n = world_size
    if n == 1:
        return t.numel
    if strategy == FSDP2:
        return math.ceil(t.rows / n) * (t.numel // t.rows)
    if strategy == ZERO3:
        return t.numel if t.numel < ZERO3_PERSISTENCE_THRESHOLD else math.ceil(t.numel / n)
    raise UserError(f"sharding {strategy!r}: use one of {', '.join(STRATEGIES)}")


@dataclass
class ShardedStates:
    """Model states one rank holds, and the gathered parameters it holds for a while."""

    world_size: int
    strategy: str
    reshard_after_forward: bool
    unsharded: M.ModelStates
    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    master_weight_bytes: int
    unit_bytes: int  # the largest unit's parameters, gathered
    gathered_bytes: int  # transient: gathered parameters and unsharded gradients live at once

    @property
    def total_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optimizer_state_bytes + self.master_weight_bytes

    def fraction(self, category: str) -> float:
        """Per-rank bytes over unsharded bytes of one category of gcdoctor.model.memory's breakdown."""
        u = self.unsharded
        pairs = {"params": (self.param_bytes, u.param_bytes), "grads": (self.grad_bytes, u.grad_bytes),
                 "optimizer_states": (self.optimizer_state_bytes + self.master_weight_bytes,
                                      u.optimizer_state_bytes + u.master_weight_bytes)}
        mine, full = pairs.get(category, (1, 1))
        return mine / full if full else 1.0


def shard_states(spec: Any, world_size: int, dtype: str = "bf16", optimizer: str = "adamw", device: str = "cuda",
                 master_weights: bool = False, strategy: str = FSDP2,
                 reshard_after_forward: bool = True) -> ShardedStates:
    """The per-rank model states of `spec` sharded over `world_size` devices."""
    if world_size < 1:
        raise UserError(f"--shard {world_size}: the number of devices must be positive")
    states = M.model_states(spec, dtype, optimizer, device, master_weights)
    e = M.DTYPE_BYTES[dtype]
    tensors = param_tensors(spec)
    local = sum(local_elements(t, world_size, strategy) for t in tensors)
    full = sum(t.numel for t in tensors)
    # optimizer states and master weights scale like the parameters they belong to (the CPU's
    # per-tensor `step` scalars stay whole: they are in the unsharded figure's remainder)
    share = local / full if full else 1.0
    units: dict[str, int] = {}
    for t in tensors:  # gathered size: N padded shards
        units[t.unit] = units.get(t.unit, 0) + local_elements(t, world_size, strategy) * world_size * e
    unit = max(units.values())
    layer = max((v for k, v in units.items() if k != "root"), default=0)
    if world_size == 1:
        gathered = 0  # one rank: the "gathered" parameters are its own shard
    elif reshard_after_forward:
        gathered = units["root"] + 2 * layer + unit
    else:
        gathered = sum(units.values()) + unit
    return ShardedStates(
        world_size=world_size, strategy=strategy, reshard_after_forward=reshard_after_forward, unsharded=states,
        param_bytes=local * e, grad_bytes=local * e, optimizer_state_bytes=round(states.optimizer_state_bytes * share),
        master_weight_bytes=round(states.master_weight_bytes * share), unit_bytes=unit, gathered_bytes=gathered)


def per_rank_peak(pred: M.Prediction, sh: ShardedStates) -> int:
    """A rank's peak from the unsharded prediction of the same per-rank batch: in each phase's
    peak the state categories are scaled to the rank's shards and the gathered units added.
    First order: the unsharded timeline is not replayed with sharded states (the peak phase is
    the larger of the two adjusted ones); transients other than the gathered units are kept whole,
    which overestimates the optimizer step's."""
    best = 0
    for peak in (pred.forward, pred.backward, pred.optimizer):
        b = peak.bytes
        for cat in ("params", "grads", "optimizer_states"):
            b -= round(peak.breakdown.get(cat, 0) * (1.0 - sh.fraction(cat)))
        best = max(best, b + (sh.gathered_bytes if peak is not pred.optimizer else 0))
    return best


def max_batch_per_rank(spec: Any, limit_bytes: int, seq_len: int, sh: ShardedStates, dtype: str = "bf16",
                       optimizer: str = "adamw", gc: bool = False, device: str = "cuda",
                       master_weights: bool = False, cap: int = 1 << 16) -> int:
    """The largest per-rank batch whose per-rank peak fits `limit_bytes` (0: not even batch 1)."""
    def fits(b: int) -> bool:
        return per_rank_peak(M.predict(spec, M.Workload(b, seq_len, dtype, optimizer, gc, device, master_weights)),
                             sh) <= limit_bytes

    return M.largest_fitting(fits, cap)


# -- gcdoctor plan --shard N ---------------------------------------------------------------------------

def _size(n: int | float) -> str:
    return f"{n / M.GiB:.1f} GiB" if abs(n) >= M.GiB else f"{n / M.MiB:.1f} MiB"


def plan_section(spec: Any, usable: int, seq_len: int, dtype: str, optimizer: str, device: str,
                 master_weights: bool, world_size: int, reshard_after_forward: bool, modes: list[str],
                 batches: list[int], strategy: str = FSDP2) -> dict[str, Any]:
    """What `plan --shard N` adds: a rank's model states, its gathered transient, its predicted peak
    at each tabulated per-rank batch and its largest per-rank batch, each way."""
    sh = shard_states(spec, world_size, dtype, optimizer, device, master_weights, strategy, reshard_after_forward)
    points = []
    for b in batches:
        for mode in modes:
            peak = per_rank_peak(M.predict(spec, M.Workload(b, seq_len, dtype, optimizer, mode == "gc", device,
                                                             master_weights)), sh)
            points.append({"batch_size": b, "variant": mode, "peak_bytes": peak, "fits": peak <= usable})
    best = {mode: max_batch_per_rank(spec, usable, seq_len, sh, dtype, optimizer, mode == "gc", device,
                                     master_weights) for mode in modes}
    return {
        "world_size": world_size, "strategy": strategy, "reshard_after_forward": reshard_after_forward,
        "per_rank_state_bytes": {"params": sh.param_bytes, "grads": sh.grad_bytes,
                                 "optimizer_states": sh.optimizer_state_bytes,
                                 "master_weights": sh.master_weight_bytes, "total": sh.total_bytes},
        "gathered_bytes": sh.gathered_bytes, "unit_bytes": sh.unit_bytes,
        "max_batch_per_rank": best, "points": points,
        "method": "each phase's unsharded peak with its states scaled to a rank's shards, plus the gathered "
                  "units (first order: the timeline is not replayed with sharded states)",
    }


def render_plan(sec: dict[str, Any], modes: list[str], label: dict[str, str]) -> list[str]:
    st = sec["per_rank_state_bytes"]
    n = sec["world_size"]
    how = "FSDP2" if sec["strategy"] == FSDP2 else "ZeRO-3"
    keep = "" if sec["reshard_after_forward"] else ", parameters kept gathered from forward to backward"
    lines = ["", *textwrap.wrap(f"sharded over {n} devices ({how}{keep}), per rank:", 80)]
    lines += textwrap.wrap(f"model states {_size(st['total'])}: params {_size(st['params'])} + grads "
                           f"{_size(st['grads'])} + optimizer {_size(st['optimizer_states'] + st['master_weights'])}; "
                           f"gathered parameters up to {_size(sec['gathered_bytes'])} at once", 80,
                           initial_indent="  ", subsequent_indent="  ")
    by = {(p["batch_size"], p["variant"]): p for p in sec["points"]}
    batches = sorted({p["batch_size"] for p in sec["points"]})
    lines.append(f"{'batch/rank':>10}" + "".join(f"  {('peak ' + label[m]):>18}" for m in modes))
    for b in batches:
        cells = "".join(f"  {_size(by[(b, m)]['peak_bytes']):>16} {' ' if by[(b, m)]['fits'] else 'x'}"
                        for m in modes)
        lines.append(f"{b:>10}" + cells)
    for m in modes:
        mb = sec["max_batch_per_rank"][m]
        lines.append(f"largest batch per rank {label[m]:>5}: " + (str(mb) if mb else "none fits"))
    lines += textwrap.wrap(f"({sec['method']})", 80)
    return lines
