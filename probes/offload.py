"""Offload: layer checkpointing combined with CPU offload, at one batch size, variant by variant.

Variants (the probe's model, `ctx.probe_spec()`, at `--probe-batch`):

    gc                          layer checkpointing alone: the reference
    gc+save_on_cpu-pinned       + torch.autograd.graph.save_on_cpu(pin_memory=True) around forward+loss:
                                what checkpointing saves (the layer inputs, and the tensors saved
                                outside checkpointed regions: final norm, LM head, loss) goes to the host
    gc+save_on_cpu-pageable     the same with pageable host memory
    save_on_cpu-pinned          no checkpointing, every saved activation on the host (pinned)
    deepspeed-ckpt-cpu          DeepSpeed activation checkpointing with cpu_checkpointing, the model's
                                checkpoint function routed through deepspeed.checkpointing.checkpoint
                                (the config block alone does nothing for a Hugging Face model), and a
                                check that the checkpoints really crossed to the host
    deepspeed-zero2-offload+gc  DeepSpeed ZeRO stage 2, optimizer states and Adam step on the host
                                (DeepSpeed's CPU Adam), checkpointing on

For each: step time and phases, device peak, host RSS, copies by direction and host memory kind,
copy/compute overlap, device stall shares (trace), PCIe throughput against the link's peak,
device utilisation and CPU load (telemetry). Rules GC020 (offload stall) and GC021 (host-bound
step) judge. What the probe does on the CPU and why: docs/offload.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import psutil
import torch
from torch.profiler import record_function

from gcdoctor.run.capture import LABEL_PREFIX, TrainingStep, _causal_lm_loss, enable_layer_checkpointing, free_memory
from gcdoctor.errors import RunInterrupted
from gcdoctor.facts import Facts, Measurement
from gcdoctor.facts.offload import (CheckpointOffloadCheck, OffloadFacts, OffloadVariant, derive_link_whatif,
                                    device_busy_share, read_copies, stall_shares, summary_value)
from gcdoctor.probes import _deepspeed

PROFILED_STEPS = 2  # ctx.measure profiles this many steps (session._profile)
CPU_MAX_MEASURE_STEPS = 2  # the CPU share of the default run must stay around 20 s
# On the CPU a trace has no device metrics and profiling adds two steps and a trace analysis per variant:
# profile only the reference and the DeepSpeed-checkpointed variant (its recompute labels show the routing)
CPU_PROFILED = {"gc", "deepspeed-ckpt-cpu"}
REFERENCE = "gc"
ZERO2 = "deepspeed-zero2-offload+gc"
CKPT_CPU = "deepspeed-ckpt-cpu"


@dataclass(frozen=True)
class VariantSpec:
    name: str
    description: str
    engine: str
    on_host: str
    offloads: bool
    pin_memory: bool | None = None


VARIANTS = (
    VariantSpec(REFERENCE, "layer checkpointing, everything on the device", "torch", "nothing", False),
    VariantSpec("gc+save_on_cpu-pinned", "layer checkpointing + save_on_cpu(pin_memory=True) around forward+loss",
                "torch", "tensors saved for backward: layer inputs (checkpoints) and the non-checkpointed "
                "saved tensors (final norm, LM head, loss)", True, True),
    VariantSpec("gc+save_on_cpu-pageable", "layer checkpointing + save_on_cpu(pin_memory=False) around forward+loss",
                "torch", "as gc+save_on_cpu-pinned, in pageable memory", True, False),
    VariantSpec("save_on_cpu-pinned", "no checkpointing + save_on_cpu(pin_memory=True): every saved activation "
                "on the host", "torch", "every tensor saved for backward", True, True),
    VariantSpec(CKPT_CPU, "DeepSpeed activation checkpointing, cpu_checkpointing=true, through "
                "deepspeed.checkpointing.checkpoint", "deepspeed", "layer inputs (checkpoints)", True, True),
    VariantSpec(ZERO2, "DeepSpeed ZeRO-2, offload_optimizer to the CPU (pinned), DeepSpeed CPU Adam, layer "
                "checkpointing", "deepspeed", "fp32 master weights, Adam moments; the Adam step runs on the host",
                True, True),
)


def _rss() -> int:
    return psutil.Process().memory_info().rss


class OffloadProbe:
    name = "offload"
    description = ("checkpointing with CPU offload (save_on_cpu, DeepSpeed cpu_checkpointing, ZeRO-Offload): "
                   "copies, PCIe, host load")

    def applies(self, device_kind: str) -> str | None:
        return None

    def run(self, ctx) -> None:
        cfg, kind = ctx.config, ctx.backend.kind
        spec = ctx.probe_spec()
        batch = cfg.probe_batch
        steps = cfg.measure_steps if kind != "cpu" else min(cfg.measure_steps, CPU_MAX_MEASURE_STEPS)
        facts = OffloadFacts(batch_size=batch, seq_len=ctx.seq_len, n_layers=spec.n_layers, dtype=ctx.dtype,
                             warmup_steps=cfg.warmup_steps, measure_steps=steps, device_key=f"gpu{ctx.backend.index}",
                             host_cpus=psutil.cpu_count(logical=True))
        ctx.facts.offload = facts
        if kind == "cpu":
            facts.notes.append(
                "CPU run: host and device are the same memory, so the 'copies' are host-to-host, pin_memory has "
                "no effect, the trace has no device metrics and telemetry has no PCIe: the variants run to "
                f"exercise the code paths; the stall rules need a GPU run. {steps} measured step(s) per variant; "
                f"only {', '.join(sorted(CPU_PROFILED))} profiled.")
        self._ds = _DeepSpeedState(ctx, facts, explicit=bool(cfg.probes) and self.name in cfg.probes)
        runners: dict[str, Callable[[Any, VariantSpec, OffloadVariant, Any], Measurement | None]] = {
            REFERENCE: self._torch_variant, "gc+save_on_cpu-pinned": self._torch_variant,
            "gc+save_on_cpu-pageable": self._torch_variant, "save_on_cpu-pinned": self._torch_variant,
            CKPT_CPU: self._ckpt_cpu_variant, ZERO2: self._zero2_variant,
        }
        for i, vs in enumerate(VARIANTS):
            ctx.check_stop()
            ctx.progress(self.name, vs.name, batch, i, len(VARIANTS))
            row = OffloadVariant(variant=vs.name, description=vs.description, engine=vs.engine, on_host=vs.on_host,
                                 offloads=vs.offloads, pin_memory=vs.pin_memory if kind != "cpu" else None)
            facts.variants.append(row)
            skip = self._ds.skip_reason(vs.name) if vs.engine == "deepspeed" else None
            if skip:
                row.skipped = skip
                ctx.facts.unavailable[f"offload.{vs.name}"] = skip
                ctx.log(f"offload: {vs.name} skipped: {skip}")
                ctx.save()
                continue
            try:
                m = runners[vs.name](ctx, vs, row, spec)
            except (RunInterrupted, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 - one failing variant must not lose the others
                row.skipped = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
                ctx.facts.unavailable[f"offload.{vs.name}"] = row.skipped
                ctx.log(f"offload: {vs.name} {row.skipped}", "warning")
                m = None
            free_memory(ctx.backend)
            if m is not None:
                row.measurement = m
                derive(row, m, ctx.facts, facts, ctx.facts.environment.pcie_peak_gbs)
                if not m.fits:
                    ctx.facts.unavailable[f"offload.{vs.name}"] = f"out of memory in the {m.oom_phase} phase"
            ctx.save()
        ref = facts.get(REFERENCE)
        ref_ms = ref.step_ms if ref is not None and ref.ran else None
        for row in facts.variants:
            if ref_ms is not None and row.ran and row.step_ms is not None and row.variant != REFERENCE:
                row.slowdown_pct = 100.0 * (row.step_ms / ref_ms - 1.0)
        ck = facts.get(CKPT_CPU)
        if ck is not None and ck.ckpt_check is not None:
            finish_check(ck, ref)
        derive_link_whatif(facts, ctx.facts.environment.pcie_peak_gbs)
        if facts.link_efficiency is None:
            ctx.facts.unavailable["offload.link_whatif"] = (
                "CPU run: no host link" if kind == "cpu" else
                "no pinned copy was measured against a known link peak (gcdoctor.model.hardware): no slower-link what-if")
        self._ds.close()
        ctx.save()

    # -- variants ---------------------------------------------------------------------------
    def _measure(self, ctx, row: OffloadVariant, make_step: Callable[[], TrainingStep], spec) -> Measurement:
        cfg = ctx.config
        steps = ctx.facts.offload.measure_steps
        row.host_rss_before_bytes = _rss()
        profile = ctx.backend.kind != "cpu" or row.variant in CPU_PROFILED
        ref = ctx.facts.offload.get(REFERENCE)
        base = (REFERENCE, ref.step_ms) if ref is not None and ref.ran and row.variant != REFERENCE else None
        m = ctx.measure(self.name, row.variant, make_step, cfg.probe_batch, spec=spec, steps=steps,
                        profile_key=f"{self.name}/{row.variant}" if profile else None, compare_with=base)
        if m.timed_once:
            row.notes.append(m.timed_once)
        row.host_rss_after_bytes = _rss()
        return m

    def _torch_variant(self, ctx, vs: VariantSpec, row: OffloadVariant, spec) -> Measurement:
        cfg = ctx.config
        t0 = time.monotonic()
        model = ctx.build_model(spec)
        row.optimizer = f"torch {cfg.optimizer} (on the device)"
        row.checkpointing = enable_layer_checkpointing(model) if vs.name != "save_on_cpu-pinned" else "none"
        forward = None
        if vs.pin_memory is not None:
            # on a CPU-only build, save_on_cpu(device_type="cpu", pin_memory=True) asks for a pinned allocator
            # that does not exist; "cuda" there makes it fall back to plain host tensors
            device_type = ctx.backend.kind if ctx.backend.kind != "cpu" else "cuda"
            forward = _save_on_cpu_forward(vs.pin_memory, device_type)
            row.checkpointing += (f"; forward+loss inside torch.autograd.graph.save_on_cpu("
                                  f"pin_memory={vs.pin_memory})")
        row.setup_s = round(time.monotonic() - t0, 2)
        try:
            return self._measure(ctx, row, lambda: TrainingStep(model, ctx.backend, cfg.probe_batch, ctx.seq_len,
                                                                 cfg.optimizer, cfg.seed, forward=forward), spec)
        finally:
            del model

    def _ckpt_cpu_variant(self, ctx, vs: VariantSpec, row: OffloadVariant, spec) -> Measurement:
        cfg, kind = ctx.config, ctx.backend.kind
        ds = self._ds.module()
        ds_cfg = _deepspeed.ckpt_cpu_config(cfg.probe_batch)
        if kind == "cpu":
            # the host is the device: nothing to move, and DeepSpeed's synchronized-device copy path hands
            # the checkpoint's own (emptied) storage to the backward (verified with 0.19.8: the recompute
            # gets a 0-d tensor); run DeepSpeed's checkpoint with the checkpoints in place instead
            ds_cfg["activation_checkpointing"]["cpu_checkpointing"] = False
            row.notes.append("CPU run: cpu_checkpointing is off (the host is the device, nothing to move); the "
                             "model's checkpoints still go through deepspeed.checkpointing.checkpoint")
            row.pin_memory = None
            row.description = row.description.replace("cpu_checkpointing=true", "cpu_checkpointing=false (CPU run)")
            row.on_host = "nothing: on the CPU the checkpoints stay where they are"
        row.ds_config = ctx.rundir.write_json(f"ds_config-{vs.name}.json", ds_cfg).name
        t0 = time.monotonic()
        _deepspeed.configure_cpu_checkpointing(ds, ds_cfg)
        model = ctx.build_model(spec)
        row.checkpointing = _deepspeed.route_checkpointing(model, ds) + (
            " after deepspeed.checkpointing.configure(cpu_checkpointing=%s)" % str(
                ds_cfg["activation_checkpointing"]["cpu_checkpointing"]).lower())
        row.optimizer = f"torch {cfg.optimizer} (on the device)"
        row.setup_s = round(time.monotonic() - t0, 2)
        _deepspeed.reset_offload_stats(ds)
        try:
            m = self._measure(ctx, row, lambda: TrainingStep(model, ctx.backend, cfg.probe_batch, ctx.seq_len,
                                                              cfg.optimizer, cfg.seed), spec)
            info = _deepspeed.offload_engine_info(ds)
        finally:
            del model
            _deepspeed.reset_checkpointing(ds)
        profiled = cfg.profile and (ctx.backend.kind != "cpu" or vs.name in CPU_PROFILED)
        n_steps = cfg.warmup_steps + ctx.facts.offload.measure_steps + (PROFILED_STEPS if profiled else 0)
        row.ckpt_check = start_check(ctx, spec, info, n_steps,
                                     on_host=ds_cfg["activation_checkpointing"]["cpu_checkpointing"])
        return m

    def _zero2_variant(self, ctx, vs: VariantSpec, row: OffloadVariant, spec) -> Measurement:
        cfg = ctx.config
        ds = self._ds.module()
        ds_cfg = _deepspeed.zero2_offload_config(cfg.probe_batch, ctx.dtype, spec.param_count())
        row.ds_config = ctx.rundir.write_json(f"ds_config-{vs.name}.json", ds_cfg).name
        holder: dict[str, Any] = {}

        def make_step() -> TrainingStep:
            t0 = time.monotonic()
            model = ctx.build_model(spec)
            row.checkpointing = enable_layer_checkpointing(model)
            engine = holder["engine"] = _deepspeed.initialize(ds, model, ds_cfg)
            row.optimizer = _deepspeed.optimizer_name(engine) + " (Adam step on the host)"
            row.setup_s = round(time.monotonic() - t0, 2)
            vocab = engine.module.config.vocab_size

            def forward(_model: Any, input_ids: torch.Tensor) -> torch.Tensor:
                out = engine(input_ids=input_ids, use_cache=False)
                with record_function(LABEL_PREFIX + "loss"):
                    return engine.module.loss_function(logits=out.logits, labels=input_ids, vocab_size=vocab)

            return TrainingStep(engine.module, ctx.backend, cfg.probe_batch, ctx.seq_len, seed=cfg.seed,
                                forward=forward, backward=engine.backward, optimizer_step=engine.step)

        try:
            m = self._measure(ctx, row, make_step, spec)
            if "engine" in holder:
                row.host_state_bytes = _deepspeed.host_state_bytes(holder["engine"])
        finally:
            engine = holder.pop("engine", None)
            if engine is not None:
                _deepspeed.destroy(engine)
            del engine
        return m


def _save_on_cpu_forward(pin_memory: bool, device_type: str) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    def forward(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
        with torch.autograd.graph.save_on_cpu(pin_memory=pin_memory, device_type=device_type):
            return _causal_lm_loss(model, input_ids)

    return forward


# -- DeepSpeed, loaded once per run and only when a DeepSpeed variant runs --------------------

class _DeepSpeedState:
    def __init__(self, ctx, facts: OffloadFacts, explicit: bool) -> None:
        self.ctx, self.facts, self.explicit = ctx, facts, explicit
        self._mod: Any = None
        self._why: str | None = None
        self._tried = False
        self._adam_why: str | None = None
        self._adam_tried = False

    def _load(self) -> None:
        if self._tried:
            return
        self._tried = True
        ds, why = _deepspeed.load(self.ctx.backend.kind)
        if ds is None:
            self._why = why
            self.ctx.facts.unavailable["offload.deepspeed"] = why
            return
        self.facts.deepspeed = getattr(ds, "__version__", None)
        try:
            self.facts.dist_backend = _deepspeed.init_distributed(ds, self.ctx.backend.kind, self.ctx.backend.index)
        except Exception as exc:  # noqa: BLE001 - a reason, not a crash: the torch variants still run
            self._why = f"deepspeed.init_distributed failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            self.ctx.facts.unavailable["offload.deepspeed"] = self._why
            return
        self._mod = ds

    def module(self) -> Any:
        self._load()
        return self._mod

    def skip_reason(self, variant: str) -> str | None:
        self._load()
        if self._mod is None:
            return self._why
        if variant == ZERO2:
            return self._cpu_adam()
        return None

    def _cpu_adam(self) -> str | None:
        if self._adam_tried:
            return self._adam_why
        self._adam_tried = True
        st = _deepspeed.cpu_adam_status()
        f = self.facts
        f.cpu_adam_prebuilt, f.cpu_adam_cached = st.prebuilt, st.cached
        if self.ctx.backend.kind == "cpu" and not self.explicit:
            # Even with CPU Adam compiled, ZeRO-2's engine set-up and CPU Adam steps took 45 s of a
            # 75 s default CPU run (2-core machine, 2026-11-30): the default run must stay short.
            self._adam_why = (
                "CPU default run: the ZeRO-2 engine with DeepSpeed's CPU Adam is slow to build and run on a "
                "small host" + ("" if (st.prebuilt or st.cached) else " (and its CPU Adam op is not compiled yet)")
                + "; run `gcdoctor diagnose --probes offload` to include it")
            return self._adam_why
        if not st.prebuilt:
            # a step of its own, shown live (console and TUI): a JIT compile takes a minute or more,
            # and the install-time build (DS_BUILD_CPU_ADAM=1, the README's set-up) avoids it
            what = ("loading DeepSpeed's CPU Adam op (JIT-cached)" if st.cached else
                    f"compiling DeepSpeed's CPU Adam op now: {_deepspeed.cpu_adam_compile_estimate()} (first use; "
                    "cached afterwards; DS_BUILD_CPU_ADAM=1 at install time avoids it)")
            self.ctx.progress("offload", ZERO2, message=what)
            if not st.cached:
                self.ctx.log(what, "warning")
        _deepspeed.load_cpu_adam(st)
        f.cpu_adam_load_s = st.load_s
        if not st.prebuilt:
            self.ctx.progress("offload", ZERO2, message=f"DeepSpeed's CPU Adam op ready in {st.load_s:.0f} s"
                              + (f" ({st.error})" if st.error else ""))
        if st.error:
            self._adam_why = f"DeepSpeed's CPU Adam op could not be built or loaded: {st.error}"
        elif not (st.prebuilt or st.cached):
            f.notes.append(f"DeepSpeed's CPU Adam op was compiled in this run: {st.load_s:.0f} s (not in any step time)")
        return self._adam_why

    def close(self) -> None:
        """The process group stays: DeepSpeed cannot re-initialise one in the same process."""


# -- derived numbers ----------------------------------------------------------------------------

def derive(row: OffloadVariant, m: Measurement, facts: Facts, of: OffloadFacts, pcie_peak_gbs: float | None) -> None:
    """Fill the row's per-step numbers from the measurement, its trace and its telemetry summary."""
    row.step_ms, row.forward_ms = m.step_ms_median, m.forward_ms_median
    row.backward_ms, row.optimizer_ms = m.backward_ms_median, m.optimizer_ms_median
    if row.step_ms and row.optimizer_ms is not None:
        row.optimizer_share = row.optimizer_ms / row.step_ms
    row.peak_allocated_bytes = m.peak_allocated_bytes
    row.saved_after_forward_bytes = m.activation_after_forward_bytes
    tel, dk = m.telemetry, of.device_key
    rss = summary_value(tel, "proc_rss_bytes", "max")
    row.host_rss_max_bytes = int(rss) if rss is not None else None
    row.pcie_tx_gbs_mean = summary_value(tel, f"{dk}.pcie_tx_gbs", "mean")
    row.pcie_tx_gbs_max = summary_value(tel, f"{dk}.pcie_tx_gbs", "max")
    row.pcie_rx_gbs_mean = summary_value(tel, f"{dk}.pcie_rx_gbs", "mean")
    row.pcie_rx_gbs_max = summary_value(tel, f"{dk}.pcie_rx_gbs", "max")
    row.pcie_peak_gbs = pcie_peak_gbs
    row.util_pct_mean = summary_value(tel, f"{dk}.util_pct", "mean")
    row.util_pct_min = summary_value(tel, f"{dk}.util_pct", "min")
    row.cpu_pct_mean = summary_value(tel, "cpu_pct", "mean")
    row.cpu_max_core_pct_mean = summary_value(tel, "cpu_max_core_pct", "mean")
    row.proc_cpu_pct_mean = summary_value(tel, "proc_cpu_pct", "mean")
    row.proc_cpu_pct_max = summary_value(tel, "proc_cpu_pct", "max")
    key = f"offload/{row.variant}"
    tm = facts.trace.get(key)
    if tm is None:
        return
    row.trace_key = key
    n = sum(1 for k in facts.trace if k.startswith(f"{key}|step:")) or PROFILED_STEPS
    row.profiled_steps = n
    if tm.device_unavailable:
        return
    c = read_copies(tm)
    row.h2d_bytes, row.d2h_bytes = c.h2d_bytes / n, c.d2h_bytes / n
    row.h2d_ms, row.d2h_ms = c.h2d_us / n / 1e3, c.d2h_us / n / 1e3
    row.pageable_bytes, row.pinned_bytes = c.pageable_bytes / n, c.pinned_bytes / n
    row.pageable_share = c.pageable_share
    row.copy_ms, row.exposed_copy_ms = c.time_us / n / 1e3, c.exposed_us / n / 1e3
    row.copy_overlap_share = c.overlap_us / c.time_us if c.time_us > 0 else None
    row.h2d_copy_gbs, row.d2h_copy_gbs = c.bandwidth_gbs("HtoD"), c.bandwidth_gbs("DtoH")
    row.device_window_ms = tm.device_window_us / n / 1e3 if tm.device_window_us else None
    st = stall_shares(tm)
    if st is not None:
        row.device_idle_share, row.host_wait_share = st.idle_share, st.host_wait_share
        row.exposed_copy_share, row.stall_share = st.exposed_copy_share, st.stall_share
        row.optimizer_device_busy_share = device_busy_share(facts.trace.get(f"{key}|optimizer"))


# -- did cpu_checkpointing put the checkpoints on the host? --------------------------------------

def start_check(ctx, spec, info: dict[str, Any] | None, n_steps: int, on_host: bool) -> CheckpointOffloadCheck:
    """Record DeepSpeed's own counters and the expected bytes; `finish_check` compares with the trace."""
    elem = {"bf16": 2, "fp16": 2, "fp32": 4}[ctx.dtype]
    ck = CheckpointOffloadCheck()
    ck.layer_input_bytes = ctx.config.probe_batch * ctx.seq_len * spec.hidden_size * elem
    ck.n_checkpoints = spec.n_layers
    if not on_host:
        ck.detail = ("not checkable on the CPU: host and device are the same memory (cpu_checkpointing off, "
                     "see the variant's notes)")
        return ck
    if info is not None:
        ck.kept_on_device = info.get("keep_last_count")
        if info.get("offloaded_bytes") is not None and n_steps:
            ck.ds_offloaded_bytes_per_step = info["offloaded_bytes"] / n_steps
        if info.get("restored_bytes") is not None and n_steps:
            ck.ds_restored_bytes_per_step = info["restored_bytes"] / n_steps
    offloaded = ck.n_checkpoints - (ck.kept_on_device or 0)
    ck.expected_offload_bytes_per_step = max(offloaded, 0) * ck.layer_input_bytes
    return ck


def finish_check(row: OffloadVariant, ref: OffloadVariant | None) -> None:
    ck = row.ckpt_check
    if ck is None or ck.expected_offload_bytes_per_step is None:
        return
    ck.saved_after_forward_bytes = row.saved_after_forward_bytes
    ck.saved_after_forward_gc_bytes = ref.saved_after_forward_bytes if ref is not None and ref.ran else None
    ck.trace_d2h_bytes_per_step, ck.trace_h2d_bytes_per_step = row.d2h_bytes, row.h2d_bytes
    expected = ck.expected_offload_bytes_per_step
    mib = 2**20
    if expected <= 0:
        ck.method = ""
        ck.detail = "every checkpoint is kept on the device at this layer count: nothing to verify"
        return
    if ck.trace_d2h_bytes_per_step is not None:
        ck.method = "trace: device-to-host copy bytes per step"
        got = ck.trace_d2h_bytes_per_step
    elif ck.ds_offloaded_bytes_per_step is not None:
        ck.method = "DeepSpeed offload engine counters (no device trace)"
        got = ck.ds_offloaded_bytes_per_step
    else:
        ck.detail = "neither a device trace nor DeepSpeed's offload counters are available"
        return
    assert ck.layer_input_bytes is not None  # the expected bytes were computed from it
    kept = f", {ck.kept_on_device} newest kept on the device by DeepSpeed" if ck.kept_on_device else ""
    ck.detail = (f"{got / mib:.1f} MiB/step went device-to-host; expected {expected / mib:.1f} MiB/step "
                 f"({ck.n_checkpoints} checkpoints of {ck.layer_input_bytes / mib:.1f} MiB{kept})")
    if ck.ds_offloaded_bytes_per_step is not None and ck.method.startswith("trace"):
        ck.detail += f"; DeepSpeed counted {ck.ds_offloaded_bytes_per_step / mib:.1f} MiB/step offloaded"
    if ck.saved_after_forward_bytes is not None and ck.saved_after_forward_gc_bytes is not None:
        ck.detail += (f"; device memory held after the forward {ck.saved_after_forward_bytes / mib:.1f} MiB vs "
                      f"{ck.saved_after_forward_gc_bytes / mib:.1f} MiB with checkpoints on the device")
