"""Granularity: how much is recomputed, and how many regions and kernels the recompute costs,
for checkpointing at different granularities of the same model, at one batch size.

Variants on the chosen model (truncated to the probe layers): none; layer (each decoder layer,
transformers' own API); every-2 / every-4 (its every_n_layers); selective-mlp / selective-attn
(only the MLP or only the attention of each layer); sub-layer (attention and MLP wrapped
separately); fine (each nn.Linear of the decoder layers wrapped separately). Then the synthetic
block of the original experiment: stacked Linear(h,h) -> GELU -> Linear(h,h) blocks, none /
per block / per Linear, non-reentrant and reentrant, at a large and at a small hidden size.
Before all of it, the device's launch cost (probes/launch_cost.py). Rule GC010 judges.

When the policies probe runs too, every-N and selective-mlp/-attn are left to it (it measures them
on the full model); this probe keeps what only it shows: launch cost, region and kernel counts of
the finer granularities, the synthetic blocks.
"""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch

from gcdoctor.run.capture import TrainingStep, enable_layer_checkpointing, free_memory
from gcdoctor.config import RunConfig
from gcdoctor.facts import Facts
from gcdoctor.facts.granularity import GranularityFacts, GranularityGroup, GranularityVariant
from gcdoctor.trace.launch_response import fill_whatif
from gcdoctor.probes._regions import RegionCensus, wrap_in_checkpoint
from gcdoctor.probes.launch_cost import LaunchDelay, calibrate_emulation, measure_launch_cost

PROFILED_STEPS = 2  # ctx.measure profiles this many steps (session._profile)


@dataclass(frozen=True)
class SyntheticSize:
    name: str
    hidden: int
    tokens: int
    blocks: int


# GPU: h 4096 is a Llama-3-8B-wide GEMM (compute-bound); h 256 at the same 4096 tokens gives
# kernels of a few microseconds, where launches dominate. CPU: small enough to stay fast.
GPU_SYNTHETIC = (SyntheticSize("synthetic-large", 4096, 4096, 16), SyntheticSize("synthetic-small", 256, 4096, 16))
CPU_SYNTHETIC = (SyntheticSize("synthetic-large", 256, 128, 8), SyntheticSize("synthetic-small", 32, 64, 8))
# the CPU share of the default run must stay around 20 s: the default 3 measured steps become 2
# there (an explicit --steps other than the default is honoured)
CPU_DEFAULT_MEASURE_STEPS = 2
# On the CPU profiling triples a step and its trace has no device metrics: profile only these
CPU_PROFILED = {("model", "none"), ("model", "layer"), ("model", "fine")}

MODEL_VARIANTS: list[tuple[str, str | None, str]] = [
    ("none", None, "no checkpointing"),
    ("layer", "none", "each decoder layer (transformers' layer checkpointing)"),
    ("every-2", "none", "every 2nd decoder layer (every_n_layers=2)"),
    ("every-4", "none", "every 4th decoder layer (every_n_layers=4)"),
    ("selective-mlp", "none", "only the MLP of each layer"),
    ("selective-attn", "none", "only the attention of each layer"),
    ("sub-layer", "layer", "attention and MLP of each layer, separately"),
    ("fine", "layer", "each nn.Linear of each layer, separately"),
]
# the model variants the policies probe measures on the full model: left out here when it runs
POLICY_SEARCH_VARIANTS = ("every-2", "every-4", "selective-mlp", "selective-attn")
SYNTHETIC_VARIANTS: list[tuple[str, str | None, str]] = [
    ("none", None, "no checkpointing"),
    ("block", "none", "each Linear-GELU-Linear block"),
    ("linear", "block", "each Linear, separately"),
    ("block-reentrant", "none", "each block, use_reentrant=True"),
    ("linear-reentrant", "block-reentrant", "each Linear, use_reentrant=True"),
]


class GranularityProbe:
    name = "granularity"
    description = "checkpointing granularity (layer, sub-layer, per-Linear, selective, every-N) and device launch cost"

    def applies(self, device_kind: str) -> str | None:
        return None

    def run(self, ctx) -> None:
        cfg = ctx.config
        cpu = ctx.backend.kind == "cpu"
        steps = cfg.measure_steps
        if cpu and steps == RunConfig().measure_steps:
            steps = CPU_DEFAULT_MEASURE_STEPS
        facts = GranularityFacts(warmup_steps=max(1, cfg.warmup_steps), measure_steps=steps)
        facts.notes.append("the first warm-up step of every variant is a census: it counts checkpoint regions and "
                           "the ops their recomputation runs (a dispatch mode inside recompute contexts); it is "
                           "never timed")
        if cpu and cfg.profile:
            facts.notes.append("CPU run: only " + ", ".join(sorted(f"{g}/{v}" for g, v in CPU_PROFILED))
                               + " were profiled (profiling triples a CPU step; a CPU trace has no device metrics)")
        if cpu and steps < cfg.measure_steps:
            facts.notes.append(f"CPU run: {steps} measured steps per variant instead of the default "
                               f"{cfg.measure_steps}, to keep the probe short (--steps N overrides)")
        ctx.facts.granularity = facts

        ctx.progress(self.name, "launch-cost", message="device launch-cost microbenchmark")
        facts.launch, unavailable = measure_launch_cost(ctx.backend)
        ctx.facts.unavailable.update(unavailable)
        self._log_launch(ctx, facts.launch)
        self._delay: LaunchDelay | None = None
        if cfg.emulate_launch_us is not None:
            self._emulate(ctx, facts, cfg.emulate_launch_us)
        ctx.save()

        with self._delay if self._delay is not None else contextlib.nullcontext():
            self._model_group(ctx, facts, steps)
            # several ranks: the model group runs sharded; the synthetic blocks measure one device
            for size in (() if ctx.dist is not None else CPU_SYNTHETIC if cpu else GPU_SYNTHETIC):
                self._synthetic_group(ctx, facts, size, steps)
        if ctx.dist is not None:
            facts.notes.append(f"{ctx.dist.world_size} ranks: the model group ran sharded (FSDP2 fully_shard per "
                               "decoder layer, each variant's checkpointing applied on the sharded model); the "
                               "synthetic blocks measure one device and were left out (run without --nproc)")
        self._whatif(ctx, facts)
        ctx.save()
        if cpu:
            ctx.facts.unavailable.setdefault(
                "granularity.kernels_per_step", "CPU run: the trace has no device kernels (device idle share, "
                "kernel durations and recompute share of device time are device metrics)")

    @staticmethod
    def _log_launch(ctx, lc) -> None:
        ctx.log(f"launch cost: {lc.launch_us:.2f} us per tiny kernel, host enqueue {lc.enqueue_us:.2f} us, "
                f"graph replay {_us(lc.graph_replay_us_per_op)} per op; checkpoint region host cost "
                f"{_us(lc.region_fixed_us)} + {_us(lc.region_per_op_us)} per op inside")

    def _emulate(self, ctx, facts: GranularityFacts, target_us: float) -> None:
        """Calibrate the launch delay, then measure the launch and region costs again under it: every
        variant below runs with it, and GC010 judges them with the emulated costs."""
        ctx.progress(self.name, "launch-cost", message=f"emulating +{target_us:g} us per launch")
        emu, delay = calibrate_emulation(ctx.backend, target_us, facts.launch)
        self._delay = delay
        with delay:
            facts.launch, unavailable = measure_launch_cost(ctx.backend)
        ctx.facts.unavailable.update(unavailable)
        facts.emulation = emu
        lc = facts.launch
        if lc.launch_us is not None and emu.native.launch_us is not None:
            emu.readback_extra_us = lc.launch_us - emu.native.launch_us
        emu.notes.append("only the granularity probe runs with the emulated launch cost; other probes run natively")
        ctx.log(f"emulated launch cost: +{target_us:g} us per launching op (dispatch mode {emu.mode_cost_us:.2f} us "
                f"+ spin {emu.spin_us:.2f} us); the microbenchmark reads {_us(lc.launch_us)} against "
                f"{_us(emu.native.launch_us)} natively (+{_us(emu.readback_extra_us)})")
        self._log_launch(ctx, lc)

    def _whatif(self, ctx, facts: GranularityFacts) -> None:
        """Each variant's step time as a function of the launch cost (docs/granularity.md, What-if)."""
        fill_whatif(ctx.facts, ctx.rundir.path)

    # -- the chosen model ------------------------------------------------------------------
    def _model_group(self, ctx, facts: GranularityFacts, steps: int) -> None:
        cfg = ctx.config
        spec = ctx.probe_spec()
        variants = [v for v in MODEL_VARIANTS if not (v[0] == "every-4" and spec.n_layers < 4)]
        if any(p.name == "policies" for p in getattr(ctx.session, "probes", ())):
            # the policy search measures these on the full model (and checks what they recompute)
            variants = [v for v in variants if v[0] not in POLICY_SEARCH_VARIANTS]
            facts.notes.append("every-N and attention- or MLP-only checkpointing are left to the policy search, "
                               "which measures them on the full model")
        group = GranularityGroup(
            name="model", description=f"{spec.name}, {spec.n_layers} of {spec.n_layers_full} layers",
            hidden_size=spec.hidden_size, tokens_per_step=cfg.probe_batch * ctx.seq_len, batch_size=cfg.probe_batch,
            seq_len=ctx.seq_len, n_layers=spec.n_layers, dtype=ctx.dtype)
        facts.groups.append(group)
        model = ctx.build_model(spec)
        if ctx.dist is not None:
            from gcdoctor.probes._sharding import FSDP2, Sharding, fsdp2_model, show_fsdp_resizes
            if ctx.backend.kind == "cpu":
                show_fsdp_resizes(ctx.backend)
            group.description += f", FSDP2 over {ctx.dist.world_size} ranks"
            fsdp2_model(model, Sharding(FSDP2, ctx.config.reshard_after_forward), gc=False)
        try:
            for i, (variant, baseline, description) in enumerate(variants):
                ctx.check_stop()
                ctx.progress(self.name, f"model/{variant}", cfg.probe_batch, i, len(variants))
                census = RegionCensus()
                undo = apply_model_variant(model, variant, census)
                try:
                    self._measure(ctx, group, variant, baseline, description, census, steps, lambda: _CensusStep(
                        census, model, ctx.backend, cfg.probe_batch, ctx.seq_len, cfg.optimizer, cfg.seed,
                        delay=self._delay), spec=spec)
                finally:
                    undo()
                if variant == "layer" and census.api:
                    facts.checkpoint_api = (f"decoder layers: {census.api}; sub-modules and synthetic blocks: "
                                            + facts.checkpoint_api + " on the module's forward")
        finally:
            del model
            free_memory(ctx.backend)
        _derive(group)
        ctx.save()

    # -- the synthetic block ---------------------------------------------------------------
    def _synthetic_group(self, ctx, facts: GranularityFacts, size: SyntheticSize, steps: int) -> None:
        cfg = ctx.config
        group = GranularityGroup(
            name=size.name, description=f"{size.blocks} x [Linear({size.hidden},{size.hidden}) -> GELU -> "
            f"Linear({size.hidden},{size.hidden})], {size.tokens} tokens", hidden_size=size.hidden,
            tokens_per_step=size.tokens, batch_size=1, seq_len=size.tokens, n_layers=size.blocks, dtype=ctx.dtype)
        facts.groups.append(group)
        model = SyntheticStack(size.hidden, size.blocks, size.tokens, ctx.dtype, ctx.backend.device, cfg.seed)
        flops_per_step = 6.0 * model.matmul_params() * size.tokens
        try:
            for i, (variant, baseline, description) in enumerate(SYNTHETIC_VARIANTS):
                ctx.check_stop()
                ctx.progress(self.name, f"{size.name}/{variant}", 1, i, len(SYNTHETIC_VARIANTS))
                census = RegionCensus()
                undo = apply_synthetic_variant(model, variant, census)
                try:
                    self._measure(ctx, group, variant, baseline, description, census, steps, lambda: _CensusStep(
                        census, model, ctx.backend, 1, size.tokens, cfg.optimizer, cfg.seed, forward=synthetic_loss,
                        delay=self._delay), throughput=(size.tokens, flops_per_step))
                finally:
                    undo()
        finally:
            del model
            free_memory(ctx.backend)
        _derive(group)
        ctx.save()

    # -- one variant -----------------------------------------------------------------------
    def _measure(self, ctx, group: GranularityGroup, variant: str, baseline: str | None, description: str,
                 census: RegionCensus, steps: int, make_step: Callable[[], TrainingStep],
                 spec: Any = None, throughput: tuple[int, float] | None = None) -> GranularityVariant:
        key = f"{self.name}/{group.name}/{variant}"
        profile = ctx.config.profile and (ctx.backend.kind != "cpu" or (group.name, variant) in CPU_PROFILED)
        base = next((v for v in group.variants if v.variant == baseline and v.step_ms), None)
        m = ctx.measure(self.name, f"{group.name}/{variant}", make_step, group.batch_size, spec=spec,
                        warmup=ctx.facts.granularity.warmup_steps, steps=steps, profile_key=key if profile else None,
                        throughput=throughput, compare_with=(base.variant, base.step_ms) if base is not None else None)
        if m.timed_once:
            ctx.facts.granularity.notes.append(f"{group.name}/{variant} {m.timed_once}")
        row = GranularityVariant(group=group.name, variant=variant, description=description,
                                 baseline_variant=baseline, measurement=m)
        if census.counted is not None:
            row.regions_per_step, row.checkpointed_ops_per_step, row.recomputed_ops_per_step = census.counted
        if "optimizer" in census.launch_ops_by_phase:  # both census runs completed
            row.launch_ops_by_phase = dict(census.launch_ops_by_phase)
            row.passthrough_ops_per_step = census.passthrough_ops
        if m.fits:
            warm = ctx.facts.granularity.warmup_steps
            host = [h for h in census.host_ms[warm:warm + steps] if h is not None]
            row.host_ms = statistics.median(host) if host else None
            row.step_ms = m.step_ms_median
            row.peak_allocated_bytes = m.peak_allocated_bytes
            row.peak_phase = m.peak_phase
            if m.peak_fwd_bwd_allocated_bytes is not None and m.baseline_allocated_bytes is not None:
                row.activation_peak_bytes = m.peak_fwd_bwd_allocated_bytes - m.baseline_allocated_bytes
            row.saved_activation_bytes = m.activation_after_forward_bytes
        if key in ctx.facts.trace:
            row.trace_key = key
            fill_trace_fields(row, ctx.facts, key)
        group.variants.append(row)
        ctx.save()
        return row


class _CensusStep(TrainingStep):
    """A TrainingStep whose first run is the census (regions and their ops counted, and the ops a
    launch delay is charged to in the forward and backward); the second run counts those of the
    optimizer step. `delay` is the emulation's LaunchDelay when one is active (it counts anyway);
    otherwise a LaunchDelay without delay counts, in those two untimed or nearly free places only."""

    def __init__(self, census: RegionCensus, *args: Any, delay: LaunchDelay | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.census = census
        self.delay = delay
        self.runs = 0

    def run(self):
        first = self.runs == 0
        c = self.census
        c.reset(census=first)
        if first:
            c.launch_ops_by_phase, c.passthrough_ops = {}, 0
        counter = self.delay or LaunchDelay(self.backend.kind)
        optimizer_step = self._optimizer_step
        try:
            if first:
                counter.reset_counts()
                counter.phase_of = lambda: self.phase
                with contextlib.nullcontext() if self.delay is not None else counter:
                    rec = super().run()
                by_phase = counter.by_phase
                c.launch_ops_by_phase = {p: by_phase.get(p, 0) for p in ("forward", "backward")}
                c.passthrough_ops = sum(counter.passed_by_phase.get(p, 0) for p in ("forward", "backward"))
            elif self.runs == 1:
                def counted_optimizer_step() -> None:
                    d0, p0 = counter.delayed, counter.passed
                    with contextlib.nullcontext() if self.delay is not None else counter:
                        optimizer_step()
                    c.launch_ops_by_phase["optimizer"] = counter.delayed - d0
                    c.passthrough_ops += counter.passed - p0
                self._optimizer_step = counted_optimizer_step
                rec = super().run()
            else:
                rec = super().run()
        finally:
            self._optimizer_step = optimizer_step
            counter.phase_of = None
            self.runs += 1
        if first:
            c.counted = (c.regions, c.forward_ops, c.recomputed_ops)
        c.host_ms.append(rec.host_ms)
        self.census.reset(census=False)
        return rec


# -- variants ------------------------------------------------------------------------------

def decoder_layers(model: Any) -> list[torch.nn.Module]:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise RuntimeError(f"{type(model).__name__}: no model.layers to checkpoint")
    return list(layers)


def apply_model_variant(model: Any, variant: str, census: RegionCensus) -> Callable[[], None]:
    """Turn the variant's checkpointing on; returns the function that turns it off again."""
    if variant == "none":
        return lambda: None
    if variant == "layer" or variant.startswith("every-"):
        n = 1 if variant == "layer" else int(variant.split("-")[1])
        census.api = enable_layer_checkpointing(model, every_n_layers=n,
                                                extra_kwargs={"context_fn": census.context_fn("layer")})

        def undo() -> None:
            (getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable)()
            # the embedding hook transformers adds so reentrant layers get a grad-requiring input
            hooked = getattr(model, "_require_grads_hooks", None) or getattr(model, "_require_grads_hook", None)
            if hooked and hasattr(model, "disable_input_require_grads"):
                model.disable_input_require_grads()
        return undo
    undos: list[Callable[[], None]] = []
    for i, layer in enumerate(decoder_layers(model)):
        targets: list[tuple[str, torch.nn.Module]] = []
        if variant in ("selective-mlp", "sub-layer"):
            targets.append(("mlp", layer.get_submodule("mlp")))
        if variant in ("selective-attn", "sub-layer"):
            targets.append(("attn", layer.get_submodule("self_attn")))
        if variant == "fine":
            targets += [(name.replace(".", "-"), mod) for name, mod in layer.named_modules()
                        if isinstance(mod, torch.nn.Linear)]
        if not targets and variant not in ("selective-mlp", "selective-attn", "sub-layer", "fine"):
            raise ValueError(f"unknown granularity variant {variant!r}")
        undos += [wrap_in_checkpoint(mod, census, f"L{i}-{name}-") for name, mod in targets]
    return _undo_all(undos)


def apply_synthetic_variant(model: "SyntheticStack", variant: str, census: RegionCensus) -> Callable[[], None]:
    if variant == "none":
        return lambda: None
    reentrant = variant.endswith("-reentrant")
    base = variant.removesuffix("-reentrant")
    targets: list[tuple[str, torch.nn.Module]] = []
    for i, block in enumerate(model.typed_blocks()):
        if base == "block":
            targets.append((f"B{i}-", block))
        elif base == "linear":
            targets += [(f"B{i}-fc1-", block.fc1), (f"B{i}-fc2-", block.fc2)]
        else:
            raise ValueError(f"unknown synthetic variant {variant!r}")
    return _undo_all([wrap_in_checkpoint(mod, census, name, reentrant=reentrant) for name, mod in targets])


def _undo_all(undos: list[Callable[[], None]]) -> Callable[[], None]:
    def undo() -> None:
        for u in reversed(undos):
            u()
    return undo


# -- the synthetic block -------------------------------------------------------------------

class Block(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(hidden, hidden)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SyntheticStack(torch.nn.Module):
    """Stacked Linear(h,h) -> GELU -> Linear(h,h) blocks with a fixed random input.

    Weights are N(0, 1/h) so activations neither vanish nor blow up over the stack. The input
    requires grad, so reentrant checkpointing of the first block still yields its gradients
    (reentrant gives a region without a grad-requiring input no gradients at all).
    """

    def __init__(self, hidden: int, blocks: int, tokens: int, dtype: str, device: Any, seed: int = 0) -> None:
        super().__init__()
        from gcdoctor.model.registry import torch_dtype
        dt = torch_dtype(dtype)
        torch.manual_seed(seed)
        with torch.device(device):
            self.blocks = torch.nn.ModuleList(Block(hidden) for _ in range(blocks))
            for p in self.blocks.parameters():
                if p.dim() == 2:
                    torch.nn.init.normal_(p, std=hidden ** -0.5)
                else:
                    torch.nn.init.zeros_(p)
            self.to(dt)
            self.inputs = torch.randn(tokens, hidden, dtype=dt).requires_grad_(True)
        self.train()

    def matmul_params(self) -> int:
        return sum(b.fc1.weight.numel() + b.fc2.weight.numel() for b in self.typed_blocks())

    def typed_blocks(self) -> list[Block]:
        """The blocks as Blocks (iterating a ModuleList gives plain Modules)."""
        return [b for b in self.blocks if isinstance(b, Block)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def synthetic_loss(model: SyntheticStack, input_ids: torch.Tensor) -> torch.Tensor:
    """TrainingStep's forward for the synthetic stack: the token ids are ignored."""
    return model(model.inputs).float().square().mean()


# -- derived numbers -----------------------------------------------------------------------

def _derive(group: GranularityGroup) -> None:
    """Time added and memory saved, against the group's variant without checkpointing."""
    none = group.get("none")
    for v in group.variants:
        if none is None or not none.fits or not v.fits:
            continue
        assert v.step_ms is not None and none.step_ms is not None  # both fit
        v.time_added_pct = 100.0 * (v.step_ms / none.step_ms - 1.0)
        if none.saved_activation_bytes is not None and v.saved_activation_bytes is not None:
            v.memory_saved_bytes = none.saved_activation_bytes - v.saved_activation_bytes
            if none.saved_activation_bytes > 0:
                v.memory_saved_pct = 100.0 * v.memory_saved_bytes / none.saved_activation_bytes
        if none.peak_allocated_bytes is not None and v.peak_allocated_bytes is not None:
            v.peak_saved_bytes = none.peak_allocated_bytes - v.peak_allocated_bytes


def fill_trace_fields(row: GranularityVariant, facts: Facts, key: str) -> None:
    """Copy the profiled steps' metrics from Facts.trace into the row (per step where the trace has
    step windows, else the whole trace divided by the profiled steps)."""
    whole = facts.trace.get(key)
    steps = [m for k, m in facts.trace.items() if k.startswith(f"{key}|step:")]
    if whole is None:
        return

    def per_step(attr: str) -> float | None:
        vals = [getattr(m, attr) for m in steps if getattr(m, attr) is not None]
        if vals:
            return float(statistics.median(vals))
        total = getattr(whole, attr)
        return None if total is None else total / PROFILED_STEPS

    row.cpu_ops_per_step = per_step("cpu_op_count")
    if whole.device_unavailable:
        return
    row.kernels_per_step = per_step("kernel_count")
    src = [m for m in steps if m.device_window_us and m.idle_us is not None] or [whole]
    window = sum(m.device_window_us or 0.0 for m in src)
    idle = sum(m.idle_us or 0.0 for m in src)
    host_wait = sum(m.idle_host_wait_us or 0.0 for m in src)
    if window > 0 and all(m.idle_us is not None for m in src):
        row.device_idle_share = idle / window
        row.host_wait_idle_share = host_wait / idle if idle > 0 else None
    row.kernel_mean_us = whole.kernel_mean_us
    row.kernel_median_us = whole.kernel_median_us
    row.short_kernel_share = whole.short_kernel_share
    row.recompute_share = whole.recompute_share
    if row.recompute_share is None and row.regions_per_step == 0:
        row.recompute_share = 0.0  # no checkpoint regions: nothing can be recomputed


def _us(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} us"
