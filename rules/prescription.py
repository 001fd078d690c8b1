"""GC007 prescription."""
from __future__ import annotations

from dataclasses import dataclass

from gcdoctor.units import cost_words
from gcdoctor.types import CONFIGURATION, Evidence, Rule, Verdict
from gcdoctor.facts import Facts, Measurement, SweepFacts
from gcdoctor.facts.views import spread_pct

POLICY = {"no_gc": "no checkpointing", "gc": "layer checkpointing"}


@dataclass
class Policy:
    """One measured way to train the model: its largest batch and its throughput."""

    variant: str
    largest: int | None  # the largest batch that fits (the search's boundary, or the largest fixed batch)
    points: dict[int, Measurement]  # fitting, timed measurements by batch
    # measured in fresh processes (the allocator probe), None where not: the largest batch a job
    # starting at it can rely on with the default allocator, and with expandable segments
    reliable: int | None = None
    expandable: int | None = None
    fresh_default: int | None = None  # what the fresh default-allocator process measured (0: none fit)

    @property
    def name(self) -> str:
        return POLICY.get(self.variant, self.variant)

    def best(self) -> Measurement | None:
        """The batch with the most tokens/s: where this policy trains fastest per token."""
        return max(self.points.values(), key=lambda m: m.tokens_per_s or 0.0, default=None)

    def fits(self, batch: int) -> bool:
        return self.largest is not None and batch <= self.largest

    def needs_expandable(self, batch: int) -> bool:
        """Whether a job at `batch` needs expandable segments: above what the default allocator
        holds in a fresh process, within what expandable segments were measured to hold."""
        return (self.reliable is not None and batch > self.reliable and self.expandable is not None
                and batch <= self.expandable)


def _policy(facts: Facts, s: SweepFacts, variant: str, conclusive: bool = True) -> Policy | None:
    """The policy as measured: the sweep's points and boundary, the allocator probe's fresh
    processes where it ran (their boundary replaces the sweep's in-process one, and their points
    above the sweep's boundary are added). Not `conclusive` (memory was held beside the fresh
    processes): a default-allocator OOM there does not lower what a job can rely on below the
    sweep's boundary; their fits still count."""
    points = {m.batch_size: m for m in s.measurements if m.variant == variant and m.fits and m.tokens_per_s}
    largest = s.max_batch.get(variant) if s.searched else max(points, default=None)
    if variant not in s.max_batch and not points:
        return None
    p = Policy(variant, largest, points)
    al = facts.allocator
    if al is None:
        return p
    d, e = al.get(variant, "default"), al.get(variant, "expandable")
    if d is not None:
        p.reliable = p.fresh_default = d.largest_batch or 0
        if not conclusive:
            p.reliable = max(p.reliable, s.max_batch.get(variant) or 0)
    if e is not None and e.largest_batch:
        p.expandable = e.largest_batch
    for run in al.runs:
        if run.variant == variant and run.allocator == "expandable":
            for m in run.measurements:
                if m.fits and m.tokens_per_s and m.batch_size not in points:
                    points[m.batch_size] = m
    known = [b for b in (p.reliable, p.expandable) if b is not None]
    if known:
        p.largest = max(known)
    return p


def _spread_pct(m: Measurement) -> float:
    return spread_pct(m.step_ms)


def _tps(m: Measurement) -> float:
    """Tokens/s of one of a policy's points, all of which were timed."""
    assert m.tokens_per_s is not None
    return m.tokens_per_s


def _step_ms(m: Measurement) -> float:
    """Median step of one of a policy's points, all of which were timed."""
    assert m.step_ms_median is not None
    return m.step_ms_median


def _target(s: SweepFacts, policies: list[Policy]) -> tuple[int, str] | None:
    """The batch to prescribe for and where it came from; None where no policy fits batch 1."""
    if s.target_batch is not None:
        return s.target_batch, "--target-batch"
    largest = [p.largest for p in policies if p.largest is not None]
    if largest:
        return max(largest), "the largest batch any measured policy fits (no --target-batch)"
    return None


def _policy_evidence(policies: list[Policy]) -> list[Evidence]:
    ev = []
    for p in policies:
        best = p.best()
        ev.append(Evidence(f"largest batch, {p.name}", p.largest))
        if p.fresh_default is not None:
            ev.append(Evidence(f"largest batch in a fresh process, default allocator, {p.name}",
                               p.fresh_default or "none measured fits"))
        if p.reliable is not None and p.reliable != p.fresh_default:
            ev.append(Evidence(f"relied on, default allocator, {p.name}",
                               f"{p.reliable} (the sweep's: memory held beside the fresh processes makes their "
                               "OOMs inconclusive)"))
        if p.expandable is not None:
            ev.append(Evidence(f"largest batch in a fresh process, expandable segments, {p.name}", p.expandable))
        if best is not None:
            ev.append(Evidence(f"fastest batch, {p.name}", f"{best.batch_size}: {best.tokens_per_s:,.0f} tok/s"))
    return ev


def _compared(timed: list[Policy], target: int) -> list[Measurement]:
    """The points the ranking compares: each timed policy's point at the target and its fastest."""
    out = []
    for p in timed:
        if target in p.points:
            out.append(p.points[target])
        best = p.best()
        if best is not None:
            out.append(best)
    return out


class PrescriptionRule(Rule):
    """What it checks:
    The recipe: from the policy search on the full model (every checkpointing policy applied for
    real: none, every layer, every N-th layer, attention- or MLP-only, op-level selective, the
    compiler's activation memory budget, CPU offload; each crossed with the allocator setting, the
    AdamW implementation and a chunked loss), the one whole setting that trains fastest per token
    for the user's target: --target-batch N (micro-batch N per device), --global-batch G (each
    setting at a measured micro-batch that divides it, with gradient accumulation; the optimizer
    step counted once per G), or, without either, the fastest per token, said as an assumption,
    compared with the largest batch any setting fits. A setting another beats on both tokens/s and
    peak memory never wins; one whose trace shows it does not do what it claims, or that the search
    dropped, does not compete. It says the recipe's tokens/s and peak as confirmed by a fresh
    process beside the prediction, or plainly "unconfirmed", and why an earlier candidate was
    rejected (out of memory, more than 5 % off). When nothing fits the target: the batch that fits
    and the accumulation that reaches the target; when nothing fits batch 1, the smallest change
    that does, from the memory model (8-bit optimizer states, the optimizer on the host, adapters,
    another optimizer, sharding over N devices). The verdicts the recipe folds in (GC009 for
    expandable segments, GC008 for the AdamW implementation, GC002 for the chunked loss) are not
    repeated in the bottom line.
    A run recorded without the policy search: which of no checkpointing and layer checkpointing
    trains the target batch (--target-batch; else the largest batch any measured policy fits)
    fastest, each at its own measured largest batch, with the fresh processes' boundary per
    allocator where the allocator probe measured it; when the timings are too noisy to rank the
    policies, or only one was measured, it says so instead of choosing.

    Why it matters:
    The user's question ends in "what should I change". Checkpointing trades step time for batch,
    the allocator and the AdamW implementation move the boundary without changing the math, and
    gradient accumulation reaches a global batch from any micro-batch: the answer is one setting,
    whole and measured, not a list of separate findings. A larger batch is often not the faster
    one per token.

    Evidence:
    The target and where it came from; every candidate: its batch, tokens/s and peak, its predicted
    largest batch, whether it does what it claims, why it was dropped; every confirmation with its
    tokens/s, peak and distance from the prediction, or why it was rejected; the seconds the search
    and the confirmation took. Without the policy search: per policy the largest batch (fresh, per
    allocator, where measured), the fastest batch and its tokens/s, the spread of the timings.

    How to fix:
    Apply the recipe: `gcdoctor recipe RUN` prints it as a PyTorch snippet, Hugging Face
    TrainingArguments with the environment, or JSON. Give --target-batch or --global-batch for the
    batch you train at; watch the job with `gcdoctor watch --against RUN` to see how far it is.
    """

    code = "GC007"
    slug = "prescription"
    title = "Prescription: the recipe for the target"
    requires = ()
    scope = CONFIGURATION
    topic = "prescription"
    defaults = {
        # as GC001: timings whose steps spread by more than this cannot rank two policies
        "max_spread_pct": 15.0,
        # a difference between policies below this is within what a median of a few steps resolves
        # (the H200 sweep's steps spread by 0.1-1.8%; GC001 allows 15% before refusing)
        "min_difference_pct": 3.0,
        # as GC009: memory held beside the allocator probe's fresh processes above which their
        # default-allocator OOMs do not lower the boundary a job can rely on
        "max_held_gib": 1.0,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> Verdict:
        if facts.policies is not None and facts.policies.candidates:
            from gcdoctor.rules._recipe import judge_recipe
            return judge_recipe(self, facts)
        s = facts.sweep
        if s is None or facts.get("sweep.measurements") is None:
            return self.inconclusive(facts.missing_reason("sweep.measurements"))
        from gcdoctor.rules.allocator_boundary import fresh_ooms_conclusive
        conclusive = fresh_ooms_conclusive(facts, t["max_held_gib"])
        policies = [p for p in (_policy(facts, s, v, conclusive) for v in ("no_gc", "gc")) if p is not None]
        timed = [p for p in policies if p.points]
        if len(timed) < 2:
            if not timed:
                return self._cannot("no policy completed a timed step: nothing to choose between", [])
            return self._cannot(f"only {timed[0].name} was measured: nothing to choose between", [])
        target_why = _target(s, policies)
        if target_why is None:
            return self.fired("warning", "No measured policy fits batch 1", [],
                              "Neither policy completed a training step of one sequence.",
                              "See the memory verdicts: the model states or the loss block exceed the device.",
                              line="no prescription: batch 1 fits with no measured policy")
        target, why = target_why
        ev = [Evidence("target batch", target), Evidence("target from", why)] + _policy_evidence(policies)
        fitting = [p for p in policies if p.fits(target)]
        if not fitting:
            top = max(policies, key=lambda p: p.largest or 0)
            return self.fired(
                "warning", f"No measured policy fits batch {target}: the largest is {top.largest} with {top.name}",
                ev, "Layer checkpointing is the policy that saves the most activation memory of those measured.",
                "Lower the per-device batch and use gradient accumulation, shard or offload the optimizer states "
                "(see the memory verdicts), or shorten the sequence.",
                line=f"no measured policy fits batch {target}: the largest is {top.largest} ({top.name})")
        spread = max((_spread_pct(m) for m in _compared(timed, target)), default=0.0)
        ev.append(Evidence("largest step-to-step spread of the compared points", spread, "%"))
        if spread > t["max_spread_pct"]:
            return self._cannot(f"step times vary by {spread:.0f}% from step to step (above "
                                f"{t['max_spread_pct']:.0f}%): the timings cannot rank the policies", ev)
        return self._choose(facts, s, policies, fitting, target, ev, t)

    def _choose(self, facts: Facts, s: SweepFacts, policies: list[Policy], fitting: list[Policy], target: int,
                ev: list[Evidence], t: dict[str, float]) -> Verdict:
        """The fitting policy with the most tokens/s at the target; within the timings' resolution of
        the runner-up, the one that leaves memory free (layer checkpointing)."""
        at_target = {p.variant: p.points[target] for p in fitting if target in p.points}
        ranked = sorted((p for p in fitting if p.variant in at_target), key=lambda p: -_tps(at_target[p.variant]))
        if not ranked:
            p = fitting[0]
            return self._cannot(f"{p.name} fits batch {target} but was not timed there (fixed --batch-sizes?): "
                                f"re-run with --batch-sizes {target}", ev)
        choice = ranked[0]
        if len(ranked) > 1:
            diff = 100.0 * (_tps(at_target[choice.variant]) / _tps(at_target[ranked[1].variant]) - 1.0)
            if diff < t["min_difference_pct"]:
                # within the resolution of the timings: prefer the one that leaves memory free
                choice = next((p for p in ranked if p.variant == "gc"), choice)
        others = [p for p in policies if p is not choice and p.best() is not None]
        return self._prescribe(facts, s, choice, at_target[choice.variant], target, others, ev)

    def _prescribe(self, facts: Facts, s: SweepFacts, choice: Policy, m: Measurement, target: int,
                   others: list[Policy], ev: list[Evidence]) -> Verdict:
        line = f"{choice.name} at batch {target}: {m.tokens_per_s:,.0f} tok/s"
        why = [f"{choice.name.capitalize()} fits batch {target} and runs it at {m.tokens_per_s:,.0f} tokens/s "
               f"({m.step_ms_median:,.0f} ms per step)."]
        for o in others:
            best = o.best()
            assert best is not None  # others have a fastest batch
            rel = 100.0 * (_tps(best) / _tps(m) - 1.0)
            if o.fits(target) and target in o.points:
                other = o.points[target]
                line += f"; {o.name} {other.tokens_per_s:,.0f} ({100 * (_tps(other) / _tps(m) - 1):+.0f} %)"
                why.append(f"{o.name.capitalize()} runs the same batch at {other.tokens_per_s:,.0f} tokens/s.")
            else:
                upto = "" if best.batch_size == o.largest else f" (fits up to {o.largest})"
                line += (f"; {o.name} at batch {best.batch_size}: {best.tokens_per_s:,.0f} tok/s{upto} "
                         f"({rel:+.0f} %)")
                why.append(f"{o.name.capitalize()} fits batch {o.largest} at most; its fastest measured batch, "
                           f"{best.batch_size}, runs {best.tokens_per_s:,.0f} tokens/s ({rel:+.0f}%).")
                if rel > 0:
                    line += ", faster if accumulation reaches your global batch"
                    why.append(f"If batch {best.batch_size} with gradient accumulation reaches your global batch, "
                               f"{o.name} is the faster choice per token.")
        settings = (f"checkpoint every decoder layer with {s.gc_api}" if choice.variant == "gc" and s.gc_api
                    else "checkpoint every decoder layer (use_reentrant=False)" if choice.variant == "gc"
                    else "turn checkpointing off (model.gradient_checkpointing_disable())")
        d = facts.distributed
        if d is not None:  # a sharded run: the batch and tokens/s are per rank
            from gcdoctor.rules._dist import setup
            settings += (f", sharded with {setup(d)}: {_tps(m) * d.world_size:,.0f} tokens/s over the "
                         f"{d.world_size} ranks")
            line = line.replace(f"at batch {target}:", f"at batch {target}/rank:", 1)
        if choice.needs_expandable(target):
            from gcdoctor.model.allocator import expandable_setting
            settings += (f", with {expandable_setting(facts.environment.device_kind)} in the job's environment "
                         "(set before the device initialises)")
            line = line.replace(f"at batch {target}", f"at batch {target} (expandable segments)", 1)
            why.append(f"A job that starts at batch {target} runs out of memory with the default allocator "
                       f"(it holds {choice.reliable} in a fresh process); expandable segments hold "
                       f"{choice.expandable}.")
        cost = ""
        off = next((o for o in others if o.variant == "no_gc"), None)
        if choice.variant == "gc" and off is not None and target in off.points:
            cost = (f" It {cost_words(100 * (_step_ms(m) / _step_ms(off.points[target]) - 1), '')} "
                    "step time against no checkpointing at the same batch.")
        return self.fired(
            "info", f"Use {choice.name} at batch {target}: {m.tokens_per_s:,.0f} tokens/s", ev,
            " ".join(why) + cost,
            f"Train at per-device batch {target} and {settings}.",
            line=line)

    def _cannot(self, reason: str, ev: list[Evidence]) -> Verdict:
        v = self.inconclusive(reason)
        v.evidence = list(ev)
        v.line = f"no prescription: {reason}"
        return v
