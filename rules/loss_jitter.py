"""GC030 loss-jitter."""
from __future__ import annotations

from dataclasses import dataclass

from gcdoctor.types import CONFIGURATION, EXPERIMENT, Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.jitter import JitterComparison, JitterFacts

IDENTICAL, WITHIN_NOISE, DYNAMICS, SYSTEMATIC = "identical", "within_noise", "training_dynamics", "systematic"
CLASS_TEXT = {
    IDENTICAL: "bitwise identical",
    WITHIN_NOISE: "within run-to-run noise and rounding",
    DYNAMICS: "rounding-level at the first step, grown only through training dynamics",
    SYSTEMATIC: "a systematic difference at the first step",
}
VERDICT_ROLES = ("main", "dropout", "dropout_control")  # the comparisons that get a verdict each


@dataclass
class JitterClass:
    """How one run differs from its reference, measured against its noise floor."""

    kind: str
    grad_ratio: float | None = None  # the worst group's rel-L2 over that group's noise floor
    worst_group: str | None = None
    worst_rel_l2: float | None = None
    worst_floor: float | None = None
    loss0_ratio: float | None = None  # first-step |d loss| over its tolerance
    loss_ratio: float | None = None  # the worst later step's |d loss| over its tolerance
    loss_ratio_step: int | None = None  # 0-based step of that worst ratio


def classify(c: JitterComparison, base: JitterComparison, ref_losses: list[float], u: float,
             t: dict[str, float]) -> JitterClass:
    """Classify run-vs-reference `c` against the run-to-run comparison `base`.

    Gradient noise floor, per group (embed, each layer, final norm, LM head): the larger of the
    run-to-run rel-L2 of that group and `grad_rounding_u` unit roundoffs `u` of the dtype. Loss
    tolerance, per step: the larger of the run-to-run |d loss| and `loss_rounding_rel` x |loss|.
    A difference counts as noise up to `noise_factor` times its floor.
    """
    out = JitterClass(kind=IDENTICAL)
    rounding = t["grad_rounding_u"] * u
    for group, rel in sorted(c.grad_rel_l2_by_group.items()):
        floor = max(base.grad_rel_l2_by_group.get(group, 0.0), rounding)
        ratio = rel / floor if floor > 0 else (0.0 if rel == 0 else float("inf"))
        if out.grad_ratio is None or ratio > out.grad_ratio:
            out.grad_ratio, out.worst_group, out.worst_rel_l2, out.worst_floor = ratio, group, rel, floor
    for i, d in enumerate(c.loss_abs_diff):
        b = base.loss_abs_diff[i] if i < len(base.loss_abs_diff) else 0.0
        scale = abs(ref_losses[i]) if i < len(ref_losses) else 0.0
        tol = max(b, t["loss_rounding_rel"] * scale)
        ratio = d / tol if tol > 0 else (0.0 if d == 0 else float("inf"))
        if i == 0:
            out.loss0_ratio = ratio
        elif out.loss_ratio is None or ratio > out.loss_ratio:
            out.loss_ratio, out.loss_ratio_step = ratio, i
    k = t["noise_factor"]
    if c.losses_equal and c.grads_bitwise_equal:
        out.kind = IDENTICAL
    elif (out.grad_ratio or 0.0) > k or (out.loss0_ratio or 0.0) > k:
        out.kind = SYSTEMATIC
    elif (out.loss_ratio or 0.0) <= k:
        out.kind = WITHIN_NOISE
    else:
        out.kind = DYNAMICS
    return out


def subject_of(c: JitterComparison, j: JitterFacts) -> str:
    if c.role == "main":
        return "checkpointing on vs off"
    rng = "preserve_rng_state=False (control)" if c.role == "dropout_control" else "preserve_rng_state=True"
    return f"attention dropout {j.dropout_p:g}, {rng}"


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.2g}x"


def _yes(flag: bool | None) -> str:
    return "—" if flag is None else ("yes" if flag else "no")


class LossJitterRule(Rule):
    """What it checks:
    Whether layer checkpointing changes training numerically. The jitter probe trains N steps
    from the same weights, seed and batches without checkpointing twice (the run-to-run noise of
    this device and setting) and with it, compares every loss and, after the first backward and
    before any update, every gradient (relative L2 per layer group, max |diff|, bitwise
    equality). The difference is classified against the run-to-run difference and the dtype's
    rounding as: identical; within run-to-run noise; rounding-level at the first step and grown
    only through training dynamics (both benign); or systematic at the first step (a real
    problem). The same is done with attention dropout on, with preserve_rng_state=True and, as
    a control the rule must catch, preserve_rng_state=False.

    Why it matters:
    Recomputation runs the same forward again during backward, so the first-step loss must be
    bitwise identical and the gradients equal up to the device's own non-determinism. Loss curves
    that differ with and without checkpointing are often waved away as "FMA ordering"; that fits
    only when the difference is no larger than run-to-run noise or rounding. A systematic
    difference means the recompute computes something else: dropout masks redrawn because the RNG
    state was not preserved (OLMo-core PR 828 saw a 0.3-nat loss bias), a stateful module run
    twice (BatchNorm statistics, caches, MoE router counters), a code path that differs under
    no_grad (reentrant checkpointing), or a non-deterministic recompute.

    Evidence:
    First-step loss with and without checkpointing (bitwise), first-step gradient rel-L2 over all
    parameters and for the worst layer group against that group's run-to-run rel-L2, the share of
    gradient elements not bitwise equal, max |d loss| over the steps against the run-to-run one,
    the dtype's unit roundoff, and (where run) the same comparison under deterministic algorithms.

    How to fix:
    Benign classes: nothing to fix; compare runs by their spread over seeds, not point by point.
    For bitwise reproducibility set CUBLAS_WORKSPACE_CONFIG=:4096:8 and
    torch.use_deterministic_algorithms(True), and use a deterministic attention backward.
    Systematic: keep preserve_rng_state=True (the default) when dropout or other random ops run
    inside checkpointed regions; keep stateful modules out of checkpointed regions or make them
    idempotent; prefer use_reentrant=False; check code that branches on torch.is_grad_enabled();
    do not span several devices in one region (the RNG state is stashed for one device type).
    """

    code = "GC030"
    slug = "loss-jitter"
    title = "Loss jitter from recomputation"
    requires = ("jitter.comparisons",)
    topic = "jitter"
    defaults = {
        # A GC-vs-no-GC difference counts as noise up to 3x the run-to-run difference. Both are
        # differences between two draws of the same noise over millions of gradient elements, so
        # they agree closely (H200, Llama-3-8B: early-layer rel-L2 2.0e-2 GC vs 1.9e-2 no-GC,
        # docs/references.md section 4); 3x leaves room for a baseline measured once. A redrawn dropout
        # mask (p 0.1) moved layer gradients by rel-L2 0.10-0.25 on the CPU (samples/jitter/cpu-fp32),
        # 5x or more above the H200's 1.9e-2 noise.
        "noise_factor": 3.0,
        # Rounding floor of a gradient group's rel-L2, in unit roundoffs of the dtype (bf16 2^-8,
        # fp32 2^-24). Summing the same gradient in another order (micro-batches) measured 0.7 u
        # (bf16) to 3.5 u (fp32) per layer on the CPU; a layer's noise on the H200 is about 5 u.
        "grad_rounding_u": 4.0,
        # Rounding tolerance of the loss, relative. The loss is an fp32 mean; reordering it moves
        # it by a few fp32 ulps (1 ulp <= 1.2e-7 relative): 1e-6 is about 8 ulps.
        "loss_rounding_rel": 1e-6,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        j = facts.jitter
        if j is None:
            return self.inconclusive(facts.missing_reason("jitter.comparisons"))
        out: list[Verdict] = []
        for c in j.comparisons:
            if c.role in VERDICT_ROLES:
                v = self._judge(j, c, t)
                # checkpointing on vs off is the user's setting; the dropout runs are the probe's experiments
                v.scope = CONFIGURATION if c.role == "main" else EXPERIMENT
                v.topic = self.topic
                if c.role == "main" and not v.line and v.status != "inconclusive":
                    v.line = ("checkpointing changes training: a systematic difference at step 1"
                              if v.status == "fired" else
                              "checkpointing is numerically benign: losses and gradients agree to noise")
                out.append(v)
        return out or self.inconclusive("the jitter probe recorded no checkpointed run to compare")

    # ------------------------------------------------------------------------------------------
    def _judge(self, j: JitterFacts, c: JitterComparison, t: dict[str, float]) -> Verdict:
        subject = subject_of(c, j)
        base = j.comparison(c.baseline)
        ref = j.run(c.reference)
        missing = self._missing(j, c, base, ref)
        if missing:
            return self.inconclusive(missing, subject)
        u = j.unit_roundoff
        assert base is not None and ref is not None and u is not None  # _missing says why any is missing
        cls = classify(c, base, ref.losses, u, t)
        ev = self._evidence(j, c, base, cls)
        if c.role == "main":
            det = j.comparison("gc_det")
            if det is not None and det.grads_bitwise_equal is not None:
                ev.append(Evidence("with deterministic algorithms: checkpointing bitwise identical",
                                   _yes(bool(det.grads_bitwise_equal and det.losses_equal))))
                if not det.grads_bitwise_equal and det.grad_rel_l2 is not None:
                    ev.append(Evidence("with deterministic algorithms: gradient rel-L2", det.grad_rel_l2))
        numbers = self._numbers(c, base, cls)
        if c.role == "dropout_control":
            return self._control(c, cls, ev, numbers, subject)
        if cls.kind == SYSTEMATIC:
            return self.fired(
                "critical", f"Checkpointing changes training ({subject}): {CLASS_TEXT[SYSTEMATIC]} — {numbers}",
                ev, self._why(cls.kind, j), self._fix(cls.kind), subject,
                line="" if c.role == "main" else
                "recompute does not replay dropout here: gradients differ (RNG state not restored)")
        word = "bitwise transparent" if cls.kind == IDENTICAL else "numerically benign"
        return Verdict(self.code, self.slug, "passed", "ok",
                       f"Checkpointing is {word} ({subject}): {CLASS_TEXT[cls.kind]} — {numbers}",
                       ev, self._why(cls.kind, j), self._fix(cls.kind), subject)

    def _control(self, c: JitterComparison, cls: JitterClass, ev: list[Evidence], numbers: str,
                 subject: str) -> Verdict:
        if cls.kind == SYSTEMATIC:
            return self.fired(
                "info", f"Control caught: with dropout and preserve_rng_state=False the recompute redraws the "
                f"dropout mask — {numbers}", ev,
                "This run is broken on purpose: without the saved RNG state the recomputed forward draws a new "
                "dropout mask, so the backward differentiates a different network than the forward ran. "
                "'FMA ordering' does not explain a difference like this; this is what a real problem looks like "
                "next to the benign classes.",
                "Nothing to change in your setup for this line: keep preserve_rng_state=True (the default) in "
                "any checkpointed region that runs dropout or other random ops.", subject)
        return self.fired(
            "warning", f"Control not caught: dropout with preserve_rng_state=False did not stand out from "
            f"noise — {numbers}", ev,
            "The probe redrew the dropout mask in the recompute on purpose and still could not tell the "
            "result from run-to-run noise: the noise floor of this setting is too high (or the dropout too "
            "weak) for the jitter verdicts to detect a lost RNG state.",
            "Read the other jitter verdicts as weak evidence; re-run with more layers or a longer sequence, "
            "or with deterministic algorithms to lower the noise floor.", subject)

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def _missing(j: JitterFacts, c: JitterComparison, base: JitterComparison | None, ref) -> str | None:
        if j.unit_roundoff is None:
            return "the dtype's unit roundoff was not recorded"
        if ref is None or not ref.losses:
            return f"reference run {c.reference} has no losses"
        run = j.run(c.run)
        if run is not None and run.error:
            return f"run {c.run} did not finish: {run.error}"
        if base is None or not base.grad_rel_l2_by_group or not base.loss_abs_diff:
            return f"no run-to-run baseline ({c.baseline or 'none'}) to compare against"
        if not c.grad_rel_l2_by_group or not c.loss_abs_diff:
            return f"run {c.run} has no gradient or loss comparison"
        return None

    @staticmethod
    def _numbers(c: JitterComparison, base: JitterComparison, cls: JitterClass) -> str:
        parts = [f"first-step loss {'bitwise equal' if c.loss_step0_equal else 'differs'}"]
        if c.grads_bitwise_equal:
            parts.append("gradients bitwise equal")
        else:
            parts.append(f"gradient rel-L2 {c.grad_rel_l2:.2g} vs run-to-run {base.grad_rel_l2:.2g}")
            if cls.worst_group is not None and cls.grad_ratio is not None:
                if base.grad_rel_l2_by_group.get(cls.worst_group, 0.0) > 0:
                    parts.append(f"{cls.worst_group} {cls.worst_rel_l2:.2g} = {_times(cls.grad_ratio)} its noise floor")
                else:  # the runs without checkpointing agree bitwise: the floor is the dtype's rounding alone
                    parts.append(f"{cls.worst_group} {cls.worst_rel_l2:.2g} against run-to-run 0 (bitwise equal) and "
                                 f"a rounding floor of {cls.worst_floor:.2g}")
        if c.losses_equal:
            parts.append("all losses bitwise equal")
        else:
            parts.append(f"max |d loss| {max(c.loss_abs_diff):.2g} vs run-to-run {max(base.loss_abs_diff):.2g}")
        return ", ".join(parts)

    @staticmethod
    def _evidence(j: JitterFacts, c: JitterComparison, base: JitterComparison, cls: JitterClass) -> list[Evidence]:
        ev = [
            Evidence("runs", f"{c.run} vs {c.reference}, run-to-run {base.run} vs {base.reference}; {j.steps} steps, "
                             f"batch {j.batch_size} x seq {j.seq_len}, {j.dtype}, {j.optimizer} lr {j.lr:g}"),
            Evidence("first-step loss bitwise equal", _yes(c.loss_step0_equal)),
            Evidence("first-step |d loss|", c.loss_abs_diff[0]),
            Evidence("first-step gradients bitwise equal", _yes(c.grads_bitwise_equal)),
            Evidence("gradient rel-L2, all parameters", c.grad_rel_l2),
            Evidence("gradient rel-L2 run-to-run, all parameters", base.grad_rel_l2),
        ]
        if cls.worst_group is not None and cls.worst_rel_l2:
            ev.append(Evidence(f"worst group {cls.worst_group}: rel-L2 over its noise floor "
                               f"({cls.worst_rel_l2:.3g} / {cls.worst_floor:.3g})", cls.grad_ratio, "x"))
        if c.grad_elements:
            ev.append(Evidence("gradient elements not bitwise equal",
                               100.0 * (c.grad_elements_differing or 0) / c.grad_elements, "%"))
        if c.grad_max_abs_diff is not None:
            ev.append(Evidence("max |d grad| (max |grad| of the reference)",
                               f"{c.grad_max_abs_diff:.3g} ({c.grad_ref_max_abs or 0:.3g})"))
        ev.append(Evidence(f"max |d loss| over {len(c.loss_abs_diff)} steps", max(c.loss_abs_diff)))
        ev.append(Evidence("max |d loss| run-to-run", max(base.loss_abs_diff)))
        if cls.loss_ratio is not None:
            ev.append(Evidence(f"worst later step ({(cls.loss_ratio_step or 0) + 1}): |d loss| over its tolerance",
                               cls.loss_ratio, "x"))
        ev.append(Evidence(f"{j.dtype} unit roundoff", j.unit_roundoff))
        return ev

    @staticmethod
    def _why(kind: str, j: JitterFacts) -> str:
        if kind == IDENTICAL:
            return ("Recomputation ran the same kernels on the same inputs: every loss and every first-step gradient "
                    "is bitwise identical, and so is the run-to-run repeat. There is nothing for 'FMA ordering' to "
                    "explain here: if your loss curves differ with and without checkpointing, the cause is elsewhere "
                    "(data order, seeds, batch size, other settings).")
        if kind == WITHIN_NOISE:
            return ("The first-step loss is identical (the recompute happens in backward) and the gradients differ "
                    "no more than two runs without checkpointing differ from each other, or than the dtype's "
                    "rounding. The 'FMA ordering' / non-deterministic-kernel explanation fits: the same "
                    "accumulation-order effects (atomics in the attention backward, split reductions) are present "
                    "with checkpointing off.")
        if kind == DYNAMICS:
            return ("The first step agrees to rounding (identical loss, gradients within the noise floor); the "
                    "losses then drift apart more than the run-to-run repeat does because every update feeds the "
                    "rounding difference back into the weights and training amplifies it. 'FMA ordering' fits: "
                    "the difference is born as rounding and grows only through training dynamics.")
        return ("The difference is there at the first step, before any update could amplify anything, and it is "
                "larger than run-to-run noise and the dtype's rounding allow. 'FMA ordering' does not explain it: "
                "the recomputed forward is not the forward that ran — typically dropout masks redrawn because the "
                "RNG state was not preserved, a stateful module run twice, a code path that differs under no_grad, "
                "or a non-deterministic recompute.")

    @staticmethod
    def _fix(kind: str) -> str:
        repro = ("For bitwise-reproducible runs: CUBLAS_WORKSPACE_CONFIG=:4096:8, "
                 "torch.use_deterministic_algorithms(True) and a deterministic attention backward.")
        if kind == IDENTICAL:
            return "Nothing to fix."
        if kind in (WITHIN_NOISE, DYNAMICS):
            return ("Nothing to fix: compare runs by their spread over a few seeds, not point by point. " + repro)
        return ("Keep preserve_rng_state=True (the default) when dropout or other random ops run inside checkpointed "
                "regions; keep stateful modules (BatchNorm statistics, caches, MoE router counters) out of "
                "checkpointed regions or make them idempotent; prefer use_reentrant=False; check code that branches "
                "on torch.is_grad_enabled(); do not span several devices in one region. Re-run the probe with "
                "deterministic algorithms to confirm the recompute itself is deterministic.")
