"""A diagnose run: chooses the device and model, runs the probes, collects facts, judges them.

The session emits events on one bus; the TUI, the console and the run directory subscribe.
It never decides whether a number is good (rules do) and never prints (front ends do).
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gcdoctor.model import registry as models
from gcdoctor.run.capture import (StepRecord, TrainingStep, free_memory, median, optimizer_state_bytes,
                              profile_steps, tensor_bytes)
from gcdoctor.config import RunConfig
from gcdoctor.engine import evaluate
from gcdoctor.types import Verdict
from gcdoctor.errors import RunInterrupted, UserError
from gcdoctor.run.events import (EventBus, LogMessage, MeasurementRecorded, PhaseTimed, ProbeFinished, ProbeStarted,
                                 Progress, RunFinished, RunStarted, StepMeasured, TelemetrySampled, VerdictIssued,
                                 measurement_row, process_age_s)
from gcdoctor.facts import Facts, Measurement, ModelInfo, ProfilerOverhead, RunSettings
from gcdoctor.run.rundir import RunDirectory, default_run_dir

if TYPE_CHECKING:
    from gcdoctor.telemetry import TelemetrySampler

GPU_SEQ_LEN, CPU_SEQ_LEN = 4096, 128
# a variant whose first timed step is this many times its baseline variant's is timed once (measure)
PATHOLOGICAL_RATIO = 3.0
GPU_PROBE_LAYERS = 4  # many-variant probes on a GPU: per-layer effects repeat, so 4 layers suffice


@dataclass
class Resolved:
    """RunConfig with the device-dependent defaults filled in."""

    model: str
    dtype: str
    seq_len: int
    probe_layers: int | None


def resolve_defaults(config: RunConfig, device_kind: str) -> Resolved:
    gpu = device_kind != "cpu"
    return Resolved(
        model=config.model or (models.DEFAULT_GPU_MODEL if gpu else models.DEFAULT_CPU_MODEL),
        dtype=config.dtype or ("bf16" if gpu else "fp32"),
        seq_len=config.seq_len or (GPU_SEQ_LEN if gpu else CPU_SEQ_LEN),
        probe_layers=config.probe_layers,
    )


class ProbeContext:
    """What a probe gets: device, model spec, settings, facts to fill, and measuring helpers."""

    def __init__(self, session: "Session") -> None:
        s = session
        self.session = s
        self.config, self.backend, self.spec, self.facts = s.config, s.backend, s.spec, s.facts
        self.bus, self.rundir = s.bus, s.rundir
        self.dtype, self.seq_len = s.resolved.dtype, s.resolved.seq_len
        self.dist = s.dist  # a DistributedRun on rank r of N (sharded probes), None in one process
        self._ds: tuple[Any, str | None] | None = None

    def deepspeed(self) -> tuple[Any, str | None]:
        """(deepspeed, None) joined to this run's process group, or (None, why not); loaded once."""
        if self._ds is None:
            from gcdoctor.probes._sharding import load_deepspeed
            self._ds = load_deepspeed(self.backend.kind)
        return self._ds

    @property
    def sampler(self):
        """The session's telemetry sampler, read when used: it starts after the context is built."""
        return self.session.sampler

    # models -------------------------------------------------------------------------------
    def probe_spec(self) -> models.ModelSpec:
        """The (possibly truncated) spec for probes that compare many variants."""
        layers = self.config.probe_layers
        if layers is None and self.backend.kind != "cpu":
            layers = min(GPU_PROBE_LAYERS, self.spec.n_layers)
        if layers is None or layers >= self.spec.n_layers:
            return self.spec
        return models.load_spec(self.session.resolved.model, layers=layers)

    def build_model(self, spec: models.ModelSpec | None = None, dropout: float | None = None, init: str = "random"):
        """The model on this run's device; init "fast" skips the random initialisation (models.build_model)."""
        spec = spec or self.spec
        t0 = time.monotonic()
        model = models.build_model(spec, self.dtype, self.backend.device, seed=self.config.seed, dropout=dropout,
                                   init=init)
        self.bus.emit(PhaseTimed(self.session.current_probe or "", "model build", time.monotonic() - t0,
                                 f"{spec.name}, {spec.n_layers} layers, init {init}"))
        return model

    # events -------------------------------------------------------------------------------
    def log(self, text: str, level: str = "info") -> None:
        self.bus.emit(LogMessage(text, level))

    def progress(self, probe: str, variant: str = "", batch_size: int | None = None, done: int = 0,
                 total: int | None = None, message: str = "") -> None:
        self.bus.emit(Progress(probe, variant, batch_size, done, total, message))

    def check_stop(self) -> None:
        # several ranks stop together, where they agree on each measurement (a rank stopping alone
        # would leave the others waiting in a collective)
        if self.session.stop_requested.is_set() and self.dist is None:
            raise RunInterrupted()

    def save(self) -> None:
        self.session.save_facts()

    # measuring ----------------------------------------------------------------------------
    def measure(self, probe: str, variant: str, make_step: Callable[[], TrainingStep], batch_size: int,
                spec: models.ModelSpec | None = None, warmup: int | None = None, steps: int | None = None,
                profile_key: str | None = None, search: bool = False,
                throughput: tuple[int, float] | None = None,
                compare_with: tuple[str, float | None] | None = None) -> Measurement:
        """Warm up, then time `steps` synchronised steps; OOM is a result, not a crash.

        After an OOM everything the step allocated is freed and the allocator is checked to be
        back at its baseline before the next measurement. `throughput` (tokens, FLOPs per step) is for
        workloads that are not the language model (the synthetic blocks): their tokens/s and MFU.
        `compare_with` (name, median step ms) is the baseline variant this one is compared with: a first timed step
        at least PATHOLOGICAL_RATIO times slower is the only one timed (Measurement.timed_once says so);
        more steps would only confirm a verdict that is already clear. Not on several ranks, which must
        run the same number of steps.
        """
        cfg, b = self.config, self.backend
        spec = spec or self.spec
        warmup = cfg.warmup_steps if warmup is None else warmup
        steps = cfg.measure_steps if steps is None else steps
        m = Measurement(probe=probe, variant=variant, batch_size=batch_size, seq_len=self.seq_len)
        b.release_workspaces()
        free_memory(b)
        baseline = m.allocated_before_bytes = b.memory_allocated()
        records: list[StepRecord] = []
        step: TrainingStep | None = None
        oom: BaseException | None = None
        phase = "setup"
        try:
            step = make_step()
            self._timed_steps(step, m, records, warmup, steps, search, compare_with)
            _state_bytes(m, step)
            if profile_key and cfg.profile:
                self._profile(step, profile_key, variant, batch_size, records)
        except Exception as exc:  # noqa: BLE001 - OOM is a measurement; anything else re-raised below
            if not b.is_oom(exc):
                raise
            phase = step.phase if step is not None else "setup"
            oom = exc
            m.oom = b.oom_info(exc, phase)  # while the failed step's tensors are still alive
        finally:
            if step is not None:
                step.release()
            step = None
        self._agree(m, oom is None)
        if oom is not None:
            m.fits, m.oom_phase = False, phase
            m.error = str(oom).splitlines()[0][:300]
            del oom
        else:
            self._fill(m, records, spec, throughput)
        self._check_released(m, baseline)
        if self.dist is not None:
            self._record_rank(m, self.dist.rank, profile_key is not None)
        self.bus.emit(MeasurementRecorded(probe, measurement_row(m)))
        return m

    def _timed_steps(self, step: TrainingStep, m: Measurement, records: list[StepRecord], warmup: int, steps: int,
                     search: bool, compare_with: tuple[str, float | None] | None) -> None:
        """The warm-up steps, then the timed ones (into `records`); one timed step only when the
        first is pathological against `compare_with`."""
        for i in range(warmup + steps):
            self.check_stop()
            rec = step.run()
            is_warm = i < warmup
            if not is_warm:
                records.append(rec)
            self.bus.emit(StepMeasured(m.probe, m.variant, m.batch_size, i, rec.step_ms,
                                       "warmup" if is_warm else ("search" if search else "measure"),
                                       rec.loss, rec.peak_allocated_bytes))
            if i == warmup and steps > 1:
                m.timed_once = self._pathological(rec.step_ms, compare_with, steps)
                if m.timed_once:
                    break

    def _agree(self, m: Measurement, fits_here: bool) -> None:
        """Several ranks: whether the step fitted on every one, and whether to stop, agreed by all."""
        if self.dist is None:
            return
        fit_everywhere, stop = self.dist.agree(fits_here, self.session.stop_requested.is_set())
        if not fit_everywhere and fits_here:
            m.fits, m.oom_phase = False, "another rank"  # the sharded step is one step: it did not fit
            m.error = "out of memory on another rank"
        if stop:
            raise RunInterrupted()

    def _check_released(self, m: Measurement, baseline: int | None) -> None:
        """Free what the measurement left; a warning when the allocator is not back at its baseline."""
        b = self.backend
        b.release_workspaces()
        free_memory(b)
        after = m.allocated_after_bytes = b.memory_allocated()
        if baseline is not None and after is not None and after != baseline:
            what = "the OOM" if not m.fits else "the measurement"
            self.log(f"after {what} at batch {m.batch_size}, {after - baseline:+,} bytes differ from the "
                     f"{baseline:,} allocated before it", "warning")

    def _record_rank(self, m: Measurement, rank: int, profiled: bool) -> None:
        from gcdoctor.facts.distributed import RankMeasurement
        d = self.facts.distributed
        assert d is not None  # the session sets it whenever it runs on several ranks
        d.measurements.append(RankMeasurement(
            m.probe, m.variant, m.batch_size, rank, m.fits, m.oom_phase, m.step_ms_median,
            m.peak_allocated_bytes, m.peak_reserved_bytes, m.param_bytes, m.grad_bytes,
            m.optimizer_state_bytes, dict(m.telemetry), profiled))

    def _pathological(self, step_ms: float | None, compare_with: tuple[str, float | None] | None,
                      steps: int) -> str | None:
        """Why the rest of the timed steps are skipped, or None to time them all."""
        if compare_with is None or self.dist is not None or step_ms is None:
            return None
        name, base_ms = compare_with
        if not base_ms or base_ms <= 0 or step_ms < PATHOLOGICAL_RATIO * base_ms:
            return None
        return (f"timed once, not {steps} times: its first timed step ({step_ms:.1f} ms) was "
                f"{step_ms / base_ms:.1f}x {name}'s ({base_ms:.1f} ms)")

    def _fill(self, m: Measurement, records: list[StepRecord], spec: models.ModelSpec,
              throughput: tuple[int, float] | None = None) -> None:
        m.step_ms = [r.step_ms for r in records]
        m.step_ms_median = median(m.step_ms)
        m.forward_ms_median = median([r.forward_ms for r in records])
        m.backward_ms_median = median([r.backward_ms for r in records])
        m.optimizer_ms_median = median([r.optimizer_ms for r in records])
        m.losses = [r.loss for r in records]

        def top(xs):
            xs = [x for x in xs if x is not None]
            return max(xs) if xs else None

        m.peak_allocated_bytes = top([r.peak_allocated_bytes for r in records])
        m.peak_reserved_bytes = top([r.peak_reserved_bytes for r in records])
        m.peak_fwd_bwd_allocated_bytes = top([r.peak_fwd_bwd_allocated_bytes for r in records])
        m.peak_optimizer_allocated_bytes = top([r.peak_optimizer_allocated_bytes for r in records])
        m.baseline_allocated_bytes = top([r.baseline_allocated_bytes for r in records])
        m.activation_after_forward_bytes = top([r.activation_after_forward_bytes for r in records])
        if m.step_ms_median:
            if throughput is not None:
                tokens, flops = throughput
                m.seq_len = tokens
                m.tokens_per_s = tokens / (m.step_ms_median / 1e3)
                m.model_tflops_per_s = flops / (m.step_ms_median / 1e3) / 1e12
            else:
                m.tokens_per_s = m.batch_size * m.seq_len / (m.step_ms_median / 1e3)
                m.model_tflops_per_s = spec.flops_per_token(m.seq_len) * m.tokens_per_s / 1e12
            env = self.facts.environment
            peak = env.peak_fp32_tflops if self.dtype == "fp32" else env.peak_bf16_tflops
            m.mfu = m.model_tflops_per_s / peak if peak else None
        if self.sampler is not None and records:
            m.telemetry = self.sampler.summarize(records[0].t_start, records[-1].t_end)

    def _profile(self, step: TrainingStep, key: str, variant: str, batch_size: int,
                 records: list[StepRecord]) -> None:
        from gcdoctor.trace.perfetto import trace_file_name
        from gcdoctor.run.rundir import safe_name
        # torch writes the trace's own path into it unescaped: export under a plain temporary name
        # (a '"' in --out would make the trace unreadable), then move it into the run directory,
        # named as tensorboard_trace_handler names traces: traces/VARIANT/HOST_PID.MS.pt.trace.json.gz
        # (on several ranks: every rank's trace of a variant in one folder of rank 0's directory)
        tmp = Path(tempfile.mkdtemp(prefix="gcdoctor-trace-"))
        try:
            prof_records, tmp_path = profile_steps(step, 2, tmp / "trace.json.gz")
            if self.dist is not None:
                path = self.dist.trace_path(key)
            else:
                path = self.rundir.file(f"traces/{safe_name(key.replace('/', '-'))}") / trace_file_name()
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(tmp_path), str(path))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for i, rec in enumerate(prof_records):
            self.bus.emit(StepMeasured(key.split("/")[0], variant, batch_size, i, rec.step_ms, "profile", rec.loss,
                                       rec.peak_allocated_bytes))
        self.facts.profiler_overhead.append(ProfilerOverhead(
            variant=key, batch_size=batch_size, unprofiled_step_ms=median([r.step_ms for r in records]),
            profiled_step_ms=median([r.step_ms for r in prof_records])))
        try:
            from gcdoctor import trace
            from gcdoctor.facts.trace import TraceKey
            trace.compute_metrics, trace.load_trace  # noqa: B018 - present in this build?
        except (ImportError, AttributeError):
            self.facts.unavailable[f"trace.{key}"] = "trace analysis unavailable"
            return
        t0 = time.monotonic()
        try:
            tables = trace.load_trace(path)
            metrics = trace.compute_metrics(tables)
        except UserError as exc:
            self.facts.unavailable[f"trace.{key}"] = str(exc)
            return
        finally:
            self.bus.emit(PhaseTimed(self.session.current_probe or key.split("/")[0], "trace analysis",
                                     time.monotonic() - t0, key))
        for window, tm in metrics.items():
            tm.source = os.path.relpath(path, self.rundir.path)
            self.facts.trace[str(TraceKey(key, window))] = tm
        if self.dist is not None:
            from gcdoctor.trace.comm import comm_metrics
            d = self.facts.distributed
            assert d is not None  # the session sets it whenever it runs on several ranks
            d.comm.append(comm_metrics(tables, key, self.dist.rank, self.dist.relative(path)))


def _state_bytes(m: Measurement, step: TrainingStep) -> None:
    """Parameter, gradient and optimizer-state bytes of the step (on several ranks: this rank's shards)."""
    if hasattr(step, "state_bytes"):  # a sharded step: this rank's shards
        m.param_bytes, m.grad_bytes, m.optimizer_state_bytes = step.state_bytes()
    else:
        m.param_bytes = tensor_bytes(step.model.parameters())
        m.grad_bytes = sum(getattr(p, "_local_tensor", p).numel() * p.element_size()
                           for p in step.model.parameters() if p.requires_grad)
        m.optimizer_state_bytes = optimizer_state_bytes(step.optimizer) if step.optimizer is not None else 0


class Session:
    """One diagnose run, from RunConfig to run directory and verdicts."""

    def __init__(self, config: RunConfig, bus: EventBus | None = None) -> None:
        from gcdoctor.backends import get_backend
        from gcdoctor.probes import select_probes

        self.config = config
        self.bus = bus or EventBus()
        self.current_probe: str | None = None  # the probe running now (events name it)
        self.stop_requested = threading.Event()
        from gcdoctor.run.distributed import DistributedRun
        self.dist = DistributedRun.from_env(config.device)  # under torchrun / --nproc: rank r of N
        self.backend = get_backend(self.dist.device if self.dist is not None else config.device)
        self.resolved = resolve_defaults(config, self.backend.kind)
        self._validate()
        self.spec = models.load_spec(self.resolved.model, layers=config.layers)
        self.probes = select_probes(config.probes, self.backend.kind, distributed=self.dist is not None)
        out = config.out or default_run_dir(config.command, self.resolved.model)
        if config.out and (self.dist is None or self.dist.is_main):  # one rank checks (and empties) it
            from gcdoctor.run.rundir import prepare_run_dir
            prepare_run_dir(config.out, config.force)
        if self.dist is not None:  # every rank validated the same arguments: now they meet
            self.dist.start(self.backend.kind)
            out = self.dist.run_dir(out)
        self.rundir = RunDirectory(out)
        if config.memory_limit_bytes:
            self.backend.set_memory_limit(config.memory_limit_bytes)
        self.facts = Facts(environment=self.backend.describe(), settings=RunSettings(
            command=config.command, seq_len=self.resolved.seq_len, dtype=self.resolved.dtype,
            optimizer=config.optimizer, warmup_steps=config.warmup_steps, measure_steps=config.measure_steps,
            probes=[p.name for p in self.probes], memory_limit_bytes=config.memory_limit_bytes,
            started_at=datetime.now(timezone.utc).isoformat(timespec="seconds")))
        if self.dist is not None:
            self.facts.distributed = self.dist.facts(self.backend, self.facts.environment)
            self.dist.configure(self.facts.distributed, config)
            if not config.profile:
                self.facts.unavailable["distributed.comm"] = "--no-profile: no traces, so no collectives were counted"
        s = self.spec
        self.facts.model = ModelInfo(
            name=s.name, source=s.source, architecture=s.model_type, n_layers=s.n_layers, n_layers_full=s.n_layers_full,
            hidden_size=s.hidden_size, intermediate_size=s.intermediate_size, n_heads=s.n_heads, n_kv_heads=s.n_kv_heads,
            vocab_size=s.vocab_size, n_params=s.param_count(), dtype=self.resolved.dtype, attn_implementation="sdpa")
        self.sampler: TelemetrySampler | None = None
        self.verdicts: list[Verdict] = []
        self.report_path: Path | None = None  # set when the run has written its reports
        self._issued: dict[tuple[str, str], tuple[str, str]] = {}
        self._facts_lock = threading.Lock()
        self.finishing = False
        self.signalled = False  # SIGINT/SIGTERM received during run() (see _StopSignals)

    def _validate(self) -> None:
        c, r = self.config, self.resolved
        if c.optimizer not in ("adamw", "sgd"):
            raise UserError(f"--optimizer {c.optimizer!r}: use adamw or sgd")
        if r.dtype not in models.DTYPES:
            raise UserError(f"--dtype {r.dtype!r}: use one of {', '.join(models.DTYPES)}")
        if r.seq_len < 2:
            raise UserError(f"--seq-len {r.seq_len}: must be at least 2")
        if c.measure_steps < 1 or c.warmup_steps < 0:
            raise UserError("--steps must be at least 1 and --warmup at least 0")
        if c.max_batch < 1 or c.probe_batch < 1:
            raise UserError("--max-batch and --probe-batch must be positive")
        if c.target_batch is not None and c.target_batch < 1:
            raise UserError(f"--target-batch {c.target_batch}: must be positive")
        if c.probe_layers is not None and c.probe_layers < 1:
            raise UserError(f"--probe-layers {c.probe_layers}: must be positive")
        if c.shard not in ("fsdp2", "zero3") or c.checkpoint_impl not in ("transformers", "checkpoint_wrapper"):
            raise UserError(f"shard {c.shard!r} / checkpoint_impl {c.checkpoint_impl!r}: use fsdp2 or zero3, and "
                            "transformers or checkpoint_wrapper")
        if r.dtype == "fp16" and self.backend.kind == "cpu":
            raise UserError("--dtype fp16 is not supported for training on the CPU; use fp32 or bf16")

    # --------------------------------------------------------------------------------------
    def save_facts(self) -> None:
        with self._facts_lock:
            self.facts.save(self.rundir.file("facts.json"))

    def judge(self) -> list[Verdict]:
        """Evaluate all rules; emit verdicts that are new or changed since the last judgement."""
        self.verdicts = evaluate(self.facts, overrides=self.config.thresholds)
        for v in self.verdicts:
            sig = (v.severity, v.headline)
            # inconclusive verdicts stay in the report, except those with a bottom-line line to show
            # (the prescription that cannot choose says so on the TUI too)
            if (v.status != "inconclusive" or v.line) and self._issued.get(v.key) != sig:
                self._issued[v.key] = sig
                self.bus.emit(VerdictIssued(v.to_dict()))
        return self.verdicts

    def _start_telemetry(self) -> None:
        try:
            from gcdoctor.telemetry import TelemetrySampler, open_sources
        except ImportError as exc:
            self.facts.unavailable["telemetry"] = f"telemetry package unavailable ({exc})"
            return
        index = self.backend.index if self.backend.kind != "cpu" else None
        sources = open_sources(self.backend.kind, index)
        bus = self.bus

        def on_sample(t: float, values: dict[str, float | None]) -> None:
            bus.emit(TelemetrySampled(t, values))

        # streamed to disk as it goes, so an interrupted or crashed run keeps its whole series
        self.sampler = TelemetrySampler(sources, rate_hz=self.config.telemetry_hz, on_sample=on_sample,
                                        stream_path=self.rundir.file("telemetry.csv"))
        self.sampler.start()

    def _stop_telemetry(self) -> None:
        if self.sampler is None:
            return
        self.sampler.stop()
        path = self.rundir.file("telemetry.csv")
        self.facts.telemetry = self.sampler.facts()
        self.facts.telemetry.path = path.name

    def run(self) -> list[Verdict]:
        """Run every selected probe; on interrupt or error, keep and report what was measured."""
        t_start = time.monotonic()
        self.rundir.write_json("config.json", self.config.to_dict())
        self.bus.subscribe(self.rundir.on_event)
        s = self.spec
        self.bus.emit(RunStarted(str(self.rundir.path), self.config.command, {
            "model": s.name, "layers": s.n_layers, "layers_full": s.n_layers_full, "params": s.param_count(),
            "seq_len": self.resolved.seq_len,
            "dtype": self.resolved.dtype, "optimizer": self.config.optimizer,
            "probes": [p.name for p in self.probes], "warmup_steps": self.config.warmup_steps,
            "measure_steps": self.config.measure_steps}, self.facts.environment.__dict__, process_age_s()))
        interrupted, error = False, None
        ctx = ProbeContext(self)
        with self._signals(), self.backend.tracking():
            self._start_telemetry()
            try:
                for probe in self.probes:
                    self.current_probe = probe.name
                    t0 = time.monotonic()
                    self.bus.emit(ProbeStarted(probe.name, probe.description))
                    try:
                        probe.run(ctx)
                    except (RunInterrupted, KeyboardInterrupt):
                        self.bus.emit(ProbeFinished(probe.name, False, "interrupted", time.monotonic() - t0))
                        raise
                    except UserError:
                        raise
                    except Exception as exc:  # noqa: BLE001 - one failing probe must not lose the others
                        log = self.rundir.write_error(f"probe {probe.name} failed:\n{traceback.format_exc()}")
                        self.facts.probe_failed(probe.name, f"{type(exc).__name__}: {exc}")
                        first = (str(exc).splitlines() or [""])[0][:200]
                        # one line on the console; the traceback is the run directory's error.log
                        self.bus.emit(LogMessage(f"probe {probe.name} failed: {type(exc).__name__}: {first} "
                                                 f"(traceback in {log})", "error"))
                        self.bus.emit(ProbeFinished(probe.name, False, str(exc), time.monotonic() - t0))
                    else:
                        self.bus.emit(ProbeFinished(probe.name, True, None, time.monotonic() - t0))
                    free_memory(self.backend)
                    if self.dist is not None:
                        self.dist.gather(self.facts)  # every rank at the same point: after each probe
                    self.save_facts()
                    self.judge()
            except (RunInterrupted, KeyboardInterrupt):
                interrupted = True
            except UserError:
                raise
            except Exception as exc:  # noqa: BLE001 - write what we have, then surface the bug
                error = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                self._finish(t_start, interrupted, error)
        return self.verdicts

    def _signals(self) -> "_StopSignals":
        return _StopSignals(self)

    def _finish(self, t_start: float, interrupted: bool, error: str | None) -> None:
        from gcdoctor.report import write_reports
        self.finishing = True  # from here on a second Ctrl-C or SIGTERM is noted, never raised
        interrupted = interrupted or self.stop_requested.is_set()
        if self.dist is None:  # several ranks: their group ends in dist.close(), after the gather
            _destroy_process_group()
        self._stop_telemetry()
        st = self.facts.settings
        st.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        st.wall_s = round(time.monotonic() - t_start, 1)
        st.interrupted, st.error = interrupted, error
        if self.dist is not None and not interrupted and error is None:
            self.dist.gather(self.facts)
        self.save_facts()
        self.judge()
        if self.dist is not None:
            self.dist.close(meet=not interrupted and error is None)
        if self.dist is not None and not self.dist.is_main:  # rank 0 reports for every rank
            self.bus.emit(RunFinished(str(self.rundir.path), interrupted, error, "", {}))
            self.rundir.close()
            return
        report = self.report_path = write_reports(self.rundir.path, self.facts, self.verdicts)
        try:
            from gcdoctor.trace.perfetto import annotate_run
            annotate_run(self.rundir.path)
        except Exception as exc:  # noqa: BLE001 - the traces stay as torch wrote them
            self.bus.emit(LogMessage(f"telemetry counters not added to the traces: {exc}", "warning"))
        counts: dict[str, int] = {}
        for v in self.verdicts:
            counts[v.severity] = counts.get(v.severity, 0) + 1
        self.bus.emit(RunFinished(str(self.rundir.path), interrupted, error, str(report), counts))
        self.rundir.close()


def _destroy_process_group() -> None:
    """DeepSpeed's variants start a one-process group: end it, or NCCL warns at exit."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - best effort at the end of a run
        pass


class _StopSignals:
    """SIGINT and SIGTERM during a run (main thread only). The first asks the run to stop at the
    next step boundary (`ProbeContext.check_stop`): the step in flight finishes and is recorded, so
    a signal never lands between a measurement and its recording. A second one, while the run has
    not yet stopped, stops it at once (KeyboardInterrupt where it is: a long compile, a model
    build). Any signal while the run writes its results is noted and ignored, so a second Ctrl-C
    50 ms after the first cannot lose report.html."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.saved: dict[int, Any] = {}

    @staticmethod
    def _say(text: str) -> None:
        import sys
        try:  # the terminal's descriptor (fd 2 itself goes to gcdoctor.log during a run)
            os.write(sys.stderr.fileno(), text.encode())
        except (OSError, ValueError, AttributeError):
            pass

    def _handler(self, signum: int, frame: Any) -> None:
        s = self.session
        s.signalled = True  # the command ends with 130, whenever in the run the signal came
        if s.finishing:
            self._say("gcdoctor: stopping; writing what was measured\n")
            return
        if not s.stop_requested.is_set():
            s.stop_requested.set()
            self._say("gcdoctor: stopping after the step in flight (Ctrl-C again to stop now)\n")
            return
        raise KeyboardInterrupt

    def __enter__(self) -> "_StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    self.saved[sig] = signal.signal(sig, self._handler)
                except (ValueError, OSError):
                    pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self.saved.items():
            try:
                # once stopped by a signal, with its results on disk, a later signal ends the process
                # at once with 130 (never -2 or -15 from a signal that lands in the interpreter's exit)
                signal.signal(sig, _exit_130 if self.session.signalled else old)
            except (ValueError, OSError):
                pass


def _exit_130(signum: int, frame: Any) -> None:
    import sys
    try:
        sys.stdout.flush()
    finally:
        os._exit(130)
