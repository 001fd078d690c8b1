"""What every telemetry source offers, and the names of the series they produce.

A source reads its counters when the sampler asks (`read`), describes its devices once
(`static`), and says which series it cannot measure and why (`unavailable`). A source that
cannot open at all is replaced by an `UnavailableSource` carrying the reason, so the facts
always say why a series is missing instead of showing a 0.
"""
from __future__ import annotations

import os
from typing import Any

# Per-device series, prefixed "gpuN." (N = the device as the training process numbers it).
DEVICE_SERIES = (
    "util_pct",  # share of the last sample period in which any kernel ran (not SM occupancy)
    "mem_util_pct",  # share of the period in which device memory was read or written
    "mem_used_bytes",  # used device memory, all processes and contexts included
    "mem_total_bytes",
    "pcie_tx_gbs",  # device -> host, GB/s (1e9 bytes)
    "pcie_rx_gbs",  # host -> device, GB/s
    "power_w",
    "sm_clock_mhz",
    "throttle_reasons",  # clock event reason bitmask, as a float
)

# Host series, no prefix.
HOST_SERIES = (
    "cpu_pct",  # whole system, 0-100
    "cpu_max_core_pct",  # busiest logical core, 0-100
    "cpu_iowait_pct",  # share of all CPU time spent waiting for I/O
    "proc_cpu_pct",  # this process, 100 = one core
    "proc_rss_bytes",
    "host_mem_used_bytes",  # total - available
)

Values = dict[str, "float | None"]


SLOW_NOTE_PREFIX = "slow series"
# Device and host memory use change slowly and cost the most to read (NVML memory info ~0.12 ms,
# psutil's /proc/meminfo parse): they are read at this rate when the slow series are.
MEMORY_HZ = 1.0


def slow_every(rate_hz: float, slow_hz: float | None) -> int:
    """Read the slow series every Nth tick: N = round(rate_hz / slow_hz), at least 1."""
    if slow_hz is None or rate_hz <= slow_hz:
        return 1
    return max(1, round(rate_hz / slow_hz))


def memory_every(rate_hz: float, slow_hz: float | None) -> int:
    """Read the memory series every Nth tick: a multiple of slow_every, about MEMORY_HZ (never
    more often than the slow series; every tick when slow_hz is None)."""
    every = slow_every(rate_hz, slow_hz)
    if slow_hz is None:
        return every
    return every * max(1, round(min(slow_hz, rate_hz) / MEMORY_HZ))


class SlowSchedule:
    """Which of a source's slower reads a tick is due for: the slow series every round(rate /
    slow_hz)-th tick, the memory series about once a second, counted from `reset()`. Shared by the
    NVML and psutil sources so their slow ticks fall on the same samples."""

    def __init__(self, slow_hz: float | None) -> None:
        if slow_hz is not None and slow_hz <= 0:
            raise ValueError("slow_hz must be None (every tick) or positive")
        self.slow_hz = slow_hz
        self.rate_hz: float | None = None
        self.slow = self.memory = 1  # every Nth tick; every tick until the sampler tells its rate
        self._tick = 0

    def set_rate_hz(self, rate_hz: float) -> None:
        self.rate_hz = rate_hz
        self.slow = slow_every(rate_hz, self.slow_hz)
        self.memory = memory_every(rate_hz, self.slow_hz)

    def reset(self) -> None:
        self._tick = 0

    def next(self) -> tuple[bool, bool]:
        """(slow series due, memory series due) for this tick, and count it."""
        i = self._tick
        self._tick = i + 1
        return i % self.slow == 0, i % self.memory == 0

    def notes(self, slow_series: list[str], memory_series: list[str]) -> list[str]:
        """The facts notes naming the series read less often than every sample."""
        out = []
        for series, every in ((slow_series, self.slow), (memory_series, self.memory)):
            if every > 1 and series and self.rate_hz:
                out.append(slow_note(series, self.rate_hz, every))
        return out


def slow_note(series: list[str], rate_hz: float, every: int) -> str:
    """The facts note saying which series have the coarser resolution."""
    return (f"{SLOW_NOTE_PREFIX} read at {rate_hz / every:g} Hz (one sample in {every} at {rate_hz:g} Hz), "
            f"the last value repeated in between: {', '.join(series)}")


class SourceUnavailable(Exception):
    """A source cannot open; the message is the reason shown to the user (one line)."""


class Source:
    """Base of every telemetry source.

    Subclasses set `name` and `series` (the series they measure), fill `unavailable`
    (series -> reason) and implement `read`. `read` must be quick (well under the sampling
    period): slow counters belong in a poller thread owned by the source, whose latest value
    `read` returns.
    """

    name: str = ""

    def __init__(self) -> None:
        self.series: list[str] = []
        self.unavailable: dict[str, str] = {}
        self.notes: list[str] = []

    def capture(self) -> Any:
        """What this tick must take from the device or OS, now, with as little work as possible.

        The sampler calls it at every tick and hands the result to `read(captured)` later, in a
        batch (decoding at the tick, with the caches cold from sleeping, cost several
        times more). Everything that depends on *when* it is read belongs here, so read(captured)
        is a function of the captures, in order. The default reads every value now (a dict);
        sources with raw counters (NVML, psutil) override it with a cheaper raw capture.
        """
        return self.read()

    def read(self, captured: Any = None) -> Values:
        """The values of one tick from what capture() took then (None: capture now)."""
        raise NotImplementedError

    def set_rate_hz(self, rate_hz: float) -> None:
        """The sampler's rate, told before it starts: a source whose counters need reading more
        often than that (wrapping PCIe byte counters) starts its own poller thread here."""

    def reset(self) -> None:
        """Restart rate baselines (the sampler calls this when it starts), so the first sample
        covers one sampling period and not the time since the source opened."""

    def static(self) -> dict[str, Any]:
        return {}

    def cpu_seconds(self) -> float:
        """CPU time used so far by the source's own poller threads (0 if it has none)."""
        return 0.0

    def processes(self) -> list[dict[str, Any]]:
        """Processes using the devices: dicts with device, pid, used_memory_bytes, name."""
        raise NotImplementedError(f"{self.name} cannot list processes")

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} series={len(self.series)}>"


class UnavailableSource(Source):
    """Stands in for a source that could not open: measures nothing, says why."""

    def __init__(self, name: str, reason: str, series: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__()
        self.name = name
        self.reason = reason
        self.unavailable = {s: reason for s in series}

    def read(self, captured: Any = None) -> Values:
        return {}

    def processes(self) -> list[dict[str, Any]]:
        return []


def device_series(key: str) -> list[str]:
    """All device series names for one device key, e.g. device_series('gpu0')."""
    return [f"{key}.{s}" for s in DEVICE_SERIES]


def visible_device_map(env_var: str, device_index: int | None, count: int) -> list[tuple[str, Any]]:
    """Map the training process's device numbering to the management library's.

    Returns (key, selector) pairs: key is "gpuN" as the process numbers the device; selector
    is the library's int index or a UUID string ("GPU-..."/"MIG-..."). `*_VISIBLE_DEVICES`
    renumbers devices for the process but not for NVML/MTML, which always see all of them.
    Caveat: CUDA orders devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML by
    PCI bus; on a host with mixed GPU models the two orders can differ.
    """
    raw = os.environ.get(env_var)
    if raw is None or raw.strip() == "":
        selectors: list[Any] = list(range(count)) if raw is None else []
    else:
        selectors = []
        for item in raw.split(","):
            item = item.strip()
            if not item:
                continue
            if item.lstrip("-").isdigit():
                if int(item) < 0:
                    break  # CUDA ignores everything from the first invalid index on
                selectors.append(int(item))
            else:
                selectors.append(item)
    pairs = [(f"gpu{i}", sel) for i, sel in enumerate(selectors)]
    if device_index is None:
        return pairs
    if device_index < 0 or device_index >= len(pairs):
        return []
    return [pairs[device_index]]
