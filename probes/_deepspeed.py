"""DeepSpeed for the offload probe: optional import, one-process distributed init, generated
ds_configs, the CPU Adam op (JIT-compiled C++), and activation checkpointing routed through
`deepspeed.checkpointing.checkpoint` for a Hugging Face model.

DeepSpeed is an optional extra (`pip install gcdoctor[deepspeed]`): `load()` returns None and a
reason when it cannot be imported, and the offload probe skips its DeepSpeed variants.
"""
from __future__ import annotations

import importlib
import itertools
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import record_function

from gcdoctor.run.capture import LABEL_PREFIX

# DeepSpeed's accelerators by gcdoctor backend kind. DeepSpeed has no MUSA accelerator (its
# SUPPORTED_ACCELERATOR_LIST, deepspeed/accelerator/real_accelerator.py; docs/musa.md): on MUSA
# load() says so and the DeepSpeed variants are skipped.
DS_ACCELERATOR = {"cuda": "cuda", "cpu": "cpu"}
CPU_ADAM_OP = "cpu_adam"


def load(device_kind: str) -> tuple[Any | None, str | None]:
    """(deepspeed module, None), or (None, why not). Pins DeepSpeed's accelerator to the backend's
    device kind, which also silences its "Setting accelerator to CPU" warning on stdout."""
    accel = DS_ACCELERATOR.get(device_kind)
    if accel is None:
        return None, f"DeepSpeed has no accelerator for {device_kind} devices"
    if os.environ.get("DS_ACCELERATOR", accel) != accel:
        return None, (f"DS_ACCELERATOR={os.environ['DS_ACCELERATOR']} does not match the device kind "
                      f"{device_kind}")
    os.environ["DS_ACCELERATOR"] = accel
    try:
        import deepspeed
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install raising anything
        return None, f"deepspeed is not importable ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    return deepspeed, None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(deepspeed: Any, device_kind: str, device_index: int = 0) -> str:
    """A one-process process group, as DeepSpeed needs even on one device. Idempotent: an existing
    group (ours, or the user's launcher's) is reused. Returns the backend in use.

    The env variables are only set where absent, so a run under torchrun/deepspeed keeps its own.
    On the CPU, DeepSpeed's shared-memory all-reduce op (a JIT-compiled C++ extension, minutes to
    build on a small host) is useful only across processes: with world size 1 it is not built.
    """
    import torch.distributed as dist

    backend = "nccl" if device_kind == "cuda" else "gloo"
    if deepspeed.comm.is_initialized():
        return dist.get_backend()
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"),
                       ("LOCAL_RANK", str(device_index)), ("LOCAL_WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    if device_kind == "cpu" and os.environ.get("WORLD_SIZE") == "1":
        comm_torch: Any = importlib.import_module("deepspeed.comm.torch")  # `deepspeed.comm.torch` is torch itself
        comm_torch.build_shm_op = lambda: None
    if device_kind == "cuda":
        torch.cuda.set_device(device_index)
    deepspeed.init_distributed(dist_backend=backend, verbose=False)
    return dist.get_backend() if dist.is_initialized() else backend


# -- CPU Adam ---------------------------------------------------------------------------------

@dataclass
class OpStatus:
    """Whether DeepSpeed's CPU Adam op loads without compiling, and what loading it cost."""

    prebuilt: bool = False  # compiled into the deepspeed install (DS_BUILD_CPU_ADAM=1)
    cached: bool = False  # a JIT build is in the torch extensions cache
    build_dir: str | None = None
    load_s: float | None = None  # import or JIT compile + load
    error: str | None = None


def cpu_adam_status() -> OpStatus:
    """Look, without building, for a usable CPU Adam: prebuilt in the install, or JIT-cached."""
    st = OpStatus()
    try:
        from deepspeed.git_version_info import installed_ops
        st.prebuilt = bool(installed_ops.get(CPU_ADAM_OP, False))
    except Exception:  # noqa: BLE001 - old versions lay this out differently: then look at the cache
        pass
    try:
        from torch.utils.cpp_extension import _get_build_directory  # private, stable since torch 1.x
        build_dir = Path(_get_build_directory(CPU_ADAM_OP, verbose=False))
        st.build_dir = str(build_dir)
        st.cached = (build_dir / f"{CPU_ADAM_OP}.so").is_file()
    except Exception:  # noqa: BLE001 - unknown layout: treat as not cached
        pass
    return st


CPU_ADAM_COMPILE_S = 46.0  # measured: the JIT compile in a full diagnose on a 16-core H200 host


def cpu_adam_compile_estimate(cores: int | None = None) -> str:
    """How long a JIT compile of the CPU Adam op will take, said before it starts: the measured
    time on a 16-core host, longer with fewer than its 3 compile jobs' worth of cores."""
    import os

    cores = cores or os.cpu_count() or 1
    est = CPU_ADAM_COMPILE_S * max(1.0, 3 / max(cores, 1))
    return f"about {est:.0f} s ({CPU_ADAM_COMPILE_S:.0f} s measured on a 16-core host)"


def load_cpu_adam(st: OpStatus) -> OpStatus:
    """Load (compile if needed) the CPU Adam op now, timed, so that the variant's own setup time
    is not the compiler's. Fills `load_s` or `error`."""
    t0 = time.monotonic()
    try:
        from deepspeed.ops.op_builder import CPUAdamBuilder
        CPUAdamBuilder().load(verbose=False)
    except Exception as exc:  # noqa: BLE001 - no compiler, no ninja, ...: a reason, not a crash
        st.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    st.load_s = round(time.monotonic() - t0, 2)
    return st


# -- configs -----------------------------------------------------------------------------------

DS_BUCKET_ELEMENTS = 500_000_000  # DeepSpeed's default reduce/allgather bucket, in elements


def zero2_offload_config(batch_size: int, dtype: str, n_params: int | None = None) -> dict[str, Any]:
    """ZeRO stage 2, optimizer states and the Adam step on the host (DeepSpeed's CPU Adam), pinned
    host buffers. bf16/fp16 weights and gradients on the device, fp32 master weights and Adam
    moments on the host. AdamW with torch's defaults (lr 1e-4 as gcdoctor's own optimizer,
    weight decay 0.01) so it matches the other variants. Buckets are DeepSpeed's default, capped at
    the model's parameter count: a bucket larger than the model only allocates memory (two 2 GB
    fp32 buffers for a 5 M-parameter test model)."""
    bucket = min(DS_BUCKET_ELEMENTS, n_params) if n_params else DS_BUCKET_ELEMENTS
    return {
        "train_micro_batch_size_per_gpu": batch_size,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {
            "stage": 2,
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "contiguous_gradients": True,
            "overlap_comm": True,  # the usual ZeRO-2 setting: gradient copies on a side stream
            "reduce_bucket_size": bucket,
            "allgather_bucket_size": bucket,
        },
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                                                  "weight_decay": 0.01}},
        "bf16": {"enabled": dtype == "bf16"},
        "fp16": {"enabled": dtype == "fp16"},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def ckpt_cpu_config(batch_size: int) -> dict[str, Any]:
    """DeepSpeed activation checkpointing with the checkpoints (layer inputs) held on the host.
    partition_activations splits checkpoints across model-parallel ranks: with one process there
    is nothing to split, and DeepSpeed's cpu_checkpointing works without it (0.14+)."""
    return {
        "train_micro_batch_size_per_gpu": batch_size,
        "activation_checkpointing": {
            "partition_activations": False,
            "cpu_checkpointing": True,
            "contiguous_memory_optimization": False,
            "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        },
    }


# -- activation checkpointing ---------------------------------------------------------------

def labelled_checkpoint(ds_checkpoint: Callable[..., Any]) -> Callable[..., Any]:
    """`deepspeed.checkpointing.checkpoint` with gcdoctor's profiler labels. DeepSpeed's checkpoint
    is an autograd Function (reentrant style): its forward runs the layer under no_grad and its
    backward reruns it under enable_grad, which tells the two apart."""
    counter = itertools.count()

    def checkpoint(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        n = next(counter)

        def run(*a: Any, **kw: Any) -> Any:
            label = "recompute" if torch.is_grad_enabled() else "ckpt-forward"
            with record_function(f"{LABEL_PREFIX}{label}/layer{n}"):
                return function(*a, **kw)

        return ds_checkpoint(run, *args, **kwargs)

    return checkpoint


def configure_cpu_checkpointing(deepspeed: Any, config: dict[str, Any]) -> None:
    deepspeed.checkpointing.configure(None, deepspeed_config=config)


def route_checkpointing(model: Any, deepspeed: Any) -> str:
    """Make a Hugging Face model checkpoint its decoder layers through DeepSpeed: the
    activation_checkpointing config block alone does nothing for it (deepspeedai/DeepSpeed#5704)."""
    model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=labelled_checkpoint(
        deepspeed.checkpointing.checkpoint))
    return "model._set_gradient_checkpointing(gradient_checkpointing_func=deepspeed.checkpointing.checkpoint)"


def offload_engine_info(deepspeed: Any) -> dict[str, Any] | None:
    """DeepSpeed's async activation-offload engine (0.18+ on stream devices), if it was used:
    its counters and how many of the newest checkpoints it keeps on the device."""
    mod = deepspeed.runtime.activation_checkpointing.checkpointing
    engine = getattr(mod, "_cpu_offload_engine", None)
    if engine is None:
        return None
    stats = getattr(engine, "stats", None)
    return {
        "offloaded_tensors": getattr(stats, "offloaded_tensors", None),
        "offloaded_bytes": getattr(stats, "offloaded_bytes", None),
        "restored_tensors": getattr(stats, "restored_tensors", None),
        "restored_bytes": getattr(stats, "restored_bytes", None),
        "keep_last_count": getattr(engine, "keep_last_count", None),
        "max_fwd_stash_count": getattr(engine, "max_fwd_stash_count", None),
    }


def reset_checkpointing(deepspeed: Any) -> None:
    """Back to DeepSpeed's defaults and drop the offload engine with its pinned buffer pool."""
    mod = deepspeed.runtime.activation_checkpointing.checkpointing
    try:
        mod.reset()
    finally:
        if getattr(mod, "_cpu_offload_engine", None) is not None:
            mod._cpu_offload_engine = None
        deepspeed.checkpointing.configure(None, partition_activations=False, checkpoint_in_cpu=False)


def reset_offload_stats(deepspeed: Any) -> None:
    mod = deepspeed.runtime.activation_checkpointing.checkpointing
    engine = getattr(mod, "_cpu_offload_engine", None)
    if engine is not None and hasattr(engine, "stats"):
        engine.stats = type(engine.stats)()


# -- ZeRO ------------------------------------------------------------------------------------

def initialize(deepspeed: Any, model: Any, config: dict[str, Any]) -> Any:
    engine, _opt, _loader, _sched = deepspeed.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad], config=config)
    return engine


def host_state_bytes(engine: Any) -> int | None:
    """Bytes the ZeRO optimizer keeps on the host: fp32 master partitions and the Adam moments."""
    from gcdoctor.run.capture import tensor_bytes
    opt = getattr(engine, "optimizer", None)
    if opt is None:
        return None
    tensors: list[torch.Tensor] = []
    tensors += [t for t in getattr(opt, "single_partition_of_fp32_groups", []) if isinstance(t, torch.Tensor)]
    inner = getattr(opt, "optimizer", None)
    if inner is not None and hasattr(inner, "state"):
        tensors += [v for s in inner.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    host = [t for t in tensors if t.device.type == "cpu"]
    return tensor_bytes(host) if host else None


def optimizer_name(engine: Any) -> str:
    opt = getattr(engine, "optimizer", None)
    inner = getattr(opt, "optimizer", opt)
    return f"{type(opt).__name__}({type(inner).__name__})" if inner is not opt else type(opt).__name__


def destroy(engine: Any) -> None:
    """Release what the engine holds (hooks, buffers, pinned host memory)."""
    try:
        if hasattr(engine, "destroy"):
            engine.destroy()
    except Exception:  # noqa: BLE001 - best effort: the references are dropped below anyway
        pass
    opt = getattr(engine, "optimizer", None)
    inner = getattr(opt, "optimizer", None)
    if inner is not None and hasattr(inner, "state"):
        inner.state.clear()
