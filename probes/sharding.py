"""Sharding: the same model sharded several ways over the job's ranks, with and without
checkpointing, at the probe batch: step time, peak memory and model states per rank, and from every
rank's trace the collectives per step (by kind, and whether forward, backward or the recompute
issued them) and the communication the compute did not hide.

Variants (experiments; the sweep measures the user's own setup):
    fsdp2/no_gc         FSDP2, reshard_after_forward=True, no checkpointing
    fsdp2/gc            + transformers' layer checkpointing (the checkpoint outside each unit)
    fsdp2/gc-wrapper    + checkpoint_wrapper inside each unit (the torchtitan order)
    fsdp2-keep/no_gc    FSDP2, reshard_after_forward=False (gathered parameters kept for backward)
    fsdp2-keep/gc       the same with transformers' checkpointing
    zero3/no_gc         DeepSpeed ZeRO-3 (where DeepSpeed runs on this device)
    zero3/gc            + DeepSpeed's activation checkpointing routed into the model's layers
Rules GC062 (re-gathers caused by the recompute) and GC063 (each variant against fsdp2/gc) judge.
"""
from __future__ import annotations

from gcdoctor.facts.distributed import ShardVariant
from gcdoctor.probes._sharding import FSDP2, ZERO3, Sharding, sharded_step_factory

VARIANTS: list[tuple[str, Sharding, bool]] = [
    ("fsdp2/no_gc", Sharding(FSDP2, True, "transformers"), False),
    ("fsdp2/gc", Sharding(FSDP2, True, "transformers"), True),
    ("fsdp2/gc-wrapper", Sharding(FSDP2, True, "checkpoint_wrapper"), True),
    ("fsdp2-keep/no_gc", Sharding(FSDP2, False, "transformers"), False),
    ("fsdp2-keep/gc", Sharding(FSDP2, False, "transformers"), True),
    ("zero3/no_gc", Sharding(ZERO3, True, "deepspeed"), False),
    ("zero3/gc", Sharding(ZERO3, True, "deepspeed"), True),
]
# DeepSpeed's engine takes about 10 s to build per variant on a 2-core host (measured: tiny-llama,
# gloo, 2 ranks): on the CPU the ZeRO-3 variants run only when the user's own setup is ZeRO-3
CPU_ZERO3_NOTE = ("CPU run: the ZeRO-3 variants were skipped (DeepSpeed's engine takes about 10 s to build per "
                  "variant on a small host); --shard zero3 includes them")
PROFILED_STEPS = 2


class ShardingProbe:
    name = "sharding"
    description = "the model sharded several ways (FSDP2 resharding, checkpoint order, ZeRO-3): collectives and exposed communication"

    def applies(self, device_kind: str) -> str | None:
        return None

    def run(self, ctx) -> None:
        cfg = ctx.config
        d = ctx.facts.distributed
        spec = ctx.probe_spec()
        d.probe_batch = cfg.probe_batch
        d.notes.append(f"sharding probe: {spec.name}, {spec.n_layers} of {spec.n_layers_full} layers, batch "
                       f"{cfg.probe_batch} per rank, {cfg.warmup_steps} warm-up + {cfg.measure_steps} measured steps "
                       f"and {PROFILED_STEPS} profiled per variant")
        cpu = ctx.backend.kind == "cpu"
        for i, (name, sharding, gc) in enumerate(VARIANTS):
            ctx.check_stop()
            row = ShardVariant(name=name, description=sharding.describe(gc), strategy=sharding.strategy,
                               reshard_after_forward=sharding.reshard_after_forward,
                               checkpoint_impl=sharding.checkpoint_impl if gc else "", gc=gc)
            d.variants.append(row)
            if sharding.strategy == ZERO3:
                if cpu and cfg.shard != ZERO3:
                    row.skipped = CPU_ZERO3_NOTE
                    continue
                ds, why = ctx.deepspeed()
                if ds is None:
                    row.skipped = why
                    continue
            ctx.progress(self.name, name, cfg.probe_batch, i, len(VARIANTS))
            info: dict = {}
            make = sharded_step_factory(ctx, sharding, gc, spec=spec, info=info)
            key = f"{self.name}/{name}"
            m = ctx.measure(self.name, name, lambda: make(cfg.probe_batch), cfg.probe_batch, spec=spec,
                            profile_key=key if cfg.profile else None)
            row.measurement, row.applied, row.setup_s = m, info.get("applied", ""), info.get("setup_s")
            if any(c.key == key for c in d.comm):
                row.trace_key = key
            ctx.save()
        if cpu and cfg.shard != ZERO3 and CPU_ZERO3_NOTE not in d.notes:
            d.notes.append(CPU_ZERO3_NOTE)
