"""GC060 sharded-states."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.rules._dist import DTYPE_BYTES, setup, size, sweep_rows
from gcdoctor.rules._sweep import gib


class ShardedStatesRule(Rule):
    """What it checks:
    In a diagnose over N ranks, whether each rank holds 1/N of the model: its parameter shards
    against the unsharded parameters divided by N, and the model states (parameters, gradients,
    optimizer states) and peak memory of every rank at the sweep's comparison point, with their
    spread across ranks.

    Why it matters:
    Sharding is what makes room when the model states fill one device; checkpointing then only has
    to fit the activations of a rank's batch. A module left out of the sharding (no fully_shard on
    it, a parameter ZeRO-3 keeps whole) is replicated on every rank and takes the room sharding was
    meant to free; ranks that differ in memory hit their limit at different batches.

    Evidence:
    Parameters unsharded (the model's parameter count times the dtype's bytes) and divided by N,
    every rank's parameter shards and model states (largest and smallest rank), and peak memory
    per rank at that point.

    How to fix:
    Shard every large module: `fully_shard(layer)` on each decoder layer and `fully_shard(model)`
    on the root (the embedding and LM head are the largest tensors), or lower ZeRO-3's
    stage3_param_persistence_threshold. Padding to a multiple of N rows is expected and small.
    """

    code = "GC060"
    slug = "sharded-states"
    title = "Model states per rank under sharding"
    requires = ("distributed", "sweep.measurements", "model")
    topic = "distributed"
    defaults = {
        # FSDP2 pads each tensor's dim 0 to a multiple of N and ZeRO-3 keeps tensors under 1e5
        # elements whole: together a few percent for Llama-class models (gcdoctor.model.sharding); more
        # than 10% above 1/N is a module that is not sharded
        "max_excess_pct": 10.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        d, model = facts.distributed, facts.model
        if d is None or model is None:
            return self.inconclusive(facts.missing_reason("distributed" if d is None else "model"))
        found = sweep_rows(facts)
        if found is None:
            return self.inconclusive("no sweep measurement fit on every rank")
        variant, batch, rows = found
        rows = [r for r in rows if r.param_bytes is not None and r.model_state_bytes is not None]
        if not rows:
            return self.inconclusive("the ranks' model states were not measured")
        e = DTYPE_BYTES.get(model.dtype)
        if not e or not model.n_params:
            return self.inconclusive(f"the model's dtype {model.dtype!r} or parameter count is unknown")
        n = d.world_size
        full = model.n_params * e
        fair = full / n
        top = max(rows, key=lambda r: r.param_bytes)
        states = [r.model_state_bytes for r in rows]
        peaks = [r.peak_allocated_bytes for r in rows if r.peak_allocated_bytes is not None]
        excess = 100.0 * (top.param_bytes / fair - 1.0)
        ev = [Evidence("setup", setup(d)), Evidence("parameters unsharded", gib(full), "GiB"),
              Evidence(f"parameters / {n}", gib(fair), "GiB"),
              Evidence(f"largest rank's parameters (rank {top.rank})", gib(top.param_bytes), "GiB"),
              Evidence("above 1/N", excess, "%"),
              Evidence("model states per rank, largest", gib(max(states)), "GiB"),
              Evidence("model states per rank, smallest", gib(min(states)), "GiB")]
        if peaks:
            ev += [Evidence(f"peak per rank at {variant} batch {batch}, largest", gib(max(peaks)), "GiB"),
                   Evidence(f"peak per rank at {variant} batch {batch}, smallest", gib(min(peaks)), "GiB")]
        if excess > t["max_excess_pct"]:
            return self.fired(
                "warning", f"Rank {top.rank} holds {excess:.0f}% more parameters than 1/{n} of the model: "
                "part of it is not sharded", ev,
                f"Each of {n} ranks should hold about {size(fair)} of the {size(full)} of parameters; rank "
                f"{top.rank} holds {size(top.param_bytes)}. A replicated module takes "
                "on every rank the room sharding was meant to free for activations.",
                "Shard every decoder layer and the root (fully_shard(layer) for each layer, then "
                "fully_shard(model)); with ZeRO-3, lower stage3_param_persistence_threshold.",
                line=f"rank {top.rank} holds {excess:.0f} % more parameters than 1/{n}: part is not sharded")
        peak = f", peak {size(max(peaks))}" if peaks else ""
        if n == 1:
            return self.passed(f"One rank holds the whole model: {size(max(states))} of model states (world size 1: "
                               f"nothing to shard){peak.replace(', peak', '; peak')} at batch {batch}", ev,
                               line=f"world size 1: {size(max(states))} of states{peak} at batch {batch}")
        return self.passed(
            f"Model states are sharded {n} ways: {size(max(states))} per rank ({size(top.param_bytes)} of "
            f"parameters, 1/{n} of {size(full)}){peak.replace(', peak', '; peak')} at batch {batch}", ev,
            line=f"states sharded {n} ways: {size(max(states))} per rank{peak} at batch {batch}")
