"""The report's sections, in the order every writer shows them (after the bottom line). A new probe
adds its entry here; the Markdown, HTML and compare writers need nothing else."""
from __future__ import annotations

from gcdoctor.report.model import Section
from gcdoctor.report.sections import (allocator, distributed, granularity, jitter, memory, offload, policies, sweep,
                                      telemetry, trace, watch)

SECTIONS: list[Section] = [
    watch.WATCH, policies.SECTION, sweep.SECTION, distributed.SECTION, memory.SECTION, allocator.ALLOCATOR, allocator.OPTIMIZER,
    granularity.SECTION, offload.SECTION, jitter.SECTION,
    watch.MONITOR, telemetry.SECTION, trace.TRACE, trace.PROFILER,
]


def present(facts) -> list[Section]:
    """The sections this run has facts for. A section whose facts have a shape this gcdoctor does not
    know (facts from another version) is skipped rather than crashing the writer."""
    out = []
    for s in SECTIONS:
        try:
            if s.present(facts):
                out.append(s)
        except AttributeError:
            continue
    return out


__all__ = ["SECTIONS", "present"]
