"""Device launch cost, measured: what one tiny kernel launch, one graph-replayed op and one
checkpoint region cost on this device. The launch-overhead rule (GC010) uses these numbers
instead of a constant, because launch cost differs several-fold between devices and drivers.
Standalone: `python bench/launch_cost.py OUT_DIR --device cuda`.

Also the emulated launch cost (`diagnose --emulate-launch-us N`): LaunchDelay, a dispatch mode
that adds N microseconds of host time to every op that launches device work, calibrated here so
that the same microbenchmark reads the device's launch cost + N back.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from torch.utils._python_dispatch import TorchDispatchMode

from gcdoctor.facts.granularity import LaunchCost, LaunchEmulation, RegionTiming
from gcdoctor.probes._regions import RegionCensus

# Launches per timed loop: enough that the two synchronisations at its ends (tens of us) are
# under 1% of the loop, few enough that the whole benchmark stays well under a second on a GPU.
GPU_LAUNCHES, CPU_LAUNCHES = 2000, 2000
GPU_REPEATS, CPU_REPEATS = 5, 3
GRAPH_OPS, GRAPH_REPLAYS = 1000, 10
GPU_REGION_REPS, CPU_REGION_REPS = 200, 100  # at most; fewer where a region is slow (below)
REGION_TIMING_S = 0.02  # about this long per timing: 4 regions x repeats x 2 stay under a second


def measure_launch_cost(backend: Any, launches: int | None = None, repeats: int | None = None,
                        region_reps: int | None = None) -> tuple[LaunchCost, dict[str, str]]:
    """Run the three microbenchmarks; returns the facts and {field: why not measured}."""
    cpu = backend.kind == "cpu"
    n = launches or (CPU_LAUNCHES if cpu else GPU_LAUNCHES)
    r = repeats or (CPU_REPEATS if cpu else GPU_REPEATS)
    reps = region_reps or (CPU_REGION_REPS if cpu else GPU_REGION_REPS)
    t_start = time.perf_counter()
    lc = LaunchCost(device_kind=backend.kind, launches=n, repeats=r, region_reps=reps)
    unavailable: dict[str, str] = {}
    x = torch.zeros(1, device=backend.device)
    _launch_loop(backend, x, 50)  # warm up: first launches load the kernel and allocator pools
    walls, enqueues = [], []
    for _ in range(r):
        wall, enqueue = _launch_loop(backend, x, n)
        walls.append(1e6 * wall / n)
        enqueues.append(1e6 * enqueue / n)
    lc.launch_us_all = [round(w, 4) for w in walls]
    lc.launch_us = statistics.median(walls)
    lc.enqueue_us = statistics.median(enqueues)
    if cpu:
        lc.notes.append("on the CPU a 'launch' is one eager op dispatch (no kernel launch); inside gcdoctor "
                        "diagnose it includes the CPU backend's allocation counting, which the measured steps "
                        "pay too")
    _measure_graph(backend, x, lc, unavailable)
    _measure_region(backend, lc, reps, r)
    lc.seconds = time.perf_counter() - t_start
    return lc, unavailable


def _launch_loop(backend: Any, x: torch.Tensor, n: int) -> tuple[float, float]:
    """(synchronised wall seconds, host seconds before the final synchronise) of n tiny launches."""
    backend.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    t1 = time.perf_counter()
    backend.synchronize()
    t2 = time.perf_counter()
    return t2 - t0, t1 - t0


def graph_api(kind: str) -> tuple[Any, Any, str] | None:
    """(graph class, capture context, name) of the backend's device-graph API, or None."""
    if kind == "cpu":
        return None
    mod = getattr(torch, kind, None)
    cls_name = "CUDAGraph" if kind == "cuda" else f"{kind.upper()}Graph"
    cls, ctx = getattr(mod, cls_name, None), getattr(mod, "graph", None)
    if cls is None or ctx is None:
        return None
    return cls, ctx, f"torch.{kind}.{cls_name}"


def _measure_graph(backend: Any, x: torch.Tensor, lc: LaunchCost, unavailable: dict[str, str]) -> None:
    api = graph_api(backend.kind)
    if api is None:
        why = ("the CPU has no device graphs: each op is dispatched by the host" if backend.kind == "cpu"
               else f"torch.{backend.kind} has no graph capture API in this build")
        unavailable["granularity.launch.graph_replay_us_per_op"] = why
        return
    cls, capture, name = api
    lc.graph_api = name
    mod = getattr(torch, backend.kind)
    try:
        with mod.device(backend.device):  # streams and capture on the backend's device, not device 0
            _capture_and_replay(backend, mod, cls, capture, x, lc)
    except Exception as exc:  # noqa: BLE001 - a backend without working capture is a finding, not a crash
        unavailable["granularity.launch.graph_replay_us_per_op"] = (
            f"{name} capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")


def _capture_and_replay(backend: Any, mod: Any, cls: Any, capture: Any, x: torch.Tensor, lc: LaunchCost) -> None:
    """Capture GRAPH_OPS tiny adds in one device graph and time GRAPH_REPLAYS replays (x3)."""
    side = mod.Stream()  # warm up on a side stream before capture (CUDA graph docs)
    side.wait_stream(mod.current_stream())
    with mod.stream(side):
        for _ in range(3):
            x.add_(1)
    mod.current_stream().wait_stream(side)
    graph = cls()
    # thread_local: another thread's CUDA call (none expected) must not invalidate the capture
    kwargs = {"capture_error_mode": "thread_local"} if backend.kind == "cuda" else {}
    with capture(graph, **kwargs):
        for _ in range(GRAPH_OPS):
            x.add_(1)
    graph.replay()
    backend.synchronize()
    times = []
    for _ in range(3):
        backend.synchronize()
        t0 = time.perf_counter()
        for _ in range(GRAPH_REPLAYS):
            graph.replay()
        backend.synchronize()
        times.append(time.perf_counter() - t0)
    lc.graph_ops, lc.graph_replays = GRAPH_OPS, GRAPH_REPLAYS
    lc.graph_replay_us_per_op = 1e6 * statistics.median(times) / (GRAPH_REPLAYS * GRAPH_OPS)
    del graph




REGION_BLOCKS = (1, 4, 16)  # chains of Linear -> GELU -> Linear blocks, besides a single Linear


def _tiny_regions(dev: Any) -> list[tuple[str, Any, tuple[torch.Tensor, ...], int]]:
    """(name, fn, args, blocks) of tiny regions: a single Linear (its saved tensors are its
    inputs, so checkpoint recomputes nothing), then chains of 1, 4 and 16 synthetic blocks (early
    stop recomputes all but the last Linear), so the fitted per-op cost spans regions from one op
    to the size of a decoder layer."""
    x = torch.randn(4, 4, device=dev, requires_grad=True)
    ws = [torch.randn(4, 4, device=dev, requires_grad=True) for _ in range(2 * max(REGION_BLOCKS))]

    def chain(t: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        for a, b in zip(weights[::2], weights[1::2]):
            t = F.linear(F.gelu(F.linear(t, a)), b)
        return t

    out: list[tuple[str, Any, tuple[torch.Tensor, ...], int]] = [("linear", lambda t, a: F.linear(t, a), (x, ws[0]), 0)]
    out += [(f"{n} block{'s' if n > 1 else ''}", chain, (x, *ws[:2 * n]), n) for n in REGION_BLOCKS]
    return out


def _measure_region(backend: Any, lc: LaunchCost, reps: int, repeats: int) -> None:
    """Host cost of checkpoint regions: forward + backward of each tiny region with and without a
    non-reentrant checkpoint around it, interleaved so drift hits both alike. The difference,
    minus the launches of the ops the recompute runs, is the region's Python and autograd
    bookkeeping; a least-squares line over the regions gives its fixed and per-op parts."""
    fit: list[tuple[int, float]] = []  # (forward ops, extra us) of each region
    for name, fn, args, _blocks in _tiny_regions(backend.device):
        census = RegionCensus()
        census.reset(True)
        checkpoint(fn, *args, use_reentrant=False, context_fn=census.context_fn("launch-cost")).sum().backward()

        def plain() -> None:
            fn(*args).sum().backward()

        def region() -> None:
            checkpoint(fn, *args, use_reentrant=False).sum().backward()

        for f in (plain, region):  # warm up both paths
            for _ in range(3):
                f()
        # repetitions: at most `reps`, fewer where one call is slow, so that every timing takes
        # about REGION_TIMING_S whatever the region's size and the machine's load
        one = _timed(backend, region, 1) / 1e6
        n = max(3, min(reps, int(REGION_TIMING_S / max(one, 1e-9))))
        point = RegionTiming(name=name, forward_ops=census.forward_ops, recomputed_ops=census.recomputed_ops, reps=n)
        plains, regions = [], []
        for _ in range(repeats):
            plains.append(_timed(backend, plain, n))
            regions.append(_timed(backend, region, n))
        point.plain_us = statistics.median(plains)
        point.checkpoint_us = statistics.median(regions)
        point.extra_us = extra = max(point.checkpoint_us - point.plain_us - point.recomputed_ops * (lc.launch_us or 0.0),
                                     0.0)
        lc.region_points.append(point)
        fit.append((point.forward_ops, extra))
        for a in args:
            a.grad = None
    lin = lc.region_points[0]
    lc.region_plain_us, lc.region_checkpoint_us = lin.plain_us, lin.checkpoint_us
    lc.region_recomputed_ops, lc.region_host_us = lin.recomputed_ops, lin.extra_us
    lc.region_fixed_us, lc.region_per_op_us = _fit(fit)


def _timed(backend: Any, f: Any, n: int) -> float:
    """Microseconds per call of f over n synchronised calls."""
    backend.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    backend.synchronize()
    return 1e6 * (time.perf_counter() - t0) / n


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares line (intercept, slope) through (ops, us), both clamped at zero."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = max(sum((x - mx) * (y - my) for x, y in points) / sxx, 0.0) if sxx else 0.0
    return max(my - slope * mx, 0.0), slope


# -- an emulated launch cost -----------------------------------------------------------------

# aten ops (overload packet names) that allocate or alias without launching device work
NO_LAUNCH_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh", "detach", "alias",
    "set_", "resize_", "resize_as_", "record_stream", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type",
})
CALIBRATION_REPEATS = 3


def _never_launches(func: Any) -> bool:
    if getattr(func, "is_view", False):
        return True
    packet = getattr(func, "_overloadpacket", None)
    return getattr(packet, "__name__", str(func)) in NO_LAUNCH_OPS


def _on_device(args: tuple, kwargs: dict | None, kind: str) -> bool:
    """Does the op work on a tensor of the device kind (its first tensor argument, or its device=)?"""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type == kind
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            return a[0].device.type == kind
    dev = kwargs.get("device") if kwargs else None
    return dev is not None and torch.device(dev).type == kind


class LaunchDelay(TorchDispatchMode):
    """Adds `spin_us` of busy host time before every dispatched op that launches device work.

    Why per dispatched op, not per kernel: a TorchDispatchMode is the one hook into every op that
    works the same on CUDA, MUSA (PrivateUse1) and the CPU, and it also runs in the backward (the
    autograd engine carries the mode to its device threads) and inside checkpoint recomputation.
    An op is what the host dispatches, and almost every op that passes the filter launches one
    kernel; the exceptions are counted, not guessed: the census counts the delayed ops of every
    variant by phase, and the trace counts the launches (a multi-tensor optimizer op launches tens
    of kernels for one delay, a view launches none and is let through). The mode's own cost per op
    is part of the emulated cost: `spin_us` is the target minus that cost (calibrate_emulation).

    Counts `delayed` and `passed` ops; with `phase_of` set, also both by phase.
    """

    def __init__(self, kind: str, spin_us: float = 0.0) -> None:
        super().__init__()
        self.kind = kind
        self.spin_ns = max(int(round(spin_us * 1e3)), 0)
        self.delayed = 0
        self.passed = 0
        self.phase_of: Any = None  # a callable returning the phase name, during a census
        self.by_phase: dict[str, int] = {}
        self.passed_by_phase: dict[str, int] = {}
        self._skip: dict[Any, bool] = {}

    def reset_counts(self) -> None:
        self.delayed, self.passed, self.by_phase, self.passed_by_phase = 0, 0, {}, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        skip = self._skip.get(func)
        if skip is None:
            skip = self._skip[func] = _never_launches(func)
        if skip or not _on_device(args, kwargs, self.kind):
            self.passed += 1
            if self.phase_of is not None:
                phase = self.phase_of()
                self.passed_by_phase[phase] = self.passed_by_phase.get(phase, 0) + 1
        else:
            self.delayed += 1
            if self.phase_of is not None:
                phase = self.phase_of()
                self.by_phase[phase] = self.by_phase.get(phase, 0) + 1
            if self.spin_ns:
                end = time.perf_counter_ns() + self.spin_ns
                while time.perf_counter_ns() < end:
                    pass
        return func(*args, **(kwargs or {}))


def _per_call_us(backend: Any, f: Any, n: int, repeats: int) -> float:
    backend.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        backend.synchronize()
        times.append(1e6 * (time.perf_counter() - t0) / n)
    return statistics.median(times)


def calibrate_emulation(backend: Any, target_us: float, native: LaunchCost,
                        launches: int | None = None) -> tuple[LaunchEmulation, LaunchDelay]:
    """The mode's own cost per delayed op and per op let through (timed with no spin against the
    native loops), and the spin that makes one delayed launch cost native + target."""
    n = launches or (CPU_LAUNCHES if backend.kind == "cpu" else GPU_LAUNCHES)
    x = torch.zeros(1, device=backend.device)
    emu = LaunchEmulation(target_us=target_us, native=native)
    probe = LaunchDelay(backend.kind)
    with probe:
        _launch_loop(backend, x, 50)
        mode_launch = statistics.median(1e6 * _launch_loop(backend, x, n)[0] / n for _ in range(CALIBRATION_REPEATS))
        mode_view = _per_call_us(backend, lambda: x.view(-1), n, CALIBRATION_REPEATS)
    plain_view = _per_call_us(backend, lambda: x.view(-1), n, CALIBRATION_REPEATS)
    emu.mode_cost_us = max(mode_launch - (native.launch_us or 0.0), 0.0)
    emu.passthrough_cost_us = max(mode_view - plain_view, 0.0)
    emu.spin_us = max(target_us - emu.mode_cost_us, 0.0)
    if target_us < emu.mode_cost_us:
        emu.notes.append(f"{target_us:g} us is less than the emulation's own cost per op "
                         f"({emu.mode_cost_us:.2f} us): each delayed op costs that much instead")
    return emu, LaunchDelay(backend.kind, emu.spin_us)
