"""GC024 data-loader-stall."""
from __future__ import annotations

from gcdoctor.types import Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import JudgedWindow
from gcdoctor.rules._host import HostCauseRule


class DataLoaderStallRule(HostCauseRule):
    """What it checks:
    Over the steady-state steps, the device idle time while the host was inside the DataLoader: the
    `enumerate(DataLoader)#...` ranges torch records around each batch fetch (with num_workers=0 the
    whole loading, collation and transforms run there, on the training thread).

    Why it matters:
    The device cannot start a step before its batch exists. When loading runs on the training
    thread, or the workers cannot keep up, the device waits for every batch, and no checkpointing or
    kernel choice changes the step time.

    Evidence:
    Data-loading idle per step and as a share of the steady-state window.

    How to fix:
    DataLoader(num_workers=N>0, pin_memory=True, prefetch_factor=2-4, persistent_workers=True);
    pre-tokenise or pre-process offline; move transforms to the device; make sure the workers get
    free cores.
    """

    code = "GC024"
    slug = "data-loader-stall"
    title = "The device waits on data loading"
    cause = "data"
    what = "waits on data loading"
    defaults = {
        "min_share": 0.1,  # a tenth of the step: beyond step-time noise; a prefetching loader hides all of it
        "critical_share": 0.5,
    }

    def judge(self, facts: Facts, jw: JudgedWindow, t: dict[str, float]) -> Verdict:
        _, share, subject, ev = self.start(facts, jw)
        severity = self.grade(share, t)
        if severity is None:
            return self.passed(f"{subject}: data loading idles the device {100 * share:.0f}% of the steady-state "
                               "time", ev, subject=subject)
        return self.fired(
            severity, f"{subject}: the device waits on the DataLoader {100 * share:.0f}% of the step", ev,
            "The host was inside enumerate(DataLoader) fetching the next batch while the device had nothing to "
            "run: loading, collation and transforms set the pace of the step.",
            "Load in worker processes: DataLoader(num_workers=N, pin_memory=True, prefetch_factor=2-4, "
            "persistent_workers=True) with N free cores; pre-tokenise or pre-process offline; move transforms "
            "to the device.", subject=subject)
