"""GC007 from the policy search (facts.policies): the recipe, one whole setting, said with its
confirmation (or plainly unconfirmed), what it beats, and why an earlier candidate was rejected."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.policies import CONFIRM_TOLERANCE_PCT, PolicyFacts, RecipeChoice, RecipeConfirmation
from gcdoctor.recipe import (ASSUMED, batch_words, describe, extras_words, largest_batch_recipe, pick, points,
                             policy_words, rank_recipes, rejected, same)
from gcdoctor.units import fmt_bytes

# which verdicts a recipe folds in: the bottom line does not repeat them
FOLDS = {"allocator": "GC009", "optimizer": "GC008", "chunked_loss": "GC002"}
# the smallest change first, when nothing fits: the same training on the same devices (8-bit states, the
# optimizer on the host), then a lighter training (adapters, another optimizer), then more devices
CHANGE_ORDER = ("adamw-8bit", "zero-offload", "lora", "adafactor", "sgd", "shard")


def _devices(facts: Facts) -> int:
    return facts.distributed.world_size if facts.distributed is not None else 1


def _tok(x: float | None) -> str:
    return "?" if x is None else f"{x:,.0f}"


def _gib(x: int | None) -> str:
    return "?" if x is None else fmt_bytes(x, gib_digits=1)


def _figures(choice: RecipeChoice, conf: RecipeConfirmation | None) -> str:
    """'9,702 tok/s, peak 131.2 GiB confirmed (predicted 9,688, 130.9 GiB)' or '... predicted, unconfirmed'."""
    if conf is not None and conf.tokens_per_s is not None and conf.rejected:
        off = f"{conf.off_pct:+.0f} % " if conf.off_pct is not None else ""
        return (f"{_tok(conf.tokens_per_s)} tok/s in a fresh process, {off}off the predicted "
                f"{_tok(choice.predicted_tokens_per_s)}: not confirmed")
    if conf is not None and conf.tokens_per_s is not None:
        peak = f", peak {_gib(conf.peak_allocated_bytes)}" if conf.peak_allocated_bytes is not None else ""
        noisy = (conf.off_pct is not None and conf.tolerance_pct is not None
                 and abs(conf.off_pct) > CONFIRM_TOLERANCE_PCT)
        within = f" within the steps' {conf.tolerance_pct:g} % spread" if noisy else ""
        return (f"{_tok(conf.tokens_per_s)} tok/s{peak} confirmed{within} (predicted "
                f"{_tok(choice.predicted_tokens_per_s)}"
                + (f", {_gib(choice.predicted_peak_bytes)})" if choice.predicted_peak_bytes is not None else ")"))
    peak = f", peak {_gib(choice.predicted_peak_bytes)}" if choice.predicted_peak_bytes is not None else ""
    return f"{_tok(choice.predicted_tokens_per_s)} tok/s{peak} predicted, unconfirmed"


def _rival(choice: RecipeChoice, ranked: list[RecipeChoice], alt: RecipeChoice | None) -> RecipeChoice | None:
    """What the recipe is compared with: the largest-batch alternative when the target was assumed
    (and differs), else the fastest setting of another policy."""
    if choice.target == ASSUMED and alt is not None and not same(alt, choice):
        return alt
    return next((c for c in ranked if c.setting.policy != choice.setting.policy), None)


def _speed(choice: RecipeChoice, conf: RecipeConfirmation | None) -> float | None:
    if conf is not None and conf.tokens_per_s is not None:
        return conf.tokens_per_s
    return choice.predicted_tokens_per_s


def _evidence(pf: PolicyFacts, facts: Facts) -> list[Evidence]:
    ev = []
    target = (f"batch {pf.target_batch} per device (--target-batch)" if pf.target_batch is not None
              else f"global batch {pf.global_batch} (--global-batch)" if pf.global_batch is not None
              else ASSUMED)
    ev.append(Evidence("target", target))
    for c in pf.candidates:
        name = c.label or policy_words(c.setting.policy)
        extras = extras_words(c.setting)
        if extras:
            name += f" ({', '.join(extras)})"
        m = c.measurement
        if c.dropped:
            text = f"dropped: {c.dropped}"
        elif m is None or not m.fits:
            text = "no measured batch fits" if m is not None else "not measured"
        else:
            text = f"batch {m.batch_size}: {_tok(m.tokens_per_s)} tok/s, peak {_gib(m.peak_allocated_bytes)}"
            if c.predicted_largest_batch is not None:
                text += f" (predicted largest batch {c.predicted_largest_batch})"
        if c.check is not None and c.check.ok is False:
            text += f"; does not do what it claims: {c.check.note or 'its trace disagrees'}"
        ev.append(Evidence(name, text))
    for i, conf in enumerate(pf.confirmations, 1):
        what = describe(conf.choice)
        if conf.rejected or conf.fits is False:
            ev.append(Evidence(f"confirmation {i}", f"{what}: rejected ({conf.rejected or 'out of memory'})"))
        else:
            off = f", {conf.off_pct:+.1f}% against predicted" if conf.off_pct is not None else ""
            ev.append(Evidence(f"confirmation {i}", f"{what}: {_tok(conf.tokens_per_s)} tok/s, peak "
                                                    f"{_gib(conf.peak_allocated_bytes)}{off}"))
    if pf.search_seconds is not None:
        ev.append(Evidence("policy search", pf.search_seconds, "s"))
    if pf.confirm_seconds is not None:
        ev.append(Evidence("confirmation", pf.confirm_seconds, "s"))
    return ev


def _how(choice: RecipeChoice, facts: Facts) -> str:
    """The recommendation: each setting the job changes, in words a training script maps to code."""
    from gcdoctor.model.allocator import expandable_setting
    s = choice.setting
    parts = []
    if s.allocator == "expandable":
        parts.append(f"set {expandable_setting(facts.environment.device_kind or 'cuda')} in the job's environment "
                     "before the device initialises")
    policy = {"none": "turn checkpointing off", "layer": "checkpoint every decoder layer (use_reentrant=False)",
              "cpu-offload": "offload saved activations to pinned host memory"}.get(
        s.policy, f"apply {policy_words(s.policy)}")
    parts.append(policy)
    if s.optimizer == "adamw-fused":
        parts.append("build the optimizer as torch.optim.AdamW(..., fused=True)")
    elif s.optimizer == "adamw-forloop":
        parts.append("build the optimizer as torch.optim.AdamW(..., foreach=False)")
    if s.chunked_loss:
        parts.append("compute the loss in chunks of the sequence")
    if choice.accumulation > 1:
        parts.append(f"train at micro-batch {choice.micro_batch} per device with {choice.accumulation} "
                     "gradient-accumulation steps")
    else:
        parts.append(f"train at per-device batch {choice.micro_batch}")
    return ("; ".join(parts) + ". `gcdoctor recipe RUN` prints this as TrainingArguments, a PyTorch snippet "
            "or JSON.")


def judge_recipe(rule: Rule, facts: Facts) -> Verdict:
    pf = facts.policies
    assert pf is not None
    seq = facts.settings.seq_len or 1
    choice, conf, ranked = pick(pf, seq_len=seq, devices=_devices(facts))
    ev = _evidence(pf, facts)
    if choice is None:
        return _nothing_fits(rule, facts, pf, ev)
    alt = largest_batch_recipe(pf, seq_len=seq) if choice.target == ASSUMED else None
    rival = _rival(choice, ranked, alt)
    speed = _speed(choice, conf)
    line = f"{describe(choice)}: {_figures(choice, conf)}"
    why = []
    if choice.target == ASSUMED:
        why.append("No --target-batch or --global-batch was given: the recipe is the fastest setting per token, "
                   "which assumes gradient accumulation reaches your global batch.")
    else:
        why.append(f"The target is {choice.target}.")
    if rival is not None and speed and rival.predicted_tokens_per_s:
        rel = 100.0 * (speed / rival.predicted_tokens_per_s - 1.0)
        tag = " (the largest batch)" if rival is alt else ""
        line += (f"; {rel:+.0f} % over {policy_words(rival.setting.policy)} at {batch_words(rival)}{tag}")
        why.append(f"It runs {rel:+.0f}% against {describe(rival)}{tag} at "
                   f"{_tok(rival.predicted_tokens_per_s)} tokens/s.")
    if conf is not None and conf.rejected:
        why.append(f"A fresh process ran the whole setting but did not confirm it: {conf.rejected}. No other "
                   "setting was left to confirm, so it stands, with figures that disagree.")
    elif conf is not None:
        off = f" ({conf.off_pct:+.1f}% against the prediction)" if conf.off_pct is not None else ""
        why.append(f"A fresh process ran the whole setting: {_tok(conf.tokens_per_s)} tokens/s, peak "
                   f"{_gib(conf.peak_allocated_bytes)}{off}.")
    else:
        why.append("It is unconfirmed: no fresh process ran the whole setting, so the figures are the search's "
                   "measurement of each part, not of the composition.")
    for r in rejected(pf):
        if r is conf:
            continue
        why.append(f"{describe(r.choice).capitalize()} was confirmed first and rejected: "
                   f"{r.rejected or 'out of memory'}.")
    folds = sorted({FOLDS["allocator"]} if choice.setting.allocator != "default" else set())
    if choice.setting.optimizer != "adamw":
        folds.append(FOLDS["optimizer"])
    if choice.setting.chunked_loss:
        folds.append(FOLDS["chunked_loss"])
    state = ("confirmed" if conf is not None and not conf.rejected else
             "not confirmed: off the prediction" if conf is not None else "predicted, unconfirmed")
    how = _how(choice, facts)
    v = rule.fired("info", f"Use {describe(choice)}: {_tok(speed)} tokens/s ({state})", ev, " ".join(why),
                   how[0].upper() + how[1:], line=line)
    v.folds = sorted(set(folds))
    v.mark = "use" if state == "confirmed" else "try"
    return v


def _nothing_fits(rule: Rule, facts: Facts, pf: PolicyFacts, ev: list[Evidence]) -> Verdict:
    """No measured setting meets the target: the smallest change that does, with numbers."""
    seq = facts.settings.seq_len or 1
    pts = points(pf)
    ranked = rank_recipes(pf, seq_len=seq, devices=_devices(facts))
    if ranked:  # every setting that meets the target ran out of memory when confirmed
        first = rejected(pf)[0]
        line = (f"no recipe: every setting measured to fit ran out of memory in a fresh process (first: "
                f"{describe(first.choice)})")
        return rule.fired("warning", "No recipe: every setting measured to fit ran out of memory in a fresh process",
                          ev, "The search measured them in its own process; a fresh process, as a training job "
                              "starts, did not fit them: the boundary depends on the process's history.",
                          "Train one batch below the search's and re-run gcdoctor diagnose; with the default "
                          "allocator, expandable segments often hold the batch a fresh process cannot.",
                          line=line)
    if pts and pf.target_batch is not None:
        top = max(pts, key=lambda p: (p.batch, p.tokens_per_s))
        acc = rank_recipes(pf, seq_len=seq, global_batch=pf.target_batch)
        line = (f"no measured setting fits batch {pf.target_batch} per device: the largest is {top.batch} "
                f"({policy_words(top.candidate.setting.policy)})")
        fix = "Lower the per-device batch and accumulate gradients, or shard the model states (see GC004)."
        if acc:
            line += f"; {batch_words(acc[0])} reaches it at {_tok(acc[0].predicted_tokens_per_s)} tok/s"
            fix = (f"Reach {pf.target_batch} sequences per optimizer step with {describe(acc[0])}: "
                   f"{_tok(acc[0].predicted_tokens_per_s)} tokens/s predicted (unconfirmed).")
        return rule.fired("warning", f"No measured setting fits batch {pf.target_batch} per device", ev,
                          f"The largest batch any measured setting fits is {top.batch}.", fix, line=line)
    if pts and pf.global_batch is not None:
        per = pf.global_batch // _devices(facts) if pf.global_batch % _devices(facts) == 0 else None
        batches = sorted({p.batch for p in pts})
        line = (f"no measured micro-batch ({', '.join(map(str, batches))}) divides global batch {pf.global_batch}"
                + (f" over {_devices(facts)} devices" if _devices(facts) > 1 else ""))
        return rule.fired("warning", line[0].upper() + line[1:], ev,
                          "Gradient accumulation reaches a global batch only in whole micro-batches."
                          + (f" Each device needs {per} sequences per step." if per else ""),
                          "Pick a global batch a measured micro-batch divides, or re-run with --target-batch.",
                          line=line)
    return _smallest_change(rule, facts, ev)


def _smallest_change(rule: Rule, facts: Facts, ev: list[Evidence]) -> Verdict:
    """Nothing fits batch 1: the memory model's options (GC004's list), best first."""
    mm = facts.memory_model
    fits = sorted((o for o in (mm.fit_options if mm is not None else []) if o.fits),
                  key=lambda o: (CHANGE_ORDER.index(o.key) if o.key in CHANGE_ORDER else len(CHANGE_ORDER),
                                 o.n_devices))
    for o in fits[:4]:
        ev.append(Evidence(o.label, f"peak {_gib(o.peak_bytes_batch1_gc)} at batch 1 with checkpointing; "
                                    f"largest batch {o.max_batch_gc} (memory model)"))
    if not fits:
        return rule.fired("warning", "No measured setting fits batch 1", ev,
                          "No checkpointing policy, allocator or optimizer setting ran a step of one sequence.",
                          "Shard the model states over more devices (FSDP/ZeRO-3), use 8-bit optimizer states or "
                          "adapters (LoRA), or offload the optimizer states (see GC004).",
                          line="nothing fits batch 1: shard the states, 8-bit optimizer states, adapters or "
                               "optimizer offload (see GC004)")
    best = fits[0]
    others = "; ".join(f"{o.label}: batch {o.max_batch_gc}" for o in fits[1:3])
    return rule.fired(
        "warning", f"No measured setting fits batch 1: {best.label} fits batch {best.max_batch_gc}", ev,
        "No checkpointing policy, allocator or optimizer setting ran a step of one sequence; the memory model "
        "predicts what fits once the model states move." + (f" Also: {others}." if others else ""),
        f"{best.label[0].upper() + best.label[1:]}: {best.settings}. Then re-run gcdoctor diagnose to measure the "
        "recipe with it.",
        line=f"nothing fits batch 1; smallest change: {best.label}, batch {best.max_batch_gc} with checkpointing "
             f"(memory model)")
