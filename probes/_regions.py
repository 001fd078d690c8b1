"""Checkpoint regions for the granularity probe: wrapping a module's forward in a labelled,
non-reentrant checkpoint, and counting regions and recomputed ops while a step runs.

Counting happens through checkpoint's `context_fn`: it is called once per region in the forward,
and the recompute context it returns is entered around that region's recomputation in the
backward. During a census step the recompute context also pushes a dispatch mode that counts the
aten ops the recomputation really runs (non-reentrant checkpoint stops early, as soon as every
tensor the backward needs exists again, so a region may recompute nothing at all).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from gcdoctor.run.capture import labelled_context_fn

# ops that move no data: not counted
_FREE_OPS = {"detach", "alias", "lift_fresh", "_to_copy_noop"}


class _CountOps(TorchDispatchMode):
    """Counts aten ops that are not views (a view of a saved tensor computes nothing) into one
    of the census's counters."""

    def __init__(self, census: "RegionCensus", counter: str) -> None:
        super().__init__()
        self.census, self.counter = census, counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = getattr(func, "_overloadpacket", None)
        name = getattr(packet, "__name__", str(func))
        if not getattr(func, "is_view", False) and name not in _FREE_OPS:
            setattr(self.census, self.counter, getattr(self.census, self.counter) + 1)
        return func(*args, **(kwargs or {}))


class RegionCensus:
    """For one step: checkpoint regions entered in the forward, the ops they ran in the forward,
    and the ops their recomputation ran in the backward.

    `census` on: the contexts also count ops (costs time: only for an untimed step).
    """

    def __init__(self) -> None:
        self.regions = 0
        self.forward_ops = 0
        self.recomputed_ops = 0
        self.census = False
        # (regions, forward ops in regions, recomputed ops) of the census step
        self.counted: tuple[int, int, int] | None = None
        self.api: str | None = None  # how checkpointing was turned on, when a library call did it
        # ops an emulated launch delay is charged to, by phase (LaunchDelay's filter), and those it
        # lets through: forward and backward from the census step, the optimizer from the next
        # step (the first optimizer step also creates the optimizer's states)
        self.launch_ops_by_phase: dict[str, int] = {}
        self.passthrough_ops = 0
        self.host_ms: list[float | None] = []  # every step run, in order (StepRecord.host_ms)

    def reset(self, census: bool) -> None:
        self.regions, self.forward_ops, self.recomputed_ops, self.census = 0, 0, 0, census

    def wrap(self, fwd: Any, rec: Any) -> tuple[Any, Any]:
        """The (forward, recompute) contexts of one region, counting during a census."""
        self.regions += 1
        if not self.census:
            return fwd, rec
        return _Deferred(fwd, _CountOps(self, "forward_ops")), _Deferred(rec, _CountOps(self, "recomputed_ops"))

    def context_fn(self, name: str) -> Callable[[], tuple[Any, Any]]:
        """A checkpoint `context_fn` with gcdoctor's profiler labels that also counts."""
        labelled = labelled_context_fn(name)
        return lambda: self.wrap(*labelled())


class _Deferred(contextlib.AbstractContextManager):
    """Enters several context managers at __enter__ time (checkpoint enters the recompute
    context only when the backward needs the region)."""

    def __init__(self, *managers: Any) -> None:
        self.managers = managers
        self.stack: contextlib.ExitStack | None = None

    def __enter__(self):
        self.stack = contextlib.ExitStack()
        for m in self.managers:
            self.stack.enter_context(m)
        return self

    def __exit__(self, *exc):
        stack, self.stack = self.stack, None
        return stack.__exit__(*exc) if stack is not None else False


def wrap_in_checkpoint(module: torch.nn.Module, census: RegionCensus, name: str,
                       reentrant: bool = False) -> Callable[[], None]:
    """Make `module` run its forward inside `checkpoint(...)` in training; returns the function
    that undoes it.

    Non-reentrant (the default): keyword arguments pass through, so attention modules called with
    keywords work unchanged, and the census's context_fn labels and counts. Reentrant checkpoint
    accepts no context_fn, so the wrapper labels and counts itself: reentrant runs the function
    under no_grad in the forward and again with grad enabled in the backward, which tells the
    two apart. Reentrant passes positional arguments only.
    """
    original = module.forward
    if not reentrant:
        context_fn = census.context_fn(name)

        def forward(*args: Any, **kwargs: Any) -> Any:
            if not (module.training and torch.is_grad_enabled()):
                return original(*args, **kwargs)
            return checkpoint(original, *args, use_reentrant=False, context_fn=context_fn, **kwargs)
    else:
        labelled = labelled_context_fn(name)
        pending: list[Any] = []  # recompute labels of regions run forward, in order

        def run(*args: Any) -> Any:
            if not torch.is_grad_enabled():  # the forward, under checkpoint's no_grad
                fwd, rec = census.wrap(*labelled())
                pending.append(rec)
                with fwd:
                    return original(*args)
            rec = pending.pop() if pending else contextlib.nullcontext()  # backward runs regions in reverse
            with rec:
                return original(*args)

        def forward(*args: Any, **kwargs: Any) -> Any:
            if not (module.training and torch.is_grad_enabled()):
                return original(*args, **kwargs)
            if kwargs:
                raise TypeError(f"reentrant checkpoint of {name}: keyword arguments are not supported")
            return checkpoint(run, *args, use_reentrant=True)

    module.forward = forward

    def undo() -> None:
        if module.__dict__.get("forward") is forward:
            del module.forward

    return undo
