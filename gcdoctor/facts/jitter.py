"""Facts of the jitter probe: losses and first-step gradients of training runs that
differ only in checkpointing (and, for the controls, dropout, RNG preservation or deterministic
algorithms), and their differences from a reference run.

Every run starts from the same initial weights, the same global seed and the same token batches.
Step indices are 0-based here (`losses[0]` is the loss of the first optimizer step); reports
call that step 1.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class JitterRun:
    """One short training run: N optimizer steps from the shared initial state."""

    name: str  # no_gc_a, no_gc_b, gc, no_gc_det, gc_det, no_gc_dropout, gc_dropout_no_rng, ...
    checkpointing: bool = False
    preserve_rng_state: bool | None = None  # None when checkpointing is off
    dropout: float = 0.0  # attention dropout probability of the model
    deterministic: bool = False  # torch.use_deterministic_algorithms(True, warn_only=True)
    micro_batches: int = 1  # >1: the batch split into this many accumulated micro-batches
    losses: list[float] = field(default_factory=list)  # fp32 loss per step, exact (JSON keeps all bits)
    step_ms: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. non-deterministic ops reported in det mode
    error: str | None = None  # set when the run could not finish (OOM); its numbers are partial


@dataclass
class JitterComparison:
    """A run against its reference run: loss per step and gradients after the first backward.

    Gradients are compared before the first optimizer step, so both runs have the same weights
    and the same data: any difference comes from the computation itself. Relative L2 is
    ||g - g_ref|| / ||g_ref|| over the parameters (all of them, and per group: embed, layer<i>,
    final_norm, lm_head), computed in fp32.
    """

    name: str  # = the compared run
    role: str  # baseline | main | deterministic | dropout_baseline | dropout | dropout_control
    run: str
    reference: str
    baseline: str | None = None  # name of the comparison giving this one's run-to-run noise floor
    loss_abs_diff: list[float] = field(default_factory=list)  # |loss - loss_ref| per step
    loss_step0_equal: bool | None = None  # bitwise
    losses_equal: bool | None = None  # bitwise, every step
    first_loss_diff_step: int | None = None  # 0-based; None when all losses are equal
    grads_bitwise_equal: bool | None = None  # torch.equal for every parameter's gradient
    grad_rel_l2: float | None = None
    grad_max_abs_diff: float | None = None
    grad_ref_max_abs: float | None = None  # scale of the reference gradients
    grad_elements: int | None = None
    grad_elements_differing: int | None = None  # elements not bitwise equal
    grad_rel_l2_by_group: dict[str, float] = field(default_factory=dict)


@dataclass
class JitterFacts:
    steps: int = 0  # optimizer steps per run
    batch_size: int = 0
    seq_len: int = 0
    dtype: str = ""
    dtype_eps: float | None = None  # torch.finfo(dtype).eps: the gap between 1 and the next value
    unit_roundoff: float | None = None  # eps / 2: the largest relative error of one rounding
    optimizer: str = ""
    lr: float | None = None
    seed: int = 0
    n_layers: int = 0  # decoder layers of the model the probe built
    dropout_p: float | None = None  # attention dropout of the dropout runs; None: not run
    gc_api: str = ""
    reference_grads_on: str = ""  # device | host: where the reference gradients were kept
    cublas_workspace_config: str | None = None  # CUBLAS_WORKSPACE_CONFIG as found (None: unset)
    runs: list[JitterRun] = field(default_factory=list)
    comparisons: list[JitterComparison] = field(default_factory=list)
    wall_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def run(self, name: str) -> JitterRun | None:
        return next((r for r in self.runs if r.name == name), None)

    def comparison(self, name: str | None) -> JitterComparison | None:
        return next((c for c in self.comparisons if c.name == name), None) if name else None
