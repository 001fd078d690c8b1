"""GC004 model-states-dominate."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.facts.views import memory_limit_bytes
from gcdoctor.rules._sweep import gib

OFFLOAD_VARIANT = "deepspeed-zero2-offload+gc"


class ModelStatesDominateRule(Rule):
    """What it checks:
    The share of the device's memory (or of --memory-limit) taken by model states: parameters,
    gradients and optimizer states, measured from the tensors themselves after a full step, or,
    when not even batch 1 completed a step, from the memory model. When the states alone exceed
    the device, what would fit instead, each predicted with its peak and largest batch.

    Why it matters:
    Checkpointing only shrinks activations. When parameters, gradients and AdamW's two moments
    fill most of the card (8 bytes/param in pure bf16, 16 with fp32 master weights: Llama-3-8B
    needs 60 to 120 GiB before any activation), no granularity of checkpointing makes room.

    Evidence:
    Parameter, gradient and optimizer-state bytes, their sum, the device's memory (or the
    injected limit) and the share; when the states do not fit, each alternative home for them
    (optimizer states on the host, 8-bit states, a lighter optimizer, LoRA, sharding over N
    devices) with its predicted peak at batch 1 and largest batch with checkpointing, and the
    offload probe's measurement of ZeRO-Offload beside its prediction.

    How to fix:
    Shard states across devices (ZeRO-1/2/3, FSDP), offload optimizer states to the host
    (ZeRO-Offload; watch the offload verdict), use an 8-bit or factored optimizer, train adapters
    (LoRA) instead of all weights.
    """

    code = "GC004"
    slug = "model-states-dominate"
    title = "Model states dominate"
    requires = ()
    topic = "memory"
    defaults = {
        # above half the card for states alone, activations compete for the rest
        "max_state_share_pct": 50.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        sweep, mm = facts.sweep, facts.memory_model
        m = next((m for m in (sweep.measurements if sweep else []) if m.fits and m.model_state_bytes is not None), None)
        limit = memory_limit_bytes(facts)
        total = limit or facts.environment.total_memory_bytes or (mm.capacity_bytes if mm else None)
        if not total:
            return self.inconclusive("the device's memory size is unknown (on the CPU, give --memory-limit)")
        where = "the memory limit" if limit else "the device's memory"
        if m is not None:
            params, grads, states_b = m.param_bytes, m.grad_bytes, m.optimizer_state_bytes
            assert params is not None and grads is not None and states_b is not None  # m has model_state_bytes
            source = "measured"
        elif mm is not None and mm.model_state_bytes:
            params, grads, states_b = mm.param_bytes, mm.grad_bytes, mm.optimizer_state_bytes
            source = "memory model (no step completed)"
        else:
            return self.inconclusive("no measurement completed a full step, and no memory model was computed")
        states = params + grads + states_b
        share = 100.0 * states / total
        ev = [Evidence("parameters", gib(params), "GiB"), Evidence("gradients", gib(grads), "GiB"),
              Evidence("optimizer states", gib(states_b), "GiB"),
              Evidence("model states", gib(states), "GiB"), Evidence(where, gib(total), "GiB"),
              Evidence("share", share, "%"), Evidence("model states from", source)]
        if share >= 100:
            fits = [o for o in (mm.fit_options if mm else []) if o.fits]
            for o in fits:
                ev.append(Evidence(o.label, f"peak {gib(o.peak_bytes_batch1_gc):.1f} GiB at batch 1 with GC; largest "
                                            f"batch {o.max_batch_gc} with GC, {o.max_batch_no_gc or 'none'} without"))
            measured = self._offload_measured(facts, mm)
            if measured:
                ev.append(measured)
            best = fits[0].label if fits else None
            return self.fired(
                "critical",
                f"Model states alone ({gib(states):.1f} GiB: params {gib(params):.1f}, grads {gib(grads):.1f}, "
                f"optimizer {gib(states_b):.1f}) exceed {where} ({gib(total):.1f} GiB): no batch fits, with or "
                "without checkpointing", ev,
                "Checkpointing only shrinks activations; parameters, gradients and optimizer states must all be on "
                "the device for a plain training step.",
                (f"Move the states: {best} fits a batch of {fits[0].max_batch_gc} with checkpointing (all the options "
                 "that fit are in the evidence, best first; `gcdoctor plan` lists them for other cards)."
                 if fits else "Shard the states over more devices (FSDP/ZeRO-3), or a smaller model."),
                line=f"model states {gib(states):.1f} GiB exceed {where} {gib(total):.1f} GiB"
                     + (f"; {fits[0].key} fits {fits[0].max_batch_gc}" if fits else ""))
        if share > t["max_state_share_pct"]:
            return self.fired(
                "warning",
                f"Model states take {share:.0f}% of {where}: checkpointing cannot free that",
                ev, "Checkpointing only shrinks activations; parameters, gradients and optimizer states stay.",
                "Shard states (ZeRO/FSDP), offload the optimizer (ZeRO-Offload), use an 8-bit optimizer, or train "
                "adapters (LoRA).", line=f"model states take {share:.0f} % of the device: checkpointing cannot free it")
        return self.passed(f"Model states take {share:.0f}% of {where}", ev)

    @staticmethod
    def _offload_measured(facts: Facts, mm) -> Evidence | None:
        """The offload probe's ZeRO-Offload point beside the memory model's prediction of it."""
        off = facts.offload
        row = off.get(OFFLOAD_VARIANT) if off is not None else None
        opt = next((o for o in (mm.fit_options if mm else []) if o.key == "zero-offload"), None)
        if off is None or row is None or row.measurement is None or not row.measurement.fits or opt is None:
            return None
        meas = row.measurement.peak_allocated_bytes
        pred = opt.predicted_probe_peak_bytes
        text = f"{gib(meas):.2f} GiB measured"
        if pred:
            text += f", {gib(pred):.2f} GiB predicted ({100 * (pred - meas) / meas:+.1f}%)"
        return Evidence(f"ZeRO-Offload measured by the offload probe ({off.n_layers} layers, batch "
                        f"{off.batch_size}, GC)", text)
