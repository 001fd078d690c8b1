"""GC013 recipe-gap."""
from __future__ import annotations

from gcdoctor.types import CONFIGURATION, Evidence, Rule, Verdict
from gcdoctor.facts import AgainstFacts, Facts, WatchFacts
from gcdoctor.facts.policies import RecipeChoice
from gcdoctor.recipe import describe, policy_words


def job_policy(facts: Facts) -> str | None:
    """The watched job's checkpointing as a policy key where it maps to one (None: not reported)."""
    if facts.watch is None:
        return None
    cs = facts.watch.checkpointing
    if cs.enabled is None:
        return None
    if not cs.enabled:
        return "none"
    if cs.offload:
        return "cpu-offload"
    n, total = cs.layers_checkpointed, cs.layers_total
    if n is not None and total and n < total:
        idx = cs.layer_indices
        if len(idx) >= 2 and idx[0] == 0 and all(b - a == idx[1] for a, b in zip(idx, idx[1:])):
            return f"every-{idx[1]}"
        return f"{n}/{total} layers"
    return "layer"


def job_allocator(alloc_conf: str | None) -> str:
    conf = (alloc_conf or "").replace(" ", "").lower()
    return "expandable" if "expandable_segments:true" in conf else "default"


def job_optimizer(facts: Facts) -> str | None:
    w = facts.watch
    if w is None:
        return None
    name = w.optimizer.lower()
    if name not in ("adamw", "adam"):
        return name or None
    return {"fused": "adamw-fused", "forloop": "adamw-forloop"}.get(w.optimizer_impl, "adamw")


def _words(label: str, value: str | int) -> str:
    """A setting as the verdict shows it: a checkpointing policy in words, anything else as is."""
    return policy_words(str(value)) if label == "checkpointing" else str(value)


def _notes(facts: Facts, w: WatchFacts, ag: AgainstFacts) -> list[str]:
    """Where the job and the diagnosed run differ in what the recipe was measured on."""
    notes = []
    if w.seq_len and ag.seq_len and w.seq_len != ag.seq_len:
        notes.append(f"the job runs sequences of {w.seq_len}, the recipe {ag.seq_len}")
    dev = facts.environment.device_name
    if dev and ag.device_name and dev != ag.device_name:
        notes.append(f"the job ran on {dev}, the recipe was measured on {ag.device_name}")
    return notes


class RecipeGapRule(Rule):
    """What it checks:
    A watched training job (gcdoctor watch, or the gcdoctor.watch context manager) held against the
    recipe of a gcdoctor diagnose run of the same model (`gcdoctor analyze WATCHED --against
    DIAGNOSE`, `gcdoctor watch --against DIAGNOSE -- CMD`): the job's tokens/s against the recipe's
    (confirmed in a fresh process where it was, else predicted), and each setting of the recipe
    against what the job ran: checkpointing policy, micro-batch, gradient accumulation, AdamW
    implementation, allocator setting.

    Why it matters:
    The recipe is measured on gcdoctor's own training step; a real job differs in data loading,
    logging and the settings it was launched with. The distance in tokens/s says what following
    the recipe is worth; the settings that differ say what to change.

    Evidence:
    The job's tokens/s (tokens per step over the median step), the recipe's and where it came
    from; per setting, the job's value and the recipe's; the model (parameters), device and
    sequence length of both, so a comparison across different ones is seen as such.

    How to fix:
    Change the settings that differ (`gcdoctor recipe DIAGNOSE` prints them as code). A job
    already on the recipe but slower than it loses the time elsewhere: see the watch verdicts
    (data loading, host time).
    """

    code = "GC013"
    slug = "recipe-gap"
    title = "Recipe gap: a watched job against the diagnosed recipe"
    requires = ("against",)
    scope = CONFIGURATION
    topic = "prescription"
    defaults = {
        # a job this much slower than the recipe is told so as a warning (the confirmation's tolerance)
        "max_gap_pct": 5.0,
        # parameter counts further apart than this are different models: the recipe does not apply
        "max_param_diff_pct": 1.0,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> Verdict:
        ag, w = facts.against, facts.watch
        if ag is None:
            return self.inconclusive(facts.missing_reason("against"))
        if w is None:
            return self.inconclusive("no watched job in this run (--against compares a watched run)")
        if ag.recipe is None:
            return self._cannot(f"{ag.run_dir} has no recipe: {ag.reason or 'no measured setting fits'}", [])
        r = ag.recipe
        ev = [Evidence("recipe", describe(r)), Evidence("recipe from", f"{ag.run_dir} ({ag.source})")]
        if w.n_params and ag.n_params:
            diff = 100.0 * abs(w.n_params - ag.n_params) / ag.n_params
            ev.append(Evidence("parameters, job / diagnosed", f"{w.n_params:,} / {ag.n_params:,}"))
            if diff > t["max_param_diff_pct"]:
                return self._cannot(f"the job's model has {w.n_params:,} parameters, the diagnosed one "
                                    f"{ag.n_params:,}: a different model, the recipe does not apply", ev)
        notes = _notes(facts, w, ag)
        changes = self._settings(facts, w, r, ev)
        if r.setting.chunked_loss:
            ev.append(Evidence("chunked loss", "in the recipe; a watched job's loss is not observed"))
        job_tok = (1000.0 * w.tokens_per_step / w.step_ms_median
                   if w.tokens_per_step and w.step_ms_median else None)
        rec_tok = ag.tokens_per_s
        state = "confirmed" if ag.confirmation is not None else "predicted"
        ev += [Evidence("job tokens/s", job_tok, "tok/s"), Evidence(f"recipe tokens/s ({state})", rec_tok, "tok/s")]
        gap = 100.0 * (rec_tok / job_tok - 1.0) if job_tok and rec_tok else None
        for n in notes:
            ev.append(Evidence("note", n))
        if gap is None:
            speed = "tokens/s not measured"
        else:
            at = f" at seq {ag.seq_len}" if w.seq_len and ag.seq_len and w.seq_len != ag.seq_len else ""
            speed = f"{job_tok:,.0f} tok/s, recipe {rec_tok:,.0f} {state}{at} ({gap:+.0f} %)"
        why = " ".join([f"The recipe ({describe(r)}) runs {rec_tok or 0:,.0f} tokens/s ({state})."]
                       + ([f"The job ran {job_tok:,.0f}."] if job_tok else []) + [n.capitalize() + "." for n in notes])
        return self._verdict(ag, changes, gap, speed, why, ev, t)

    def _settings(self, facts: Facts, w: WatchFacts, r: RecipeChoice, ev: list[Evidence]) -> list[str]:
        """Each setting of the recipe against the job's, as evidence; the changes the job needs."""
        rows: list[tuple[str, str | int | None, str | int]] = [
            ("checkpointing", job_policy(facts), r.setting.policy),
            ("micro-batch", w.batch_size, r.micro_batch),
            ("accumulation", w.micro_batches, r.accumulation),
            ("optimizer", job_optimizer(facts), r.setting.optimizer),
            ("allocator", job_allocator(w.alloc_conf), r.setting.allocator)]
        changes = []
        for label, job, want in rows:
            shown = "not reported" if job is None else _words(label, job)
            ev.append(Evidence(f"{label}, job / recipe", f"{shown} / {_words(label, want)}"))
            if job is not None and job != want:
                changes.append(self._change(label, job, want))
        return changes

    def _verdict(self, ag: AgainstFacts, changes: list[str], gap: float | None, speed: str, why: str,
                 ev: list[Evidence], t: dict[str, float]) -> Verdict:
        if not changes:
            if gap is not None and gap > t["max_gap_pct"]:
                return self.fired("warning", f"Your job runs the recipe's settings {gap:.0f}% below its tokens/s",
                                  ev, why + " The settings match: the time goes elsewhere.",
                                  "See the watch verdicts for where the step's time goes (data loading, host time).",
                                  subject="watch", line=f"your job has the recipe's settings: {speed}: the time "
                                                        "goes elsewhere")
            return self.passed(f"Your job runs the recipe ({speed})", ev, subject="watch",
                               line=f"your job runs the recipe: {speed}")
        what = "; ".join(changes)
        sev = "warning" if gap is not None and gap > t["max_gap_pct"] else "info"
        head = (f"Your job is {gap:.0f}% below the recipe's tokens/s" if gap is not None and gap > 0
                else "Your job differs from the recipe")
        return self.fired(sev, f"{head}: {what}", ev, why,
                          f"Change: {what}. `gcdoctor recipe {ag.run_dir}` prints the recipe as code.",
                          subject="watch", line=f"your job: {speed}; change {what}")

    @staticmethod
    def _change(label: str, job, want) -> str:
        if label == "checkpointing":
            return f"{policy_words(job)} -> {policy_words(want)}"
        if label == "micro-batch":
            return f"batch {job} -> {want}"
        if label == "accumulation":
            return f"accumulation {job} -> {want}"
        if label == "optimizer":
            return {"adamw-fused": "fused AdamW", "adamw": "AdamW (foreach)"}.get(want, want)
        if label == "allocator":
            return "expandable segments" if want == "expandable" else "default allocator"
        return f"{label} {job} -> {want}"

    def _cannot(self, reason: str, ev: list[Evidence]) -> Verdict:
        v = self.inconclusive(reason, subject="watch")
        v.evidence = list(ev)
        v.line = f"recipe gap not judged: {reason}"
        return v

