"""GC023 setup-in-steady-state."""
from __future__ import annotations

import re

from gcdoctor.types import Evidence, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import JudgedWindow
from gcdoctor.rules._host import HostCauseRule, idle_of, per_step, top

_ALLOC = re.compile(r"malloc|free|alloc|memcreate|memmap|memunmap|memrelease|memaddress|memsetaccess|register", re.I)
_MODULE = re.compile(r"module|library|getfunction|getkernel|fatbinary", re.I)


class SetupInSteadyStateRule(HostCauseRule):
    """What it checks:
    Over the steady-state steps (warm-up steps are found and left out: they load modules, initialise
    libraries and fill the caching allocator once), the device idle time while the host sat in
    allocator or setup calls: cudaMalloc/cudaFree and their hip/musa/XPU equivalents, virtual-memory
    mapping, module and library loading, stream and event creation, device queries. On a trace
    without profiler steps it cannot tell one-time setup from a recurring cost, and says so.

    Why it matters:
    After the first steps a training loop should not allocate device memory from the driver or load
    code: the caching allocator reuses its blocks and every kernel is loaded. Calls that recur every
    step mean the allocator is emptied or fragmented (torch.cuda.empty_cache() in the loop, shapes
    that change every step) or kernels are compiled/loaded anew (dynamic shapes): each costs
    milliseconds during which the device waits.

    Evidence:
    Setup idle per step and as a share of the steady-state window, by call.

    How to fix:
    Allocator calls: remove torch.cuda.empty_cache() from the loop, keep shapes fixed (pad sequences to
    a few bucket lengths), PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation.
    Module loading: fixed shapes, or a longer warm-up before profiling (schedule(wait=1, warmup=2, ...)).
    """

    code = "GC023"
    slug = "setup-in-steady-state"
    title = "Allocator or setup calls in the steady state"
    cause = "setup"
    what = "waits on allocator or setup calls"
    defaults = {
        # a tenth of the step: a single cudaMalloc of a large block costs 1-10 ms, a few-ms step
        "min_share": 0.1,
        "critical_share": 0.5,
    }

    def judge(self, facts: Facts, jw: JudgedWindow, t: dict[str, float]) -> Verdict:
        h = idle_of(jw)
        _, share, subject, ev = self.start(facts, jw)
        for name, v in top(h.setup_calls, 4):
            ev.append(Evidence(f"setup idle in {name}", *per_step(v, jw)))
        severity = self.grade(share, t)
        if severity is None:
            return self.passed(f"{subject}: allocator and setup calls idle the device {100 * share:.0f}% of the "
                               "steady-state time", ev, subject=subject)
        names = [n for n, _ in top(h.setup_calls, 4)]
        alloc = any(_ALLOC.search(n) for n in names)
        module = any(_MODULE.search(n) for n in names)
        recurring = jw.steps is not None
        when = ("in every steady-state step, after the warm-up" if recurring else
                "in a trace without profiler steps, so one-time setup and a recurring cost cannot be told apart")
        fixes = []
        if alloc:
            fixes.append("allocator calls after warm-up: remove torch.cuda.empty_cache() from the loop, keep tensor "
                         "shapes fixed (pad to a few bucket lengths), set PYTORCH_CUDA_ALLOC_CONF="
                         "expandable_segments:True against fragmentation")
        if module:
            fixes.append("module loading after warm-up: new kernels every step (changing shapes, recompilation): "
                         "fix the shapes, or warm up longer")
        if not recurring:
            fixes.insert(0, "profile with torch.profiler.schedule(wait=1, warmup=1, active=3) and prof.step() each "
                            "step, so that one-time setup is recorded apart from the steady state")
        fixes = fixes or ["find which library creates streams, events or handles each step and create them once"]
        return self.fired(
            severity, f"{subject}: the device waits on allocator or setup calls {100 * share:.0f}% of the "
            + ("step" if recurring else "traced time") + f" ({', '.join(names[:2]) or 'setup calls'})", ev,
            f"The host sat in {', '.join(names[:3]) or 'setup calls'} while the device had nothing to run, {when}. "
            "After warm-up the caching allocator should serve every allocation and every kernel should be loaded.",
            "; ".join(fixes) + ".", subject=subject)
