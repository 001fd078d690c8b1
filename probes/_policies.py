"""The checkpointing policies of the policy search, applied for real to a Hugging Face decoder, and
the check that each does what it claims.

Policies (names are gcdoctor.facts.policies' keys):

- none, layer, every-<N>, attn-only, mlp-only: the granularity probe's variants
  (probes/granularity.py `apply_model_variant`), reused as they are;
- selective-op: each decoder layer under non-reentrant `checkpoint` with
  `create_selective_checkpoint_contexts` and a policy that saves the outputs of the matmuls and
  of attention and recomputes everything else (the pointwise ops: norms, RoPE, SiLU, products,
  residual adds), as torchtitan's "selective op" activation checkpointing does;
- budget-<f>: each decoder layer compiled by torch.compile while
  `torch._functorch.config.activation_memory_budget` is f: the partitioner (min-cut
  rematerialisation) then recomputes what it must to keep about f of the activations. Inductor on
  a GPU; on the CPU the `aot_eager_decomp_partition` backend runs the same partitioner without
  code generation;
- cpu-offload: each decoder layer's saved tensors moved to host memory (`save_on_cpu`, pinned
  on a GPU) and back in the backward: the last resort.

A chunked loss (`chunked_causal_lm_loss`) replaces the model's logits and fp32 loss over all
tokens by chunks of tokens, each recomputed in the backward: the same loss, without the
[tokens x vocab] blocks. It moves the boundary without changing the math, like the allocator and
the AdamW implementation.

The check (`check_policy`) runs one step of a policy under the profiler and the memory counter:

- the recompute, from the step's own trace: gcdoctor.trace.recompute finds the forward ops run
  inside the backward (regions and their host time, as a share of the forward's);
- the bytes each decoder layer keeps for the backward: what is allocated after the layer's
  forward less what was before it (the layer's output included: the next layer's input). A
  `saved_tensors_hooks` pair cannot count this under checkpointing: the innermost hooks win and
  `checkpoint` installs its own, which keep nothing but the region's inputs;
- for selective-op, the policy's own decisions: which ops it saved in the forward and which it
  ran again in the recomputation.

Both are set against what the policy implies (the memory model's per-layer bytes, the layer's
share of the forward) in a PolicyCheck.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from gcdoctor.facts.policies import (POLICY_ATTN, POLICY_LAYER, POLICY_MLP, POLICY_NONE, POLICY_OFFLOAD,
                                     POLICY_SELECTIVE, PolicyCheck)
from gcdoctor.probes._regions import RegionCensus, _Deferred
from gcdoctor.probes.granularity import apply_model_variant, decoder_layers

# the granularity probe's names for two of the policies
_GRANULARITY_NAME = {POLICY_ATTN: "selective-attn", POLICY_MLP: "selective-mlp"}
BUDGETS = (0.5, 0.25)  # the compiler's activation memory budgets tried (fractions of the default's)
LOSS_CHUNKS = 8  # the chunked loss's chunks: one eighth of the logits alive at a time


def budget_policy(fraction: float) -> str:
    return f"budget-{fraction:g}"


def every_policy(n: int) -> str:
    return f"every-{n}"


def policy_label(policy: str) -> str:
    """A few words for reports: what the policy checkpoints."""
    if policy.startswith("every-"):
        n = int(policy.split("-")[1])
        return f"every {_ordinal(n)} decoder layer checkpointed"
    if policy.startswith("budget-"):
        return f"compiled layers, activation memory budget {policy.split('-', 1)[1]}"
    return {POLICY_NONE: "no checkpointing", POLICY_LAYER: "every decoder layer checkpointed",
            POLICY_ATTN: "only the attention of each layer checkpointed",
            POLICY_MLP: "only the MLP of each layer checkpointed",
            POLICY_SELECTIVE: "op-level selective: matmul and attention outputs saved, pointwise ops recomputed",
            POLICY_OFFLOAD: "saved activations offloaded to host memory"}.get(policy, policy)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def policies_for(n_layers: int, compile_ok: bool) -> list[str]:
    """The policies searched for a model of `n_layers` decoder layers, cheapest recompute first."""
    out = [POLICY_NONE, POLICY_SELECTIVE, POLICY_ATTN, POLICY_MLP]
    if n_layers >= 2:
        out.append(every_policy(2))
    out.append(POLICY_LAYER)
    if compile_ok:
        out += [budget_policy(b) for b in BUDGETS]
    out.append(POLICY_OFFLOAD)
    return out


# -- selective op-level checkpointing ----------------------------------------------------------

def _op_name(func: Any) -> str:
    return str(getattr(getattr(func, "_overloadpacket", None), "__name__", func))


def _op(name: str) -> Any:
    pkt, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, pkt, None), overload or "default", None)


# matmuls and attention kernels whose outputs selective-op keeps (the rest is recomputed)
SAVE_OPS = frozenset(o for o in (_op(n) for n in (
    "mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
    "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward",
    "_efficient_attention_forward")) if o is not None)
SAVE_OP_NAMES = frozenset(_op_name(o) for o in SAVE_OPS)


@dataclass
class SelectiveLog:
    """What selective-op did, by op name: the forward ops whose outputs the policy kept, and the
    ops the recomputation really ran (counted outside SAC's own mode, which answers the kept ones
    from its cache without running them)."""

    saved: dict[str, int] = field(default_factory=dict)
    recomputed: dict[str, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.saved.clear()
        self.recomputed.clear()


class _CountNames(TorchDispatchMode):
    def __init__(self, book: dict[str, int]) -> None:
        super().__init__()
        self.book = book

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = _op_name(func)
        self.book[name] = self.book.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def selective_policy(log: SelectiveLog | None = None) -> Callable:
    from torch.utils.checkpoint import CheckpointPolicy

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        save = func in SAVE_OPS
        if save and log is not None and not ctx.is_recompute:
            name = _op_name(func)
            log.saved[name] = log.saved.get(name, 0) + 1
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _apply_selective(model: Any, census: RegionCensus, log: SelectiveLog | None) -> Callable[[], None]:
    from torch.utils.checkpoint import create_selective_checkpoint_contexts
    policy = selective_policy(log)
    undos = []
    for i, layer in enumerate(decoder_layers(model)):
        labelled = census.context_fn(f"L{i}-sac-")

        def context_fn(labelled=labelled):
            sac_fwd, sac_rec = create_selective_checkpoint_contexts(policy)
            fwd, rec = labelled()
            counted = [_CountNames(log.recomputed)] if log is not None else []
            return _Deferred(fwd, sac_fwd), _Deferred(rec, *counted, sac_rec)

        def make(original: Callable, context_fn: Callable = context_fn) -> Callable:
            return lambda *a, **k: checkpoint(original, *a, use_reentrant=False, context_fn=context_fn, **k)

        undos.append(_wrap_forward(layer, make))
    return _undo_all(undos)


def _wrap_forward(module: torch.nn.Module, make: Callable[[Callable], Callable]) -> Callable[[], None]:
    """Replace module.forward in training (grad enabled) by make(original); returns the undo."""
    original = module.forward
    wrapped = make(original)

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not (module.training and torch.is_grad_enabled()):
            return original(*args, **kwargs)
        return wrapped(*args, **kwargs)

    module.forward = forward

    def undo() -> None:
        if module.__dict__.get("forward") is forward:
            del module.forward
    return undo


def _undo_all(undos: list[Callable[[], None]]) -> Callable[[], None]:
    def undo() -> None:
        for u in reversed(undos):
            u()
    return undo


# -- the compiler's activation memory budget ---------------------------------------------------

def compile_backend(device_kind: str) -> str:
    return "inductor" if device_kind in ("cuda", "musa") else "aot_eager_decomp_partition"


def compile_unavailable(device_kind: str) -> str | None:
    """Why torch.compile cannot run the budget policies here, or None."""
    try:
        import torch._dynamo  # noqa: F401
        import torch._functorch.config  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means no compile
        return f"torch.compile is unavailable: {type(exc).__name__}: {exc}"
    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile is not supported on this Python"
    if device_kind == "musa":
        return "torch.compile's inductor backend has no MUSA code generation here"
    return None


def _apply_budget(model: Any, fraction: float, device_kind: str) -> Callable[[], None]:
    """Compile each decoder layer with the budget set while the graphs are compiled (at the first
    training step): the setting stays patched until undone, and dynamo's caches are reset at both
    ends so another budget compiles afresh."""
    import torch._dynamo
    import torch._functorch.config as fconfig
    torch._dynamo.reset()
    old = fconfig.activation_memory_budget
    fconfig.activation_memory_budget = fraction
    # a layer that guards on something of its own (its index) compiles once per layer: let every
    # layer compile rather than fall back to eager past dynamo's default limit of 8
    n = len(decoder_layers(model))
    limits = {k: getattr(torch._dynamo.config, k) for k in ("recompile_limit", "cache_size_limit")
              if hasattr(torch._dynamo.config, k)}
    for k, v in limits.items():
        setattr(torch._dynamo.config, k, max(v, n + 8))
    backend = compile_backend(device_kind)
    undos = [_wrap_forward(layer, lambda original: torch.compile(original, backend=backend, dynamic=False))
             for layer in decoder_layers(model)]

    def undo() -> None:
        _undo_all(undos)()
        fconfig.activation_memory_budget = old
        for k, v in limits.items():
            setattr(torch._dynamo.config, k, v)
        torch._dynamo.reset()
    return undo


# -- CPU offload ---------------------------------------------------------------------------------

def _apply_offload(model: Any, device_kind: str) -> Callable[[], None]:
    pin = device_kind in ("cuda", "musa")

    def make(original: Callable) -> Callable:
        def run(*args: Any, **kwargs: Any) -> Any:
            with torch.autograd.graph.save_on_cpu(pin_memory=pin):
                return original(*args, **kwargs)
        return run
    return _undo_all([_wrap_forward(layer, make) for layer in decoder_layers(model)])


# -- one entry point ---------------------------------------------------------------------------

def apply_policy(model: Any, policy: str, census: RegionCensus | None = None, device_kind: str = "cpu",
                 log: SelectiveLog | None = None) -> Callable[[], None]:
    """Turn `policy` on for `model`'s decoder layers; returns the function that turns it off."""
    census = census or RegionCensus()
    if policy == POLICY_SELECTIVE:
        return _apply_selective(model, census, log)
    if policy.startswith("budget-"):
        return _apply_budget(model, float(policy.split("-", 1)[1]), device_kind)
    if policy == POLICY_OFFLOAD:
        return _apply_offload(model, device_kind)
    if policy in (POLICY_NONE, POLICY_LAYER) or policy.startswith("every-") or policy in _GRANULARITY_NAME:
        return apply_model_variant(model, _GRANULARITY_NAME.get(policy, policy), census)
    raise ValueError(f"unknown checkpointing policy {policy!r}")


def checkpointed_layers(policy: str, n_layers: int) -> int:
    """Decoder layers whose forward (or a part of it) the policy runs again in the backward."""
    if policy in (POLICY_NONE, POLICY_OFFLOAD) or policy.startswith("budget-"):
        return 0
    if policy.startswith("every-"):
        n = int(policy.split("-")[1])
        return len(range(0, n_layers, n))  # transformers checkpoints layers 0, n, 2n, ...
    return n_layers


# -- the chunked loss ----------------------------------------------------------------------------

def chunked_loss_supported(model: Any) -> str | None:
    """Why the chunked loss cannot replace this model's loss, or None."""
    cfg = getattr(model, "config", None)
    if getattr(model, "model", None) is None or getattr(model, "lm_head", None) is None:
        return "the model has no .model / .lm_head to split the loss from"
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        return "the model transforms its logits (softcapping or scale): the chunked loss would change the math"
    return None


def chunked_loss_supported_spec(spec: Any) -> str | None:
    """chunked_loss_supported from the spec alone (before a model is built)."""
    from gcdoctor.model.memory import EXACT_TYPES
    if spec.model_type not in EXACT_TYPES:
        return f"model_type {spec.model_type!r}: its logits may be transformed (softcapping, scale)"
    return None


def _chunk_loss(hidden: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
    logits = torch.nn.functional.linear(hidden, weight, bias).float()
    return torch.nn.functional.cross_entropy(logits, labels, reduction="sum")


def chunked_causal_lm_loss(model: Any, input_ids: torch.Tensor, chunks: int = LOSS_CHUNKS) -> torch.Tensor:
    """The causal-LM loss of the library's loss function (next-token cross-entropy in fp32, mean
    over the b*(s-1) predicted tokens), computed `chunks` slices of tokens at a time, each under
    checkpoint: only one slice's logits exist at once, in the forward and in the backward."""
    from torch.profiler import record_function

    from gcdoctor.run.capture import LABEL_PREFIX
    hidden = model.model(input_ids=input_ids, use_cache=False).last_hidden_state
    with record_function(LABEL_PREFIX + "loss"):
        h = hidden[:, :-1].reshape(-1, hidden.shape[-1])
        y = input_ids[:, 1:].reshape(-1)
        size = max(1, math.ceil(len(y) / chunks))
        head = model.lm_head
        total: torch.Tensor | None = None
        for hc, yc in zip(h.split(size), y.split(size)):
            part = checkpoint(_chunk_loss, hc, yc, head.weight, head.bias, use_reentrant=False)
            total = part if total is None else total + part
        assert total is not None  # a sequence of two tokens or more gives one chunk or more
        return total / len(y)


# -- what a layer keeps --------------------------------------------------------------------------

class LayerKept:
    """Bytes allocated by each decoder layer's forward and still alive after it (the activations
    it keeps for the backward, its output included), read from the backend's counter."""

    def __init__(self, model: Any, backend: Any) -> None:
        self.backend = backend
        self.kept: list[int | None] = []
        self._before: dict[int, int | None] = {}
        self._handles: list[Any] = []
        self.active = False
        for i, layer in enumerate(decoder_layers(model)):
            self._handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: self._pre(i)))
            self._handles.append(layer.register_forward_hook(lambda m, a, o, i=i: self._post(i)))

    def _pre(self, i: int) -> None:
        if self.active and torch.is_grad_enabled():
            self._before[i] = self.backend.memory_allocated()

    def _post(self, i: int) -> None:
        if not (self.active and torch.is_grad_enabled()) or i not in self._before:
            return
        before, after = self._before.pop(i), self.backend.memory_allocated()
        self.kept.append(None if before is None or after is None else after - before)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


class SavedBytes:
    """Bytes of the tensors autograd saves for the backward while each decoder layer's forward
    runs (a `saved_tensors_hooks` pair counting each storage once). It sees what a compiled
    layer's graph saves; under `checkpoint` it sees nothing (checkpoint's own hooks are innermost),
    which is why checkpointed policies are read from the memory counter instead (LayerKept)."""

    def __init__(self, model: Any) -> None:
        self.kept: list[int | None] = []
        self._layer: int | None = None
        self._seen: set[int] = set()
        self._by_layer: dict[int, int] = {}
        self._handles: list[Any] = []
        self.n = len(decoder_layers(model))
        # the weights a matmul saves are the model's, not activations
        self._params = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
        for i, layer in enumerate(decoder_layers(model)):
            self._handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: self._enter(i)))
            self._handles.append(layer.register_forward_hook(lambda m, a, o, i=i: self._enter(None)))

    def _enter(self, i: int | None) -> None:
        self._layer = i

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if self._layer is not None and isinstance(t, torch.Tensor) and t.device.type != "meta":
            st = t.untyped_storage()
            key = st.data_ptr()
            if key not in self._seen and key not in self._params:
                self._seen.add(key)
                self._by_layer[self._layer] = self._by_layer.get(self._layer, 0) + st.nbytes()
        return t

    @contextlib.contextmanager
    def counting(self):
        self._seen.clear()
        self._by_layer.clear()
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield self
        self.kept = [self._by_layer.get(i, 0) for i in range(self.n)]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


# -- the check -----------------------------------------------------------------------------------

@dataclass
class CheckResult:
    """One policy's check step: what it did, measured, and the PolicyCheck judging it."""

    check: PolicyCheck
    regions: int = 0  # recomputed regions found in the trace
    recomputed_ops: int = 0
    kept_per_layer: list[int | None] = field(default_factory=list)
    step_ms: float | None = None
    selective: SelectiveLog | None = None


def expected_saved_per_token(policy: str, spec: Any, dtype: str) -> int | None:
    """What one decoder layer should keep per token under `policy`, its output included, where the
    policy implies a number: the memory model's layer bytes without checkpointing, its input with
    checkpointing, the matmul and attention outputs for selective-op."""
    from gcdoctor.model import memory as M
    e = M.DTYPE_BYTES[dtype]
    full = M.layer_activation_bytes_per_token(spec, dtype)
    residue = M.checkpoint_residue_bytes_per_token(spec, dtype)
    h, f, hd = spec.hidden_size, spec.intermediate_size, spec.head_dim
    q, kv = spec.n_heads * hd, spec.n_kv_heads * hd
    if policy == POLICY_NONE:
        return full
    if policy == POLICY_LAYER:
        return residue
    if policy.startswith("every-"):
        return None  # a mean of the two, by the layers' pattern: checked per layer instead
    if policy == POLICY_SELECTIVE:
        # q, k, v, o projections, gate, up, down; the attention output and its log-sum-exp; the
        # layer's output (kept as the next checkpoint's input)
        return e * (q + 2 * kv + h + 2 * f + h) + e * q + 4 * spec.n_heads + residue
    return None


def check_policy(model: Any, policy: str, backend: Any, batch: int, seq_len: int, spec: Any, dtype: str,
                 optimizer: str = "adamw", seed: int = 0, trace_dir: str | Path | None = None,
                 profile: bool = True) -> CheckResult:
    """Run one profiled step of `policy` on `model` (after a warm-up step that compiles, for the
    compiled policies; the policy applied here and undone before returning); judge it from its
    trace and its kept bytes. `profile` False (--no-profile): no trace; the regions are those
    checkpoint entered in the forward (counted by their context_fn) and no share is measured."""
    from gcdoctor.run.capture import TrainingStep, profile_steps
    from gcdoctor.trace.load import load_trace
    from gcdoctor.trace.recompute import find_recompute

    census = RegionCensus()
    log = SelectiveLog() if policy == POLICY_SELECTIVE else None
    compiled = policy.startswith("budget-")
    kept: Any = SavedBytes(model) if compiled else LayerKept(model, backend)
    undo = apply_policy(model, policy, census, backend.kind, log)
    out = CheckResult(check=PolicyCheck(), selective=log)
    step = None
    try:
        with contextlib.ExitStack() as stack:
            if compiled and backend.kind == "cpu":
                # the CPU backend's memory counter is a dispatch mode: under it dynamo runs nothing
                # compiled. The compiled layers run without it; their saved tensors are counted.
                from torch.utils._python_dispatch import _disable_current_modes
                stack.enter_context(_disable_current_modes())
            step = TrainingStep(model, backend, batch, seq_len, optimizer, seed)
            if compiled:
                step.run()  # warm-up: compilation (what a layer keeps does not need the optimizer's states)
            if log is not None:
                log.reset()
            if compiled:
                stack.enter_context(kept.counting())
            else:
                kept.active = True
            share = None
            if not profile:
                census.reset(census=False)
                out.step_ms = step.run().step_ms
                kept.active = False
                out.regions = census.regions
            else:
                where = Path(trace_dir) if trace_dir is not None else Path(stack.enter_context(
                    tempfile.TemporaryDirectory()))
                records, path = profile_steps(step, 1, where / f"policy-{policy}.pt.trace.json.gz")
                kept.active = False
                tables = load_trace(path)
                out.step_ms = records[0].step_ms if records else None
                found = find_recompute(tables)
                out.regions = found.regions if found is not None else 0
                out.recomputed_ops = found.op_count if found is not None else 0
                fwd_ns = _range_ns(tables, "gcdoctor/forward")
                if fwd_ns:
                    share = 100.0 * (found.host_ns if found is not None else 0) / fwd_ns
        out.kept_per_layer = list(kept.kept)
    finally:
        kept.active = False
        kept.remove()
        undo()
        if step is not None:
            step.release()
    _judge(out, policy, spec, dtype, batch * seq_len, share)
    return out


def _range_ns(t: Any, name: str) -> int:
    """Host time of the ranges (record_function) named `name` in the trace."""
    import numpy as np
    ids = [i for i, n in enumerate(t.names) if n == name]
    total = 0
    for table in (t.ranges, t.cpu_ops):
        if ids and len(table):
            sel = np.isin(table.name_id, ids)
            if hasattr(table, "on_device"):
                sel &= ~table.on_device
            total = max(total, int(table.dur_ns[sel].sum()))
    return total


def _judge(out: CheckResult, policy: str, spec: Any, dtype: str, tokens: int, share: float | None) -> None:
    chk = out.check
    chk.recompute_share_pct = None if share is None else round(share, 1)
    n = len(out.kept_per_layer) or spec.n_layers
    want_regions = checkpointed_layers(policy, n)
    known = [k for k in out.kept_per_layer if k is not None]
    chk.saved_bytes_per_layer = int(statistics.mean(known)) if known else None
    full = _expect(chk, policy, spec, dtype, tokens, n, want_regions)
    problems = _recompute_problems(out, policy, want_regions) + _kept_problems(chk, policy, full)
    notes = _notes(chk, policy, share)
    known_kept = chk.saved_bytes_per_layer is not None
    chk.ok = not problems if (known_kept or out.regions or want_regions == 0) else None
    chk.note = "; ".join(problems + notes)


def _expect(chk: PolicyCheck, policy: str, spec: Any, dtype: str, tokens: int, n: int, want_regions: int) -> int:
    """Set what the policy implies a layer keeps and the band its recomputation falls in; returns
    what a layer keeps without checkpointing (bytes)."""
    from gcdoctor.model import memory as M
    per_token = expected_saved_per_token(policy, spec, dtype)
    residue = M.checkpoint_residue_bytes_per_token(spec, dtype) * tokens
    full = M.layer_activation_bytes_per_token(spec, dtype) * tokens
    if policy.startswith("every-"):
        k = int(policy.split("-")[1])
        want = [residue if i % k == 0 else full for i in range(n)]
        chk.expected_saved_bytes_per_layer = int(statistics.mean(want))
    elif per_token is not None:
        chk.expected_saved_bytes_per_layer = per_token * tokens
    # the band the policy implies: nothing recomputed, or at most the checkpointed layers' share of
    # the forward (the forward also runs the embedding, the LM head and the loss)
    if want_regions == 0:
        chk.expected_recompute_min_pct, chk.expected_recompute_max_pct = 0.0, 0.0
    else:
        chk.expected_recompute_min_pct = 0.0
        chk.expected_recompute_max_pct = round(100.0 * want_regions / n, 1)
    return full


def _recompute_problems(out: CheckResult, policy: str, want_regions: int) -> list[str]:
    """What the trace shows recomputed against what the policy should recompute."""
    problems = []
    if not policy.startswith("budget-") and out.regions != want_regions:
        problems.append(f"{out.regions} recomputed regions in the trace, {want_regions} expected")
    if policy == POLICY_SELECTIVE and out.selective is not None:
        bad = sorted(op for op in out.selective.recomputed if op in SAVE_OP_NAMES)
        if bad:
            problems.append(f"recomputed ops it should have saved: {', '.join(bad)}")
        if not out.selective.saved:
            problems.append("saved no matmul or attention output")
    return problems


def _kept_problems(chk: PolicyCheck, policy: str, full: int) -> list[str]:
    """The bytes a layer kept against what the policy implies; a compiler budget's expectation is
    set here, from the bytes without checkpointing."""
    problems = []
    if chk.saved_bytes_per_layer is not None and chk.expected_saved_bytes_per_layer:
        off = abs(chk.saved_bytes_per_layer - chk.expected_saved_bytes_per_layer) / chk.expected_saved_bytes_per_layer
        if off > 0.10:
            problems.append(f"keeps {chk.saved_bytes_per_layer:,} bytes per layer, "
                            f"{chk.expected_saved_bytes_per_layer:,} expected")
    if policy.startswith("budget-") and chk.saved_bytes_per_layer is not None:
        frac = float(policy.split("-", 1)[1])
        chk.expected_saved_bytes_per_layer = int(full * frac)
        if chk.saved_bytes_per_layer > full * 1.10:
            problems.append(f"keeps {chk.saved_bytes_per_layer:,} bytes per layer, more than without "
                            f"checkpointing ({full:,})")
    return problems


def _notes(chk: PolicyCheck, policy: str, share: float | None) -> list[str]:
    """What the check says without judging it."""
    notes = []
    if policy.startswith("budget-"):
        notes.append("the compiler's recompute runs inside its compiled backward: no separate forward ops to find "
                     "in the trace; judged by the bytes kept")
    if policy == POLICY_OFFLOAD:
        notes.append("kept bytes are device bytes: offloaded tensors leave the device (on the CPU they stay)")
    if (share is not None and chk.expected_recompute_max_pct is not None and share > chk.expected_recompute_max_pct
            and not policy.startswith("budget-")):
        # host time of one step: a busy host or the checkpoint's own hooks stretch it; said, not judged
        notes.append(f"recomputation took {share:.0f} % of the forward's host time, the checkpointed layers are "
                     f"{chk.expected_recompute_max_pct:.0f} % of the layers")
    return notes
