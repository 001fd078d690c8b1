"""Facts of the analytic memory model's predictions.

The session stores one `PredictedPoint` per (variant, batch) it measures, next to the
measurement, so a report can show predicted vs measured and a rule can say what
checkpointing should have saved. Built by `gcdoctor.model.fitting.memory_model_facts`.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PredictedPoint:
    """The model's prediction for one variant ('no_gc' or 'gc') at one batch size."""

    variant: str = ""
    batch_size: int = 0
    seq_len: int = 0
    peak_bytes: int = 0  # whole step, as max_memory_allocated after a reset at the step start
    peak_phase: str = ""  # forward | backward | optimizer step
    peak_where: str = ""  # e.g. "loss backward", "layer 0 backward (MLP)", "optimizer step"
    forward_peak_bytes: int = 0  # forward + loss
    backward_peak_bytes: int = 0
    fwd_bwd_peak_bytes: int = 0  # max of the two, comparable to Measurement.peak_fwd_bwd_allocated_bytes
    optimizer_peak_bytes: int = 0
    baseline_bytes: int = 0  # allocated at the step start: params, optimizer states, workspaces, batch
    activations_after_forward_bytes: int = 0  # allocated after forward+loss minus the baseline
    peak_breakdown: dict[str, int] = field(default_factory=dict)  # category -> live bytes at the peak
    fits: bool | None = None  # fits a fresh process under the default allocator (replayed); None: no capacity
    fits_expandable: bool | None = None  # the same with expandable_segments:True
    peak_reserved_bytes: int | None = None  # replayed reserved peak (default allocator), when it fits


@dataclass
class FitOption:
    """One other home for the model states (gcdoctor.model.memory.remedy), predicted on this device."""

    key: str = ""  # zero-offload | adamw-8bit | adafactor | sgd | lora | shard
    label: str = ""
    settings: str = ""  # how to get it
    host: str = ""  # host memory it needs, where it needs much
    n_devices: int = 1  # sharding: over how many devices
    device_state_bytes: int = 0  # weights, optimizer states and framework buffers resident per device
    peak_bytes_batch1_gc: int = 0  # predicted peak at batch 1 with layer checkpointing
    max_batch_gc: int = 0  # predicted largest batch with layer checkpointing (0: none)
    max_batch_no_gc: int = 0
    # the offload probe's configuration, predicted, to check the line against its measurement
    probe_layers: int | None = None
    probe_batch: int | None = None
    predicted_probe_peak_bytes: int | None = None

    @property
    def fits(self) -> bool:
        return self.max_batch_gc > 0


@dataclass
class MemoryModelFacts:
    model: str = ""
    dtype: str = ""
    optimizer: str = ""
    seq_len: int = 0
    device: str = ""  # the semantics predicted for: cuda | musa | cpu
    exact: bool = True  # False: the architecture is approximated by a Llama layer
    n_params: int = 0
    param_bytes: int = 0
    grad_bytes: int = 0
    optimizer_state_bytes: int = 0
    model_state_bytes: int = 0  # params + grads + optimizer states
    layer_activation_bytes_per_token: int = 0  # one decoder layer, no checkpointing
    checkpoint_residue_bytes_per_token: int = 0  # one checkpointed layer (its input)
    loss_block_bytes_per_token: int = 0  # logits + fp32 upcast + log-probs at the loss
    capacity_bytes: int | None = None  # the device's memory (torch's total_memory) predicted for
    usable_bytes: int | None = None  # what the caching allocator can reserve: capacity minus the context
    limit_bytes: int | None = None  # --memory-limit: a cap on reserved bytes, if one was in force
    context_bytes: int | None = None  # device memory outside the allocator (context, kernels, handles)
    context_source: str = ""  # "measured ..." or where the assumed value comes from
    # predicted largest batch, default allocator (a fresh process, replayed); 0 = not even batch 1
    max_batch: dict[str, int | None] = field(default_factory=dict)
    # allocator ("default" | "expandable") -> variant -> predicted largest batch of a fresh process
    max_batch_by_allocator: dict[str, dict[str, int]] = field(default_factory=dict)
    # variant -> largest batch whose allocated peak fits what the allocator can reserve (no allocator)
    max_batch_allocated: dict[str, int] = field(default_factory=dict)
    points: list[PredictedPoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # when the measured setup does not fit at batch 1: what would, best first (GC004, plan)
    fit_options: list[FitOption] = field(default_factory=list)

    def get(self, variant: str, batch_size: int) -> PredictedPoint | None:
        for p in self.points:
            if p.variant == variant and p.batch_size == batch_size:
                return p
        return None

    def predicted_peak(self, variant: str, batch_size: int) -> int | None:
        p = self.get(variant, batch_size)
        return p.peak_bytes if p else None

    def predicted_activation_peak(self, variant: str, batch_size: int) -> int | None:
        """Predicted peak minus the model states (params, grads, optimizer states): the same
        quantity as Measurement.activation_peak_bytes, so the two compare directly."""
        p = self.get(variant, batch_size)
        if p is None:
            return None
        return p.peak_bytes - (self.param_bytes + self.grad_bytes + self.optimizer_state_bytes)

    def predicted_activation_saving_pct(self, batch_size: int, a: str = "no_gc", b: str = "gc") -> float | None:
        """What checkpointing should save of the activation peak at `batch_size`, in percent,
        defined as GC002 measures it: 1 - (peak_gc - states) / (peak_no_gc - states)."""
        act_a, act_b = self.predicted_activation_peak(a, batch_size), self.predicted_activation_peak(b, batch_size)
        if act_a is None or act_b is None or act_a <= 0:
            return None
        return 100.0 * (1.0 - act_b / act_a)


def predicted_activation_saving(mm: MemoryModelFacts | None, batch_size: int,
                                a: str = "no_gc", b: str = "gc") -> int | None:
    """What checkpointing should save in activations at `batch_size`, in bytes.

    The difference of the predicted activations alive after forward+loss (measured the same
    way: allocated after the loss minus the step-start baseline) between variant `a` and `b`.
    None when either prediction is missing.
    """
    if mm is None:
        return None
    pa, pb = mm.get(a, batch_size), mm.get(b, batch_size)
    if pa is None or pb is None:
        return None
    return pa.activations_after_forward_bytes - pb.activations_after_forward_bytes


def predicted_peak_saving(mm: MemoryModelFacts | None, batch_size: int,
                          a: str = "no_gc", b: str = "gc") -> int | None:
    """What checkpointing should save on the step's peak at `batch_size`, in bytes (may be
    small or negative when the optimizer step, not the activations, sets the peak)."""
    if mm is None:
        return None
    pa, pb = mm.get(a, batch_size), mm.get(b, batch_size)
    if pa is None or pb is None:
        return None
    return pa.peak_bytes - pb.peak_bytes


def prediction_error_pct(predicted_bytes: int | None, measured_bytes: int | None) -> float | None:
    """(predicted - measured) / measured in percent; None when either is missing."""
    if predicted_bytes is None or not measured_bytes:
        return None
    return 100.0 * (predicted_bytes - measured_bytes) / measured_bytes
