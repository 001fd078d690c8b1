"""The launch-cost break-even table of a granularity run, as Markdown (docs/granularity.md).

    python bench/whatif_table.py RUN_DIR

Reads RUN_DIR/facts.json; a run recorded before the what-if existed gets it computed from its own
traces first (gcdoctor.trace.launch_response.fill_whatif).
"""
from __future__ import annotations

import sys
from pathlib import Path

from gcdoctor.facts import Facts
from gcdoctor.trace.launch_response import fill_whatif


def _f(x: float | None, fmt: str = "{:,.1f}") -> str:
    return "—" if x is None else fmt.format(x)


def table(facts: Facts) -> str:
    g = facts.granularity
    pts = g.whatif_launch_us
    head = ["variant", "launches/step", "host issue ms", "device busy ms", "step ms", "break-even us/launch"]
    head += [f"step at {x:g} us" for x in pts] + [f"vs none at {x:g} us" for x in pts]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for group in g.groups:
        for v in group.variants:
            w = v.whatif
            if w is None:
                continue
            cells = [f"{group.name}/{v.variant}", _f(w.launches_per_step, "{:,.0f}"), _f(w.host_issue_ms),
                     _f(w.device_busy_ms), _f(v.step_ms), _f(v.break_even_launch_us, "{:,.0f}")]
            cells += [_f(p) for p in v.predicted_step_ms]
            cells += [_f(o, "{:+.0f}%") for o in v.predicted_overhead_pct]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    run = Path(sys.argv[1])
    facts = Facts.load(run / "facts.json")
    if facts.granularity is None:
        sys.exit(f"{run}: no granularity facts")
    if not any(v.whatif for grp in facts.granularity.groups for v in grp.variants):
        fill_whatif(facts, run)
    g = facts.granularity
    print(f"launch cost {g.launch.launch_us:.2f} us; profiler cost {_f(g.profiler_us_per_event, '{:.2f}')} us per "
          f"event; {facts.environment.device_name}, torch {facts.environment.torch}\n")
    print(table(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
