"""The recipe: the fastest whole setting per token for the user's target, from the policy search.

Pure and torch-free: the policies probe calls it to decide what to confirm, GC007 calls it to say
the answer, and the writers call it for the Pareto plot. Every candidate the probe measured on the
full model is a point (setting, micro-batch, tokens/s, peak); the target decides which points
count and how they are combined:

- `target_batch` N (per device): micro-batch N, no accumulation; only points measured at N.
- `global_batch` G: micro-batch x accumulation x devices = G; each setting at its fastest
  measured micro-batch that divides G/devices. With accumulation the optimizer steps once per
  G, so the predicted step is `accumulation x (step - optimizer step) + optimizer step`.
- neither: the fastest point per token, assuming accumulation reaches the user's global batch
  (said in `RecipeChoice.target`); `largest_batch_recipe` gives the largest-batch alternative.

Dominated points (another is at least as fast with no more memory) never rank first.
"""
from __future__ import annotations

from dataclasses import dataclass

from gcdoctor.facts.policies import PolicyCandidate, PolicyFacts, RecipeChoice
from gcdoctor.facts.sweep import Measurement

ASSUMED = "fastest per token (assumes gradient accumulation reaches your global batch)"
LARGEST = "largest batch per device"


@dataclass
class Point:
    """One measured candidate: a setting at one micro-batch."""

    candidate: PolicyCandidate
    batch: int
    tokens_per_s: float
    peak_bytes: int | None
    step_ms: float | None
    optimizer_ms: float | None

    @property
    def key(self) -> str:
        return self.candidate.setting.key


def _point(c: PolicyCandidate, m: Measurement) -> Point | None:
    if not m.fits or not m.tokens_per_s or m.tokens_per_s <= 0:
        return None
    peak = m.peak_allocated_bytes if m.peak_allocated_bytes is not None else c.predicted_peak_bytes
    return Point(c, m.batch_size, float(m.tokens_per_s), peak, m.step_ms_median, m.optimizer_ms_median)


def points(policies: PolicyFacts) -> list[Point]:
    """Every fitting, timed measurement of a candidate that did what it claims and was not dropped."""
    out = []
    for c in policies.candidates:
        if c.dropped or (c.check is not None and c.check.ok is False) or c.measurement is None:
            continue
        p = _point(c, c.measurement)
        if p is not None:
            out.append(p)
    return out


def dominated(p: Point, others: list[Point]) -> Point | None:
    """The point that dominates `p` (at least as fast, no more memory, better in one), if any."""
    if p.peak_bytes is None:
        return None
    for q in others:
        if q is p or q.peak_bytes is None:
            continue
        if (q.tokens_per_s >= p.tokens_per_s and q.peak_bytes <= p.peak_bytes
                and (q.tokens_per_s > p.tokens_per_s or q.peak_bytes < p.peak_bytes)):
            return q
    return None


def pareto(policies: PolicyFacts) -> list[Point]:
    """The points no other point dominates, fastest first (the frontier of the Pareto plot)."""
    pts = points(policies)
    return sorted((p for p in pts if dominated(p, pts) is None), key=lambda p: -p.tokens_per_s)


def _simplicity(p: Point) -> int:
    """How many settings differ from a plain job: fewer changes win a tie."""
    s = p.candidate.setting
    return (s.allocator != "default") + (s.optimizer != "adamw") + int(s.chunked_loss)


def _accumulated(p: Point, accumulation: int, seq_len: int) -> float:
    """tokens/s of `accumulation` micro-steps per optimizer step, from one measured step."""
    if accumulation <= 1 or not p.step_ms or p.optimizer_ms is None or p.optimizer_ms >= p.step_ms:
        return p.tokens_per_s
    step_ms = accumulation * (p.step_ms - p.optimizer_ms) + p.optimizer_ms
    return 1000.0 * p.batch * accumulation * seq_len / step_ms


def _rank(choices: list[tuple[RecipeChoice, Point]], within_pct: float) -> list[RecipeChoice]:
    """Non-dominated first (fastest first; within `within_pct` of each other, the smaller peak and
    then the fewer changed settings first), then the dominated ones, fastest first."""
    pts = [p for _, p in choices]
    front = [(c, p) for c, p in choices if dominated(p, pts) is None]
    rest = [(c, p) for c, p in choices if dominated(p, pts) is not None]

    def order(group: list[tuple[RecipeChoice, Point]]) -> list[RecipeChoice]:
        group = sorted(group, key=lambda cp: (-(cp[0].predicted_tokens_per_s or 0.0), _simplicity(cp[1])))
        if within_pct > 0 and group:
            top = group[0][0].predicted_tokens_per_s or 0.0
            near = [cp for cp in group if (cp[0].predicted_tokens_per_s or 0.0) >= top * (1 - within_pct / 100)]
            far = group[len(near):]
            near.sort(key=lambda cp: (cp[1].peak_bytes if cp[1].peak_bytes is not None else 1 << 62,
                                      _simplicity(cp[1])))
            group = near + far
        return [c for c, _ in group]

    return order(front) + order(rest)


def _choice(p: Point, micro: int, accumulation: int, target: str, tokens_per_s: float) -> RecipeChoice:
    return RecipeChoice(setting=p.candidate.setting, micro_batch=micro, accumulation=accumulation, target=target,
                        predicted_tokens_per_s=tokens_per_s, predicted_peak_bytes=p.peak_bytes)


def rank_recipes(policies: PolicyFacts, *, seq_len: int, target_batch: int | None = None,
                 global_batch: int | None = None, devices: int = 1, within_pct: float = 0.0) -> list[RecipeChoice]:
    """Whole settings for the target, best first (empty: nothing measured fits it).

    `target_batch`/`global_batch` default to the ones recorded in `policies`. One entry per
    setting (its best micro-batch for the target). `within_pct`: tokens/s this close to the
    fastest count as a tie, broken by the smaller peak (timings resolve no finer)."""
    if target_batch is None and global_batch is None:
        target_batch, global_batch = policies.target_batch, policies.global_batch
    pts = points(policies)
    best: dict[str, tuple[RecipeChoice, Point]] = {}

    def offer(c: RecipeChoice, p: Point) -> None:
        old = best.get(p.key)
        if old is None or (c.predicted_tokens_per_s or 0.0) > (old[0].predicted_tokens_per_s or 0.0):
            best[p.key] = (c, p)

    if target_batch is not None:
        for p in pts:
            if p.batch == target_batch:
                offer(_choice(p, p.batch, 1, f"target batch {target_batch}", p.tokens_per_s), p)
    elif global_batch is not None:
        per_device, rem = divmod(global_batch, max(devices, 1))
        if rem == 0 and per_device > 0:
            where = f" over {devices} devices" if devices > 1 else ""
            for p in pts:
                if per_device % p.batch == 0:
                    accumulation = per_device // p.batch
                    offer(_choice(p, p.batch, accumulation, f"global batch {global_batch}{where}",
                                  _accumulated(p, accumulation, seq_len)), p)
    else:
        for p in pts:
            offer(_choice(p, p.batch, 1, ASSUMED, p.tokens_per_s), p)
    return _rank(list(best.values()), within_pct)


def largest_batch_recipe(policies: PolicyFacts, *, seq_len: int) -> RecipeChoice | None:
    """The alternative beside an assumed target: the largest per-device batch any setting was
    measured to fit, its fastest setting there."""
    del seq_len  # the same signature as rank_recipes; tokens/s are measured at the batch itself
    pts = points(policies)
    if not pts:
        return None
    top = max(p.batch for p in pts)
    p = min((p for p in pts if p.batch == top), key=lambda p: (-p.tokens_per_s, _simplicity(p)))
    return _choice(p, p.batch, 1, LARGEST, p.tokens_per_s)


def point_for(policies: PolicyFacts, choice: RecipeChoice) -> Point | None:
    """The measured point a choice was made from."""
    for p in points(policies):
        if p.key == choice.setting.key and p.batch == choice.micro_batch:
            return p
    return None
