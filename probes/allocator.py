"""The boundary as a training job meets it: fresh processes, under both allocator settings.

The sweep finds each variant's largest batch in one process, after other batches: the default
caching allocator's segments then carry the history of those trials, so the boundary it reports
may not hold for a job whose first step is that batch. And `PYTORCH_CUDA_ALLOC_CONF` is read when
CUDA initialises, so another allocator setting needs another process. This probe starts gcdoctor
again in subprocesses (`python -m gcdoctor.run.worker WORK.json`), each measuring given
batches with the same training step and returning its measurements as JSON:

- default allocator: the sweep's boundary batch first, in a fresh process; if it does not fit,
  the batch below in another fresh process, and so on (at most `MAX_DEFAULT_TRIES`);
- expandable segments (`expandable_segments:True`): one process that starts at the allocator
  replay's prediction (or one above the sweep's boundary) and steps up while it fits, or down
  until it does (expandable segments unmap free pages at an OOM, so the trials within the
  process barely depend on each other).

Each point is one warm-up step (the optimizer states) and `STEPS` measured ones: enough to meet
the second step's layout and give a tokens/s, little enough to keep the probe to a few processes.
In the expandable process, the points after the first only answer fit or OOM: the warm-up and one
timed step each (the second step's layout is met; docs/benchmarks.md has the measurement).
The worker builds its model without the random initialisation (WORK.json "init", default
"fast": models.build_model), since its steps measure memory and time, not learning; it records
its own start-up and build seconds (PhaseTimed events in its events.jsonl).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gcdoctor.model.allocator import alloc_conf_env
from gcdoctor.facts import AllocatorFacts, Measurement
from gcdoctor.facts.serde import from_dict
from gcdoctor.facts.sweep import AllocatorBoundary, FreshRun

ALLOC_CONF = {"default": "", "expandable": "expandable_segments:True"}
STEPS = 2  # measured steps per point, after one warm-up
MAX_DEFAULT_TRIES = 3  # fresh processes walking down from the sweep's boundary
MAX_EXPANDABLE_TRIALS = 4  # points in the expandable-segments process
WORKER_TIMEOUT_S = 900


class AllocatorProbe:
    name = "allocator"
    description = "the largest batch in fresh processes, default allocator and expandable segments"

    def applies(self, device_kind: str) -> str | None:
        if device_kind not in ("cuda", "musa"):
            return "no caching allocator on the CPU: the sweep's boundary is the counter's, history-free"
        return None

    def run(self, ctx) -> None:
        sweep = ctx.facts.sweep
        if sweep is None or not sweep.searched or not sweep.max_batch:
            ctx.facts.unavailable["allocator"] = "needs the sweep's searched boundary (run the sweep probe first)"
            return
        facts = ctx.facts.allocator = AllocatorFacts(steps=STEPS)
        ctx.backend.release_workspaces()
        from gcdoctor.run.capture import free_memory
        free_memory(ctx.backend)
        info = getattr(ctx.backend, "mem_get_info", lambda: None)()
        if info is not None:
            facts.parent_device_bytes = info[1] - info[0]
        mm = ctx.facts.memory_model
        for variant in ("no_gc", "gc"):
            ctx.check_stop()
            found = sweep.max_batch.get(variant)
            if not found:
                ctx.facts.unavailable[f"allocator.{variant}"] = "the sweep found no fitting batch"
                continue
            predicted = {a: self._predicted(ctx, mm, variant, a, facts.parent_device_bytes) for a in ALLOC_CONF}
            self._default(ctx, facts, variant, found, predicted["default"])
            self._expandable(ctx, facts, variant, found, predicted["expandable"])
            ctx.save()

    @staticmethod
    def _predicted(ctx, mm, variant: str, allocator: str, parent: int | None) -> int | None:
        """The replay's largest batch for a fresh process beside this one: the device less what this
        process still holds (its context), less the fresh process's own context."""
        if mm is None:
            return None
        if not parent or not mm.capacity_bytes:
            return (mm.max_batch_by_allocator.get(allocator) or {}).get(variant)
        from gcdoctor.model.fitting import max_batch_fresh
        return max_batch_fresh(ctx.spec, mm.capacity_bytes - parent, mm.seq_len, mm.dtype, mm.optimizer,
                                 variant == "gc", mm.device, allocator, mm.context_bytes, mm.limit_bytes)

    # the two searches -------------------------------------------------------------------
    def _default(self, ctx, facts: AllocatorFacts, variant: str, found: int, predicted: int | None) -> None:
        bound = AllocatorBoundary(variant=variant, allocator="default", predicted=predicted, in_process=found)
        batch = found
        for _ in range(MAX_DEFAULT_TRIES):
            ctx.progress(self.name, variant, batch, message="default allocator, fresh process")
            run = self._fresh(ctx, facts, variant, "default", [batch], "list")
            m = run.measurements[0] if run.measurements else None
            if m is None:
                break
            if m.fits:
                _fill(bound, m)
                break
            bound.first_oom_batch, bound.first_oom_kind = batch, (m.oom.kind if m.oom else None)
            batch -= 1
            if batch < 1:
                break
        if bound.largest_batch is not None:
            bound.order_moves_boundary = bound.largest_batch != found
            if bound.first_oom_batch is None:
                # the sweep measured the batch above it: an OOM in the sweep's process
                above = [m for m in ctx.facts.sweep.measurements
                         if m.variant == variant and m.batch_size == found + 1 and not m.fits]
                if above:
                    bound.first_oom_batch = found + 1
                    bound.first_oom_kind = above[0].oom.kind if above[0].oom else None
            bound.exact = bound.first_oom_batch == bound.largest_batch + 1
        facts.boundaries.append(bound)

    def _expandable(self, ctx, facts: AllocatorFacts, variant: str, found: int, predicted: int | None) -> None:
        bound = AllocatorBoundary(variant=variant, allocator="expandable", predicted=predicted, in_process=found)
        start = max(predicted or 0, found + 1)
        cap = ctx.config.max_batch
        ctx.progress(self.name, variant, start, message="expandable segments, fresh process")
        run = self._fresh(ctx, facts, variant, "expandable", [min(start, cap)], "boundary", low=found, high=cap)
        fits = sorted(m.batch_size for m in run.measurements if m.fits)
        ooms = sorted(m.batch_size for m in run.measurements if not m.fits)
        if fits:
            best = fits[-1]
            _fill(bound, next(m for m in run.measurements if m.fits and m.batch_size == best))
            above = [b for b in ooms if b > best]
            if above:
                bound.first_oom_batch = above[0]
                m = next(m for m in run.measurements if m.batch_size == above[0])
                bound.first_oom_kind = m.oom.kind if m.oom else None
            bound.exact = bound.first_oom_batch == best + 1
        facts.boundaries.append(bound)

    # one fresh process --------------------------------------------------------------------
    def _fresh(self, ctx, facts: AllocatorFacts, variant: str, allocator: str, batches: list[int], mode: str,
               low: int = 1, high: int = 1 << 16) -> FreshRun:
        label = f"{variant}-{allocator}-b{batches[0]}"
        out = ctx.rundir.file(f"allocator/{label}")
        out.mkdir(parents=True, exist_ok=True)
        cfg = ctx.config.to_dict()
        cfg.update(model=ctx.session.resolved.model, dtype=ctx.dtype, seq_len=ctx.seq_len, profile=False,
                   out=str(out), warmup_steps=1, measure_steps=min(STEPS, ctx.config.measure_steps), tui=False,
                   probes=["sweep"], batch_sizes=None)  # the worker runs no probe; it measures itself
        work = {"config": cfg, "variant": variant, "batches": batches, "mode": mode, "low": low,
                "high": high, "max_trials": MAX_EXPANDABLE_TRIALS}
        (out / "work.json").write_text(json.dumps(work, indent=1))
        env = dict(os.environ)
        conf = ALLOC_CONF[allocator]
        var = alloc_conf_env(ctx.backend.kind)
        if conf:
            env[var] = conf
        else:
            env.pop(var, None)
        run = FreshRun(variant=variant, allocator=allocator, alloc_conf=conf, batches=[],
                       run_dir=str(out.relative_to(ctx.rundir.path)))
        t0 = time.monotonic()
        result = run_worker(out / "work.json", env, ctx.check_stop)
        run.wall_s = round(time.monotonic() - t0, 1)
        if isinstance(result, str):
            run.error = result
            ctx.log(f"allocator probe: the fresh process for {label} failed: {result}", "warning")
        else:
            run.measurements = [from_dict(Measurement, m) for m in result["measurements"]]
            run.batches = [m.batch_size for m in run.measurements]
            run.context_bytes = result.get("context_bytes")
            run.alloc_conf = result.get("alloc_conf", conf)
            for m in run.measurements:
                m.probe = self.name
                ctx.bus.emit(_recorded(self.name, m))
        facts.runs.append(run)
        return run


def _fill(bound: AllocatorBoundary, m: Measurement) -> None:
    bound.largest_batch, bound.tokens_per_s, bound.step_ms = m.batch_size, m.tokens_per_s, m.step_ms_median
    bound.mfu, bound.peak_allocated_bytes, bound.peak_reserved_bytes = m.mfu, m.peak_allocated_bytes, m.peak_reserved_bytes


def _recorded(probe: str, m: Measurement):
    from gcdoctor.run.events import MeasurementRecorded, measurement_row
    return MeasurementRecorded(probe, measurement_row(m))


def run_worker(work: Path, env: dict[str, str], check_stop=None) -> dict[str, Any] | str:
    """Run the worker on `work` in a subprocess; its result dict, or why there is none."""
    result = work.with_name("result.json")
    cmd = [sys.executable, "-m", "gcdoctor.run.worker", str(work)]
    with open(work.with_name("worker.log"), "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    return f"no result within {WORKER_TIMEOUT_S} s"
                if check_stop is not None:
                    check_stop()
                time.sleep(0.2)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if proc.returncode != 0 or not result.is_file():
        tail = work.with_name("worker.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return f"exit code {proc.returncode}: {tail[0][:200]}"
    return json.loads(result.read_text())
