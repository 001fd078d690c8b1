"""The probes (experiments), in the order of the experiment table (gcdoctor.experiments).

A probe has `name`, `description`, `applies(device_kind) -> str | None` (a reason when it does
not apply) and `run(ctx)` which fills its section of the facts through the ProbeContext.
"""
from __future__ import annotations

from gcdoctor.errors import UserError
from gcdoctor.experiments import DISTRIBUTED_ONLY, DISTRIBUTED_PROBES, EXPERIMENTS, load_probe

PROBES = [load_probe(e) for e in EXPERIMENTS]
# a diagnose on several ranks (--nproc N, torchrun) runs DISTRIBUTED_PROBES, sharded; the others
# measure one device in one process, and DISTRIBUTED_ONLY need several ranks (a process group)
__all__ = ["DISTRIBUTED_ONLY", "DISTRIBUTED_PROBES", "PROBES", "select_probes"]


def _why_not(p, device_kind: str, distributed: bool) -> str | None:
    if distributed and p.name not in DISTRIBUTED_PROBES:
        return "it measures one device in one process: run it without --nproc / torchrun"
    if not distributed and p.name in DISTRIBUTED_ONLY:
        return "it compares sharded setups: run diagnose on several ranks (--nproc N, or under torchrun)"
    return p.applies(device_kind)


def select_probes(names: list[str] | None, device_kind: str, distributed: bool = False) -> list:
    """`names` None: every probe that applies to the device (and to one process or several ranks),
    in table order."""
    by_name = {p.name: p for p in PROBES}
    if names is None:
        return [p for p in PROBES if _why_not(p, device_kind, distributed) is None]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UserError(f"--probes: unknown probe(s) {', '.join(unknown)} (available: {', '.join(by_name)})")
    chosen = []
    for p in PROBES:
        if p.name in names:
            why = _why_not(p, device_kind, distributed)
            if why:
                raise UserError(f"--probes {p.name}: {why}")
            chosen.append(p)
    return chosen
