"""The experiment table: every probe gcdoctor can run, in the order it runs, importable without torch.

Each list of probes is derived from this table: `--probes` (its names and its help),
`config.PROBE_NAMES`, the probe objects (`gcdoctor.probes.PROBES`, which imports the class named
here), the console's topic titles, what a bare trace lacks, and the sections whose measurements
the notebook table (`gcdoctor.load`) gathers. A new probe is one row here, beside its own module,
its facts, its section and its rule.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Experiment:
    name: str  # the --probes name, the probe's `name`, and its verdicts' topic
    probe: str  # "module:Class" under gcdoctor.probes
    facts: str  # the Facts field the probe fills
    title: str  # the console's heading for its experiment verdicts
    bare_trace: str | None = None  # what a bare profiler trace lacks (None: no reason recorded)
    distributed: bool = False  # it also runs on several ranks (--nproc N, torchrun), sharded
    distributed_only: bool = False  # it needs several ranks (a process group)
    notebook: bool = False  # its measurements join the notebook's measurement table


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("sweep", "batch_sweep:SweepProbe", "sweep", "batch sweep",
               "batch sweep with and without checkpointing", distributed=True),
    Experiment("allocator", "allocator:AllocatorProbe", "allocator", "allocator"),
    Experiment("optimizer", "optimizer:OptimizerProbe", "optimizer", "optimizer"),
    Experiment("policies", "policies:PoliciesProbe", "policies", "checkpointing policies"),
    Experiment("granularity", "granularity:GranularityProbe", "granularity", "granularity",
               "checkpoint-granularity comparison", distributed=True, notebook=True),
    Experiment("sharding", "sharding:ShardingProbe", "distributed", "sharding",
               distributed=True, distributed_only=True),
    Experiment("offload", "offload:OffloadProbe", "offload", "offload", "offload on/off comparison",
               notebook=True),
    Experiment("jitter", "jitter:JitterProbe", "jitter", "loss jitter",
               "loss comparison with and without checkpointing", notebook=True),
)

BY_NAME = {e.name: e for e in EXPERIMENTS}
PROBE_NAMES = tuple(e.name for e in EXPERIMENTS)
DISTRIBUTED_PROBES = tuple(e.name for e in EXPERIMENTS if e.distributed)
DISTRIBUTED_ONLY = tuple(e.name for e in EXPERIMENTS if e.distributed_only)
NOTEBOOK_SECTIONS = tuple(e.facts for e in EXPERIMENTS if e.notebook)


def load_probe(e: Experiment):
    """The probe object of a row (imports its module: torch, for most)."""
    import importlib
    module, cls = e.probe.split(":")
    return getattr(importlib.import_module(f"gcdoctor.probes.{module}"), cls)()
