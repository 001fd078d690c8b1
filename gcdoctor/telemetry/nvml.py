"""NVIDIA devices through NVML (package nvidia-ml-py, module `pynvml`).

Never the deprecated `pynvml` PyPI package: nvidia-ml-py is NVIDIA's own binding. The costs
and meanings of the counters (docs/references.md section 6, NVML API reference):

- Utilisation (`nvmlDeviceGetUtilizationRates`): share of the last sample period (1/6 s to
  1 s) in which any kernel ran; reads 100% during a pure host-to-device copy. Not SM occupancy.
- Memory (`nvmlDeviceGetMemoryInfo`): "used" includes every process's CUDA context and
  other processes' memory, not only this process's allocator.
- PCIe throughput: the byte-count fields `NVML_FI_DEV_PCIE_COUNT_TX_BYTES`/`RX_BYTES`
  (197/198, driver R555+) are cheap but 32-bit: at Gen5 x16 speed they wrap every 68 ms. When
  the sampler's period is short enough to unwrap them with headroom (20 Hz at Gen5 x16), they are
  read in the sampler's own tick, in the same `nvmlDeviceGetFieldValues` call as the instant
  power field: one call per device per tick, no extra thread. A slower sampler (or an explicit
  `pcie_poll_hz`) gets a dedicated poller thread (50 Hz by default). Without them,
  `nvmlDeviceGetPcieThroughput` blocks ~20 ms per call and direction and reports KB/s
  (1000-byte units) over a 20 ms window; it runs in its own thread so it never stalls the
  sampler. TX = device to host, RX = host to device; both include protocol overhead.
- Power: the instant field `NVML_FI_DEV_POWER_INSTANT` (186) where supported, else
  `nvmlDeviceGetPowerUsage`, which is a 1 s average on recent GPUs (Ampere and newer).
- Throttle: `nvmlDeviceGetCurrentClocksEventReasons` (older drivers/bindings: ...ThrottleReasons).

Slow series: utilisation, SM clock, throttle reasons and the averaged power usage are
read every Nth tick only (`slow_hz`, 5 Hz by default: every 4th tick at 20 Hz), memory used about
once a second, and held in between. NVML's utilisation is itself a share of a 1/6 s to 1 s period
(docs/references.md section 6), so reading it at 20 Hz only repeated values; memory and clocks change
slowly. The PCIe byte counters and the instant power stay in every tick (the counters must be
unwrapped): `capture()` makes that one field-values call and copies its bytes (plus the slow
calls on their ticks); decoding, unwrapping the counters and computing rates happen in
`read(captured)`, which the sampler runs later, in a batch.

NVML is thread-safe (NVML API reference, "Initialization and Cleanup"), so the sampler and
the PCIe poller may call it at the same time.

Cost (measured on an H200, driver 580.159): with a 50 Hz poller thread beside the 20 Hz
sampler the telemetry cost 5.8% of one core, 4.4 of it in the poller: every wake-up of a
Python thread costs far more CPU than the NVML call it makes. Hence one thread, one field-values
call per device per tick, and a field-value array built once (`FieldReader`).
"""
from __future__ import annotations

import ctypes
import functools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from gcdoctor.telemetry.base import (
    DEVICE_SERIES, SLOW_NOTE_PREFIX, SlowSchedule, Source, SourceUnavailable, Values, visible_device_map,
)
from gcdoctor.telemetry.pcie import FASTEST_KNOWN_LINK_GBS, link_peak_gbs

FI_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT, milliwatts
FI_PCIE_TX_BYTES = 197  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES, device -> host, wraps at 2**32
FI_PCIE_RX_BYTES = 198  # NVML_FI_DEV_PCIE_COUNT_RX_BYTES, host -> device, wraps at 2**32
PCIE_UTIL_TX = 0  # NVML_PCIE_UTIL_TX_BYTES
PCIE_UTIL_RX = 1  # NVML_PCIE_UTIL_RX_BYTES
CLOCK_SM = 1  # NVML_CLOCK_SM
COUNTER_WRAP = 2 ** 32
# Read the byte counters in the sampler's tick only if one period moves at most this share of
# 2**32 bytes at the link's peak: a tick may then come up to 1/3 of a period late (GIL hand-off,
# scheduler) before its interval becomes too long to unwrap. Gen5 x16 (63.0 GB/s): periods up
# to 51 ms, i.e. sampling at 19.6 Hz or faster.
TICK_WRAP_HEADROOM = 0.75
DEFAULT_POLL_HZ = 50.0  # the poller's rate when one is needed: 20 ms, a third of Gen5 x16's wrap

_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_value(fv: Any) -> float | int | None:
    """The number in one nvmlFieldValue_t, or None if NVML returned an error for it."""
    if getattr(fv, "nvmlReturn", 0) != 0:
        return None
    member = _VALUE_MEMBERS.get(getattr(fv, "valueType", 3), "ullVal")
    return getattr(fv.value, member)


def _err(nvml: Any, exc: BaseException) -> str:
    """'Not Supported' etc. for NVML errors; the exception's class and text otherwise."""
    if isinstance(exc, getattr(nvml, "NVMLError", ())):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class FieldReader:
    """One `nvmlDeviceGetFieldValues` call for a fixed list of field ids of one device.

    With nvidia-ml-py the c_nvmlFieldValue_t array is built once and passed to the C function
    on every read (the binding's wrapper builds a new array type instance and sets every id,
    through a try/except per id, on each call). With any other module (a test stand-in, an
    older binding) it calls `module.nvmlDeviceGetFieldValues(handle, ids)`. The returned array
    is reused: read its values before the next `read()`, in the same thread.

    `capture()` is the sampler's tick: the call plus a copy of the array's bytes, nothing else;
    `decode(raw)` turns that copy back into field values later, off the tick.
    """

    def __init__(self, nvml: Any, handle: Any, ids: list[int]) -> None:
        self.ids = list(ids)
        self._nvml = nvml
        self._handle = handle
        self._fn: Any = None
        struct = getattr(nvml, "c_nvmlFieldValue_t", None)
        get_fn = getattr(nvml, "_nvmlGetFunctionPointer", None)
        if struct is None or get_fn is None or not self.ids:
            return
        try:
            self._type = struct * len(self.ids)
            self._arr = self._type()
            for i, field_id in enumerate(self.ids):
                self._arr[i].fieldId = field_id
            self._n = ctypes.c_int32(len(self.ids))
            self._fn = get_fn("nvmlDeviceGetFieldValues")
        except Exception:  # noqa: BLE001 - fall back to the binding's own wrapper
            self._fn = None

    @property
    def prebuilt(self) -> bool:
        return self._fn is not None

    def read(self) -> Any:
        if self._fn is None:
            return self._nvml.nvmlDeviceGetFieldValues(self._handle, self.ids)
        ret = self._fn(self._handle, self._n, self._arr)  # ctypes passes an array by reference
        if ret != 0:
            raise self._nvml.NVMLError(ret)
        return self._arr

    def capture(self) -> Any:
        """read(), keeping only a copy of the result (bytes of the array, or the binding's list)."""
        if self._fn is None:
            return self._nvml.nvmlDeviceGetFieldValues(self._handle, self.ids)
        arr = self._arr
        ret = self._fn(self._handle, self._n, arr)
        if ret != 0:
            raise self._nvml.NVMLError(ret)
        return bytes(arr)  # a copy of the array's memory

    def decode(self, raw: Any) -> Any:
        """The field values of a capture()."""
        if isinstance(raw, bytes):
            return self._type.from_buffer_copy(raw)
        return raw


@dataclass
class _Counter:
    """One unwrapped 32-bit byte counter."""

    raw: int | None = None
    total: int = 0  # bytes since the first poll
    t: float | None = None  # seconds, in the counter's timebase (NVML timestamp or monotonic)
    ambiguous: int = 0  # intervals too long to unwrap safely at the link's peak rate
    updates: int = 0  # polls that brought a new value


class PcieCounterPoller:
    """Polls the 32-bit PCIe byte counters fast enough to unwrap them, in its own thread.

    A delta between two polls is taken modulo 2**32. It is only trustworthy if the link could
    not have moved 2**32 bytes in the interval (peak GB/s x interval < 4 GiB): a longer interval
    (a stalled poller) is counted as ambiguous and the rates that span it become unavailable.
    Timestamps come from NVML's field timestamp (microseconds) when present, so a counter the
    driver refreshes less often than we poll still gives correct averages.
    """

    def __init__(self, nvml: Any, devices: dict[str, tuple[Any, float | None]], hz: float = 50.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._nvml = nvml
        self._devices = devices  # key -> (handle, link peak GB/s or None)
        self._period = 1.0 / hz
        self._clock = clock
        self._lock = threading.Lock()
        self._state = {k: {"tx": _Counter(), "rx": _Counter()} for k in devices}
        self._peak = {k: (peak or FASTEST_KNOWN_LINK_GBS) * 1e9 for k, (_, peak) in devices.items()}
        self._readers: dict[str, FieldReader] | None = None  # built on the first poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.polls = 0  # polls by this thread, or sampler ticks that read the counters
        self.errors = 0
        self.last_error: str | None = None
        self.cpu_s = 0.0  # this poller thread's CPU time

    def poll_once(self) -> None:
        if self._readers is None:
            self._readers = {k: FieldReader(self._nvml, h, [FI_PCIE_TX_BYTES, FI_PCIE_RX_BYTES])
                             for k, (h, _) in self._devices.items()}
        for key, reader in self._readers.items():
            try:
                values = reader.read()
            except Exception as exc:  # noqa: BLE001 - one failed poll must not end the thread
                self.errors += 1
                self.last_error = _err(self._nvml, exc)
                continue
            self.ingest(key, values)
        self.polls += 1

    def ingest(self, key: str, values: Any, now: float | None = None) -> None:
        """Take one device's [TX, RX] field values (a poll, a sampler tick, or the probe at open).

        now: when they were read (monotonic), used where NVML gives no timestamp; default: now."""
        if now is None:
            now = self._clock()
        peak = self._peak[key]
        with self._lock:
            for direction, fv in zip(("tx", "rx"), values):
                raw = field_value(fv)
                if raw is None:
                    continue
                ts = getattr(fv, "timestamp", 0)
                t = ts * 1e-6 if ts and ts > 0 else now
                self._advance(self._state[key][direction], int(raw), t, peak)

    @staticmethod
    def _advance(c: _Counter, raw: int, t: float, peak_bytes_per_s: float) -> None:
        if c.raw is None or c.t is None:  # set together: the first poll, or after a rebase
            c.raw, c.t = raw, t
            return
        if t <= c.t:  # the driver has not refreshed the counter since the last poll
            return
        if peak_bytes_per_s * (t - c.t) >= COUNTER_WRAP:
            c.ambiguous += 1  # could have wrapped more than once: the delta is unknowable
        else:
            c.total += (raw - c.raw) % COUNTER_WRAP
        c.raw, c.t = raw, t
        c.updates += 1

    def rebase(self, key: str, values: Any) -> None:
        """Restart one device's deltas from these [TX, RX] values (totals kept, no interval counted)."""
        with self._lock:
            for c in self._state[key].values():
                c.raw = None
        self.ingest(key, values)

    def snapshot(self, key: str) -> dict[str, tuple[int, float | None, int, int]]:
        """direction -> (total bytes, time, ambiguous intervals, updates) of one device."""
        with self._lock:
            return {d: (c.total, c.t, c.ambiguous, c.updates) for d, c in self._state[key].items()}

    def _run(self) -> None:
        next_t = self._clock()
        while not self._stop.is_set():
            self.poll_once()
            self.cpu_s = time.thread_time()
            next_t += self._period
            delay = next_t - self._clock()
            if delay < 0:  # fell behind: do not try to catch up with a burst of polls
                next_t, delay = self._clock(), 0.0
            self._stop.wait(delay)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gcdoctor-pcie-counters", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)


class PcieThroughputPoller:
    """Fallback for drivers without the byte-count fields: `nvmlDeviceGetPcieThroughput`.

    Each call blocks ~20 ms and measures one 20 ms window of one direction, so one thread
    alternating TX and RX covers about half the time of each direction. Readings are averaged
    between two reads of the sampler. Values are KB/s with KB = 1000 bytes.
    """

    def __init__(self, nvml: Any, devices: dict[str, Any], clock: Callable[[], float] = time.monotonic) -> None:
        self._nvml = nvml
        self._devices = devices  # key -> handle
        self._clock = clock
        self._lock = threading.Lock()
        self._acc = {k: {"tx": [0.0, 0], "rx": [0.0, 0]} for k in devices}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0
        self.last_error: str | None = None
        self.cpu_s = 0.0  # this poller thread's CPU time

    def poll_once(self) -> None:
        for key, handle in self._devices.items():
            for direction, counter in (("tx", PCIE_UTIL_TX), ("rx", PCIE_UTIL_RX)):
                try:
                    kbs = self._nvml.nvmlDeviceGetPcieThroughput(handle, counter)
                except Exception as exc:  # noqa: BLE001
                    self.errors += 1
                    self.last_error = _err(self._nvml, exc)
                    continue
                with self._lock:
                    acc = self._acc[key][direction]
                    acc[0] += kbs * 1000 / 1e9  # KB/s (1000 bytes) -> GB/s
                    acc[1] += 1

    def take(self, key: str) -> dict[str, float | None]:
        """Mean GB/s per direction since the last take; None where no window completed."""
        with self._lock:
            out = {}
            for direction, acc in self._acc[key].items():
                out[direction] = acc[0] / acc[1] if acc[1] else None
                acc[0], acc[1] = 0.0, 0
            return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()  # blocks ~20 ms per call: no sleep needed
            self.cpu_s = time.thread_time()
            if self.errors and not any(a[1] for d in self._acc.values() for a in d.values()):
                self._stop.wait(0.05)  # every call failing: do not spin

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gcdoctor-pcie-throughput", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)


Reader = Callable[[Any], tuple]  # handle -> values, in the order of its series keys


def _none() -> None:
    return None


@dataclass
class _Device:
    key: str
    handle: Any
    index: int | None
    static: dict[str, Any]
    readers: list[tuple[Reader, tuple[str, ...], bool]]  # (reader, full series names, memory?) per call
    power_field: bool = False  # power from field 186, read in the tick's field-values call
    tick: FieldReader | None = None  # the one field-values call of each tick (power, PCIe)
    tick_pcie: bool = False  # the tick's call also reads the PCIe byte counters 197/198


class NvmlSource(Source):
    """GPU, memory, PCIe, power, clock and throttle series of NVIDIA devices.

    device_index: the device as the training process numbers it (after CUDA_VISIBLE_DEVICES),
    or None for every visible device (`gcdoctor monitor`). `nvml` may be a stand-in module for
    tests; `start_pollers=False` leaves the PCIe poller to be driven by hand (`poll_pcie`).
    pcie_mode: "auto" (byte counters, else the throughput call), "counters" or "throughput"
    (to compare the two on one machine).
    pcie_poll_hz: None (default) reads the byte counters in each read() - the sampler's tick -
    unless the sampler announces a rate too slow to unwrap them (`set_rate_hz`), in which case a
    poller thread runs at 50 Hz; a number > 0 always uses a poller thread at that rate; 0 never
    does (intervals too long to unwrap then read as missing).
    slow_hz: rate of the slow series (utilisation, memory, SM clock, throttle reasons, averaged
    power): read every round(rate/slow_hz)-th tick once the sampler tells its rate, the last
    value held in between (None: read them at every tick). Until `set_rate_hz`, every read reads
    everything.
    """

    name = "nvml"

    def __init__(self, device_index: int | None = 0, nvml: Any = None, pcie_poll_hz: float | None = None,
                 start_pollers: bool = True, clock: Callable[[], float] = time.monotonic,
                 visible_env: str = "CUDA_VISIBLE_DEVICES", pcie_mode: str = "auto",
                 slow_hz: float | None = 5.0) -> None:
        super().__init__()
        self._schedule = SlowSchedule(slow_hz)  # utilisation, clock, reasons: slow; memory used: memory
        self._held: Values = {}  # the slow series' last values, repeated between slow reads
        if pcie_mode not in ("auto", "counters", "throughput"):
            raise ValueError(f"pcie_mode {pcie_mode!r}: use auto, counters or throughput")
        self._pcie_mode = pcie_mode
        if pcie_poll_hz is not None and pcie_poll_hz < 0:
            raise ValueError("pcie_poll_hz must be None (auto), 0 (never a thread) or positive")
        self._poll_hz = pcie_poll_hz
        self._start_pollers = start_pollers
        if nvml is None:
            try:
                import pynvml  # noqa: PLC0415 - optional dependency (nvidia-ml-py)
            except ImportError as exc:
                raise SourceUnavailable("nvidia-ml-py not installed (pip install nvidia-ml-py)") from exc
            nvml = pynvml
        self._nvml = nvml
        self._clock = clock
        try:
            nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError or OSError, both mean "no NVML"
            raise SourceUnavailable(f"NVML: {_err(nvml, exc)}") from exc
        try:
            self._open(device_index, visible_env, pcie_poll_hz, start_pollers)
        except BaseException:
            self._shutdown()
            raise

    # -- opening -----------------------------------------------------------------------------
    def _open(self, device_index: int | None, visible_env: str, pcie_poll_hz: float | None,
              start_pollers: bool) -> None:
        nvml = self._nvml
        count = nvml.nvmlDeviceGetCount()
        pairs = visible_device_map(visible_env, device_index, count)
        if not pairs:
            raise SourceUnavailable(f"NVML: no device {device_index} among the {count} visible")
        self._driver: str | None
        try:
            self._driver = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001
            self._driver = None
        self.devices: list[_Device] = []
        for key, selector in pairs:
            try:
                if isinstance(selector, int):
                    if selector >= count:
                        raise SourceUnavailable(f"index {selector} but NVML sees {count} devices")
                    handle = nvml.nvmlDeviceGetHandleByIndex(selector)
                else:
                    handle = nvml.nvmlDeviceGetHandleByUUID(selector)
            except Exception as exc:  # noqa: BLE001
                for s in DEVICE_SERIES:
                    self.unavailable[f"{key}.{s}"] = f"NVML: cannot open {key} ({selector}): {_err(nvml, exc)}"
                continue
            self.devices.append(self._open_device(key, handle, selector if isinstance(selector, int) else None))
        if not self.devices:
            raise SourceUnavailable(next(iter(self.unavailable.values()), "NVML: no device"))
        self._prev_pcie: dict[str, dict[str, tuple]] = {}
        self._open_pcie(pcie_poll_hz, start_pollers)
        self._build_ticks()
        self.series = [f"{d.key}.{s}" for d in self.devices for s in DEVICE_SERIES
                       if f"{d.key}.{s}" not in self.unavailable]
        self._link_refresh_t = self._clock()

    def _probe(self, key: str, series: list[str], label: str, fn: Callable[[], Any]) -> Any:
        """Call once; on failure mark `series` unavailable with NVML's reason and return None."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001
            for s in series:
                self.unavailable[f"{key}.{s}"] = f"NVML {label}: {_err(self._nvml, exc)}"
            return None

    def _open_device(self, key: str, handle: Any, index: int | None) -> _Device:
        nvml = self._nvml
        static: dict[str, Any] = {"source": "nvml", "index": index}
        for name, fn in (("name", nvml.nvmlDeviceGetName), ("uuid", nvml.nvmlDeviceGetUUID)):
            try:
                static[name] = _text(fn(handle))
            except Exception:  # noqa: BLE001
                static[name] = None
        static.update(self._link_state(handle))
        static["pcie_link_gen_seen_max"] = static.get("pcie_link_gen_current")
        static["pcie_link_peak_gbs"] = link_peak_gbs(static.get("pcie_link_gen_max"),
                                                     static.get("pcie_link_width_max"))
        readers: list[tuple[Reader, tuple[str, ...], bool]] = []

        def utilization(h: Any) -> tuple:
            u = nvml.nvmlDeviceGetUtilizationRates(h)
            return float(u.gpu), float(u.memory)

        def memory(h: Any) -> tuple:
            m = nvml.nvmlDeviceGetMemoryInfo(h)
            return float(m.used), float(m.total)

        def power_average(h: Any) -> tuple:
            return (nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,)

        def sm_clock(h: Any) -> tuple:
            return (float(nvml.nvmlDeviceGetClockInfo(h, CLOCK_SM)),)

        for fn, series, label in (
                (utilization, ["util_pct", "mem_util_pct"], "nvmlDeviceGetUtilizationRates"),
                (memory, ["mem_used_bytes", "mem_total_bytes"], "nvmlDeviceGetMemoryInfo"),
                (sm_clock, ["sm_clock_mhz"], "nvmlDeviceGetClockInfo(SM)")):
            first = self._probe(key, series, label, functools.partial(fn, handle))
            if first is not None:
                readers.append((fn, tuple(f"{key}.{s}" for s in series), fn is memory))
                if fn is memory:
                    static["total_memory_bytes"] = int(first[1])
        # Power: the instant field if this GPU/driver fills it (read in the tick's field-values
        # call), else the (averaged) power usage.
        instant = self._probe(key, [], "", lambda: field_value(
            nvml.nvmlDeviceGetFieldValues(handle, [FI_POWER_INSTANT])[0]))
        power_field = instant is not None
        if power_field:
            static["power_counter"] = "NVML_FI_DEV_POWER_INSTANT (instantaneous)"
        elif self._probe(key, ["power_w"], "nvmlDeviceGetPowerUsage", lambda: power_average(handle)) is not None:
            readers.append((power_average, (f"{key}.power_w",), False))
            static["power_counter"] = "nvmlDeviceGetPowerUsage (a 1 s average on Ampere and newer)"
            self.notes.append(f"{key}.power_w is nvmlDeviceGetPowerUsage, a 1 s average on recent GPUs "
                              "(the instant power field is not available)")
        reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if reasons_fn is None:
            self.unavailable[f"{key}.throttle_reasons"] = "this nvidia-ml-py has no clock event reasons call"
        else:
            def throttle(h: Any) -> tuple:
                return (float(reasons_fn(h)),)

            if self._probe(key, ["throttle_reasons"], reasons_fn.__name__, lambda: throttle(handle)) is not None:
                readers.append((throttle, (f"{key}.throttle_reasons",), False))
        return _Device(key, handle, index, static, readers, power_field=power_field)

    def _link_state(self, handle: Any) -> dict[str, int | None]:
        nvml = self._nvml
        out: dict[str, int | None] = {}
        for name, fn in (("pcie_link_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
                         ("pcie_link_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                         ("pcie_link_width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
                         ("pcie_link_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
            try:
                value = int(getattr(nvml, fn)(handle))
                out[name] = value if value > 0 else None
            except Exception:  # noqa: BLE001
                out[name] = None
        return out

    def _open_pcie(self, hz: float | None, start: bool) -> None:
        """Byte counters if every device has them, else the blocking throughput call."""
        nvml = self._nvml
        self._counters: PcieCounterPoller | None = None
        self._throughput: PcieThroughputPoller | None = None
        counter_ok, why_not = True, ""
        first: dict[str, Any] = {}
        if self._pcie_mode == "throughput":
            counter_ok, why_not = False, "byte-count fields not used (pcie_mode=throughput)"
        for d in self.devices if counter_ok else []:
            try:
                fvs = nvml.nvmlDeviceGetFieldValues(d.handle, [FI_PCIE_TX_BYTES, FI_PCIE_RX_BYTES])
                first[d.key] = fvs
                if any(field_value(fv) is None for fv in fvs):
                    counter_ok, why_not = False, "byte-count fields 197/198 not supported (driver before R555?)"
            except Exception as exc:  # noqa: BLE001
                counter_ok, why_not = False, f"byte-count fields: {_err(nvml, exc)}"
        if counter_ok:
            self._counters = PcieCounterPoller(
                nvml, {d.key: (d.handle, d.static.get("pcie_link_peak_gbs")) for d in self.devices},
                hz=hz or DEFAULT_POLL_HZ, clock=self._clock)
            for d in self.devices:
                self._counters.ingest(d.key, first[d.key])  # prime: a rate needs a previous value
            self._set_pcie_thread(bool(hz))  # explicit rate: a thread; auto or 0: in the tick
            return
        usable = {}
        if self._pcie_mode == "counters":
            for d in self.devices:
                for s in ("pcie_tx_gbs", "pcie_rx_gbs"):
                    self.unavailable[f"{d.key}.{s}"] = f"NVML: {why_not} (pcie_mode=counters)"
            return
        for d in self.devices:
            reason = self._probe_throughput(d.handle)
            if reason is None:
                usable[d.key] = d.handle
                d.static["pcie_counter"] = "nvmlDeviceGetPcieThroughput (20 ms windows, ~50% coverage)"
            else:
                for s in ("pcie_tx_gbs", "pcie_rx_gbs"):
                    self.unavailable[f"{d.key}.{s}"] = f"NVML: {why_not}; nvmlDeviceGetPcieThroughput: {reason}"
        if usable:
            self.notes.append("PCIe throughput from nvmlDeviceGetPcieThroughput: 20 ms windows, each "
                              f"direction sampled about half the time ({why_not})")
            self._throughput = PcieThroughputPoller(nvml, usable, clock=self._clock)
            if start:
                self._throughput.start()

    def _probe_throughput(self, handle: Any) -> str | None:
        try:
            self._nvml.nvmlDeviceGetPcieThroughput(handle, PCIE_UTIL_TX)
            return None
        except Exception as exc:  # noqa: BLE001
            return _err(self._nvml, exc)

    def _set_pcie_thread(self, thread: bool) -> None:
        """Read the byte counters in a poller thread, or in each read() (the sampler's tick)."""
        assert self._counters is not None
        hz = 1.0 / self._counters._period
        for d in self.devices:
            d.tick_pcie = not thread
            d.static["pcie_counter"] = (
                f"NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES polled at {hz:g} Hz in a thread" if thread else
                "NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES read at every sample (one field-values call per tick)")
        self._build_ticks()
        if thread and self._start_pollers:
            self._counters.start()

    def _build_ticks(self) -> None:
        for d in self.devices:
            ids = ([FI_POWER_INSTANT] if d.power_field else []) + (
                [FI_PCIE_TX_BYTES, FI_PCIE_RX_BYTES] if d.tick_pcie else [])
            d.tick = FieldReader(self._nvml, d.handle, ids) if ids else None
        self._tick_captures = [d.tick.capture if d.tick is not None else _none for d in self.devices]
        # rates are computed in read() from the counters read in the tick (or there are none);
        # False when a poller thread supplies them, which must be taken at the tick
        self._pcie_in_read = self.devices[0].tick_pcie or (self._counters is None and self._throughput is None)

    def needs_pcie_thread(self, rate_hz: float) -> bool:
        """True if a sampler period of 1/rate_hz is too long to unwrap the byte counters in the tick.

        The bound uses each device's link peak (the fastest known link where it is unknown) and
        keeps TICK_WRAP_HEADROOM for late ticks.
        """
        if self._counters is None:
            return False
        return any(peak / rate_hz >= TICK_WRAP_HEADROOM * COUNTER_WRAP for peak in self._counters._peak.values())

    def set_rate_hz(self, rate_hz: float) -> None:
        """The sampler's rate: how often to read the slow series, and, with pcie_poll_hz=None,
        a poller thread if the sampler is too slow to unwrap the PCIe counters."""
        sched = self._schedule
        sched.set_rate_hz(rate_hz)
        self.notes = [n for n in self.notes if not n.startswith(SLOW_NOTE_PREFIX)]
        keys: dict[bool, list[str]] = {False: [], True: []}  # series of the slow readers, by "is a memory reader"
        for d in self.devices:
            for _, ks, memory in d.readers:
                keys[memory] += ks
        self.notes += sched.notes(keys[False], keys[True])
        for d in self.devices:
            d.static["slow_series_hz"] = rate_hz / sched.slow
            d.static["memory_series_hz"] = rate_hz / sched.memory
        if (self._counters is None or self._poll_hz is not None or self._counters.running
                or not self.needs_pcie_thread(rate_hz)):
            return
        self.notes.append(f"PCIe byte counters polled at {DEFAULT_POLL_HZ:g} Hz in a thread: a {rate_hz:g} Hz "
                          "sampler is too slow to unwrap them at this link's peak")
        self._set_pcie_thread(True)

    # -- reading -----------------------------------------------------------------------------
    def reset(self) -> None:
        """Start PCIe rates from now: the first read covers one sampling period, and reads the
        slow series."""
        self._schedule.reset()
        self._held = {}
        counters = self._counters
        for d in self.devices:
            # counters read in the tick (tick_pcie comes with the counters): take a fresh base
            if d.tick_pcie and d.tick is not None and counters is not None:
                try:
                    fvs = d.tick.read()
                    i = 1 if d.power_field else 0
                    counters.rebase(d.key, (fvs[i], fvs[i + 1]))
                except Exception:  # noqa: BLE001 - the first interval will then read as missing
                    pass
            if counters is not None:
                self._prev_pcie[d.key] = counters.snapshot(d.key)
            if self._throughput is not None and d.key in self._throughput._devices:
                self._throughput.take(d.key)

    def poll_pcie(self) -> None:
        """Poll the PCIe counters once (tests, or a caller that drives the poller by hand)."""
        if self._counters is not None:
            self._counters.poll_once()
        if self._throughput is not None:
            self._throughput.poll_once()

    def _pcie_rates(self, key: str) -> dict[str, float | None]:
        if self._throughput is not None and key in self._throughput._devices:
            r = self._throughput.take(key)
            return {"pcie_tx_gbs": r["tx"], "pcie_rx_gbs": r["rx"]}
        if self._counters is None:
            return {}
        snap = self._counters.snapshot(key)
        prev = self._prev_pcie.get(key)
        self._prev_pcie[key] = snap
        out: dict[str, float | None] = {}
        for direction in ("tx", "rx"):
            name = f"pcie_{direction}_gbs"
            total, t, ambiguous, _ = snap[direction]
            if prev is None or t is None or prev[direction][1] is None:
                out[name] = None  # the first read only sets the starting point
                continue
            p_total, p_t, p_ambiguous, _ = prev[direction]
            if ambiguous != p_ambiguous or t <= p_t:
                out[name] = None  # an interval could not be unwrapped, or no new counter value
            else:
                out[name] = (total - p_total) / (t - p_t) / 1e9
        return out

    def capture(self) -> tuple[float, list[Any], Values | None, dict[str, Values] | None]:
        """Everything this tick takes from the driver, undecoded: the one field-values call per
        device (instant power, PCIe byte counters) as bytes, an exception in place of a device's
        bytes if its call failed; the slow calls on their ticks (None for a failed one); and, when
        the PCIe rates come from a poller thread, those rates as of now.

        Most ticks are only the field-values calls: kept to a few lines, since every line run
        after a wake-up from sleep costs a cache miss or more."""
        slow, mem = self._schedule.next()
        t = self._clock()
        raws: list[Any] = []
        for cap in self._tick_captures:
            try:
                raws.append(cap())
            except Exception as exc:  # noqa: BLE001 - decoded as a missing sample
                raws.append(exc)
        if not (slow or mem) and self._pcie_in_read:
            return t, raws, None, None
        slow_values: Values | None = None
        if slow or mem:
            slow_values = {}
            for d in self.devices:
                for fn, keys, memory in d.readers:
                    if not (mem if memory else slow):
                        continue
                    try:
                        slow_values.update(zip(keys, fn(d.handle)))
                    except Exception:  # noqa: BLE001 - a failed read is a missing sample, not a 0
                        slow_values.update(dict.fromkeys(keys))
            # Current link generation drops when idle; note the highest seen, about once a second.
            if t - self._link_refresh_t >= 1.0:
                self._link_refresh_t = t
                self._refresh_link()
        polled = None
        if not self._pcie_in_read:
            polled = {d.key: self._pcie_rates(d.key) for d in self.devices}  # a poller's rates: now
        return t, raws, slow_values, polled

    def read(self, captured: Any = None) -> Values:
        t_tick, raws, slow_values, polled = self.capture() if captured is None else captured
        held = self._held
        if slow_values is not None:
            for k, v in slow_values.items():
                if v is None:
                    held.pop(k, None)
                else:
                    held[k] = v
        out: Values = dict(held)
        for d, raw in zip(self.devices, raws):
            if d.tick is not None and raw is not None and not isinstance(raw, Exception):  # no tick: raw is None
                self._read_tick(d, d.tick.decode(raw), out, t_tick)
            rates = polled[d.key] if polled is not None else self._pcie_rates(d.key)
            for s, v in rates.items():
                out[f"{d.key}.{s}"] = v
        if self._counters is not None and self.devices[0].tick_pcie:
            self._counters.polls += 1
        return out

    def _read_tick(self, d: _Device, fvs: Any, out: Values, t_tick: float) -> None:
        """The tick's single field-values call: instant power and/or the PCIe byte counters."""
        i = 0
        if d.power_field:
            mw = field_value(fvs[0])
            out[f"{d.key}.power_w"] = None if mw is None else mw / 1000.0
            i = 1
        if d.tick_pcie and self._counters is not None:  # tick_pcie comes with the counters
            self._counters.ingest(d.key, (fvs[i], fvs[i + 1]), now=t_tick)

    def _refresh_link(self) -> None:
        for d in self.devices:
            try:
                gen = int(self._nvml.nvmlDeviceGetCurrPcieLinkGeneration(d.handle))
            except Exception:  # noqa: BLE001
                continue
            seen = d.static.get("pcie_link_gen_seen_max")
            if gen > 0 and (seen is None or gen > seen):
                d.static["pcie_link_gen_seen_max"] = gen

    def static(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nvml.driver_version": self._driver}
        for d in self.devices:
            for k, v in d.static.items():
                out[f"{d.key}.{k}"] = v
        if self._counters is not None:
            for d in self.devices:
                snap = self._counters.snapshot(d.key)
                out[f"{d.key}.pcie_counter_ambiguous_intervals"] = snap["tx"][2] + snap["rx"][2]
                out[f"{d.key}.pcie_counter_updates"] = snap["rx"][3]
            out["nvml.pcie_counter_polls"] = self._counters.polls
        return out

    def cpu_seconds(self) -> float:
        return sum(p.cpu_s for p in (self._counters, self._throughput) if p is not None)

    def processes(self) -> list[dict[str, Any]]:
        """Compute processes per device. PIDs are host PIDs, also inside containers."""
        out = []
        for d in self.devices:
            try:
                procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(d.handle)
            except Exception:  # noqa: BLE001
                continue
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                out.append({"device": d.key, "pid": int(p.pid),
                            "used_memory_bytes": None if used is None else int(used)})
        return out

    def close(self) -> None:
        for poller in (getattr(self, "_counters", None), getattr(self, "_throughput", None)):
            if poller is not None:
                poller.stop()
        self._shutdown()

    def _shutdown(self) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
