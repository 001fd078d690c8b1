"""Sharded training steps for a distributed diagnose: FSDP2 (`torch.distributed.fsdp.fully_shard`)
with either checkpointing users run on it, and DeepSpeed ZeRO-3.

Checkpointing under FSDP2 comes in two orders, and they differ in where the recompute meets the
parameter all-gather:
- "transformers": the model's own layer checkpointing (`gradient_checkpointing_enable`), applied
  around the decoder layer's call, so the checkpoint sits *outside* each FSDP unit; the recompute
  runs the unit's forward hooks again inside backward;
- "checkpoint_wrapper": torch's `apply_activation_checkpointing(checkpoint_wrapper)` before
  `fully_shard`, the torchtitan order: the checkpoint sits *inside* the unit.
Which order re-gathers what is measured (the sharding probe counts the collectives in each rank's
trace), not assumed.

Model states per rank are counted from the local shards (a DTensor's local tensor, a ZeRO-3
parameter's `ds_tensor` partition), never from the global shapes.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.profiler import record_function

from gcdoctor.run.capture import LABEL_PREFIX, TrainingStep, enable_layer_checkpointing, labelled_context_fn

FSDP2, ZERO3 = "fsdp2", "zero3"
STRATEGIES = (FSDP2, ZERO3)
CKPT_IMPLS = ("transformers", "checkpoint_wrapper")


@dataclass(frozen=True)
class Sharding:
    """How the model is sharded and checkpointed: the user's setup, or one variant of the probe."""

    strategy: str = FSDP2  # fsdp2 | zero3
    reshard_after_forward: bool = True  # FSDP2: free the gathered parameters after each unit's forward
    checkpoint_impl: str = "transformers"  # transformers | checkpoint_wrapper (FSDP2); ZeRO-3: DeepSpeed's

    def describe(self, gc: bool) -> str:
        if self.strategy == ZERO3:
            return ("DeepSpeed ZeRO-3" + (", layers checkpointed through deepspeed.checkpointing.checkpoint"
                                         if gc else ", no checkpointing"))
        ckpt = ("no checkpointing" if not gc else "transformers' layer checkpointing (outside each unit)"
                if self.checkpoint_impl == "transformers" else "checkpoint_wrapper inside each unit (torchtitan order)")
        return f"FSDP2 fully_shard per decoder layer, reshard_after_forward={self.reshard_after_forward}, {ckpt}"


def decoder_layers(model: Any) -> torch.nn.ModuleList:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise RuntimeError(f"{type(model).__name__}: no model.layers to shard")
    return layers


# -- FSDP2 ----------------------------------------------------------------------------------------

def checkpoint_inside(model: Any) -> str:
    """torch's checkpoint_wrapper (non-reentrant, gcdoctor's labels) around every decoder layer."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)
    layer_type = type(decoder_layers(model)[0])
    wrapper = functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT,
                                context_fn=labelled_context_fn())
    apply_activation_checkpointing(model, checkpoint_wrapper_fn=wrapper, check_fn=lambda m: isinstance(m, layer_type))
    return "apply_activation_checkpointing(checkpoint_wrapper(NO_REENTRANT)) per decoder layer, before fully_shard"


def fsdp2_model(model: Any, sharding: Sharding, gc: bool) -> str:
    """Checkpoint (if asked) and shard `model` in place: one FSDP unit per decoder layer, and the
    root (embedding, final norm, LM head). Returns what was applied, for the facts."""
    from torch.distributed.fsdp import fully_shard

    applied = []
    if gc and sharding.checkpoint_impl == "checkpoint_wrapper":
        applied.append(checkpoint_inside(model))
    elif gc:
        applied.append(enable_layer_checkpointing(model) + " (outside each FSDP unit)")
    for layer in decoder_layers(model):
        fully_shard(layer, reshard_after_forward=sharding.reshard_after_forward)
    fully_shard(model, reshard_after_forward=sharding.reshard_after_forward)
    applied.append(f"fully_shard(reshard_after_forward={sharding.reshard_after_forward}) per decoder layer and "
                   "on the root")
    return "; ".join(applied)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of `t` this rank holds: a DTensor's local shard, else `t` itself."""
    return getattr(t, "_local_tensor", t)


def local_bytes(tensors: Any) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        t = local_tensor(t)
        if t.device.type == "meta" or t.numel() == 0:
            continue
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total += st.nbytes()
    return total


class Fsdp2Step(TrainingStep):
    """TrainingStep of an FSDP2-sharded model; model states counted from the local shards."""

    def state_bytes(self) -> tuple[int, int, int]:
        params = [p for p in self.model.parameters()]
        grads = sum(local_tensor(p).numel() * p.element_size() for p in params if p.requires_grad)
        opt = 0
        if self.optimizer is not None:
            opt = local_bytes(v for s in self.optimizer.state.values() for v in s.values()
                              if isinstance(v, torch.Tensor) and v.dim() > 0)
        return local_bytes(params), grads, opt


# -- DeepSpeed ZeRO-3 -----------------------------------------------------------------------------

def zero3_config(batch_size: int, dtype: str, n_params: int) -> dict[str, Any]:
    """ZeRO stage 3 on the devices (no offload), torch's AdamW as the other variants use, buckets
    capped at the model's size (DeepSpeed's 5e8-element defaults only allocate memory on a small
    model). Parameters small enough to stay whole are DeepSpeed's default (1e5 elements)."""
    bucket = min(500_000_000, n_params)
    return {
        "train_micro_batch_size_per_gpu": batch_size,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {
            "stage": 3,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "reduce_bucket_size": bucket,
            "stage3_prefetch_bucket_size": bucket,
        },
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                                                  "weight_decay": 0.01, "torch_adam": True}},
        "bf16": {"enabled": dtype == "bf16"},
        "fp16": {"enabled": dtype == "fp16"},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


class Zero3Step(TrainingStep):
    """TrainingStep of a DeepSpeed ZeRO-3 engine: forward, engine.backward, engine.step."""

    def __init__(self, engine: Any, backend: Any, batch_size: int, seq_len: int, seed: int = 0,
                 deepspeed: Any = None) -> None:
        vocab = engine.module.config.vocab_size
        self.engine = engine
        self.deepspeed = deepspeed  # to reset its checkpointing configuration on release

        def forward(_model: Any, input_ids: torch.Tensor) -> torch.Tensor:
            out = engine(input_ids=input_ids, use_cache=False)
            with record_function(LABEL_PREFIX + "loss"):
                return engine.module.loss_function(logits=out.logits, labels=input_ids, vocab_size=vocab)

        super().__init__(engine.module, backend, batch_size, seq_len, seed=seed, forward=forward,
                         backward=engine.backward, optimizer_step=engine.step)

    def state_bytes(self) -> tuple[int, int, int]:
        """Parameter partitions (`ds_tensor`), the gradient partition buffer and the optimizer's
        master weights and moments that this rank holds."""
        params = local_bytes(getattr(p, "ds_tensor", p) for p in self.model.parameters())
        opt = getattr(self.engine, "optimizer", None)
        grads = local_bytes(_tensors(getattr(opt, "grad_partitions_flat_buffer", None)))
        master = local_bytes(_tensors(getattr(opt, "fp32_partitioned_groups_flat", None)))
        inner = getattr(opt, "optimizer", None)
        moments = local_bytes(v for s in getattr(inner, "state", {}).values() for v in s.values()
                              if isinstance(v, torch.Tensor) and v.dim() > 0)
        return params, grads, master + moments

    def release(self) -> None:
        super().release()
        destroy_engine(self.engine)
        self.engine = None
        if self.deepspeed is not None:
            from gcdoctor.probes import _deepspeed
            _deepspeed.reset_checkpointing(self.deepspeed)


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for t in x if isinstance(t, torch.Tensor)]
    return []


def zero3_engine(deepspeed: Any, model: Any, config: dict[str, Any], gc: bool) -> tuple[Any, str]:
    """The ZeRO-3 engine of `model`; with `gc`, its decoder layers checkpointed through
    DeepSpeed's own checkpoint (a Hugging Face model needs it routed: deepspeedai/DeepSpeed#5704)."""
    from gcdoctor.probes import _deepspeed
    applied = "no checkpointing"
    if gc:
        _deepspeed.configure_cpu_checkpointing(deepspeed, {**_batch(config), "activation_checkpointing": {
            "partition_activations": False, "cpu_checkpointing": False, "contiguous_memory_optimization": False,
            "number_checkpoints": None, "synchronize_checkpoint_boundary": False, "profile": False}})
        applied = _deepspeed.route_checkpointing(model, deepspeed)
    engine = _deepspeed.initialize(deepspeed, model, config)
    return engine, f"deepspeed.initialize(zero_optimization.stage=3); {applied}"


def load_deepspeed(device_kind: str) -> tuple[Any, str | None]:
    """DeepSpeed joined to the running process group, or (None, why not). On the CPU DeepSpeed's
    shared-memory all-reduce op (a JIT C++ build of minutes on a small host; gloo does the
    collectives here) is not built."""
    import importlib

    import torch.distributed as dist

    from gcdoctor.probes import _deepspeed
    ds, why = _deepspeed.load(device_kind)
    if ds is None:
        return None, why
    try:
        if device_kind == "cpu":
            comm_torch: Any = importlib.import_module("deepspeed.comm.torch")
            comm_torch.build_shm_op = lambda: None
        if not ds.comm.is_initialized():
            ds.init_distributed(dist_backend=dist.get_backend() if dist.is_initialized() else "gloo", verbose=False)
    except Exception as exc:  # noqa: BLE001 - a broken install or an unknown accelerator: a reason
        return None, f"deepspeed could not join the process group ({type(exc).__name__}: {exc})"
    return ds, None


def _batch(config: dict[str, Any]) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": config["train_micro_batch_size_per_gpu"]}


def destroy_engine(engine: Any) -> None:
    if engine is None:
        return
    from gcdoctor.probes import _deepspeed
    _deepspeed.destroy(engine)


# -- the CPU's storage counter and FSDP2 -----------------------------------------------------------

def show_fsdp_resizes(backend: Any) -> str | None:
    """FSDP2 frees a unit's gathered parameters by resizing their storage to 0 and re-allocates them
    the same way, which the CPU backend's storage counter (a dispatch mode) cannot see. Route FSDP2's
    own two helpers through the counter so CPU peaks under FSDP2 follow the real frees. Returns
    why not where torch's internals differ (the CPU peaks then overcount resharding)."""
    counter = getattr(backend, "counter", None)
    if counter is None or getattr(backend, "_fsdp_resizes_shown", False):
        return None
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
        alloc, free = _fsdp_param.alloc_storage, _fsdp_param.free_storage
    except (ImportError, AttributeError) as exc:
        return f"FSDP2's storage helpers not found ({exc}): CPU peaks count freed gathered parameters"

    def alloc_storage(tensor: torch.Tensor) -> None:
        alloc(tensor)
        counter.resized(tensor)
        counter.check_limit()

    def free_storage(tensor: torch.Tensor) -> None:
        free(tensor)
        counter.resized(tensor)

    _fsdp_param.alloc_storage, _fsdp_param.free_storage = alloc_storage, free_storage
    if getattr(_fsdp_param_group, "alloc_storage", None) is alloc:
        _fsdp_param_group.alloc_storage = alloc_storage
    backend._fsdp_resizes_shown = True
    return None


# -- one builder for the probes ---------------------------------------------------------------------

def sharded_step_factory(ctx, sharding: Sharding, gc: bool, spec: Any = None,
                         info: dict[str, Any] | None = None) -> Callable[[int], TrainingStep]:
    """A function batch -> TrainingStep of a freshly built, sharded model: a model that raised in
    the middle of a sharded step (an OOM inside an all-gather) is never reused, so every
    measurement builds its own. `info` receives what was applied and the setup time."""
    cfg = ctx.config
    info = info if info is not None else {}
    if sharding.strategy == FSDP2 and ctx.backend.kind == "cpu":
        why = show_fsdp_resizes(ctx.backend)
        if why and why not in ctx.facts.distributed.notes:
            ctx.facts.distributed.notes.append(why)

    def make(batch: int) -> TrainingStep:
        t0 = time.monotonic()
        model = ctx.build_model(spec)
        if sharding.strategy == ZERO3:
            ds, why = ctx.deepspeed()
            if ds is None:
                raise RuntimeError(f"DeepSpeed ZeRO-3 unavailable: {why}")
            n = sum(p.numel() for p in model.parameters())
            engine, info["applied"] = zero3_engine(ds, model, zero3_config(batch, ctx.dtype, n), gc)
            step: TrainingStep = Zero3Step(engine, ctx.backend, batch, ctx.seq_len, cfg.seed, deepspeed=ds)
        else:
            info["applied"] = fsdp2_model(model, sharding, gc)
            step = Fsdp2Step(model, ctx.backend, batch, ctx.seq_len, cfg.optimizer, cfg.seed)
        info["setup_s"] = round(time.monotonic() - t0, 2)
        return step

    return make
