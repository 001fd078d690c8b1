"""Section: a sharded run over N ranks: who the ranks were, every rank's memory and step time, the
collectives and communication of every rank's profiled steps, and the sharding probe's variants."""
from __future__ import annotations

from gcdoctor.facts import Facts
from gcdoctor.report.model import Column, Key, Section, Table

STRATEGY = {"fsdp2": "FSDP2 (fully_shard)", "zero3": "DeepSpeed ZeRO-3"}

RANK_COLUMNS = [Column("rank", "int", key=True), Column("local rank", "int"), Column("host", "text"),
                Column("device", "text"), Column("device name", "text"), Column("run directory", "text")]
MEASURE_COLUMNS = [Column("probe", key=True), Column("variant", key=True), Column("batch", "int", key=True),
                   Column("rank", "int", key=True), Column("result", "text"), Column("step", "ms", compare=True),
                   Column("peak", "bytes", compare=True), Column("reserved", "bytes"), Column("params", "bytes"),
                   Column("grads", "bytes"), Column("optimizer states", "bytes")]
COMM_COLUMNS = [Column("variant", key=True), Column("rank", "int", key=True), Column("all-gathers", "sci", compare=True),
                Column("in forward", "sci"), Column("in backward", "sci"), Column("by the recompute", "sci"),
                Column("reduce-scatters", "sci"), Column("all-reduces", "sci"), Column("comm kernels", "sci"),
                Column("communication", "ms", compare=True), Column("exposed", "ms", compare=True),
                Column("hidden by compute", "ms"), Column("beside the recompute", "ms"), Column("step", "ms"),
                Column("host collectives (gloo)", "ms")]
VARIANT_COLUMNS = [Column("variant", key=True), Column("what", "text"), Column("result", "text"),
                   Column("step", "ms", compare=True), Column("peak, rank 0", "bytes", compare=True),
                   Column("largest rank's peak", "bytes", compare=True), Column("setup", "s")]


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1e3


def _rank_rows(facts: Facts) -> list[list]:
    d = facts.distributed
    if d is None:
        return []
    return [[r.rank, r.local_rank, r.host or None, r.device or None, r.device_name or None, r.run_dir or None]
            for r in sorted(d.ranks, key=lambda r: r.rank)]


def _measure_rows(facts: Facts) -> list[list]:
    d = facts.distributed
    if d is None:
        return []
    seen, rows = set(), []
    for m in d.measurements:
        key = (m.probe, m.variant, m.batch_size)
        if key in seen:
            continue
        seen.add(key)
        for r in d.rows(*key):
            result = "fits" if r.fits else f"OOM ({r.oom_phase})"
            rows.append([r.probe, r.variant, r.batch_size, r.rank, result, r.step_ms_median, r.peak_allocated_bytes,
                         r.peak_reserved_bytes, r.param_bytes, r.grad_bytes, r.optimizer_state_bytes])
    return rows


def _comm_rows(facts: Facts) -> list[list]:
    d = facts.distributed
    if d is None:
        return []
    rows = []
    for c in sorted(d.comm, key=lambda c: (c.key, c.rank)):
        rows.append([c.key, c.rank, c.calls("all_gather"), c.calls("all_gather", "forward"),
                     c.calls("all_gather", "backward"), c.calls("all_gather", "recompute"),
                     c.calls("reduce_scatter"), c.calls("all_reduce"), c.comm_kernel_count, _ms(c.comm_busy_us),
                     _ms(c.comm_exposed_us), _ms(c.comm_overlap_compute_us), _ms(c.comm_overlap_recompute_us),
                     _ms(c.step_us), _ms(c.host_comm_us)])
    return rows


def _variant_rows(facts: Facts) -> list[list]:
    d = facts.distributed
    if d is None:
        return []
    rows = []
    for v in d.variants:
        m = v.measurement
        if v.skipped:
            result = f"skipped: {v.skipped}"
        elif m is None:
            result = "not measured"
        elif not m.fits:
            result = f"OOM ({m.oom_phase})"
        else:
            result = "ran"
        peaks = [r.peak_allocated_bytes for r in d.rows("sharding", v.name, m.batch_size)
                 if r.peak_allocated_bytes is not None] if m is not None else []
        rows.append([v.name, v.description, result, m.step_ms_median if m is not None else None,
                     m.peak_allocated_bytes if m is not None else None, max(peaks) if peaks else None, v.setup_s])
    return rows


def _keys(facts: Facts) -> list[Key]:
    d = facts.distributed
    if d is None:
        return []
    out = [Key("world-size", "ranks", d.world_size, "int"), Key("backend", "process group", d.backend or None),
           Key("launcher", "launched by", d.launcher or None),
           Key("strategy", "the sweep shards with", STRATEGY.get(d.strategy, d.strategy))]
    if d.strategy == "fsdp2":
        out += [Key("reshard", "reshard_after_forward", d.reshard_after_forward, "text"),
                Key("ckpt-impl", "checkpointing under FSDP2", d.checkpoint_impl)]
    for variant, applied in sorted(d.applied.items()):
        out.append(Key(f"applied-{variant}", f"sweep {variant}", applied))
    return out


def _lead(facts: Facts) -> str:
    d = facts.distributed
    if d is None:
        return ""
    return (f"{d.world_size} rank{'s' if d.world_size != 1 else ''} ({d.backend}), each running the same probes "
            f"on its own device; the sweep shards the model with {STRATEGY.get(d.strategy, d.strategy)}. The "
            "sweep's tables above are rank 0's numbers; here every rank's, and the collectives each rank's "
            "trace holds, per profiled step (traces/<variant>/rank-<r>.pt.trace.json.gz; `gcdoctor analyze` "
            "of a variant's folder compares the ranks).")


def _tables(facts: Facts) -> list[Table]:
    d = facts.distributed
    if d is None:
        return []
    return [
        Table("distributed-comm", COMM_COLUMNS, _comm_rows, title="Communication per profiled step",
              caption="Collectives counted from the host's c10d calls; kernel times from the device timeline "
                      "(none on a CPU trace, where gloo runs the collectives on the host). Exposed: communication "
                      "kernels with no compute kernel beside them."),
        Table("distributed-variants", VARIANT_COLUMNS, _variant_rows, title="Sharding probe variants",
              caption=f"At batch {d.probe_batch} per rank on the probe's layers."),
        Table("distributed-ranks-measured", MEASURE_COLUMNS, _measure_rows, title="Every rank's measurements",
              fold=True),
        Table("distributed-ranks", RANK_COLUMNS, _rank_rows, title="Ranks", fold=True),
    ]


SECTION = Section(
    id="distributed", title="Sharded over several ranks: memory and communication", facts="distributed",
    present=lambda f: f.distributed is not None, lead=_lead, keys=_keys, tables=_tables,
    notes=lambda f: list(f.distributed.notes) if f.distributed is not None else [], topics=("distributed",))
