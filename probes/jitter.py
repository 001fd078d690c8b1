"""Jitter probe: do losses and gradients change when checkpointing is turned on?

Short training runs that differ only in what is compared: same initial weights (one model,
its initial state reloaded before each run), same global seed, same token batch per step, a
fresh optimizer each time. Runs:

- no_gc_a, no_gc_b: checkpointing off, twice: the run-to-run noise of this device and setting;
- gc: layer checkpointing (use_reentrant=False, preserve_rng_state=True, the defaults);
- no_gc_det, gc_det: both under `torch.use_deterministic_algorithms(True, warn_only=True)`, to
  show what non-deterministic kernels contribute;
- with attention dropout: no_gc_dropout (twice, for its own noise floor),
  gc_dropout_rng_preserved, and gc_dropout_no_rng (preserve_rng_state=False: the recompute
  draws a different dropout mask; the control that the loss-jitter rule must catch).

Losses are recorded at every step; gradients are compared with the reference run after the
first backward, before the optimizer step, while both runs still have identical weights.
The probe measures; rules/loss_jitter.py (GC030) judges.
"""
from __future__ import annotations

import os
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any

from gcdoctor.run.capture import TrainingStep, enable_layer_checkpointing, free_memory, make_optimizer
from gcdoctor.facts.jitter import JitterComparison, JitterFacts, JitterRun

STEPS = 8
DROPOUT_P = 0.1  # a common attention-dropout value; makes a lost RNG state visible in gradients
MAX_WARNINGS = 5  # distinct warnings kept per run


@dataclass(frozen=True)
class RunPlan:
    """One run of the probe and the comparison it feeds."""

    name: str
    checkpointing: bool = False
    preserve_rng_state: bool = True
    dropout: bool = False
    deterministic: bool = False
    micro_batches: int = 1
    role: str | None = None  # comparison role; None: a reference run
    reference: str | None = None
    baseline: str | None = None


def default_plan(gc_micro_batches: int = 1, dropout: bool = True, deterministic: bool = True) -> list[RunPlan]:
    """The runs, in order. References come before the runs compared with them; runs without
    dropout come first (one model), then the dropout runs (a second model, same weights).

    `gc_micro_batches` > 1 splits the batch of every checkpointed run into accumulated
    micro-batches: the same gradient summed in a different order. It exists to record a real,
    benign difference on devices where checkpointing alone is bitwise transparent (the CPU).
    """
    m = gc_micro_batches
    plan = [
        RunPlan("no_gc_a"),
        RunPlan("no_gc_b", role="baseline", reference="no_gc_a"),
        RunPlan("gc", checkpointing=True, micro_batches=m, role="main", reference="no_gc_a", baseline="no_gc_b"),
    ]
    if deterministic:
        plan += [
            RunPlan("no_gc_det", deterministic=True),
            RunPlan("gc_det", checkpointing=True, deterministic=True, micro_batches=m, role="deterministic",
                    reference="no_gc_det", baseline="no_gc_b"),
        ]
    if dropout:
        plan += [
            RunPlan("no_gc_dropout", dropout=True),
            RunPlan("no_gc_dropout_b", dropout=True, role="dropout_baseline", reference="no_gc_dropout"),
            RunPlan("gc_dropout_rng_preserved", checkpointing=True, dropout=True, micro_batches=m, role="dropout",
                    reference="no_gc_dropout", baseline="no_gc_dropout_b"),
            RunPlan("gc_dropout_no_rng", checkpointing=True, preserve_rng_state=False, dropout=True,
                    micro_batches=m, role="dropout_control", reference="no_gc_dropout", baseline="no_gc_dropout_b"),
        ]
    return plan


def param_group(name: str) -> str:
    """Gradient group of a parameter: layer<i> for decoder layers, else embed/final_norm/lm_head/..."""
    m = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
    if m:
        return f"layer{m.group(1)}"
    parts = name.split(".")
    if parts[0] == "model" and len(parts) > 1:
        parts = parts[1:]
    return {"embed_tokens": "embed", "norm": "final_norm"}.get(parts[0], parts[0])


class JitterProbe:
    name = "jitter"
    description = "loss and gradient differences with checkpointing on vs off, against run-to-run noise"

    def __init__(self, steps: int | None = None, dropout_p: float = DROPOUT_P, dropout: bool = True,
                 deterministic: bool | None = None, gc_micro_batches: int = 1) -> None:
        """`steps` None: 8; `deterministic` None: the deterministic-algorithm runs on devices only
        (CPU kernels are deterministic already: the runs would repeat no_gc_a and gc)."""
        self.steps = steps
        self.dropout_p = dropout_p
        self.dropout, self.deterministic, self.gc_micro_batches = dropout, deterministic, gc_micro_batches
        self.plan: list[RunPlan] = []

    def applies(self, device_kind: str) -> str | None:
        return None

    def run(self, ctx) -> None:
        import torch

        from gcdoctor.model.registry import torch_dtype

        t_start = time.monotonic()
        cfg, backend = ctx.config, ctx.backend
        spec = ctx.probe_spec()
        steps = self.steps or STEPS
        batch = cfg.probe_batch
        deterministic = self.deterministic if self.deterministic is not None else backend.kind != "cpu"
        self.plan = default_plan(self.gc_micro_batches, dropout=self.dropout, deterministic=deterministic)
        most = max(p.micro_batches for p in self.plan)
        if most > batch:
            raise ValueError(f"{most} micro-batches need a probe batch of at least {most}, not {batch}")
        eps = torch.finfo(torch_dtype(ctx.dtype)).eps
        facts = JitterFacts(
            steps=steps, batch_size=batch, seq_len=ctx.seq_len, dtype=ctx.dtype, dtype_eps=eps,
            unit_roundoff=eps / 2, optimizer=cfg.optimizer, seed=cfg.seed, n_layers=spec.n_layers,
            dropout_p=self.dropout_p if any(p.dropout for p in self.plan) else None,
            cublas_workspace_config=os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
        ctx.facts.jitter = facts
        if not deterministic:
            why = ": CPU kernels are deterministic already" if backend.kind == "cpu" else ""
            facts.notes.append(f"no runs with deterministic algorithms{why}")
        if most > 1:
            facts.notes.append(f"checkpointed runs split each batch into {most} accumulated micro-batches: "
                               "the same gradient summed in another order")

        # the same token batch at step i in every run, independent of any global RNG
        batches = [torch.randint(spec.vocab_size, (batch, ctx.seq_len), generator=torch.Generator().manual_seed(
            cfg.seed * 100_003 + i)).to(backend.device) for i in range(steps)]
        runner = _Runner(ctx, facts, batches, spec, self.plan)
        try:
            for i, plan in enumerate(self.plan):
                ctx.check_stop()
                ctx.progress(self.name, plan.name, batch, i, len(self.plan))
                runner.run(i)
                _compare_losses(facts)
                facts.wall_s = round(time.monotonic() - t_start, 2)
                ctx.save()
        finally:
            runner.close()


class _Runner:
    """Holds the model, its initial state and the reference gradients between runs."""

    def __init__(self, ctx, facts: JitterFacts, batches: list, spec, plan: list[RunPlan]) -> None:
        self.ctx, self.facts, self.batches, self.spec, self.plan = ctx, facts, batches, spec, plan
        self.model: Any = None
        self.model_dropout: bool | None = None
        self.init_state: dict[str, Any] | None = None
        self.copy_device: Any = None  # where the initial state and reference gradients are kept
        self.refs: dict[str, list[Any]] = {}  # run name -> its first-step gradients
        self.gc_state: tuple[bool, bool] | None = None  # (on, preserve_rng_state) as set on the model now

    def close(self) -> None:
        self.model = self.init_state = None
        self.refs.clear()
        free_memory(self.ctx.backend)

    # model -------------------------------------------------------------------------------
    def _model_for(self, plan: RunPlan) -> Any:
        """The model with the initial weights, no gradients, and checkpointing set as planned."""
        import torch

        if self.model is None or self.model_dropout != plan.dropout:
            self.model = None
            free_memory(self.ctx.backend)
            self.model = self.ctx.build_model(self.spec, dropout=self.facts.dropout_p if plan.dropout else None)
            self.model_dropout, self.gc_state = plan.dropout, (False, True)
            if self.init_state is None:
                self._snapshot(self.model)
        with torch.no_grad():
            self.model.load_state_dict(self.init_state)
        for p in self.model.parameters():
            p.grad = None
        state = (plan.checkpointing, plan.preserve_rng_state)
        if state != self.gc_state:
            if plan.checkpointing:
                extra = {} if plan.preserve_rng_state else {"preserve_rng_state": False}
                api = enable_layer_checkpointing(self.model, labelled=False, extra_kwargs=extra)
                if plan.preserve_rng_state and not self.facts.gc_api:
                    self.facts.gc_api = api
            else:
                off = getattr(self.model, "activation_checkpointing_disable", None)
                (off or self.model.gradient_checkpointing_disable)()
            self.gc_state = state
        return self.model

    def _snapshot(self, model: Any) -> None:
        """Copy the initial weights: on the device when it has room for them and the reference
        gradients with the training states beside them, else on the host."""
        b = self.ctx.backend
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        total, used = b.total_memory(), b.memory_allocated()
        # the two copies, the run's own gradients and AdamW states, plus activations: 8x is ample
        room = b.kind == "cpu" or total is None or used is None or total - used > 8 * param_bytes
        self.copy_device = None if room else "cpu"
        self.facts.reference_grads_on = "device" if room else "host"
        self.init_state = {k: v.detach().to(self.copy_device or v.device, copy=True)
                           for k, v in model.state_dict().items()}

    # one run -----------------------------------------------------------------------------
    def run(self, index: int) -> None:
        import torch

        plan, ctx, facts = self.plan[index], self.ctx, self.facts
        b = ctx.backend
        dropout = facts.dropout_p if plan.dropout else 0.0
        assert dropout is not None  # dropout_p is recorded when a run of the plan has dropout
        record = JitterRun(name=plan.name, checkpointing=plan.checkpointing,
                           preserve_rng_state=plan.preserve_rng_state if plan.checkpointing else None,
                           dropout=dropout, deterministic=plan.deterministic,
                           micro_batches=plan.micro_batches)
        facts.runs.append(record)
        comparison = None
        if plan.role is not None:
            comparison = JitterComparison(name=plan.name, role=plan.role, run=plan.name,
                                          reference=plan.reference or "", baseline=plan.baseline)
            facts.comparisons.append(comparison)
        later = self.plan[index + 1:]
        keep_ref = any(p.reference == plan.name for p in later)
        model = self._model_for(plan)
        optimizer = make_optimizer(model.parameters(), ctx.config.optimizer)
        facts.lr = optimizer.param_groups[0]["lr"]
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        params = [p for p in model.parameters() if p.requires_grad]
        at = {"step": 0}

        def optimizer_step() -> None:
            if at["step"] == 0:  # after the first backward, before any update: same weights everywhere
                grads = [p.grad for p in params]
                if comparison is not None and plan.reference in self.refs:
                    _compare_grads(comparison, names, grads, self.refs[plan.reference])
                if keep_ref:
                    self.refs[plan.name] = [None if g is None else g.detach().to(self.copy_device or g.device,
                                                                                  copy=True) for g in grads]
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        forward = _micro_batched_loss(plan.micro_batches) if plan.micro_batches > 1 else None
        step = TrainingStep(model, b, facts.batch_size, facts.seq_len, optimizer_obj=optimizer,
                            optimizer_step=optimizer_step, forward=forward)
        previous = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if plan.deterministic:
                    torch.use_deterministic_algorithms(True, warn_only=True)
                torch.manual_seed(ctx.config.seed)  # the same CPU and device RNG state (dropout masks) in every run
                for i, ids in enumerate(self.batches):
                    at["step"] = i
                    step.input_ids = ids
                    rec = step.run()
                    record.losses.append(rec.loss)
                    record.step_ms.append(round(rec.step_ms, 3))
        except Exception as exc:  # noqa: BLE001 - an OOM ends this run, not the probe
            if not b.is_oom(exc):
                raise
            record.error = f"out of memory in {step.phase}: {str(exc).splitlines()[0][:200]}"
            ctx.facts.unavailable[f"jitter.runs.{plan.name}"] = record.error
            ctx.log(f"jitter: run {plan.name} ran out of memory", "warning")
        finally:
            torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
            step.release()
            del step, optimizer
        record.warnings = _distinct_warnings(caught or [])
        for name in list(self.refs):  # drop references no later run needs
            if not any(p.reference == name for p in later):
                del self.refs[name]
        free_memory(b)


def _micro_batched_loss(n: int):
    """A forward that splits the batch into n micro-batches, back-propagates all but the last
    itself and returns the mean loss whose backward adds the last one (gradient accumulation)."""
    from gcdoctor.run.capture import _causal_lm_loss

    def forward(model, input_ids):
        parts = input_ids.chunk(n)
        done: Any = 0.0  # a float, then a tensor once a micro-batch is done
        for part in parts[:-1]:
            loss = _causal_lm_loss(model, part) / n
            loss.backward()
            done = done + loss.detach()
        return _causal_lm_loss(model, parts[-1]) / n + done

    return forward


def _compare_grads(c: JitterComparison, names: list[str], grads: list, refs: list) -> None:
    """Relative L2 (overall and per group), max |diff|, bitwise equality; in fp32, per tensor."""
    import torch

    groups: dict[str, list[float]] = {}
    diff_sq = ref_sq = 0.0
    max_diff = ref_max = 0.0
    equal = True
    differing = total = 0
    for name, g, r in zip(names, grads, refs):
        if g is None or r is None:
            equal = equal and g is None and r is None
            continue
        r = r.to(g.device)
        same = torch.equal(g, r)
        equal = equal and same
        total += g.numel()
        gf, rf = g.float(), r.float()
        r_sq = float(rf.pow(2).sum())
        if same:
            d_sq = 0.0
        else:
            d = gf - rf
            d_sq = float(d.pow(2).sum())
            max_diff = max(max_diff, float(d.abs().max()))
            differing += int((g != r).sum())
            del d
        ref_max = max(ref_max, float(rf.abs().max()) if rf.numel() else 0.0)
        acc = groups.setdefault(param_group(name), [0.0, 0.0])
        acc[0] += d_sq
        acc[1] += r_sq
        diff_sq += d_sq
        ref_sq += r_sq
    c.grads_bitwise_equal = equal
    c.grad_rel_l2 = (diff_sq / ref_sq) ** 0.5 if ref_sq > 0 else None
    c.grad_max_abs_diff = max_diff
    c.grad_ref_max_abs = ref_max
    c.grad_elements, c.grad_elements_differing = total, differing
    c.grad_rel_l2_by_group = {k: (d / r) ** 0.5 for k, (d, r) in groups.items() if r > 0}


def _compare_losses(facts: JitterFacts) -> None:
    for c in facts.comparisons:
        run, ref = facts.run(c.run), facts.run(c.reference)
        if run is None or ref is None:
            continue
        n = min(len(run.losses), len(ref.losses))
        c.loss_abs_diff = [abs(run.losses[i] - ref.losses[i]) for i in range(n)]
        c.loss_step0_equal = run.losses[0] == ref.losses[0] if n else None
        c.losses_equal = n == facts.steps and all(run.losses[i] == ref.losses[i] for i in range(n))
        c.first_loss_diff_step = next((i for i in range(n) if run.losses[i] != ref.losses[i]), None)


def _distinct_warnings(caught: list) -> list[str]:
    out: list[str] = []
    for w in caught:
        text = str(w.message).splitlines()[0][:240]
        if text not in out:
            out.append(text)
        if len(out) >= MAX_WARNINGS:
            break
    return out
