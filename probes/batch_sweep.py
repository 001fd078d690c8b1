"""Batch sweep: layer-level checkpointing off and on, largest batch that fits, and step time and
peak memory at each batch (the memory/time trade-off, measured at equal settings)."""
from __future__ import annotations

from gcdoctor.capture import TrainingStep, enable_layer_checkpointing, free_memory
from gcdoctor.facts import Measurement, SearchTrial, SweepFacts

VARIANTS = ("no_gc", "gc")
CPU_DEFAULT_BATCHES = [1, 2, 4]  # the CPU has no memory wall worth searching for


class SweepProbe:
    name = "sweep"
    description = "batch sweep with layer checkpointing off and on: max batch, step time, peak memory"

    def applies(self, device_kind: str) -> str | None:
        return None

    def run(self, ctx) -> None:
        cfg = ctx.config
        facts = SweepFacts(target_batch=cfg.target_batch)
        fixed = cfg.batch_sizes
        if fixed is None and ctx.backend.kind == "cpu" and ctx.backend.memory_limit() is None:
            fixed = CPU_DEFAULT_BATCHES
            ctx.log("on the CPU without --memory-limit there is no memory wall to search: "
                    f"measuring batch sizes {fixed}")
        facts.searched = fixed is None
        ctx.facts.sweep = facts
        compare_batch: int | None = None
        for variant in VARIANTS:
            ctx.check_stop()
            model, make_step = self._steps(ctx, variant, facts)

            def measure(batch: int, profile: bool = False, search: bool = True) -> Measurement:
                m = ctx.measure(self.name, variant, lambda: make_step(batch), batch,
                                profile_key=f"sweep/{variant}" if profile else None, search=search)
                facts.measurements.append(m)
                facts.trials.append(SearchTrial(variant, batch, m.fits, m.peak_allocated_bytes, m.oom_phase))
                self._predict(ctx, m, variant)
                ctx.save()
                return m

            if fixed is not None:
                best = None
                for i, batch in enumerate(fixed):
                    ctx.progress(self.name, variant, batch, i, len(fixed))
                    m = measure(batch, search=False)
                    if not m.fits:
                        break
                    best = batch
                facts.max_batch[variant] = best if not facts.searched else None
                facts.max_batch_capped[variant] = False
            else:
                best = self._search(ctx, variant, measure, facts)
            # profile one point per variant: the largest batch both variants fit (for no_gc its max)
            target = best if variant == "no_gc" else (min(best, compare_batch) if best and compare_batch else best)
            if variant == "no_gc":
                compare_batch = best
            if target and cfg.profile:
                ctx.progress(self.name, variant, target, message="profiling")
                # the extra measurement only feeds the trace and the profiler overhead
                ctx.measure(self.name, variant, lambda: make_step(target), target,
                            profile_key=f"sweep/{variant}", warmup=1, steps=2)
            del model
            free_memory(ctx.backend)
            ctx.save()

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

    def _search(self, ctx, variant: str, measure, facts: SweepFacts) -> int | None:
        """Double until OOM (or --max-batch), then bisect between the last fit and the first OOM."""
        cap = ctx.config.max_batch
        last_fit, first_oom, batch, n = None, None, 1, 0
        while batch <= cap:
            ctx.progress(self.name, variant, batch, n, None, "doubling")
            n += 1
            if measure(batch).fits:
                last_fit = batch
                batch *= 2
            else:
                first_oom = batch
                break
        if first_oom is None:
            if last_fit is not None and last_fit < cap:  # one more at the cap itself
                if measure(cap).fits:
                    last_fit = cap
                else:
                    first_oom = cap
            facts.max_batch_capped[variant] = first_oom is None
        else:
            facts.max_batch_capped[variant] = False
        if last_fit is not None and first_oom is not None:
            lo, hi = last_fit, first_oom
            while hi - lo > 1:
                mid = (lo + hi) // 2
                ctx.progress(self.name, variant, mid, n, None, "bisecting")
                n += 1
                if measure(mid).fits:
                    lo = mid
                else:
                    hi = mid
            last_fit = lo
        facts.max_batch[variant] = last_fit
        if last_fit is None:
            ctx.facts.unavailable[f"sweep.max_batch.{variant}"] = "batch 1 does not fit"
        return last_fit

    @staticmethod
    def _predict(ctx, m: Measurement, variant: str) -> None:
        """Store the analytic model's prediction beside the measurement (issue 11)."""
        if ctx.dist is not None:
            # the memory model predicts one unsharded device: a rank's peak is `plan --shard N`'s
            ctx.facts.unavailable.setdefault(
                "memory_model", f"a sharded run ({ctx.config.shard} over {ctx.dist.world_size} ranks): the memory "
                "model predicts one unsharded device (gcdoctor plan --shard N predicts a rank's states)")
            return
        try:
            from gcdoctor import memory
        except ImportError:
            return
        predict = getattr(memory, "predict_for_measurement", None)
        if predict is not None:
            m.predicted_peak_bytes = predict(ctx, m, variant)
