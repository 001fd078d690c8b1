"""GC004 model-states-dominate."""
from __future__ import annotations

from gcdoctor.engine import Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.rules._sweep import gib


class ModelStatesDominateRule(Rule):
    """What it checks:
    The share of the device's memory taken by model states: parameters, gradients and optimizer
    states, measured from the tensors themselves after a full step.

    Why it matters:
    Checkpointing only shrinks activations. When parameters, gradients and AdamW's two moments
    fill most of the card (8 bytes/param in pure bf16, 16 with fp32 master weights: Llama-3-8B
    needs 60 to 120 GiB before any activation), no granularity of checkpointing makes room.

    Evidence:
    Parameter, gradient and optimizer-state bytes, their sum, the device's memory (or the
    injected limit) and the share.

    How to fix:
    Shard states across devices (ZeRO-1/2/3, FSDP), offload optimizer states to the host
    (ZeRO-Offload; watch the offload verdict), use an 8-bit or factored optimizer, train adapters
    (LoRA) instead of all weights.
    """

    code = "GC004"
    slug = "model-states-dominate"
    title = "Model states dominate"
    requires = ("sweep.measurements",)
    topic = "memory"
    defaults = {
        # above half the card for states alone, activations compete for the rest
        "max_state_share_pct": 50.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        m = next((m for m in facts.sweep.measurements if m.fits and m.model_state_bytes is not None), None)
        if m is None:
            return self.inconclusive("no measurement completed a full step")
        total = facts.environment.total_memory_bytes
        if not total:
            return self.inconclusive("the device's memory size is unknown (on the CPU, give --memory-limit)")
        states = m.model_state_bytes
        share = 100.0 * states / total
        ev = [Evidence("parameters", gib(m.param_bytes), "GiB"), Evidence("gradients", gib(m.grad_bytes), "GiB"),
              Evidence("optimizer states", gib(m.optimizer_state_bytes), "GiB"),
              Evidence("model states", gib(states), "GiB"), Evidence("device memory", gib(total), "GiB"),
              Evidence("share of device memory", share, "%")]
        if share > t["max_state_share_pct"]:
            return self.fired(
                "critical" if share >= 100 else "warning",
                f"Model states take {share:.0f}% of the device's memory: checkpointing cannot free that",
                ev, "Checkpointing only shrinks activations; parameters, gradients and optimizer states stay.",
                "Shard states (ZeRO/FSDP), offload the optimizer (ZeRO-Offload), use an 8-bit optimizer, or train "
                "adapters (LoRA).", line=f"model states take {share:.0f} % of the device: checkpointing cannot free it")
        return self.passed(f"Model states take {share:.0f}% of the device's memory", ev)
