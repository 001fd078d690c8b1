"""Host telemetry through psutil: CPU (system, busiest core, iowait), this process, memory.

CPU shares are computed from deltas of the kernel's cumulative CPU times between two reads,
kept here rather than through `psutil.cpu_percent`, whose module-level state is shared with
any other caller and whose first call returns a meaningless 0.0. We prime the deltas when the
source opens (and again when the sampler starts), so the first sample is a real value.

System CPU times come in clock ticks (10 ms with USER_HZ=100): over a 50 ms sample on N cores
one tick is 20/N points of a per-core share, so single samples are coarse and window means are
what to read. This process's CPU time comes from `time.process_time()` (nanosecond clock of the
whole process) when watching ourselves, which has no such granularity.

The source reads the CPU times at `slow_hz` (5 Hz by default: every 4th tick of a 20 Hz
sampler) and the memory figures (RSS, host memory) at about 1 Hz, repeating the last values in
between (a full psutil read costs ~0.14 ms of CPU on the H200 host, half of it the
/proc/meminfo parse). CPU shares over 200 ms windows still show a core saturated during an
optimizer step of hundreds of ms; RSS and host memory change slowly. A read right after
`reset` has no interval to measure CPU shares over: they are missing there (never 0), and every
read tries again until they exist (the sampler's second tick), then only the slow ticks.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

from gcdoctor.telemetry.base import (
    HOST_SERIES, SLOW_NOTE_PREFIX, SlowSchedule, Source, SourceUnavailable, Values,
)

_CPU_SERIES = ("cpu_pct", "cpu_max_core_pct", "cpu_iowait_pct", "proc_cpu_pct")
_NOTHING = (None, None)  # the capture of a tick with nothing due
_MEMORY_SERIES = ("proc_rss_bytes", "host_mem_used_bytes")


def _busy_total(times: Any) -> tuple[float, float, float]:
    """(busy, total, iowait) seconds of one cpu_times() record, as psutil counts them.

    guest and guest_nice are already included in user and nice on Linux, so they are
    subtracted from the total; idle and iowait are not busy (psutil's own convention).
    """
    total = sum(times)
    total -= getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    iowait = getattr(times, "iowait", 0.0)
    busy = total - times.idle - iowait
    return busy, total, iowait


def _share(part: float, whole: float) -> float:
    """100 * part / whole, clamped to 0-100 (float sums of ticks can land a hair outside)."""
    return min(100.0, max(0.0, 100.0 * part / whole))


class HostSource(Source):
    """System and process CPU, RSS and host memory. Cheap: a few /proc reads per sample."""

    name = "psutil"

    def __init__(self, psutil_module: Any = None, pid: int | None = None,
                 clock: Callable[[], float] = time.monotonic, slow_hz: float | None = 5.0) -> None:
        super().__init__()
        self._schedule = SlowSchedule(slow_hz)  # CPU times: slow series; RSS, host memory: memory
        self._held: Values = {}
        if psutil_module is None:
            try:
                import psutil  # noqa: PLC0415 - optional at import time
            except ImportError as exc:
                raise SourceUnavailable("psutil not installed") from exc
            psutil_module = psutil
        self._ps = psutil_module
        self._clock = clock
        self._self = pid is None or pid == os.getpid()
        try:
            self._proc = self._ps.Process(pid if pid is not None else os.getpid())
            per_cpu = self._ps.cpu_times(percpu=True)
        except Exception as exc:  # noqa: BLE001 - any failure here means no host telemetry
            raise SourceUnavailable(f"psutil cannot read CPU times: {exc}") from exc
        self.series = list(HOST_SERIES)
        if not hasattr(per_cpu[0], "iowait"):
            self.series.remove("cpu_iowait_pct")
            self.unavailable["cpu_iowait_pct"] = "this OS reports no iowait time (Linux only)"
        self._cpu_count = len(per_cpu)
        self.reset()

    def set_rate_hz(self, rate_hz: float) -> None:
        """Read the CPU times every round(rate_hz / slow_hz)-th tick and the memory figures about
        once a second, holding the values in between."""
        self._schedule.set_rate_hz(rate_hz)
        self.notes = [n for n in self.notes if not n.startswith(SLOW_NOTE_PREFIX)]
        self.notes += self._schedule.notes([s for s in self.series if s in _CPU_SERIES], list(_MEMORY_SERIES))

    def reset(self) -> None:
        self._schedule.reset()
        self._held = {}
        self._cpu_pending = True  # no CPU share yet: try at every read until one exists
        self._prev_cpu = [_busy_total(t) for t in self._ps.cpu_times(percpu=True)]
        self._prev_proc = self._proc_seconds()
        self._prev_t = self._cap_t = self._clock()

    def _proc_seconds(self) -> float:
        if self._self:
            return time.process_time()
        t = self._proc.cpu_times()
        return t.user + t.system

    # Below this interval the CPU-tick counters cannot give a share (a read right after reset).
    MIN_INTERVAL_S = 0.02

    def capture(self) -> tuple[Any, Any]:
        """The raw psutil reads this tick is due: CPU times on slow ticks (and until a first share
        exists), memory about once a second. (None, None) on the other ticks."""
        slow, memory = self._schedule.next()
        if not (slow or memory or self._cpu_pending):
            return _NOTHING
        cpu = mem = None
        if slow or self._cpu_pending:
            now = self._clock()
            if now - self._cap_t >= self.MIN_INTERVAL_S:
                self._cpu_pending = False
                self._cap_t = now
                cpu = (now, self._ps.cpu_times(percpu=True), self._proc_seconds())
        if memory:
            # rss from memory_info() is one small /proc read (~0.02 ms); memory_full_info() costs ~2 ms.
            mem = (self._proc.memory_info().rss, self._ps.virtual_memory())
        return cpu, mem

    def read(self, captured: Any = None) -> Values:
        """Held values, refreshed by the captures of this source's slow ticks (CPU) and memory ticks."""
        cpu, mem = self.capture() if captured is None else captured
        held = self._held
        if cpu is not None:
            now, per_cpu, proc = cpu
            fresh = self._cpu_shares(now, [_busy_total(t) for t in per_cpu], proc)
            for k in _CPU_SERIES:  # a share this read could not give is missing, not stale
                if k in fresh:
                    held[k] = fresh[k]
                else:
                    held.pop(k, None)
        if mem is not None:
            rss, vm = mem
            held["proc_rss_bytes"] = float(rss)
            held["host_mem_used_bytes"] = float(vm.total - vm.available)
        return dict(held)

    def _cpu_shares(self, now: float, per_cpu: list[tuple[float, float, float]], proc: float) -> Values:
        out: Values = {}
        if len(per_cpu) == len(self._prev_cpu):  # CPU hotplug changes the count: skip one sample
            d_busy = d_total = d_iowait = 0.0
            core_max: float | None = None
            for (b, t, w), (pb, pt, pw) in zip(per_cpu, self._prev_cpu):
                db, dt = b - pb, t - pt
                d_busy, d_total, d_iowait = d_busy + db, d_total + dt, d_iowait + (w - pw)
                if dt > 0:
                    core = _share(db, dt)
                    core_max = core if core_max is None else max(core_max, core)
            if d_total > 0:
                out["cpu_pct"] = _share(d_busy, d_total)
                if "cpu_iowait_pct" in self.series:
                    out["cpu_iowait_pct"] = _share(d_iowait, d_total)
                out["cpu_max_core_pct"] = core_max
        dt_wall = now - self._prev_t
        if dt_wall > 0:
            out["proc_cpu_pct"] = max(0.0, 100.0 * (proc - self._prev_proc) / dt_wall)
        self._prev_cpu, self._prev_proc, self._prev_t = per_cpu, proc, now
        return out

    def static(self) -> dict[str, Any]:
        vm = self._ps.virtual_memory()
        out = {"host.cpu_count": self._cpu_count, "host.mem_total_bytes": vm.total}
        rate = self._schedule.rate_hz
        if rate:
            out["host.slow_series_hz"] = rate / self._schedule.slow
            out["host.memory_series_hz"] = rate / self._schedule.memory
        return out
