"""GC008 optimizer-step-peak."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts, Measurement
from gcdoctor.rules._sweep import gib

LABEL = {"adamw": "foreach AdamW", "adamw-forloop": "AdamW(foreach=False)", "adamw-fused": "AdamW(fused=True)"}
SETTING = {"adamw-forloop": "torch.optim.AdamW(params, foreach=False)",
           "adamw-fused": "torch.optim.AdamW(params, fused=True)"}


def _size(n: float) -> str:
    """Bytes as a person reads them: GiB to one decimal, MiB below 1 GiB (a small model's saving)."""
    return f"{n / 2**30:.1f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def _peak(m: Measurement) -> int:
    """The step's peak of a measurement that fits (the probe records it for every step it completes)."""
    assert m.peak_allocated_bytes is not None
    return m.peak_allocated_bytes


class OptimizerStepPeakRule(Rule):
    """What it checks:
    Whether the training step's memory peak, with layer checkpointing at the probe's batch, is
    the optimizer step's rather than the forward's or the backward's, whether it still is at the
    batch you train (--target-batch, else the largest that fits: the optimizer step's peak does not
    grow with the batch, the forward/backward's does), and what the other AdamW implementations, measured at that batch, make of it:
    peak and step time of foreach=False and fused=True against the default (foreach).

    Why it matters:
    Checkpointing only shrinks what the forward saves for the backward. torch's default AdamW
    (foreach) makes one parameter-sized temporary per parameter (`_foreach_sqrt`) while the
    gradients are alive: 2 bytes per parameter in bf16, 15 GiB for an 8B model. When that is the
    peak, no checkpointing granularity lowers it, and a largest batch or a card that does not fit
    is the optimizer's doing.

    Evidence:
    Peak of the step and of its optimizer phase, and step time, for each AdamW implementation
    measured; the forward/backward peak; the memory model's predicted peak for each.

    How to fix:
    Use the implementation that lowers the peak at an acceptable step time: fused=True has no
    temporaries (and is usually the fastest on CUDA); foreach=False keeps one parameter's at a
    time (usually slower). Or shard the optimizer states (ZeRO-1/FSDP) so each device steps a part.
    """

    code = "GC008"
    slug = "optimizer-step-peak"
    title = "Optimizer step peak"
    requires = ("optimizer.measurements",)
    topic = "optimizer"
    defaults = {
        # a saving below 5% of the peak is not worth a change of optimizer implementation
        "min_saving_pct": 5.0,
        # an alternative that slows the step by more than this is not recommended (fused usually
        # speeds it up; foreach=False usually costs a few percent)
        "max_slowdown_pct": 10.0,
    }

    @staticmethod
    def _trained_point(facts: Facts, probe_batch: int):
        """The sweep's checkpointed point at the batch a job trains (--target-batch, else the
        largest that fits), where it is another batch than the probe's and was measured."""
        s = facts.sweep
        if s is None:
            return None
        batch = s.target_batch or s.max_batch.get("gc")
        if not batch or batch == probe_batch:
            return None
        return s.get("gc", batch)

    def check(self, facts: Facts, t: dict[str, float]):
        opt = facts.optimizer
        if opt is None:
            return self.inconclusive(facts.missing_reason("optimizer.measurements"))
        base = opt.get("adamw")
        if base is None:
            return self.inconclusive(f"foreach AdamW did not complete a step at batch {opt.batch_size}")
        fb, op = base.peak_fwd_bwd_allocated_bytes, base.peak_optimizer_allocated_bytes
        b = opt.batch_size
        ev = [Evidence("batch (with layer checkpointing)", b),
              Evidence("forward/backward peak", gib(fb), "GiB"), Evidence("optimizer-step peak (foreach)", gib(op), "GiB")]
        if base.peak_phase != "optimizer step":
            return self.passed(f"At batch {b} the step peaks in the forward/backward ({gib(fb):.1f} GiB), not the "
                               f"optimizer step ({gib(op):.1f} GiB)", ev)
        assert fb is not None and op is not None  # the optimizer step's peak phase was read from both
        best = None
        for name in ("adamw-fused", "adamw-forloop"):
            m = opt.get(name)
            if m is None:
                if name in opt.skipped:
                    ev.append(Evidence(f"{LABEL[name]}", f"not measured: {opt.skipped[name]}"))
                continue
            saving = 100.0 * (1 - _peak(m) / _peak(base))
            dt = 100.0 * (m.step_ms_median / base.step_ms_median - 1) if m.step_ms_median and base.step_ms_median else None
            ev.append(Evidence(f"{LABEL[name]}: peak", gib(m.peak_allocated_bytes), "GiB"))
            ev.append(Evidence(f"{LABEL[name]}: peak change", -saving, "%"))
            if dt is not None:
                ev.append(Evidence(f"{LABEL[name]}: step time change", dt, "%"))
            if saving >= t["min_saving_pct"] and (dt is None or dt <= t["max_slowdown_pct"]):
                if best is None or _peak(m) < _peak(best[1]):
                    best = (name, m, saving, dt)
        for name, p in opt.predicted_peak_bytes.items():
            ev.append(Evidence(f"predicted peak, {LABEL.get(name, name)}", gib(p), "GiB"))
        ev.append(Evidence("step time (foreach)", base.step_ms_median, "ms"))
        head = (f"At batch {b} the step's peak is the optimizer step ({_size(_peak(base))}, "
                f"forward/backward {_size(fb)}): checkpointing cannot lower it")
        why = ("foreach AdamW makes one parameter-sized temporary per parameter (torch._foreach_sqrt) while the "
               "gradients are alive; recomputation only shrinks what the forward saves.")
        if best is None:
            return self.fired("info", head, ev, why,
                              "No measured AdamW implementation lowers it enough at an acceptable step time; shard "
                              "the optimizer states (ZeRO-1/FSDP) or offload them if the peak is what limits you.",
                              line=f"optimizer step is the peak at batch {b}: checkpointing cannot lower it")
        name, m, saving, dt = best
        cost = "" if dt is None else f", step {dt:+.0f}%"
        trained = self._trained_point(facts, b)
        if trained is not None and (trained.peak_fwd_bwd_allocated_bytes or 0) > op:
            # the optimizer peak is batch-independent: at the batch trained the forward/backward is higher
            ev.append(Evidence(f"forward/backward peak at batch {trained.batch_size} (the batch trained)",
                               gib(trained.peak_fwd_bwd_allocated_bytes), "GiB"))
            return self.fired(
                "info", f"At batch {trained.batch_size} the forward/backward is the peak, not the optimizer step; "
                f"{LABEL[name]} still {'speeds the step' if dt is not None and dt < 0 else 'lowers the optimizer peak'}"
                f" ({'-' + format(saving, '.0f') + '% optimizer-step peak'}{cost} at batch {b})", ev, why,
                f"Use {SETTING[name]}{cost.replace(', step', ': step time')} at batch {b}.",
                line=(f"{LABEL[name]}:{cost.replace(',', '')}, optimizer-step peak -{saving:.0f}% (batch {b})"
                      if cost else f"{LABEL[name]}: optimizer-step peak -{saving:.0f}% (batch {b})"))
        return self.fired(
            "warning", f"{head}; {LABEL[name]} peaks at {_size(_peak(m))} (-{saving:.0f}%{cost})",
            ev, why, f"Use {SETTING[name]}: {_size(_peak(base) - _peak(m))} lower "
                     f"peak at batch {b}{cost.replace(', step', ', step time')}.",
            line=f"optimizer step is the peak at batch {b}: {LABEL[name]} -{saving:.0f}%{cost}")
