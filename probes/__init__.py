"""The probes (experiments), in one explicit table, in the order they run.

A probe has `name`, `description`, `applies(device_kind) -> str | None` (a reason when it does
not apply) and `run(ctx)` which fills its section of the facts through the ProbeContext.
"""
from __future__ import annotations

from gcdoctor.errors import UserError
from gcdoctor.probes.allocator import AllocatorProbe
from gcdoctor.probes.batch_sweep import SweepProbe
from gcdoctor.probes.granularity import GranularityProbe
from gcdoctor.probes.jitter import JitterProbe
from gcdoctor.probes.offload import OffloadProbe
from gcdoctor.probes.optimizer import OptimizerProbe

PROBES = [SweepProbe(), AllocatorProbe(), OptimizerProbe(), GranularityProbe(), OffloadProbe(), JitterProbe()]


def select_probes(names: list[str] | None, device_kind: str) -> list:
    """`names` None: every probe that applies to the device, in table order."""
    by_name = {p.name: p for p in PROBES}
    if names is None:
        return [p for p in PROBES if p.applies(device_kind) is None]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UserError(f"--probes: unknown probe(s) {', '.join(unknown)} (available: {', '.join(by_name)})")
    chosen = []
    for p in PROBES:
        if p.name in names:
            why = p.applies(device_kind)
            if why:
                raise UserError(f"--probes {p.name}: {why}")
            chosen.append(p)
    return chosen
