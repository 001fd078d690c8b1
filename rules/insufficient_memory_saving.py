"""GC002 insufficient-memory-saving."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.facts.views import EqualBatch
from gcdoctor.rules._sweep import equal_batch_pair, gib


class InsufficientMemorySavingRule(Rule):
    """What it checks:
    How much activation memory layer-level checkpointing saved at equal batch: activation memory
    is the step's peak allocated memory minus the model states (parameters, gradients, optimizer
    states), with and without checkpointing. Where the analytic memory model ran, the saving is
    compared with what it should have been.

    Why it matters:
    On the total peak, model states dilute the saving (Llama-3-8B on an H200: -33% of the peak but
    -88% of the activations), so a verdict on the total misfires. A real shortfall means some
    memory is not in the checkpointed layers: the LM head and the fp32 loss (at vocab 128k the loss
    block is larger than all 32 checkpointed layer inputs), layers left unwrapped, eager attention's
    s^2 scores, or a padding mask that widens K/V.

    Evidence:
    Activation memory with and without checkpointing at the largest common batch, the saving in
    percent, the total-peak saving for contrast, the estimated logits/loss block, the predicted
    saving where available.

    How to fix:
    Checkpoint every decoder layer (every_n_layers=1); use a fused/chunked cross-entropy (Liger
    kernel, Apple's Cut Cross-Entropy) so fp32 logits are never materialised; use SDPA/flash
    attention, not eager; avoid padding masks (pack sequences).
    """

    code = "GC002"
    slug = "insufficient-memory-saving"
    title = "Insufficient memory saving"
    requires = ("sweep.measurements",)
    topic = "sweep"
    defaults = {
        # layer checkpointing keeps 2h bytes/token/layer of ~200h (Llama): the saving should be far
        # above 40% of activations; below that something besides the layers holds the memory
        "min_saving_pct": 40.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        pair = equal_batch_pair(facts)
        if pair is None:
            return self.inconclusive("no batch size was measured both with and without checkpointing")
        b, off, on = pair
        a_off, a_on = off.activation_peak_bytes, on.activation_peak_bytes
        if a_off is None or a_on is None or a_off <= 0:
            return self.inconclusive("peak memory or model-state sizes were not measured")
        eq = EqualBatch(b, off, on)
        saving, total = eq.activation_saving_pct, eq.peak_saving_pct
        assert saving is not None  # both activation peaks were measured, the one without GC above 0
        ev = [Evidence("batch size (both variants)", b),
              Evidence("activation memory without GC", gib(a_off), "GiB"),
              Evidence("activation memory with GC", gib(a_on), "GiB"),
              Evidence("activation saving", saving, "%"),
              Evidence("total peak saving (diluted by model states)", total, "%")]
        m, mm = facts.model, facts.memory_model
        logits_bytes = None
        if mm is not None and mm.loss_block_bytes_per_token:
            # the memory model's exact term: logits in the model dtype, their fp32 upcast and its gradient
            logits_bytes = b * off.seq_len * mm.loss_block_bytes_per_token
            ev.append(Evidence("logits + fp32 loss block (memory model)", gib(logits_bytes), "GiB"))
        elif m is not None and m.vocab_size:
            # no memory model: logits in the model dtype plus the fp32 upcast the library makes for the loss
            dtype_bytes = 4 if (m.dtype or "fp32") == "fp32" else 2
            logits_bytes = b * off.seq_len * m.vocab_size * (dtype_bytes + 4)
            ev.append(Evidence("logits + fp32 loss block (estimate)", gib(logits_bytes), "GiB"))
        predicted = _predicted_saving(facts, b)
        if predicted is not None:
            ev.append(Evidence("predicted activation saving", predicted, "%"))
        if saving < t["min_saving_pct"]:
            why = ("Checkpointing wrapped layers whose activations are only part of the peak.")
            if logits_bytes and a_on and logits_bytes > 0.5 * a_on:
                why += (" Here the logits and the fp32 loss alone are about "
                        f"{gib(logits_bytes):.2f} GiB of the {gib(a_on):.2f} GiB left: the peak is the loss, not the layers.")
            return self.fired(
                "warning", f"Checkpointing saved only {saving:.0f}% of activation memory at batch {b}", ev, why,
                "Checkpoint every decoder layer; use a chunked/fused cross-entropy (Liger, Cut Cross-Entropy); "
                "use SDPA or flash attention; avoid padding masks.",
                line=f"checkpointing saves only {saving:.0f} % of activations at batch {b}"
                     + (": the loss is the peak" if logits_bytes and a_on and logits_bytes > 0.5 * a_on else ""))
        return self.passed(f"Checkpointing saved {saving:.0f}% of activation memory at batch {b} "
                           f"({total:.0f}% of the total peak)", ev,
                           line=f"checkpointing saves {saving:.0f} % of activations at batch {b} "
                                f"({total:.0f} % of the peak)")


def _predicted_saving(facts: Facts, batch: int) -> float | None:
    mm = facts.memory_model
    fn = getattr(mm, "predicted_activation_saving_pct", None) if mm is not None else None
    return fn(batch) if callable(fn) else None
