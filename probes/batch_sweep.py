"""Batch sweep: layer-level checkpointing off and on, largest batch that fits, and step time and
peak memory at each batch (the memory/time trade-off, measured at equal settings).

The search is guided by the memory model: it measures the batch the caching-allocator replay
predicts to be the largest (gcdoctor.model.fitting.max_batch_fresh), then its neighbour, and falls back
to doubling and bisection when either surprises it. Each variant's search records its strategy,
the prediction, how many trials ran out of memory and how long it took.
"""
from __future__ import annotations

import time

from gcdoctor.run.capture import TrainingStep, enable_layer_checkpointing, free_memory
from gcdoctor.facts import Measurement, SearchTrial, SweepFacts

VARIANTS = ("no_gc", "gc")
CPU_DEFAULT_BATCHES = [1, 2, 4]  # the CPU has no memory wall worth searching for


class SweepProbe:
    name = "sweep"
    description = "batch sweep with layer checkpointing off and on: max batch, step time, peak memory"

    def applies(self, device_kind: str) -> str | None:
        return None

    def run(self, ctx) -> None:
        t_probe = time.monotonic()
        cfg = ctx.config
        facts = SweepFacts(target_batch=cfg.target_batch)
        fixed = self._fixed_batches(ctx, facts)
        facts.searched = fixed is None
        ctx.facts.sweep = facts
        if facts.searched:
            self._model_facts(ctx)
        compare_batch: int | None = None
        for variant in VARIANTS:
            ctx.check_stop()
            t_variant = time.monotonic()
            # the variant's model, its step factory and `measure` live in _variant's frame and are
            # dropped there, or the model would stay on the device through the next variant's build
            # and the probes after the sweep
            best = self._variant(ctx, facts, variant, fixed, compare_batch)
            if variant == "no_gc":
                compare_batch = best
            free_memory(ctx.backend)
            facts.search_seconds[variant] = round(time.monotonic() - t_variant, 1)
            ctx.save()
        if facts.searched:
            try:
                from gcdoctor.probes._memory_model import refresh_context
                refresh_context(ctx)
            except Exception as exc:  # noqa: BLE001 - the predictions stay those made before the steps
                ctx.log(f"memory model: the context could not be read again ({exc})", "warning")
        facts.wall_s = round(time.monotonic() - t_probe, 1)
        ctx.save()

    @staticmethod
    def _fixed_batches(ctx, facts: SweepFacts) -> list[int] | None:
        """The batch sizes to measure (--batch-sizes, or a few on the CPU without a memory limit),
        with who fixed them in `facts.fixed_by`; None: search for the largest that fits."""
        if ctx.config.batch_sizes is not None:
            facts.fixed_by = "--batch-sizes"
            return ctx.config.batch_sizes
        if ctx.backend.kind == "cpu" and ctx.backend.memory_limit() is None:
            facts.fixed_by = "cpu-default"
            ctx.log("on the CPU without --memory-limit there is no memory wall to search: "
                    f"measuring batch sizes {CPU_DEFAULT_BATCHES}")
            return CPU_DEFAULT_BATCHES
        return None

    def _variant(self, ctx, facts: SweepFacts, variant: str, fixed: list[int] | None,
                 compare_batch: int | None) -> int | None:
        """One variant: its largest batch (searched, or among the fixed sizes), the batch both variants
        fit measured and profiled, the memory snapshot. Returns the largest batch."""
        cfg = ctx.config
        model, make_step = self._steps(ctx, variant, facts)
        profiled: set[int] = set()

        def measure(batch: int, profile: bool = False, search: bool = True) -> Measurement:
            t0 = time.monotonic()
            key = f"sweep/{variant}" if profile and cfg.profile else None
            m = ctx.measure(self.name, variant, lambda: make_step(batch), batch, profile_key=key,
                            search=search)
            if key and m.fits:
                profiled.add(batch)
            facts.measurements.append(m)
            facts.trials.append(SearchTrial(variant, batch, m.fits, m.peak_allocated_bytes, m.oom_phase,
                                            round(time.monotonic() - t0, 2),
                                            None if m.fits or m.oom is None else m.oom.kind))
            self._predict(ctx, m, variant)
            ctx.save()
            return m

        if fixed is not None:
            best = self._fixed(ctx, facts, variant, fixed, measure)
        else:
            # profile the point the comparison will use: no_gc's own boundary, gc's at no_gc's
            guess = self._prediction(ctx, variant)
            profile_at = guess if variant == "no_gc" or not compare_batch else compare_batch
            best = self._search(ctx, variant, measure, facts, guess, profile_at)
            facts.search_ooms[variant] = sum(1 for t in facts.trials if t.variant == variant and not t.fits)
        # the largest batch both variants fit is the fair comparison: measure it if the search
        # did not, and profile it (for no_gc its largest batch)
        target = best if variant == "no_gc" else (min(best, compare_batch) if best and compare_batch else best)
        if target and facts.searched and facts.get(variant, target) is None:
            ctx.progress(self.name, variant, target, message="equal-batch point")
            measure(target, profile=True, search=False)
        elif target and cfg.profile and target not in profiled:
            ctx.progress(self.name, variant, target, message="profiling")
            # the extra measurement only feeds the trace and the profiler overhead
            ctx.measure(self.name, variant, lambda: make_step(target), target,
                        profile_key=f"sweep/{variant}", warmup=1, steps=2)
        if cfg.memory_snapshot and variant == "gc" and best and model is not None:
            ctx.progress(self.name, variant, best, message="memory snapshot")
            self._memory_snapshot(ctx, variant, best, model, facts)
        # an out-of-memory step's traceback can outlive this call and keep this frame, with its locals,
        # alive (torch holds the last error): drop the model and the two closures that hold it here
        del model, make_step, measure
        return best

    def _fixed(self, ctx, facts: SweepFacts, variant: str, fixed: list[int], measure) -> int | None:
        """The fixed batch sizes in order, up to the first that does not fit; the largest that fits."""
        best = None
        for i, batch in enumerate(fixed):
            ctx.progress(self.name, variant, batch, i, len(fixed))
            m = measure(batch, search=False)
            if not m.fits:
                break
            best = batch
        facts.max_batch[variant] = best if not facts.searched else None
        facts.max_batch_capped[variant] = False
        return best

    # the search ---------------------------------------------------------------------------
    @staticmethod
    def _steps(ctx, variant: str, facts: SweepFacts):
        """(model, batch -> TrainingStep). One process: one model per variant, reused at every batch.
        Several ranks: a freshly built model per measurement, sharded as the user's setup says
        (probes/_sharding.py), since a sharded model that raised mid-step is not reused."""
        cfg = ctx.config
        if ctx.dist is not None:
            from gcdoctor.probes._sharding import Sharding, sharded_step_factory
            sharding = Sharding(cfg.shard, cfg.reshard_after_forward, cfg.checkpoint_impl)
            info: dict = {}
            make = sharded_step_factory(ctx, sharding, variant == "gc", info=info)

            def step(batch: int) -> TrainingStep:
                st = make(batch)
                ctx.facts.distributed.applied[variant] = info.get("applied", "")
                if variant == "gc":
                    facts.gc_api = info.get("applied", "")
                return st
            return None, step
        model = ctx.build_model()
        if variant == "gc":
            facts.gc_api = enable_layer_checkpointing(model)
        return model, lambda batch: TrainingStep(model, ctx.backend, batch, ctx.seq_len, cfg.optimizer, cfg.seed)

    @staticmethod
    def _model_facts(ctx) -> None:
        """The memory model's facts (and its predicted boundaries) before the first trial."""
        if ctx.facts.memory_model is not None:
            return
        try:
            from gcdoctor.probes._memory_model import memory_model_facts_for
            ctx.facts.memory_model = memory_model_facts_for(ctx)
        except Exception as exc:  # noqa: BLE001 - a model that cannot be predicted is searched blind
            ctx.facts.unavailable["memory_model"] = f"the memory model failed: {type(exc).__name__}: {exc}"

    @staticmethod
    def _prediction(ctx, variant: str) -> int | None:
        """The largest batch the allocator replay predicts for a fresh process (default allocator)."""
        mm = ctx.facts.memory_model
        if mm is None:
            return None
        best = (mm.max_batch_by_allocator.get("default") or mm.max_batch or {}).get(variant)
        return best if best else None

    def _search(self, ctx, variant: str, measure, facts: SweepFacts, guess: int | None,
                profile_at: int | None) -> int | None:
        """Model-guided when there is a prediction: the predicted largest batch, then its
        neighbour above; a fit above it doubles on from there, an OOM at it steps to the
        neighbour below and bisects below that if it fails too. Without a prediction: double
        from 1 until OOM (or --max-batch), then bisect. Returns the largest fit."""
        cap = ctx.config.max_batch
        facts.strategy[variant] = "model-guided" if guess else "doubling"
        facts.predicted_max_batch[variant] = guess
        n = 0

        def trial(batch: int, stage: str) -> bool:
            nonlocal n
            ctx.progress(self.name, variant, batch, n, None, stage)
            n += 1
            return measure(batch, profile=batch == profile_at).fits

        last_fit: int | None = None
        first_oom: int | None = None
        if guess:
            p = min(guess, cap)
            if trial(p, "predicted"):
                last_fit = p
                if p < cap:
                    if trial(p + 1, "predicted + 1"):
                        last_fit = p + 1  # the prediction was short: keep doubling from here
                    else:
                        first_oom = p + 1
            else:
                first_oom = p
                if p > 1 and trial(p - 1, "predicted - 1"):
                    last_fit = p - 1
                elif p > 1:
                    first_oom = p - 1
        start = 1 if last_fit is None else 2 * last_fit
        if first_oom is None:  # double (from 1, or on from a fit above the prediction)
            batch = start
            while batch <= cap:
                if trial(batch, "doubling"):
                    last_fit, batch = batch, batch * 2
                else:
                    first_oom = batch
                    break
            if first_oom is None and last_fit is not None and last_fit < cap:
                if trial(cap, "doubling"):
                    last_fit = cap
                else:
                    first_oom = cap
        facts.max_batch_capped[variant] = first_oom is None
        if first_oom is not None and (last_fit is not None or first_oom > 1):
            # bisect between the last fit (0: none yet) and the first OOM
            lo, hi = last_fit or 0, first_oom
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if trial(mid, "bisecting"):
                    lo = mid
                else:
                    hi = mid
            last_fit = lo or None
        facts.max_batch[variant] = last_fit
        if last_fit is None:
            ctx.facts.unavailable[f"sweep.max_batch.{variant}"] = "batch 1 does not fit"
        return last_fit

    @staticmethod
    def _memory_snapshot(ctx, variant: str, batch: int, model, facts: SweepFacts) -> None:
        """One step at the sweep's peak point (checkpointing's largest batch) under the allocator's
        history recorder, after a warm-up step; the pickle for pytorch.org/memory_viz and its
        live tensors at the peak attributed (gcdoctor.model.snapshot)."""
        import pickle

        import torch

        from gcdoctor.model.snapshot import attribute
        mem = getattr(getattr(torch, ctx.backend.kind, None), "memory", None)
        record = getattr(mem, "_record_memory_history", None)
        snap = getattr(mem, "_snapshot", None)
        key = "sweep.snapshot"
        if ctx.backend.kind == "cpu" or record is None or snap is None:
            ctx.facts.unavailable[key] = f"no allocator history on {ctx.backend.kind} (torch.cuda.memory._snapshot)"
            return
        cfg = ctx.config
        step = None
        try:
            ctx.backend.release_workspaces()
            free_memory(ctx.backend)
            step = TrainingStep(model, ctx.backend, batch, ctx.seq_len, cfg.optimizer, cfg.seed)
            step.run()  # the warm-up makes the optimizer states
            known = {p.data_ptr(): "parameters" for p in model.parameters()}
            if step.optimizer is not None:
                known.update({t.data_ptr(): "optimizer states" for st in step.optimizer.state.values()
                              for t in st.values() if isinstance(t, torch.Tensor) and t.device.type != "cpu"})
            hooks = [p.register_post_accumulate_grad_hook(
                lambda p: known.__setitem__(p.grad.data_ptr(), "gradients"))
                for p in model.parameters() if p.requires_grad]
            record(max_entries=500_000, stacks="python")
            try:
                step.run()
            finally:
                data = snap()
                record(enabled=None)
                for h in hooks:
                    h.remove()
            path = ctx.rundir.file(f"memory/snapshot-{variant}-b{batch}.pickle")
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                pickle.dump(data, f)
            V, T = ctx.spec.vocab_size, batch * ctx.seq_len
            e = {"bf16": 2, "fp16": 2}.get(ctx.dtype, 4)
            facts.snapshot = attribute(data, known, loss_sizes={e * V * T, 4 * V * T})
            facts.snapshot.path = str(path.relative_to(ctx.rundir.path))
            facts.snapshot.variant, facts.snapshot.batch_size = variant, batch
        except Exception as exc:  # noqa: BLE001 - the snapshot is extra evidence, never the run's end
            ctx.facts.unavailable[key] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        finally:
            if step is not None:
                step.release()
            ctx.backend.release_workspaces()
            free_memory(ctx.backend)

    @staticmethod
    def _predict(ctx, m: Measurement, variant: str) -> None:
        """Store the analytic model's prediction beside the measurement."""
        if ctx.dist is not None:
            # the memory model predicts one unsharded device: a rank's peak is `plan --shard N`'s
            ctx.facts.unavailable.setdefault(
                "memory_model", f"a sharded run ({ctx.config.shard} over {ctx.dist.world_size} ranks): the memory "
                "model predicts one unsharded device (gcdoctor plan --shard N predicts a rank's states)")
            return
        from gcdoctor.probes._memory_model import predict_for_measurement
        try:
            m.predicted_peak_bytes = predict_for_measurement(ctx, m, variant)
        except Exception as exc:  # noqa: BLE001 - e.g. the replay fails on a device smaller than its context
            ctx.facts.unavailable.setdefault(
                f"memory_model.predicted.{variant}", f"the prediction failed: {type(exc).__name__}: {exc}")
