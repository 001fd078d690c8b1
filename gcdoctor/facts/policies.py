"""Facts of the policy search and the recipe's confirmation.

The policies probe applies each checkpointing policy to the full model, checks that it does what
it claims (the trace's recompute share and the bytes it saves), measures it once near the batch
the memory model predicts as its largest, and drops dominated ones early. The recipe (the fastest
whole setting per token for the user's target) is then confirmed in a fresh process. The recipe
itself is chosen by `gcdoctor.recipe` (torch-free), which the probe and the rule both call.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gcdoctor.facts.sweep import Measurement

# Policy names (stable keys in facts.json). Every-N is "every-<N>", the compiler's activation
# memory budget "budget-<fraction>" (e.g. "budget-0.5").
POLICY_NONE = "none"
POLICY_LAYER = "layer"
POLICY_ATTN = "attn-only"
POLICY_MLP = "mlp-only"
POLICY_SELECTIVE = "selective-op"
POLICY_OFFLOAD = "cpu-offload"


@dataclass
class PolicyCheck:
    """Whether a policy did what it claims, read from its own trace and memory."""

    recompute_share_pct: float | None = None  # forward ops recomputed in backward, % of forward device time
    expected_recompute_min_pct: float | None = None  # the band the policy implies
    expected_recompute_max_pct: float | None = None
    saved_bytes_per_layer: int | None = None  # activation bytes a layer keeps for backward, measured
    expected_saved_bytes_per_layer: int | None = None  # what the policy should keep (memory model)
    ok: bool | None = None  # None: could not be checked (and why in `note`)
    note: str = ""


@dataclass
class PolicySetting:
    """One whole setting: a checkpointing policy crossed with what moves the boundary without
    changing the math."""

    policy: str = POLICY_LAYER
    allocator: str = "default"  # default | expandable
    optimizer: str = "adamw"  # adamw (foreach) | adamw-fused | adamw-forloop
    chunked_loss: bool = False

    @property
    def key(self) -> str:
        parts = [self.policy, self.allocator, self.optimizer]
        if self.chunked_loss:
            parts.append("chunked-loss")
        return "/".join(parts)


@dataclass
class PolicyCandidate:
    """A setting as measured on the full model near its predicted largest batch."""

    setting: PolicySetting = field(default_factory=PolicySetting)
    label: str = ""  # "every 2nd layer checkpointed"
    predicted_largest_batch: int | None = None  # the memory model's, from per-layer measurements
    predicted_peak_bytes: int | None = None  # at predicted_largest_batch
    largest_batch: int | None = None  # the largest batch measured to fit (None: not measured)
    measurement: Measurement | None = None  # the timed one, at largest_batch
    check: PolicyCheck | None = None
    dropped: str | None = None  # why it was not measured further ("dominated by layer: slower, no less memory")
    seconds: float | None = None  # what measuring it cost


@dataclass
class RecipeChoice:
    """The recipe as chosen from the candidates, before or after confirmation."""

    setting: PolicySetting = field(default_factory=PolicySetting)
    micro_batch: int = 1
    accumulation: int = 1
    target: str = ""  # "target batch 8" | "global batch 64" | "fastest per token (assumed accumulation)"
    predicted_tokens_per_s: float | None = None
    predicted_peak_bytes: int | None = None


# a confirmation further off its predicted tokens/s than this (or than the spread of the steps
# compared, where larger) confirms the next recipe instead
CONFIRM_TOLERANCE_PCT = 5.0


@dataclass
class RecipeConfirmation:
    """A fresh process that ran the whole recipe as the user would."""

    choice: RecipeChoice = field(default_factory=RecipeChoice)
    fits: bool | None = None
    tokens_per_s: float | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    step_ms: list[float] = field(default_factory=list)
    off_pct: float | None = None  # confirmed tokens/s against predicted, %
    rejected: str | None = None  # why the next candidate was confirmed instead (OOM, > tolerance off)
    seconds: float | None = None
    # how far off still confirms: 5 %, or the step-to-step spread of the steps compared where larger
    tolerance_pct: float | None = None


@dataclass
class PolicyFacts:
    candidates: list[PolicyCandidate] = field(default_factory=list)
    confirmations: list[RecipeConfirmation] = field(default_factory=list)  # in order tried; last accepted
    target_batch: int | None = None  # --target-batch, per device
    global_batch: int | None = None  # --global-batch
    search_seconds: float | None = None
    confirm_seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    def confirmed(self) -> RecipeConfirmation | None:
        """The confirmation that was accepted, if any."""
        for c in reversed(self.confirmations):
            if c.fits and c.rejected is None:
                return c
        return None
