"""The optimizer step's peak, and what the other AdamW implementations make of it.

With checkpointing, small batches peak in `optimizer.step()`, not in the forward or backward:
torch's default (foreach) AdamW makes `torch._foreach_sqrt(exp_avg_sqs)`, one parameter-sized
tensor per parameter, while the gradients are alive. Checkpointing cannot lower that. This probe
measures, with layer checkpointing at the batch the user trains (--target-batch, else
--probe-batch), foreach AdamW and, when its peak is the optimizer step's, the alternatives:
`foreach=False` (one parameter's temporaries at a time) and `fused=True` (none; where the
backend has the kernel). Peak memory and step time of each; the memory model's prediction beside.
"""
from __future__ import annotations

import dataclasses

from gcdoctor.run.capture import TrainingStep, enable_layer_checkpointing, free_memory
from gcdoctor.facts import OptimizerFacts

ALTERNATIVES = ("adamw-forloop", "adamw-fused")


class OptimizerProbe:
    name = "optimizer"
    description = "the optimizer step's peak with checkpointing: foreach, for-loop and fused AdamW"

    def applies(self, device_kind: str) -> str | None:
        return None

    def run(self, ctx) -> None:
        cfg = ctx.config
        if cfg.optimizer != "adamw":
            ctx.facts.unavailable["optimizer"] = f"the run trains with {cfg.optimizer}: only AdamW's step allocates"
            return
        batch = cfg.target_batch or cfg.probe_batch
        facts = ctx.facts.optimizer = OptimizerFacts(batch_size=batch)
        self._predict(ctx, facts)
        model = ctx.build_model()
        enable_layer_checkpointing(model)

        def measure(name: str):
            ctx.progress(self.name, name, batch)
            m = ctx.measure(self.name, name, lambda: TrainingStep(model, ctx.backend, batch, ctx.seq_len, name,
                                                                  cfg.seed), batch)
            facts.measurements.append(m)
            ctx.save()
            return m

        sweep = ctx.facts.sweep
        known = sweep.get("gc", batch) if sweep is not None else None
        if known is not None and known.seq_len == ctx.seq_len:
            base = dataclasses.replace(known, probe=self.name, variant="adamw")  # the sweep's own point
            facts.measurements.append(base)
        else:
            base = measure("adamw")
        if not base.fits:
            for name in ALTERNATIVES:
                facts.skipped[name] = f"batch {batch} does not fit with foreach AdamW"
        elif base.peak_phase != "optimizer step":
            for name in ALTERNATIVES:
                facts.skipped[name] = ("the step's peak is the forward/backward, not the optimizer step: another "
                                       "AdamW would not lower it")
        else:
            for name in ALTERNATIVES:
                ctx.check_stop()
                try:
                    measure(name)
                except (RuntimeError, ValueError, TypeError) as exc:  # fused=True where the backend lacks it
                    if ctx.backend.is_oom(exc):
                        raise
                    facts.skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        del model
        free_memory(ctx.backend)
        ctx.save()

    @staticmethod
    def _predict(ctx, facts: OptimizerFacts) -> None:
        try:
            from gcdoctor.model import memory as M
        except ImportError:
            return
        kind = ctx.backend.kind if ctx.backend.kind in M.DEVICE_KINDS else "cuda"
        for name in ("adamw",) + ALTERNATIVES:
            w = M.Workload(facts.batch_size, ctx.seq_len, ctx.dtype, name, True, kind)
            facts.predicted_peak_bytes[name] = M.predict(ctx.spec, w).peak_bytes
