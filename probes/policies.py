"""The checkpointing policy space at the full model, and the recipe confirmed in a fresh process.

1. Per layer (the probe layers, --probe-batch): each policy (probes/_policies.py) is applied for
   real and run for one profiled step: its trace says what it recomputed, the memory counter what
   each layer keeps; both are judged against what the policy implies (PolicyCheck).
2. Each policy's setting gets what moves the boundary without changing the math: fused AdamW
   where the run trains with AdamW, a chunked loss where it raises the predicted largest batch,
   expandable segments on a device (the allocator variable needs a fresh process: the full-model
   measurement below runs with this process's allocator, the confirmation with the setting's). The memory model predicts the full model's largest batch
   from the layer's kept bytes (gcdoctor.model.memory.policy_max_batch).
3. A policy that keeps no fewer bytes than another and was no faster per layer is dropped before
   the full model runs it; the rest are measured once each on the full model at the predicted
   largest batch (one batch lower after an OOM; the target batch, or a divisor of the global
   batch, where the user gave one), fastest per layer first. One not yet measured is dropped as
   soon as a measured one fits at least its predicted batch and was no slower per layer.
4. The recipes are ranked (gcdoctor.recipe.rank_recipes) and the first is confirmed in a fresh
   process (the allocator probe's worker) that runs the whole setting as the user would: the
   allocator variable, the optimizer, the loss, the micro-batch and the accumulation. An OOM or
   tokens/s more than CONFIRM_TOLERANCE_PCT off the prediction (or the steps' own spread, where larger)
   confirms the next one instead.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from gcdoctor.run.capture import TrainingStep, free_memory
from gcdoctor.facts.policies import (CONFIRM_TOLERANCE_PCT, POLICY_OFFLOAD, PolicyCandidate, PolicyFacts, PolicySetting,
                                     RecipeChoice, RecipeConfirmation)
from gcdoctor.facts.serde import from_dict
from gcdoctor.facts.sweep import Measurement
from gcdoctor.facts.views import spread_pct
from gcdoctor.probes import _policies as P

MAX_CONFIRMATIONS = 2  # fresh processes at most (each builds the full model)
CPU_STEPS = 3  # measured steps per candidate on the CPU (after one warm-up); the device's --steps elsewhere


class PoliciesProbe:
    name = "policies"
    description = "checkpointing policies at the full model (predicted, measured, dominated ones dropped), " \
                  "and the recipe confirmed in a fresh process"

    def __init__(self, rank: Callable[..., list[RecipeChoice]] | None = None) -> None:
        self._rank_fn = rank  # tests inject a ranking; otherwise gcdoctor.recipe's

    def applies(self, device_kind: str) -> str | None:
        return None

    def run(self, ctx) -> None:
        t0 = time.monotonic()
        cfg = ctx.config
        facts = ctx.facts.policies = PolicyFacts(target_batch=cfg.target_batch,
                                                 global_batch=getattr(cfg, "global_batch", None))
        kind = ctx.backend.kind
        why_no_compile = "the CPU: compiling costs more than the whole search there, and the CPU's memory " \
                         "counter (a dispatch mode) keeps dynamo from running compiled graphs" if kind == "cpu" \
            else P.compile_unavailable(kind)
        if why_no_compile:
            facts.notes.append(f"the compiler's activation memory budget was not searched: {why_no_compile}")
        policies = P.policies_for(ctx.spec.n_layers, why_no_compile is None)
        checks = self._check_layers(ctx, facts, policies)
        self._predict(ctx, facts, checks)
        self._drop_before_measuring(facts, checks)
        ctx.save()
        self._measure_full(ctx, facts, checks)
        facts.search_seconds = round(time.monotonic() - t0, 1)
        ctx.save()
        t1 = time.monotonic()
        self._confirm(ctx, facts)
        facts.confirm_seconds = round(time.monotonic() - t1, 1)
        ctx.save()

    # 1. per layer -------------------------------------------------------------------------
    def _check_layers(self, ctx, facts: PolicyFacts, policies: list[str]) -> dict[str, P.CheckResult]:
        cfg = ctx.config
        spec = ctx.probe_spec()
        model = ctx.build_model(spec)
        trace_dir = ctx.rundir.file("policies")
        trace_dir.mkdir(parents=True, exist_ok=True)
        checks: dict[str, P.CheckResult] = {}
        try:
            for i, policy in enumerate(policies):
                ctx.check_stop()
                ctx.progress(self.name, f"check/{policy}", cfg.probe_batch, i, len(policies))
                t = time.monotonic()
                try:
                    res = P.check_policy(model, policy, ctx.backend, cfg.probe_batch, ctx.seq_len, spec, ctx.dtype,
                                         _optimizer(ctx), cfg.seed, trace_dir=trace_dir, profile=cfg.profile)
                except Exception as exc:  # noqa: BLE001 - a policy the stack cannot run is a finding
                    if ctx.backend.is_oom(exc):
                        facts.notes.append(f"{policy}: the per-layer check ran out of memory at batch "
                                           f"{cfg.probe_batch} on {spec.n_layers} layers")
                    else:
                        facts.notes.append(f"{policy}: could not be applied: {type(exc).__name__}: "
                                           f"{str(exc).splitlines()[0][:160] if str(exc) else ''}")
                    free_memory(ctx.backend)
                    continue
                checks[policy] = res
                cand = PolicyCandidate(setting=PolicySetting(policy=policy), label=P.policy_label(policy),
                                       check=res.check, seconds=round(time.monotonic() - t, 2))
                facts.candidates.append(cand)
                if res.check.ok is False:
                    ctx.log(f"policies: {policy} does not do what it claims: {res.check.note}", "warning")
        finally:
            del model
            free_memory(ctx.backend)
        facts.notes.append(f"per-layer checks on {spec.n_layers} of {ctx.spec.n_layers} layers at batch "
                           f"{cfg.probe_batch}: one {'profiled ' if cfg.profile else ''}step each (compiled ones after a "
                           "warm-up step)" + ("" if cfg.profile else "; --no-profile: the recomputed regions "
                                              "are those checkpoint entered, not found in a trace"))
        return checks

    # 2. settings and predictions ---------------------------------------------------------------
    def _room(self, ctx) -> int | None:
        from gcdoctor.model import memory as M
        b = ctx.backend
        if b.kind == "cpu":
            return b.memory_limit()
        mm = ctx.facts.memory_model
        total = b.total_memory()
        if total is None:
            return None
        room = M.usable_bytes(total, "cuda", mm.context_bytes if mm is not None else None)
        limit = b.memory_limit()
        return min(room, limit) if limit else room

    def _predict(self, ctx, facts: PolicyFacts, checks: dict[str, P.CheckResult]) -> None:
        from gcdoctor.model import memory as M
        cfg = ctx.config
        kind = ctx.backend.kind
        dev = kind if kind in M.DEVICE_KINDS else "cuda"
        room = self._room(ctx)
        tokens = cfg.probe_batch * ctx.seq_len
        optimizer = _optimizer(ctx)
        # expandable segments on a device: the predicted boundary is the allocated peak's, which they
        # reach (no fragmentation); the confirmation's fresh process runs with them
        allocator = "expandable" if kind in ("cuda", "musa") else "default"
        chunk_ok = P.chunked_loss_supported_spec(ctx.spec)
        cap = cfg.max_batch if room is not None else cfg.probe_batch
        if room is None:
            facts.notes.append(f"no memory wall on the CPU without --memory-limit: each policy is measured at "
                               f"batch {cap} (--probe-batch)")
        for cand in facts.candidates:
            res = checks.get(cand.setting.policy)
            cand.setting.optimizer, cand.setting.allocator = optimizer, allocator
            kept = res.check.saved_bytes_per_layer if res is not None else None
            if kept is None:
                continue
            per_token = kept / tokens
            if room is None:
                cand.predicted_largest_batch = cap
            else:
                plain = M.policy_max_batch(ctx.spec, room, ctx.seq_len, per_token, ctx.dtype, optimizer, dev,
                                           cap=cap)
                chunked = M.policy_max_batch(ctx.spec, room, ctx.seq_len, per_token, ctx.dtype, optimizer, dev,
                                             P.LOSS_CHUNKS, cap=cap) if chunk_ok is None else plain
                cand.setting.chunked_loss = chunked > plain
                cand.predicted_largest_batch = max(plain, chunked)
            b = cand.predicted_largest_batch
            if b:
                cand.predicted_peak_bytes = M.policy_peak_bytes(ctx.spec, b, ctx.seq_len, per_token, ctx.dtype,
                                                                optimizer, dev,
                                                                P.LOSS_CHUNKS if cand.setting.chunked_loss else 1)
        if chunk_ok is not None:
            facts.notes.append(f"no chunked loss: {chunk_ok}")

    # 3. dropping the dominated ---------------------------------------------------------------
    @staticmethod
    def _drop_before_measuring(facts: PolicyFacts, checks: dict[str, P.CheckResult]) -> None:
        """Before the full model: a policy whose layers keep no fewer bytes than another's and whose
        per-layer step was no faster is dropped (one strictly better)."""
        live = _kept_and_timed(facts, checks)
        for c in facts.candidates:
            if c.predicted_largest_batch == 0:
                c.dropped = "does not fit at batch 1 (predicted by the memory model)"
            elif c.check is not None and c.check.ok is False:
                c.dropped = f"does not do what it claims: {c.check.note}"
        for x, kx, tx in live:
            if x.dropped:
                continue
            for y, ky, ty in live:
                if y is x or y.dropped or y.setting.policy == POLICY_OFFLOAD:  # the last resort drops nothing
                    continue
                if ky <= kx and ty <= tx and (ky < kx or ty < tx):
                    x.dropped = (f"dominated by {y.setting.policy} on the probe layers: keeps "
                                 f"{_pct_less(ky, kx)} and steps {_pct_less(ty, tx)} time")
                    break

    # 4. the full model -------------------------------------------------------------------------
    def _measure_full(self, ctx, facts: PolicyFacts, checks: dict[str, P.CheckResult]) -> None:
        cfg = ctx.config
        cpu = ctx.backend.kind == "cpu"
        steps = CPU_STEPS if cpu else min(cfg.measure_steps, 2)
        todo = [c for c in facts.candidates if not c.dropped and c.predicted_largest_batch]
        # the fastest per layer first: a measured fast policy drops slower ones before they run;
        # CPU offload last, and only when nothing else fits
        todo.sort(key=lambda c: (c.setting.policy == POLICY_OFFLOAD, _check_ms(checks, c)))
        if not todo:
            return
        model = ctx.build_model()
        try:
            for i, cand in enumerate(todo):
                ctx.check_stop()
                if cand.dropped:  # by one measured before it
                    continue
                if cand.setting.policy == POLICY_OFFLOAD and any(
                        c.largest_batch for c in facts.candidates if c.measurement is not None):
                    cand.dropped = "the last resort: measured only when no other policy fits"
                    continue
                t = time.monotonic()
                largest = cand.predicted_largest_batch
                assert largest  # todo holds only candidates predicted to fit
                batch = self._batch_for(facts, largest)
                try:
                    for attempt in range(2):
                        ctx.progress(self.name, cand.setting.policy, batch, i, len(todo), message="full model")
                        m = self._measure_one(ctx, model, cand.setting, batch, steps)
                        if m.fits or batch <= 1 or attempt:
                            break
                        batch = self._batch_for(facts, batch - 1)
                except (RuntimeError, ValueError, TypeError, AssertionError) as exc:
                    # the stack cannot run this policy on the full model (a compiler failure): a finding
                    first = (str(exc).splitlines() or [""])[0][:160]
                    cand.dropped = f"failed on the full model: {type(exc).__name__}: {first}"
                    free_memory(ctx.backend)
                    continue
                cand.measurement = m
                cand.largest_batch = m.batch_size if m.fits else None
                cand.seconds = round((cand.seconds or 0.0) + time.monotonic() - t, 2)
                if not m.fits:
                    cand.dropped = f"ran out of memory at batch {m.batch_size} (predicted {cand.predicted_largest_batch})"
                else:
                    self._drop_unmeasured(facts, checks, cand)
                ctx.save()
        finally:
            del model
            free_memory(ctx.backend)

    @staticmethod
    def _batch_for(facts: PolicyFacts, largest: int) -> int:
        """The batch to measure a candidate at: the target batch where it fits; with a global batch,
        the largest micro-batch up to `largest` that divides it; else `largest`."""
        if facts.target_batch:
            return min(facts.target_batch, largest)
        if facts.global_batch:
            return max((b for b in range(1, largest + 1) if facts.global_batch % b == 0), default=1)
        return largest

    @staticmethod
    def _drop_unmeasured(facts: PolicyFacts, checks: dict[str, P.CheckResult], y: PolicyCandidate) -> None:
        """After `y` was measured: a candidate not yet measured that is predicted to fit no larger a
        batch than `y` does and was no faster per layer is dropped (measured ones stay: the recipe
        ranks them, the plot shows them)."""
        ty = _check_ms(checks, y)
        for x in facts.candidates:
            if x.dropped or x.measurement is not None or not x.predicted_largest_batch:
                continue
            if x.predicted_largest_batch <= (y.largest_batch or 0) and ty <= _check_ms(checks, x):
                x.dropped = (f"dominated by {y.setting.policy}: it fits batch {y.largest_batch} on the full model "
                             f"(this one {x.predicted_largest_batch}, predicted) and was no slower per layer")

    def _measure_one(self, ctx, model: Any, setting: PolicySetting, batch: int, steps: int) -> Measurement:
        cfg = ctx.config
        undo = P.apply_policy(model, setting.policy, device_kind=ctx.backend.kind)
        forward = P.chunked_causal_lm_loss if setting.chunked_loss else None
        try:
            return ctx.measure(self.name, setting.key, lambda: TrainingStep(
                model, ctx.backend, batch, ctx.seq_len, setting.optimizer, cfg.seed, forward=forward), batch,
                warmup=1, steps=steps)
        finally:
            undo()

    # 5. the recipe, confirmed ------------------------------------------------------------------
    def _rank(self, facts: PolicyFacts, seq_len: int) -> list[RecipeChoice]:
        if self._rank_fn is not None:
            return self._rank_fn(facts, seq_len=seq_len)
        from gcdoctor.recipe import rank_recipes  # the recipe chooser (torch-free), shared with GC007
        return rank_recipes(facts, seq_len=seq_len)

    def _confirm(self, ctx, facts: PolicyFacts) -> None:
        ranked = self._rank(facts, ctx.seq_len)
        if not ranked:
            facts.notes.append("no recipe to confirm: no policy was measured to fit")
            return
        for choice in ranked[:MAX_CONFIRMATIONS]:
            ctx.check_stop()
            ctx.progress(self.name, "confirm", choice.micro_batch, message=f"fresh process: {choice.setting.key}")
            conf = self._confirm_one(ctx, choice)
            facts.confirmations.append(conf)
            ctx.save()
            if conf.rejected is None:
                return
            ctx.log(f"policies: the recipe {choice.setting.key} at micro-batch {choice.micro_batch} was not "
                    f"confirmed: {conf.rejected}", "warning")

    def _confirm_one(self, ctx, choice: RecipeChoice) -> RecipeConfirmation:
        from gcdoctor.probes.allocator import ALLOC_CONF, run_worker
        from gcdoctor.model.allocator import alloc_conf_env
        s = choice.setting
        label = f"confirm-{len(ctx.facts.policies.confirmations)}"
        out = ctx.rundir.file(f"policies/{label}")
        out.mkdir(parents=True, exist_ok=True)
        cfg = ctx.config.to_dict()
        cpu = ctx.backend.kind == "cpu"
        cfg.update(model=ctx.session.resolved.model, dtype=ctx.dtype, seq_len=ctx.seq_len, profile=False,
                   out=str(out), warmup_steps=1, measure_steps=CPU_STEPS if cpu else min(ctx.config.measure_steps, 2),
                   tui=False, probes=["sweep"], batch_sizes=None)
        work = {"config": cfg, "variant": "recipe", "batches": [choice.micro_batch], "mode": "list",
                "optimizer": s.optimizer,
                "setting": {"policy": s.policy, "chunked_loss": s.chunked_loss},
                "accumulation": choice.accumulation}
        (out / "work.json").write_text(json.dumps(work, indent=1))
        env = dict(os.environ)
        var = alloc_conf_env(ctx.backend.kind)
        conf = ALLOC_CONF.get(s.allocator, "")
        if conf:
            env[var] = conf
        else:
            env.pop(var, None)
        c = RecipeConfirmation(choice=choice)
        t = time.monotonic()
        result = run_worker(out / "work.json", env, ctx.check_stop)
        c.seconds = round(time.monotonic() - t, 1)
        if isinstance(result, str):
            c.fits, c.rejected = None, f"the fresh process failed: {result}"
            return c
        ms = [from_dict(Measurement, m) for m in result["measurements"]]
        m = ms[0] if ms else None
        if m is None or not m.fits:
            c.fits = False
            c.rejected = f"ran out of memory at micro-batch {choice.micro_batch}" + (
                f" ({m.oom_phase})" if m is not None and m.oom_phase else "")
            return c
        c.fits = True
        c.step_ms = list(m.step_ms)
        c.peak_allocated_bytes, c.peak_reserved_bytes = m.peak_allocated_bytes, m.peak_reserved_bytes
        if m.step_ms_median:
            c.tokens_per_s = choice.accumulation * choice.micro_batch * ctx.seq_len / (m.step_ms_median / 1e3)
        if c.tokens_per_s and choice.predicted_tokens_per_s:
            c.off_pct = round(100.0 * (c.tokens_per_s / choice.predicted_tokens_per_s - 1.0), 1)
            # a difference inside the steps' own spread is noise, not a wrong prediction
            measured = next((x.measurement for x in ctx.facts.policies.candidates
                             if x.setting == s and x.measurement is not None), None)
            noise = max(_noise_pct(c.step_ms), _noise_pct(measured.step_ms if measured is not None else []))
            c.tolerance_pct = round(max(CONFIRM_TOLERANCE_PCT, noise), 1)
            if abs(c.off_pct) > c.tolerance_pct:
                why = (f"{c.tolerance_pct:g} %, the steps' own spread" if noise > CONFIRM_TOLERANCE_PCT
                       else f"{CONFIRM_TOLERANCE_PCT:g} %")
                c.rejected = (f"{c.tokens_per_s:,.0f} tokens/s confirmed against {choice.predicted_tokens_per_s:,.0f} "
                              f"predicted ({c.off_pct:+.1f} %, more than {why} off)")
        return c


def _optimizer(ctx) -> str:
    """The optimizer of every setting: fused AdamW where the run trains with AdamW and the backend
    has the kernel (the same update, without foreach's parameter-sized temporaries)."""
    cfg = ctx.config
    return "adamw-fused" if cfg.optimizer == "adamw" and ctx.backend.kind in ("cuda", "cpu") else cfg.optimizer


def _check_ms(checks: dict[str, P.CheckResult], c: PolicyCandidate) -> float:
    res = checks.get(c.setting.policy)
    return res.step_ms if res is not None and res.step_ms is not None else float("inf")


def _kept_and_timed(facts: PolicyFacts, checks: dict[str, P.CheckResult]) -> list[tuple[PolicyCandidate, int, float]]:
    """(candidate, bytes its layers keep, per-layer step ms) of the candidates whose check measured both."""
    out = []
    for c in facts.candidates:
        if c.check is None or c.check.saved_bytes_per_layer is None:
            continue
        ms = checks[c.setting.policy].step_ms
        if ms is not None:
            out.append((c, c.check.saved_bytes_per_layer, ms))
    return out


def _noise_pct(step_ms: list[float]) -> float:
    """The steps' spread without the slowest one: a lone slow step (a page fault, another process
    on the host) does not move the median that tokens/s come from, so it must not widen the
    tolerance either (one such step once let a 95 % miss pass). Two steps or fewer: 0."""
    return spread_pct(sorted(step_ms)[:-1])


def _pct_less(a: float, b: float) -> str:
    if b <= 0:
        return "as much"
    d = 100.0 * (1.0 - a / b)
    return "as much" if abs(d) < 0.5 else f"{abs(d):.0f} % {'less' if d > 0 else 'more'}"


__all__ = ["PoliciesProbe"]
