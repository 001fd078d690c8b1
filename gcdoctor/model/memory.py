"""Analytic memory model of one training step of a decoder-only transformer (no torch).

It predicts what `max_memory_allocated` reads for the step gcdoctor measures (capture.py):
a model built in `dtype`, `out = model(input_ids=ids, labels=ids)`, `out.loss.backward()`,
`optimizer.step()`, `optimizer.zero_grad(set_to_none=True)`, peaks reset at the step start,
after a warm-up step (so optimizer states exist). See docs/memory-model.md for each term.

Instead of adding up a few closed-form terms, the model replays the step as a timeline of
allocations and frees, tensor by tensor, in the order PyTorch's autograd runs them for a
Hugging Face Llama-style layer (RMSNorm, GQA attention with RoPE and SDPA/flash, SwiGLU
MLP, fp32 log-softmax loss). Sizes are exact functions of the config, so the peak, the
moment it happens ("backward of layer 31, MLP") and what is live then all come out of one
walk. The order and lifetimes were read off the CPU (every storage's birth and death,
torch 2.13, transformers 5.24); the tests check them against CPU measurements.
Device-specific kernel workspaces (flash-attention backward, embedding backward, cuBLAS)
are invisible on the CPU and are added for CUDA/MUSA from the kernels' source.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from gcdoctor.errors import UserError

if TYPE_CHECKING:
    from gcdoctor.facts.memory import FitOption

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# "adamw" is torch.optim.AdamW(foreach=True), what gcdoctor measures by default; the other two
# AdamW implementations differ only in what the step allocates (see _optimizer_step).
OPTIMIZERS = ("adamw", "adamw-forloop", "adamw-fused", "sgd")
ADAM_IMPLS = {"adamw": "foreach", "adamw-forloop": "forloop", "adamw-fused": "fused"}
DEVICE_KINDS = ("cuda", "musa", "cpu")
# Architectures whose layer the timeline replays exactly (Llama layout, optional q/k/v bias).
EXACT_TYPES = ("llama", "mistral", "qwen2")

GiB = 1024 ** 3
MiB = 1024 ** 2

# The CUDA caching allocator hands out blocks in multiples of 512 bytes (kMinBlockSize in
# c10/cuda/CUDACachingAllocator.cpp); max_memory_allocated counts the rounded sizes.
CUDA_BLOCK_BYTES = 512
# cuBLAS workspaces live in the caching allocator: 32 MiB per (handle, stream) on sm90
# (CUBLAS_WORKSPACE_CONFIG default :4096:8 on Hopper, aten/src/ATen/cuda/CublasHandlePool.cpp).
# Forward runs on the main thread and backward on autograd's device thread, two handles.
# Allocated in the warm-up step, so it is in the measured baseline. Settled by the H200 run.
CUDA_BLAS_WORKSPACE_BYTES = 2 * 32 * MiB
# Device memory the allocator never gets: the CUDA/MUSA context, loaded kernels and library
# handles. MEASURED, not fitted: diagnose reads it on the device (total - free - reserved after
# the first measured step, gcdoctor.backends.accelerator.non_allocator_bytes); this default is
# what the four OOM messages of samples/h200-llama3-8b-diagnose (H200, torch 2.11+cu130, driver
# 580) state: "this process has X in use" minus allocated minus reserved-but-unallocated = 0.74,
# 0.74, 0.75, 0.76 GiB. `plan` uses it for cards it has not seen (said beside the result). The
# capacity is torch's total_memory (139.80 GiB on that H200; NVML reports 615 MiB more, 143,771
# MiB: the driver's own reservation).
DEVICE_CONTEXT_BYTES = 768 * MiB
CONTEXT_SOURCE = "assumed: the 0.74-0.76 GiB the OOM messages of an H200 run state, torch 2.11 and CUDA 13"
# The allocators the largest batch is predicted for (gcdoctor.model.allocator replays both).
ALLOCATORS = ("default", "expandable")

# Categories of live bytes, for the breakdown at a peak.
CATEGORIES = ("params", "optimizer_states", "grads", "activations", "logits_loss",
              "transients", "workspace", "inputs")


@dataclass(frozen=True)
class StatesPolicy:
    """Where a training setup keeps the model states, as the device sees it: what `plan` and
    GC004 predict for setups gcdoctor does not measure itself (built by `remedy`).

    The activations, the loss block and their order are the measured step's; only the
    parameters, gradients, optimizer states and the optimizer step's transients change."""

    name: str
    param_scale: float = 1.0  # of the model-dtype parameters resident on this device
    grad_scale: float = 1.0  # of each weight gradient as the backward makes it
    state_bytes: int = 0  # optimizer states resident on this device
    transient_bytes: int = 0  # extra bytes optimizer.step() allocates on this device
    extra_bytes: int = 0  # resident buffers of the framework (buckets, gathered layers)


@dataclass(frozen=True)
class Workload:
    """One configuration of the measured training step."""

    batch_size: int
    seq_len: int
    dtype: str = "bf16"
    optimizer: str = "adamw"
    gc: bool = False  # layer-level checkpointing (non-reentrant), decoder layers only
    device: str = "cuda"
    master_weights: bool = False  # fp32 master copy + fp32 Adam states (plan only; not measured)
    # Whether the caller holds the model output (and so its logits) from the forward to the
    # step's end, as `out = model(...); out.loss.backward(); optimizer.step()` does. gcdoctor's
    # capture computes the loss inside a helper and drops `out`: the logits die after the loss.
    keep_logits: bool = False
    policy: StatesPolicy | None = None  # None: the measured setup (all states on this device)
    # the loss computed this many slices of tokens at a time (a chunked loss): the logits and loss
    # blocks alive at any moment are this many times smaller
    loss_chunks: int = 1

    def check(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise UserError(f"dtype {self.dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"optimizer {self.optimizer!r}: use one of {', '.join(OPTIMIZERS)}")
        if self.device not in DEVICE_KINDS:
            raise UserError(f"device {self.device!r}: use one of {', '.join(DEVICE_KINDS)}")
        if self.batch_size < 1 or self.seq_len < 1:
            raise UserError(f"batch size and sequence length must be positive "
                            f"(got {self.batch_size}, {self.seq_len})")
        if self.master_weights and self.dtype == "fp32":
            raise UserError("fp32 master weights only make sense with a bf16/fp16 model")


@dataclass
class ModelStates:
    """Bytes that live across steps (and grads, which live from backward to zero_grad)."""

    n_params: int
    n_param_tensors: int
    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int  # Adam exp_avg + exp_avg_sq (+ step tensors on the CPU)
    master_weight_bytes: int  # fp32 copy of the weights, mixed precision only
    buffer_bytes: int  # RoPE inv_freq buffers (fp32)
    optimizer_transient_bytes: int  # extra bytes allocated inside optimizer.step()

    @property
    def resident_bytes(self) -> int:
        """What is allocated between steps (grads are None after zero_grad(set_to_none=True))."""
        return self.param_bytes + self.optimizer_state_bytes + self.master_weight_bytes + self.buffer_bytes

    @property
    def total_bytes(self) -> int:
        """Params, grads and optimizer states: the 'model states' of the literature."""
        return self.resident_bytes + self.grad_bytes


@dataclass
class Peak:
    bytes: int = 0
    where: str = ""
    breakdown: dict[str, int] = field(default_factory=dict)  # category -> live bytes at the peak


@dataclass
class Prediction:
    """Predicted memory of one workload, with the terms that make it up."""

    workload: Workload
    states: ModelStates
    baseline_bytes: int  # allocated at the step start: resident states + workspaces + inputs
    forward: Peak  # forward + loss
    backward: Peak
    optimizer: Peak
    activations_after_forward_bytes: int  # live after forward+loss minus the baseline
    saved_per_layer_bytes: int  # saved for backward by one decoder layer (no GC) or its checkpoint (GC)
    layer_activation_bytes: int  # one decoder layer's saved tensors without checkpointing
    loss_block_bytes: int  # logits, fp32 upcast and log-probs at the forward's loss
    approximate: bool = False  # the architecture is not one the timeline replays exactly
    notes: list[str] = field(default_factory=list)

    @property
    def fwd_bwd(self) -> Peak:
        return self.forward if self.forward.bytes >= self.backward.bytes else self.backward

    @property
    def peak(self) -> Peak:
        fb = self.fwd_bwd
        return fb if fb.bytes >= self.optimizer.bytes else self.optimizer

    @property
    def peak_bytes(self) -> int:
        return self.peak.bytes

    @property
    def peak_phase(self) -> str:
        p = self.peak
        return "optimizer step" if p is self.optimizer else ("forward" if p is self.forward else "backward")

# ---------------------------------------------------------------------------------------
# dimensions


@dataclass(frozen=True)
class _Dims:
    h: int  # hidden
    q: int  # query width = heads x head_dim
    kv: int  # key/value width = kv_heads x head_dim
    f: int  # MLP intermediate
    a: int  # attention heads
    hd: int  # head dim
    V: int  # vocabulary
    L: int  # decoder layers
    tied: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    e: int  # bytes per element of the model dtype
    T: int  # tokens per step = batch x seq
    b: int
    s: int

    @property
    def cast(self) -> bool:
        """RMSNorm and the loss upcast to fp32: a copy unless the model already is fp32."""
        return self.e != 4


def _dims(spec: Any, w: Workload) -> _Dims:
    return _Dims(
        h=spec.hidden_size, q=spec.n_heads * spec.head_dim, kv=spec.n_kv_heads * spec.head_dim,
        f=spec.intermediate_size, a=spec.n_heads, hd=spec.head_dim, V=spec.vocab_size, L=spec.n_layers,
        tied=bool(spec.tie_word_embeddings), qkv_bias=bool(spec.attention_bias),
        o_bias=bool(spec.attention_bias) and spec.model_type == "llama", mlp_bias=bool(spec.mlp_bias),
        e=DTYPE_BYTES[w.dtype], T=w.batch_size * w.seq_len, b=w.batch_size, s=w.seq_len,
    )


def _layer_weights(d: _Dims) -> dict[str, int]:
    """Elements of each parameter tensor of one decoder layer (bias folded into its matrix)."""
    return {
        "q": d.h * d.q + (d.q if d.qkv_bias else 0),
        "k": d.h * d.kv + (d.kv if d.qkv_bias else 0),
        "v": d.h * d.kv + (d.kv if d.qkv_bias else 0),
        "o": d.q * d.h + (d.h if d.o_bias else 0),
        "gate": d.h * d.f + (d.f if d.mlp_bias else 0),
        "up": d.h * d.f + (d.f if d.mlp_bias else 0),
        "down": d.f * d.h + (d.h if d.mlp_bias else 0),
        "norm1": d.h, "norm2": d.h,
    }


def _n_param_tensors(d: _Dims) -> int:
    per_layer = 9 + (3 if d.qkv_bias else 0) + (1 if d.o_bias else 0) + (3 if d.mlp_bias else 0)
    return 1 + d.L * per_layer + 1 + (0 if d.tied else 1)


def param_tensor_bytes(spec: Any, dtype: str = "bf16") -> list[int]:
    """Bytes of each parameter tensor, in the order the model creates them, which is also
    `model.parameters()`'s: embedding; per layer q, k, v, o (each weight, then its bias), gate,
    up, down, the two norms; the final norm; the LM head unless tied."""
    e = DTYPE_BYTES[dtype]
    d = _dims(spec, Workload(1, 1, dtype=dtype))
    h, q, kv, f = d.h, d.q, d.kv, d.f
    layer: list[int] = []
    for width_in, width_out, bias in ((h, q, d.qkv_bias), (h, kv, d.qkv_bias), (h, kv, d.qkv_bias),
                                      (q, h, d.o_bias), (h, f, d.mlp_bias), (h, f, d.mlp_bias), (f, h, d.mlp_bias)):
        layer.append(e * width_in * width_out)
        if bias:
            layer.append(e * width_out)
    layer += [e * h, e * h]
    sizes = [e * d.V * h] + layer * d.L + [e * h]
    if not d.tied:
        sizes.append(e * d.V * h)
    return sizes


def _forloop_transient(sizes: list[int]) -> int:
    """Peak extra bytes of torch.optim.AdamW(foreach=False): per parameter `denom =
    (exp_avg_sq.sqrt() / c).add_(eps)` makes the sqrt and the quotient while the previous
    parameter's denom is still bound (torch/optim/adam.py, _single_tensor_adam)."""
    best, prev = 0, 0
    for n in sizes:
        best = max(best, prev + 2 * n)
        prev = n
    return best


def model_states(spec: Any, dtype: str = "bf16", optimizer: str = "adamw", device: str = "cuda",
                 master_weights: bool = False) -> ModelStates:
    """Parameters, gradients and optimizer states, in bytes (exact for the built model).

    - params and grads in the model dtype (grads take the parameter's dtype);
    - AdamW (torch.optim, foreach): exp_avg and exp_avg_sq in the parameter dtype, plus a
      float32 `step` scalar per parameter tensor that lives on the CPU unless capturable/fused
      (so it costs device memory only on the CPU backend); SGD without momentum keeps nothing;
    - mixed precision (`master_weights`): an fp32 copy of the weights and fp32 Adam states
      beside the bf16 weights and grads (Megatron/DeepSpeed style, 2+2+4+8 = 16 bytes/param).
    - inside `step()`, foreach AdamW allocates `torch._foreach_sqrt(exp_avg_sq)`, one
      parameter-sized tensor (torch/optim/adam.py `_multi_tensor_adam`); with master weights
      the fp32 step also needs an fp32 copy of the grads.
    """
    w = Workload(1, 1, dtype=dtype, optimizer=optimizer, device=device, master_weights=master_weights)
    w.check()
    d = _dims(spec, w)
    n = spec.param_count()
    nt = _n_param_tensors(d)
    e = d.e
    params, grads = n * e, n * e
    master = 4 * n if master_weights else 0
    state = 0
    transient = 0
    impl = ADAM_IMPLS.get(optimizer)
    if impl is not None:
        state = 2 * n * (4 if master_weights else e)
        if device == "cpu" or impl == "fused":
            state += 4 * nt  # the float32 `step` tensors: on the device only when fused
        sizes = param_tensor_bytes(spec, dtype)
        if impl == "foreach":
            transient = n * (4 if master_weights else e)
        elif impl == "forloop":
            transient = _forloop_transient(sizes)
    if master_weights:
        transient += 4 * n  # fp32 copy of the bf16 grads for the fp32 update
    # LlamaRotaryEmbedding keeps inv_freq and original_inv_freq, fp32, head_dim/2 each.
    buffers = 2 * 4 * (d.hd // 2)
    return ModelStates(n_params=n, n_param_tensors=nt, param_bytes=params, grad_bytes=grads,
                       optimizer_state_bytes=state, master_weight_bytes=master, buffer_bytes=buffers,
                       optimizer_transient_bytes=transient)


def layer_activation_bytes_per_token(spec: Any, dtype: str = "bf16") -> int:
    """Bytes one decoder layer saves for backward per token, without checkpointing.

    Two RMSNorms: fp32 input (4h; the input itself in fp32), rstd (4), normalised x (e*h),
    output (e*h, saved by the next matmul); q and k after RoPE (e*q, e*kv), v (e*kv), SDPA
    output (e*q, also o_proj's input) and log-sum-exp (4 per head); SwiGLU gate, SiLU, up and
    their product (4*e*f). For bf16 Llama-3: 20h + 4h_kv + 8f + 4a + 8 (docs/references.md §1).
    """
    w = Workload(1, 1, dtype=dtype)
    w.check()
    d = _dims(spec, w)
    e = d.e
    norm = 4 * d.h + 4 + 2 * e * d.h
    attn = e * (2 * d.q + 2 * d.kv) + 4 * d.a
    mlp = 4 * e * d.f
    return 2 * norm + attn + mlp


def checkpoint_residue_bytes_per_token(spec: Any, dtype: str = "bf16") -> int:
    """With layer checkpointing a layer keeps only its input hidden state (e*h per token)."""
    return DTYPE_BYTES[dtype] * spec.hidden_size


# ---------------------------------------------------------------------------------------
# the timeline


class _Timeline:
    """Live tensors by name, running total, and the peak of the current phase."""

    def __init__(self, round_to: int = 1) -> None:
        self.live: dict[str, tuple[int, str]] = {}
        self.by_cat: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.total = 0
        self.round_to = round_to
        self.where = ""
        self.peak = Peak()
        self.groups: dict[str, list[str]] = {}
        self.grad_scale = 1.0  # a StatesPolicy's: sharded or adapter-only gradients
        self.loss_scale = 1.0  # a chunked loss's: one slice of the logits and loss blocks at a time

    def at(self, where: str) -> None:
        self.where = where

    def alloc(self, name: str, nbytes: int, cat: str) -> None:
        if cat == "grads" and self.grad_scale != 1.0:
            nbytes = int(nbytes * self.grad_scale)
        if cat == LOSS and self.loss_scale != 1.0:
            nbytes = -(-nbytes * 1000 // int(1000 / self.loss_scale))
        if nbytes <= 0:
            return
        if self.round_to > 1:
            nbytes = -(-nbytes // self.round_to) * self.round_to
        if name in self.live:
            raise AssertionError(f"memory timeline: {name} allocated twice")
        self.live[name] = (nbytes, cat)
        self.by_cat[cat] += nbytes
        self.total += nbytes
        if self.total > self.peak.bytes:
            self.peak = Peak(self.total, self.where, {k: v for k, v in self.by_cat.items() if v})

    def free(self, *names: str) -> None:
        for name in names:
            item = self.live.pop(name, None)
            if item is not None:
                self.total -= item[0]
                self.by_cat[item[1]] -= item[0]

    def has(self, name: str) -> bool:
        return name in self.live

    def alloc_group(self, name: str, sizes: list[int], cat: str) -> None:
        """Tensors made one after another and freed together (per-parameter optimizer states,
        foreach outputs): one live entry each, so each is rounded and placed on its own."""
        names = [f"{name}[{i}]" for i in range(len(sizes))]
        for item, n in zip(names, sizes):
            self.alloc(item, n, cat)
        self.groups[name] = names

    def free_group(self, name: str) -> None:
        self.free(*self.groups.pop(name, []))

    def hook(self, what: str) -> None:
        """A point of the step where a one-time allocation may happen (the first matmul of a
        thread makes its cuBLAS workspace). The steady-state timeline has them at the start."""

    def rename(self, old: str, new: str) -> None:
        self.live[new] = self.live.pop(old)

    def accumulate(self, target: str, first: str, second: str, nbytes: int, in_place: bool) -> None:
        """Autograd's InputBuffer summing two grads of one tensor: in place into the first
        when it holds the last reference (real devices), else a new tensor (see _Semantics)."""
        if in_place:
            self.free(second)
            self.rename(first, target)
        else:
            self.alloc(target, nbytes, TMP)
            self.free(first, second)

    def new_phase(self) -> Peak:
        """End the current phase: return its peak and start the next from the current total."""
        done = self.peak
        self.peak = Peak(self.total, self.where, {k: v for k, v in self.by_cat.items() if v})
        return done


ACT, TMP, GRAD, LOSS = "activations", "transients", "grads", "logits_loss"


def _norm_forward(tl: _Timeline, d: _Dims, p: str, x: str, keep: bool) -> str:
    """LlamaRMSNorm: x.to(fp32); pow(2).mean; rsqrt; x*rstd; .to(dtype); weight*x."""
    T, h, e = d.T, d.h, d.e
    if d.cast:
        tl.alloc(p + "x32", 4 * h * T, ACT)
    tl.alloc(p + "sq", 4 * h * T, TMP)
    tl.alloc(p + "var", 4 * T, TMP)
    tl.free(p + "sq")
    tl.alloc(p + "rstd", 4 * T, ACT)
    tl.free(p + "var")
    tl.alloc(p + "n32", 4 * h * T, ACT)
    if not keep:
        tl.free(p + "x32", p + "rstd")
    if d.cast:
        tl.alloc(p + "n", e * h * T, ACT)
    tl.alloc(p + "y", e * h * T, ACT)
    if d.cast:
        tl.free(p + "n32")
    if not keep:
        tl.free(p + "n", p + "n32")
    return p + "y"


def _rope_forward(tl: _Timeline, d: _Dims, p: str, width: int) -> None:
    """q*cos + rotate_half(q)*sin: product, negated half, cat, second product, sum."""
    e, T = d.e, d.T
    tl.alloc(p + "t1", e * width * T, TMP)
    tl.alloc(p + "neg", e * width * T // 2, TMP)
    tl.alloc(p + "cat", e * width * T, TMP)
    tl.free(p + "neg")
    tl.alloc(p + "t2", e * width * T, TMP)
    tl.free(p + "cat")
    tl.alloc(p + "r", e * width * T, ACT)
    tl.free(p + "t1", p + "t2")


def _layer_forward(tl: _Timeline, d: _Dims, l: int, keep: bool, stop_early: bool = False) -> str:
    """One decoder layer. keep=True saves tensors for backward (no GC, or GC recompute);
    keep=False is the checkpointed forward, where every intermediate dies at its last use.
    stop_early: non-reentrant recompute stops once the last saved tensor (down_proj's input)
    exists, before down_proj runs."""
    T, h, e, f = d.T, d.h, d.e, d.f
    x = f"x{l}"
    p = f"L{l}."
    tl.at(f"layer {l} forward" + (" (recompute)" if stop_early else ""))
    y1 = _norm_forward(tl, d, p + "n1.", x, keep)
    tl.alloc(p + "q", e * d.q * T, ACT)
    if l == 0 and not stop_early:
        tl.hook("matmul:forward")
    tl.alloc(p + "k", e * d.kv * T, ACT)
    tl.alloc(p + "v", e * d.kv * T, ACT)
    _rope_forward(tl, d, p + "q", d.q)
    _rope_forward(tl, d, p + "k", d.kv)
    tl.free(p + "q", p + "k")  # pre-RoPE q, k: RoPE saves only cos/sin
    tl.alloc(p + "out", e * d.q * T, ACT)  # SDPA output, laid out (b, s, heads, hd): o_proj reads it as is
    tl.alloc(p + "lse", 4 * d.a * T, ACT)
    if not keep:
        tl.free(p + "lse")
    tl.alloc(p + "o", e * h * T, TMP)
    if not keep:
        tl.free(p + "out", p + "qr", p + "kr", p + "v", y1)
    tl.alloc(p + "mid", e * h * T, ACT)
    tl.free(p + "o")
    y2 = _norm_forward(tl, d, p + "n2.", p + "mid", keep)
    tl.alloc(p + "g", e * f * T, ACT)
    tl.alloc(p + "s", e * f * T, ACT)
    if not keep:
        tl.free(p + "g")
    tl.alloc(p + "u", e * f * T, ACT)
    tl.alloc(p + "p", e * f * T, ACT)
    if not keep:
        tl.free(p + "s", p + "u")
    if stop_early:
        if d.cast:
            tl.free(p + "mid")  # bf16: not saved (its fp32 copy is); dies with the aborted frame
        return ""
    tl.alloc(p + "dn", e * h * T, TMP)
    if not keep:
        tl.free(p + "p", y2)
    out = f"x{l + 1}"
    tl.alloc(out, e * h * T, ACT)
    tl.free(p + "dn")
    if d.cast or not keep:
        tl.free(p + "mid")  # fp32 + saved: mid is the post-attention norm's saved input
    return out


@dataclass(frozen=True)
class _Semantics:
    """How the device's allocations differ from the plain autograd order.

    in_place: autograd's InputBuffer adds a second grad of a tensor into the first in place
    when it holds the last reference (torch/csrc/autograd/input_buffer.cpp,
    can_accumulate_inplace). CpuBackend's counting dispatch mode defeats that check (the
    tensors pass through Python), so under it every such sum is a new tensor.
    workspaces: kernel-internal buffers the CPU counter cannot see.
    """

    in_place: bool
    round_to: int
    blas_workspaces: list[int]  # per thread that runs matmuls: forward (main), backward (autograd)
    workspaces: dict[str, list[int]]  # kernel -> its buffers' bytes, in allocation order


def _semantics(d: _Dims, device: str, in_place: bool | None = None) -> _Semantics:
    if device == "cpu":
        return _Semantics(in_place=bool(in_place), round_to=1, blas_workspaces=[], workspaces={})
    ws = {
        # Flash-attention 2 backward (PyTorch's mha_bwd): softmax_d fp32 (b, heads, s), dq_accum
        # fp32 (b, s, heads, hd); with GQA, dk/dv at full head count before the sum.
        "sdpa_backward": [4 * d.a * d.T, 4 * d.q * d.T] + ([d.e * d.q * d.T] * 2 if d.kv != d.q else []),
        # embedding_dense_backward_cuda (EmbeddingBackwardKernel.cu): fp32 partial sums per
        # index (numel x hidden) and six int64 index buffers (sorted/original indices, segment
        # offsets, partial counts and offsets).
        "embedding_backward": [4 * d.h * d.T] + [8 * d.T] * 6,
    }
    return _Semantics(in_place=True if in_place is None else in_place, round_to=CUDA_BLOCK_BYTES,
                      blas_workspaces=[CUDA_BLAS_WORKSPACE_BYTES // 2] * 2, workspaces=ws)


def _norm_backward(tl: _Timeline, d: _Dims, sem: _Semantics, p: str, x: str, gy: str, grad_w: str) -> str:
    """Autograd of the RMSNorm ops above, in the engine's order; returns the input's grad."""
    T, h, e = d.T, d.h, d.e
    tl.alloc(p + "gn", e * h * T, TMP)  # gy * weight
    tl.alloc(p + "gt", e * h * T, TMP)  # gy * n, summed into the weight grad
    tl.alloc(grad_w, e * h, GRAD)
    tl.free(p + "gt", gy, p + "n" if d.cast else p + "n32")  # n: saved by weight * n only
    src = p + "gn"
    if d.cast:
        tl.alloc(p + "gn32", 4 * h * T, TMP)
        tl.free(p + "gn")
        src = p + "gn32"
    tl.alloc(p + "ga", 4 * h * T, TMP)  # grad * rstd
    tl.alloc(p + "gt2", 4 * h * T, TMP)  # grad * x, summed into rstd's grad
    tl.free(p + "gt2", src)
    tl.alloc(p + "gsq", 4 * h * T, TMP)  # mean backward
    tl.alloc(p + "pw", 4 * h * T, TMP)  # pow backward: x^1
    tl.alloc(p + "ms", 4 * h * T, TMP)  # ... * 2
    tl.alloc(p + "gpow", 4 * h * T, TMP)
    tl.free(p + "ms", p + "pw", p + "gsq", p + "rstd", p + "x32" if d.cast else x)
    tl.accumulate(p + "gsum", p + "ga", p + "gpow", 4 * h * T, sem.in_place)
    if not d.cast:
        return p + "gsum"
    tl.alloc(p + "gx", e * h * T, TMP)
    tl.free(p + "gsum")
    return p + "gx"


def _rope_backward(tl: _Timeline, d: _Dims, p: str, width: int, g: str) -> str:
    """Products, slice_backward and sums of rotate_half: at most three more grads at once."""
    e, T = d.e, d.T
    tl.alloc_group(p + "rtmp", [e * width * T] * 3, TMP)
    tl.free_group(p + "rtmp")
    tl.alloc(p + "gpre", e * width * T, TMP)
    tl.free(g)
    return p + "gpre"


def _layer_backward(tl: _Timeline, d: _Dims, sem: _Semantics, l: int, g_out: str) -> str:
    """One decoder layer's backward in the engine's order (highest sequence number first):
    MLP, post-attention norm, o_proj, SDPA, RoPE (k then q), v/k/q projections, input norm."""
    T, h, e, f = d.T, d.h, d.e, d.f
    p = f"L{l}."
    wts = _layer_weights(d)
    tl.at(f"layer {l} backward (MLP)")
    tl.alloc(p + "down.grad", e * wts["down"], GRAD)
    tl.alloc(p + "gp", e * f * T, TMP)
    tl.free(p + "p")
    tl.alloc(p + "gs", e * f * T, TMP)
    tl.alloc(p + "gu", e * f * T, TMP)
    tl.free(p + "gp", p + "u", p + "s")
    tl.alloc(p + "up.grad", e * wts["up"], GRAD)
    tl.alloc(p + "gxu", e * h * T, TMP)
    tl.free(p + "gu")
    tl.alloc(p + "gg", e * f * T, TMP)
    tl.free(p + "gs", p + "g")
    tl.alloc(p + "gate.grad", e * wts["gate"], GRAD)
    tl.alloc(p + "gxg", e * h * T, TMP)
    tl.free(p + "gg", p + "n2.y")
    tl.accumulate(p + "gy2", p + "gxu", p + "gxg", e * h * T, sem.in_place)
    tl.at(f"layer {l} backward (post-attention norm)")
    g_mid_n = _norm_backward(tl, d, sem, p + "n2.", p + "mid", p + "gy2", p + "norm2.grad")
    # the residual's grad (the layer output's) arrived first; the norm's is added to it
    tl.accumulate(p + "gmid", g_out, g_mid_n, e * h * T, sem.in_place)
    tl.at(f"layer {l} backward (attention)")
    tl.alloc(p + "o.grad", e * wts["o"], GRAD)
    tl.alloc(p + "gatt", e * d.q * T, TMP)
    # flash-attention backward (mha_bwd): dq, dk, dv, then softmax_d, dq_accum and, with GQA,
    # dk/dv at the full head count, summed into dk/dv before it returns
    tl.alloc(p + "gq", e * d.q * T, TMP)
    tl.alloc(p + "gk", e * d.kv * T, TMP)
    tl.alloc(p + "gv", e * d.kv * T, TMP)
    tl.alloc_group(p + "sdpa_ws", sem.workspaces.get("sdpa_backward", []), "workspace")
    tl.free_group(p + "sdpa_ws")
    tl.free(p + "gatt", p + "out", p + "lse", p + "v", p + "qr", p + "kr")
    gk = _rope_backward(tl, d, p + "k", d.kv, p + "gk")
    gq = _rope_backward(tl, d, p + "q", d.q, p + "gq")
    if l == 0:
        tl.free("cos", "sin")
    tl.alloc(p + "v.grad", e * wts["v"], GRAD)
    tl.alloc(p + "gxv", e * h * T, TMP)
    tl.free(p + "gv")
    tl.alloc(p + "ck", e * d.kv * T, TMP)  # transposed grad made contiguous for the matmul
    tl.free(gk)
    tl.alloc(p + "k.grad", e * wts["k"], GRAD)
    tl.alloc(p + "gxk", e * h * T, TMP)
    tl.free(p + "ck")
    tl.accumulate(p + "gxvk", p + "gxv", p + "gxk", e * h * T, sem.in_place)
    tl.alloc(p + "cq", e * d.q * T, TMP)
    tl.free(gq)
    tl.alloc(p + "q.grad", e * wts["q"], GRAD)
    tl.alloc(p + "gxq", e * h * T, TMP)
    tl.free(p + "cq", p + "n1.y")
    tl.accumulate(p + "gy1", p + "gxvk", p + "gxq", e * h * T, sem.in_place)
    tl.at(f"layer {l} backward (input norm)")
    g_x_n = _norm_backward(tl, d, sem, p + "n1.", f"x{l}", p + "gy1", p + "norm1.grad")
    g_x = f"g{l}"
    tl.accumulate(g_x, p + "gmid", g_x_n, e * h * T, sem.in_place)
    return g_x


def predict(spec: Any, workload: Workload, in_place: bool | None = None) -> Prediction:
    """Replay one training step of `spec` under `workload`; return its predicted peaks.

    The step is a steady one (after the warm-up): parameters, optimizer states, the cuBLAS
    workspaces and the batch are allocated at its start. `in_place` overrides how autograd sums
    two grads of one tensor (see _Semantics); by default it is in place on devices and not under
    the CPU backend's counter.
    """
    w = workload
    w.check()
    d = _dims(spec, w)
    sem = _semantics(d, w.device, in_place)
    st = model_states(spec, w.dtype, w.optimizer, w.device, w.master_weights)
    tl = _Timeline(sem.round_to)
    tl.loss_scale = 1.0 / max(w.loss_chunks, 1)
    notes: list[str] = []
    approximate = spec.model_type not in EXACT_TYPES
    if approximate:
        notes.append(f"model_type {spec.model_type!r}: layer replayed as a Llama layer (approximate)")

    # step start: resident states, workspaces from the warm-up, the batch
    tl.at("step start")
    sizes = param_tensor_bytes(spec, w.dtype)
    pol = w.policy
    if pol is None:
        tl.alloc_group("params", sizes, "params")
    else:
        tl.alloc_group("params", [int(n * pol.param_scale) for n in sizes], "params")
        tl.alloc("policy_extra", pol.extra_bytes, "optimizer_states")
        tl.grad_scale = pol.grad_scale
    tl.alloc_group("buffers", [4 * (d.hd // 2)] * 2, "params")
    _optimizer_states(tl, spec, w, sizes)
    tl.alloc_group("blas_ws", sem.blas_workspaces, "workspace")
    tl.alloc("ids", 8 * d.T, "inputs")
    baseline = tl.total
    tl.new_phase()
    forward, backward, optimizer, after_forward, loss_block = _step(tl, spec, d, sem, w, sizes)

    per_layer = layer_activation_bytes_per_token(spec, w.dtype) * d.T
    saved_per_layer = checkpoint_residue_bytes_per_token(spec, w.dtype) * d.T if w.gc else per_layer
    return Prediction(
        workload=w, states=st, baseline_bytes=baseline, forward=forward, backward=backward,
        optimizer=optimizer, activations_after_forward_bytes=after_forward - baseline,
        saved_per_layer_bytes=saved_per_layer, layer_activation_bytes=per_layer,
        loss_block_bytes=loss_block, approximate=approximate, notes=notes,
    )


def _optimizer_states(tl: _Timeline, spec: Any, w: Workload, sizes: list[int]) -> None:
    """AdamW's states as `_init_group` makes them, parameter by parameter: the float32 `step`
    (a host tensor unless fused, counted only by the CPU backend), exp_avg, exp_avg_sq; with
    mixed precision the fp32 master copy first. SGD without momentum keeps nothing."""
    if w.policy is not None:
        tl.alloc("policy_states", w.policy.state_bytes, "optimizer_states")
        return
    impl = ADAM_IMPLS.get(w.optimizer)
    if w.master_weights:
        tl.alloc_group("master", [2 * n for n in sizes] if w.dtype != "fp32" else sizes, "optimizer_states")
    if impl is None:
        return
    scale = 4 // DTYPE_BYTES[w.dtype] if w.master_weights else 1
    step_bytes = 4 if (w.device == "cpu" or impl == "fused") else 0
    for i, n in enumerate(sizes):
        tl.alloc(f"opt_step[{i}]", step_bytes, "optimizer_states")
        tl.alloc(f"opt_m[{i}]", n * scale, "optimizer_states")
        tl.alloc(f"opt_v[{i}]", n * scale, "optimizer_states")


def _optimizer_step(tl: _Timeline, w: Workload, sizes: list[int], first: bool, spec: Any) -> None:
    """What optimizer.step() allocates, by implementation (torch/optim/adam.py):

    - foreach (_multi_tensor_adam): `torch._foreach_sqrt(exp_avg_sqs)`, one tensor per
      parameter, all alive until the update is done;
    - forloop (_single_tensor_adam): per parameter the sqrt and the quotient of `denom`, while the
      previous parameter's denom is still bound;
    - fused (_fused_adamw_): nothing;
    - SGD without momentum (foreach): nothing.
    The first step makes the states first (_init_group); mixed precision also copies the grads
    to fp32 for the update (plan only)."""
    if first:
        _optimizer_states(tl, spec, w, sizes)
    if w.policy is not None:
        tl.alloc("policy_transient", w.policy.transient_bytes, TMP)
        tl.free("policy_transient")
        return
    impl = ADAM_IMPLS.get(w.optimizer)
    scale = 4 // DTYPE_BYTES[w.dtype] if w.master_weights else 1
    if w.master_weights:
        tl.alloc_group("grads32", [n * 4 // DTYPE_BYTES[w.dtype] for n in sizes], TMP)
    if impl == "foreach":
        tl.alloc_group("opt_sqrt", [n * scale for n in sizes], TMP)
        tl.free_group("opt_sqrt")
    elif impl == "forloop":
        prev = None
        for i, n in enumerate(sizes):
            tl.alloc(f"opt_sqrt[{i}]", n * scale, TMP)
            tl.alloc(f"opt_denom[{i}]", n * scale, TMP)
            tl.free(f"opt_sqrt[{i}]")
            if prev is not None:
                tl.free(prev)
            prev = f"opt_denom[{i}]"
        if prev is not None:
            tl.free(prev)
    if w.master_weights:
        tl.free_group("grads32")


def _step(tl: _Timeline, spec: Any, d: _Dims, sem: "_Semantics", w: Workload, sizes: list[int],
          first: bool = False) -> tuple[Peak, Peak, Peak, int, int]:
    """Forward, loss, backward and optimizer.step() of one training step, on a timeline where
    the parameters (and, unless `first`, the optimizer states) are alive. Returns the three
    phases' peaks, the total after forward+loss and the loss block's bytes. The grads stay
    alive (zero_grad is the caller's)."""
    e, T, h, V = d.e, d.T, d.h, d.V
    # forward ---------------------------------------------------------------------------
    tl.at("embedding and RoPE tables")
    tl.alloc("x0", e * h * T, ACT)
    tl.alloc("position_ids", 8 * d.s, "inputs")
    # LlamaRotaryEmbedding at batch 1: fp32 freqs (s x hd/2), cat, cos, sin and their
    # scaled copies; cast to the model dtype unless it is fp32.
    sh = d.s * d.hd
    tl.alloc("freqs", 2 * sh, TMP)
    tl.alloc("emb", 4 * sh, TMP)
    tl.alloc("cos32", 4 * sh, TMP)
    tl.alloc("sin_raw", 4 * sh, TMP)
    tl.alloc("sin32", 4 * sh, TMP)
    tl.free("sin_raw")
    if d.cast:
        tl.alloc("cos", e * sh, ACT)
        tl.alloc("sin", e * sh, ACT)
        tl.free("cos32", "sin32")
    else:
        tl.rename("cos32", "cos")
        tl.rename("sin32", "sin")
    tl.free("freqs", "emb")
    x = "x0"
    for l in range(d.L):
        x_next = _layer_forward(tl, d, l, keep=not w.gc)
        # the caller's loop variable lets go of the layer input unless something keeps it:
        # the checkpoint (GC), or the input norm's saved fp32 input (which is x itself in fp32)
        if l > 0 and not w.gc and d.cast:
            tl.free(x)
        x = x_next
    tl.at("final norm")
    yf = _norm_forward(tl, d, "fn.", x, keep=True)
    if d.cast:
        tl.free(x)
    if d.cast and not w.gc:
        tl.free("x0")  # inputs_embeds dies when the decoder's forward returns
    if not w.gc:
        tl.free("position_ids")  # with GC every checkpoint holds it as an input
    tl.at("LM head")
    tl.alloc("logits", e * V * T, LOSS)
    tl.at("loss (fp32 log-softmax)")
    if d.cast:
        tl.alloc("logits32", 4 * V * T, LOSS)
    # ForCausalLMLoss pads labels by one and takes labels[..., 1:].contiguous(): a copy,
    # except at batch 1 where the slice already is contiguous and keeps the padded tensor.
    tl.alloc("labels_pad", 8 * (T + d.b), "inputs")
    if d.b > 1:
        tl.alloc("labels_shift", 8 * T, "inputs")
    tl.alloc("logprobs", 4 * V * T, LOSS)
    tl.alloc("loss", 4, LOSS)
    tl.alloc("loss_total_weight", 4, LOSS)
    tl.free("logits32")
    if d.b > 1:
        tl.free("labels_pad")
    if not w.keep_logits:
        tl.free("logits")  # nothing saves them: log-softmax's backward needs only its output
    after_forward = tl.total
    loss_block = (e + 4 + (4 if d.cast else 0)) * V * T
    forward = tl.new_phase()

    # backward --------------------------------------------------------------------------
    tl.at("loss backward")
    tl.alloc("g_loss", 4, LOSS)
    tl.alloc("g_logprobs", 4 * V * T, LOSS)
    tl.free("labels_shift", "labels_pad", "loss_total_weight")
    tl.alloc("g_logits32", 4 * V * T, LOSS)
    tl.free("g_logprobs", "logprobs")
    g_logits = "g_logits32"
    if d.cast:
        tl.alloc("g_logits", e * V * T, LOSS)
        tl.free("g_logits32")
        g_logits = "g_logits"
    tl.at("LM head backward")
    tl.alloc("head.grad", e * V * h, GRAD)
    tl.hook("matmul:backward")
    tl.alloc("g_yf", e * h * T, TMP)
    tl.free(g_logits, yf)
    tl.at("final norm backward")
    g = _norm_backward(tl, d, sem, "fn.", x, "g_yf", "fnorm.grad")
    for l in reversed(range(d.L)):
        if w.gc:
            _layer_forward(tl, d, l, keep=True, stop_early=True)
        g_prev = _layer_backward(tl, d, sem, l, g)
        if w.gc:
            tl.free(f"x{l}")  # the checkpoint's input dies with the layer's last node
            if l == 0:
                tl.free("position_ids")
        g = g_prev
    tl.at("embedding backward")
    tl.alloc_group("emb_ws", sem.workspaces.get("embedding_backward", []), "workspace")
    if d.tied:
        # the embedding's grad meets the LM head's (same weight) in one InputBuffer; torch
        # adds them out of place even without the counter (profiler-measured on the CPU)
        tl.alloc("embed.grad_new", e * V * h, TMP)
        tl.free_group("emb_ws")
        tl.free(g)
        tl.accumulate("embed.grad", "head.grad", "embed.grad_new", e * V * h, False)
    else:
        tl.alloc("embed.grad", e * V * h, GRAD)
        tl.free_group("emb_ws")
    tl.free(g, "x0", "g_loss")
    backward = tl.new_phase()

    # optimizer step --------------------------------------------------------------------
    tl.at("optimizer step")
    _optimizer_step(tl, w, sizes, first, spec)
    optimizer = tl.new_phase()
    return forward, backward, optimizer, after_forward, loss_block


# ---------------------------------------------------------------------------------------
# fitting a device


def usable_bytes(device_memory_bytes: int, device: str = "cuda", context_bytes: int | None = None) -> int:
    """What the caching allocator can reserve on a card of `device_memory_bytes` (torch's
    total_memory): the card minus the context. Whether a step fits in it is the allocator
    replay's question (`fit`); on the CPU the counter's limit is the whole story."""
    if device == "cpu":
        return device_memory_bytes
    ctx = DEVICE_CONTEXT_BYTES if context_bytes is None else context_bytes
    return max(device_memory_bytes - ctx, 0)


def max_batch(spec: Any, limit_bytes: int, seq_len: int, dtype: str = "bf16", optimizer: str = "adamw",
              gc: bool = False, device: str = "cuda", master_weights: bool = False,
              keep_logits: bool = False, cap: int = 1 << 16, policy: StatesPolicy | None = None) -> int:
    """Largest batch whose predicted peak (the same `predict`) is at most `limit_bytes`.

    0 when not even batch 1 fits. Peaks grow with the batch, so a doubling then a bisection
    finds it with about 2*log2(batch) predictions.
    """
    def fits(b: int) -> bool:
        wl = Workload(b, seq_len, dtype, optimizer, gc, device, master_weights, keep_logits, policy)
        return predict(spec, wl).peak_bytes <= limit_bytes

    return largest_fitting(fits, cap)


def largest_fitting(fits: Callable[[int], bool], cap: int) -> int:
    """The largest batch up to `cap` for which `fits` holds, `fits` being monotonic (0: not even 1):
    a doubling, then a bisection."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= cap and fits(hi):
        lo, hi = hi, hi * 2
    if hi > cap:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


# ---------------------------------------------------------------------------------------
# what else would fit: other homes for the model states


DEEPSPEED_REDUCE_BUCKET = 500_000_000  # elements: DeepSpeed's default reduce_bucket_size
LORA_RANK = 16
SHARD_COUNTS = (2, 4, 8, 16, 32, 64)
REMEDY_KEYS = ("zero-offload", "adamw-8bit", "adafactor", "sgd", "lora", "shard")


def _linear_shapes(spec: Any) -> list[tuple[int, int]]:
    d = _dims(spec, Workload(1, 1))
    return [(d.h, d.q), (d.h, d.kv), (d.h, d.kv), (d.q, d.h), (d.h, d.f), (d.h, d.f), (d.f, d.h)]


def remedy(spec: Any, key: str, dtype: str = "bf16", n_devices: int = 1) -> tuple[StatesPolicy, dict[str, str]]:
    """The device-side model states of one alternative setup, and how to say it.

    Bytes per setup (n parameters of e bytes, P = n x e, the largest tensor n_max):
    - zero-offload (DeepSpeed ZeRO-2 with offload_optimizer cpu): the model-dtype weights stay;
      gradients leave the device bucket by bucket through two reduce buffers of
      reduce_bucket_size elements (5e8 by default; two with overlap_comm, stage_1_and_2.py's
      ipg_buffer); fp32 master weights, gradients and Adam moments live on the host (16 B per
      parameter) and the step runs there (DeepSpeed CPUAdam);
    - adamw-8bit (bitsandbytes AdamW8bit): both moments in 8 bits with a float32 absmax per
      256-element block, for tensors of at least 4096 elements; smaller ones keep 32-bit states;
      the update is one fused kernel;
    - adafactor (transformers Adafactor, beta1=None): a row and a column second moment per
      matrix, a full one per vector, in the gradient's dtype; its step upcasts the gradient and the
      weight of each parameter to fp32 and builds the update there: about four fp32 copies of the
      largest parameter;
    - sgd (momentum 0): no states, no step transients;
    - lora (rank 16 on every linear layer of the decoder, base weights frozen): adapter weights,
      their grads, AdamW moments and foreach transient, nothing for the frozen weights; the
      activations are taken as full fine-tuning's (an upper bound: frozen matmuls save no input
      for a weight gradient);
    - shard (FSDP2 / ZeRO-3 over N devices): weights, grads, moments and the foreach transient /N,
      plus two gathered units (the running and the prefetched one) and one unit's unsharded
      grads, a unit being a decoder layer or the embedding, whichever is larger.
    """
    sizes = param_tensor_bytes(spec, dtype)
    e = DTYPE_BYTES[dtype]
    P = sum(sizes)
    n = P // e
    if key == "zero-offload":
        pol = StatesPolicy(key, 1.0, 0.0, 0, 0, 2 * min(DEEPSPEED_REDUCE_BUCKET, n) * e)
        text = {"label": "optimizer states and step on the host (DeepSpeed ZeRO-Offload)",
                "settings": '"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", '
                            '"pin_memory": true}}',
                "host": f"{16 * n / GiB:.1f} GiB of host memory (fp32 master, grads, Adam moments)"}
    elif key == "adamw-8bit":
        state = 0
        for size in sizes:
            k = size // e
            state += (2 * k + 2 * 4 * (-(-k // 256))) if k >= 4096 else 8 * k
        pol = StatesPolicy(key, 1.0, 1.0, state, 0, 0)
        text = {"label": "8-bit AdamW states (bitsandbytes)", "settings": "bnb.optim.AdamW8bit(model.parameters())"}
    elif key == "adafactor":
        d = _dims(spec, Workload(1, 1, dtype=dtype))
        matrices = [(d.V, d.h)] + _linear_shapes(spec) * d.L + ([] if d.tied else [(d.V, d.h)])
        vectors = (2 * d.L + 1) * d.h
        state = e * (sum(r + c for r, c in matrices) + vectors)
        pol = StatesPolicy(key, 1.0, 1.0, state, 16 * (max(sizes) // e), 0)
        text = {"label": "Adafactor (factored second moment, no first moment)",
                "settings": "transformers.optimization.Adafactor(params, lr=..., scale_parameter=False, "
                            "relative_step=False)"}
    elif key == "sgd":
        pol = StatesPolicy(key, 1.0, 1.0, 0, 0, 0)
        text = {"label": "SGD without momentum (no optimizer states)", "settings": "torch.optim.SGD(params, lr=...)"}
    elif key == "lora":
        d = _dims(spec, Workload(1, 1, dtype=dtype))
        trainable = d.L * sum(LORA_RANK * (i + o) for i, o in _linear_shapes(spec))
        pol = StatesPolicy(key, 1.0, 0.0, 2 * trainable * e, trainable * e, 2 * trainable * e)
        text = {"label": f"LoRA rank {LORA_RANK} on every linear layer, base weights frozen",
                "settings": f'peft.LoraConfig(r={LORA_RANK}, target_modules="all-linear")'}
    elif key == "shard":
        d = _dims(spec, Workload(1, 1, dtype=dtype))
        layer = sum(sizes[1:1 + (len(sizes) - 2 - (0 if d.tied else 1)) // d.L])
        unit = max(e * d.V * d.h, layer)
        N = n_devices
        pol = StatesPolicy(f"shard-{N}", 1.0 / N, 1.0 / N, 2 * P // N, P // N, 3 * unit)
        text = {"label": f"states sharded over {N} devices (FSDP2 / ZeRO-3)",
                "settings": 'torch.distributed.fsdp.fully_shard(layer) per decoder layer, or DeepSpeed '
                            '"zero_optimization": {"stage": 3}'}
    else:
        raise ValueError(f"unknown remedy {key!r}")
    return pol, text


def fit_options(spec: Any, seq_len: int, room_bytes: int, dtype: str = "bf16", device: str = "cuda",
                probe: tuple[Any, int] | None = None) -> list["FitOption"]:
    """Each alternative home for the model states (`remedy`), with its device-side states, the
    predicted peak at batch 1 with layer checkpointing, and the largest batch with and without
    it, against `room_bytes` (what the allocator can reserve, or the limit). Largest batches come
    from the allocated peak (the allocator is not replayed for these setups). `probe`: (spec, batch)
    of the offload probe, so the ZeRO-Offload line can be checked against its measurement."""
    from gcdoctor.facts.memory import FitOption

    out: list[FitOption] = []
    for key in REMEDY_KEYS:
        counts = SHARD_COUNTS if key == "shard" else (1,)
        for N in counts:
            pol, text = remedy(spec, key, dtype, N)
            peak = predict(spec, Workload(1, seq_len, dtype, "adamw", True, device, policy=pol)).peak_bytes
            best = max_batch(spec, room_bytes, seq_len, dtype, "adamw", True, device, policy=pol, cap=1 << 12)
            if key == "shard" and best == 0 and N != counts[-1]:
                continue  # the smallest N that fits
            opt = FitOption(
                key=key, label=text["label"], settings=text["settings"], host=text.get("host", ""), n_devices=N,
                device_state_bytes=int(spec.param_count() * DTYPE_BYTES[dtype] * pol.param_scale) + pol.state_bytes
                + pol.extra_bytes,
                peak_bytes_batch1_gc=peak, max_batch_gc=best,
                max_batch_no_gc=max_batch(spec, room_bytes, seq_len, dtype, "adamw", False, device, policy=pol,
                                          cap=1 << 12))
            if probe is not None and key == "zero-offload":
                pspec, pbatch = probe
                ppol, _ = remedy(pspec, key, dtype)
                opt.probe_layers, opt.probe_batch = pspec.n_layers, pbatch
                opt.predicted_probe_peak_bytes = predict(
                    pspec, Workload(pbatch, seq_len, dtype, "adamw", True, device, policy=ppol)).peak_bytes
            out.append(opt)
            break
    return sorted(out, key=lambda o: (-o.max_batch_gc, o.n_devices, REMEDY_KEYS.index(o.key)))


# ---------------------------------------------------------------------------------------
# other checkpointing policies, from what their layers keep


def policy_peak_bytes(spec: Any, batch: int, seq_len: int, kept_per_token: float, dtype: str = "bf16",
                      optimizer: str = "adamw", device: str = "cuda", loss_chunks: int = 1) -> int:
    """The predicted peak of one step under a checkpointing policy whose decoder layers keep
    `kept_per_token` bytes per token each for the backward (measured on a few layers; the layer's
    output included), with the loss computed `loss_chunks` slices at a time.

    The two policies the timeline replays exactly bound it: every layer checkpointed (a layer keeps
    its input) and none (a layer keeps all it saves). The forward/backward peak is interpolated
    between theirs by where the policy's bytes lie between the two layers' bytes; a chunked loss
    is replayed as logits and loss blocks `loss_chunks` times smaller (Workload.loss_chunks). The
    optimizer step's peak does not depend on the policy."""
    full = layer_activation_bytes_per_token(spec, dtype)
    residue = checkpoint_residue_bytes_per_token(spec, dtype)
    preds = [predict(spec, Workload(batch, seq_len, dtype, optimizer, gc, device, loss_chunks=loss_chunks))
             for gc in (True, False)]
    fb = [p.fwd_bwd.bytes for p in preds]
    frac = (kept_per_token - residue) / (full - residue) if full > residue else 1.0
    fwd_bwd = fb[0] + (fb[1] - fb[0]) * max(frac, 0.0)
    return int(max(fwd_bwd, preds[0].optimizer.bytes))


def policy_max_batch(spec: Any, room_bytes: int, seq_len: int, kept_per_token: float, dtype: str = "bf16",
                     optimizer: str = "adamw", device: str = "cuda", loss_chunks: int = 1,
                     cap: int = 1 << 12) -> int:
    """The largest batch whose `policy_peak_bytes` is within `room_bytes` (0: not even 1)."""
    return largest_fitting(lambda b: policy_peak_bytes(spec, b, seq_len, kept_per_token, dtype, optimizer, device,
                                                       loss_chunks) <= room_bytes, cap)
