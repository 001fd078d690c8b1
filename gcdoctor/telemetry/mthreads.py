"""Moore Threads (MUSA) devices: the `mthreads-gmi` CLI and the `pymtml` binding.

UNTESTED ON HARDWARE. Built from published real `mthreads-gmi` output (samples/musa/, with
sources) and the public source of mthreads-ml-py (github.com/yeahdongcn/mthreads-ml-py,
`pymtml.py`, and its MTML 2.2.0 header); tested only against those recorded outputs and a
fake of the binding.

- `mthreads-gmi` default table: `Mem` is `used(total)` MiB, `Pcie Lane Width` is
  `current(max)`, `%GPU` is utilisation. The table has no power, no clocks and no PCIe
  throughput. Running the CLI takes a process start, so it runs in its own poller thread
  (default once a second) and the sampler reads the latest parse.
- `pymtml` (package mthreads-ml-py): native `mtml*` calls for utilisation, clocks, power
  (milliwatts, per the MTML header) and PCIe link info, and its NVML-compatible shim for
  memory. There is no PCIe throughput counter, and the shim returns 0 for unsupported calls
  (`nvmlDeviceGetPcieThroughput`, the SM clock, ...): such series are reported unavailable,
  and a 0 where 0 is physically impossible (a clock, a power draw, a memory size, a link
  width) is read as "not supported", never as a measurement.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from gcdoctor.telemetry.base import (
    DEVICE_SERIES, Source, SourceUnavailable, Values, visible_device_map,
)
from gcdoctor.telemetry.pcie import link_peak_gbs

MIB = 1024 * 1024
GMI = "mthreads-gmi"


# -- mthreads-gmi table parser ----------------------------------------------------------------
@dataclass
class GmiDevice:
    index: int
    name: str
    bus_id: str | None = None
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    device_type: str | None = None  # Physical | Virtual ...
    perf_state: str | None = None  # P0 ... (newer versions only)
    link_width_current: int | None = None
    link_width_max: int | None = None
    temp_c: float | None = None
    mpc_capable: str | None = None
    ecc_mode: str | None = None


@dataclass
class GmiProcess:
    device_index: int
    pid: int
    name: str
    used_memory_bytes: int | None = None  # None when the row is cut off


@dataclass
class GmiTable:
    version: str | None = None
    driver: str | None = None
    devices: list[GmiDevice] = field(default_factory=list)
    processes: list[GmiProcess] = field(default_factory=list)


_HEADER = re.compile(r"mthreads-gmi:\s*(\S+)\s+Driver Version:\s*(\S+)")
_DEV_LINE1 = re.compile(r"^(\d+)\s+(.+?)\s*$")
_UTIL_MEM = re.compile(r"^(N/A|\d+(?:\.\d+)?)%?\s+(?:(\d+)MiB\((\d+)MiB\)|N/A)")
_LANES = re.compile(r"^(\d+)x\((\d+)x\)")
_TEMP = re.compile(r"^(N/A|-?\d+(?:\.\d+)?)C?\s*(.*)$")
_PROC = re.compile(r"^(\d+)\s+(\d+)\s+(.*?)(?:\s+(\d+)MiB)?\s*$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")]


def parse_gmi_table(text: str) -> GmiTable:
    """Parse the default `mthreads-gmi` table (versions 1.8 and 2.3 seen) into devices and processes.

    Rows that do not match are skipped: a cut-off or unknown line never invents a value.
    """
    table = GmiTable()
    lines = text.splitlines()
    in_processes = False
    current: GmiDevice | None = None
    row_in_block = 0
    for line in lines:
        m = _HEADER.search(line)
        if m:
            table.version, table.driver = m.group(1), m.group(2)
            continue
        stripped = line.strip()
        if stripped.startswith("Processes:"):
            in_processes, current = True, None
            continue
        if not stripped or set(stripped) <= set("-+"):
            current, row_in_block = None, 0
            continue
        if in_processes:
            m = _PROC.match(stripped)
            if m:
                used = int(m.group(4)) * MIB if m.group(4) else None
                table.processes.append(GmiProcess(int(m.group(1)), int(m.group(2)), m.group(3), used))
            continue
        cells = _cells(line)
        first = _DEV_LINE1.match(cells[0]) if len(cells) == 3 and not line.startswith(" ") else None
        um = _UTIL_MEM.match(cells[2]) if first else None
        if first and um:
            current = GmiDevice(index=int(first.group(1)), name=first.group(2).strip())
            current.bus_id = cells[1] or None
            if um.group(1) != "N/A":
                current.util_pct = float(um.group(1))
            if um.group(2):
                current.mem_used_bytes = int(um.group(2)) * MIB
                current.mem_total_bytes = int(um.group(3)) * MIB
            table.devices.append(current)
            row_in_block = 1
            continue
        if current is None:
            continue
        row_in_block += 1
        if row_in_block == 2 and len(cells) == 3:
            parts = cells[0].split()
            current.device_type = parts[0] if parts else None
            current.perf_state = parts[1] if len(parts) > 1 else None
            lm = _LANES.match(cells[1])
            if lm:
                current.link_width_current, current.link_width_max = int(lm.group(1)), int(lm.group(2))
            tm = _TEMP.match(cells[2])
            if tm:
                current.temp_c = None if tm.group(1) == "N/A" else float(tm.group(1))
                current.mpc_capable = tm.group(2).strip() or None
        elif row_in_block == 3 and cells[-1]:
            current.ecc_mode = cells[-1]
    return table


def _gmi_device_values(dev: GmiDevice) -> dict[str, float | None]:
    return {
        "util_pct": dev.util_pct,
        "mem_used_bytes": None if dev.mem_used_bytes is None else float(dev.mem_used_bytes),
        "mem_total_bytes": None if dev.mem_total_bytes is None else float(dev.mem_total_bytes),
    }


GMI_SERIES = ("util_pct", "mem_used_bytes", "mem_total_bytes")
_GMI_MISSING = {
    "pcie_tx_gbs": "the mthreads-gmi table has no PCIe throughput",
    "pcie_rx_gbs": "the mthreads-gmi table has no PCIe throughput",
    "power_w": "the mthreads-gmi table has no power column",
    "sm_clock_mhz": "the mthreads-gmi table has no clocks",
    "mem_util_pct": "the mthreads-gmi table has no memory-controller utilisation",
    "throttle_reasons": "MUSA exposes no clock event reasons",
}


def _musa_keys(device_index: int | None, count: int) -> list[tuple[str, int]]:
    pairs = visible_device_map("MUSA_VISIBLE_DEVICES", device_index, count)
    return [(k, s) for k, s in pairs if isinstance(s, int)]


class MthreadsGmiSource(Source):
    """Parses `mthreads-gmi` output in a poller thread; `read` returns the latest parse.

    `run` may be replaced (tests): it returns the CLI's stdout. A parse older than three poll
    intervals is stale and read as missing.
    """

    name = "mthreads-gmi"

    def __init__(self, device_index: int | None = 0, poll_interval_s: float = 1.0,
                 run: Callable[[], str] | None = None, start_poller: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        if run is None:
            exe = shutil.which(GMI)
            if exe is None:
                raise SourceUnavailable(f"{GMI} not on PATH")
            run = lambda: subprocess.run([exe], capture_output=True, text=True, timeout=10,  # noqa: E731
                                         check=True).stdout
        self._run = run
        self._clock = clock
        self._interval = poll_interval_s
        try:
            first = parse_gmi_table(run())
        except Exception as exc:  # noqa: BLE001 - CLI failed or timed out
            raise SourceUnavailable(f"{GMI} failed: {exc}") from exc
        if not first.devices:
            raise SourceUnavailable(f"{GMI} printed no device table this parser understands")
        by_index = {d.index: d for d in first.devices}
        self._keys = [(k, i) for k, i in _musa_keys(device_index, len(first.devices)) if i in by_index]
        if not self._keys:
            raise SourceUnavailable(f"{GMI}: no device {device_index} among {len(first.devices)}")
        self._static: dict[str, Any] = {"mthreads-gmi.version": first.version,
                                         "mthreads-gmi.driver": first.driver}
        for key, i in self._keys:
            d = by_index[i]
            self._static.update({
                f"{key}.source": GMI, f"{key}.index": i, f"{key}.name": d.name,
                f"{key}.total_memory_bytes": d.mem_total_bytes,
                f"{key}.pcie_link_width_current": d.link_width_current,
                f"{key}.pcie_link_width_max": d.link_width_max,
                f"{key}.pcie_link_gen_current": None, f"{key}.pcie_link_gen_max": None,
                f"{key}.pcie_link_peak_gbs": None,  # the table gives no link generation
            })
            self.series += [f"{key}.{s}" for s in GMI_SERIES]
            self.unavailable.update({f"{key}.{s}": why for s, why in _GMI_MISSING.items()})
        self.notes.append(f"{GMI} is polled every {poll_interval_s:g} s: its series change at most that "
                          "often; the MUSA telemetry path is untested on hardware")
        self._lock = threading.Lock()
        self._latest, self._latest_t = first, clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        if start_poller:
            self._thread = threading.Thread(target=self._loop, name="gcdoctor-mthreads-gmi", daemon=True)
            self._thread.start()

    def poll_once(self) -> None:
        try:
            table = parse_gmi_table(self._run())
        except Exception as exc:  # noqa: BLE001
            self.last_error = str(exc)
            return
        with self._lock:
            self._latest, self._latest_t = table, self._clock()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.poll_once()
            self._cpu_s = time.thread_time()  # the CLI itself runs in a child process, not counted

    def cpu_seconds(self) -> float:
        return getattr(self, "_cpu_s", 0.0)

    def read(self, captured: Any = None) -> Values:
        with self._lock:
            table, t = self._latest, self._latest_t
        if self._clock() - t > 3 * self._interval:
            return {}  # stale: the CLI stopped answering
        by_index = {d.index: d for d in table.devices}
        out: Values = {}
        for key, i in self._keys:
            if i in by_index:
                for s, v in _gmi_device_values(by_index[i]).items():
                    out[f"{key}.{s}"] = v
        return out

    def static(self) -> dict[str, Any]:
        return dict(self._static)

    def processes(self) -> list[dict[str, Any]]:
        with self._lock:
            table = self._latest
        keys = {i: k for k, i in self._keys}
        return [{"device": keys[p.device_index], "pid": p.pid, "name": p.name,
                 "used_memory_bytes": p.used_memory_bytes}
                for p in table.processes if p.device_index in keys]

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)


# -- pymtml -----------------------------------------------------------------------------------
_PYMTML_MISSING = {
    "pcie_tx_gbs": "pymtml has no PCIe throughput counter (its NVML shim returns 0)",
    "pcie_rx_gbs": "pymtml has no PCIe throughput counter (its NVML shim returns 0)",
    "throttle_reasons": "MTML exposes no clock event reasons",
}


class PymtmlSource(Source):
    """Moore Threads devices through `pymtml` (package mthreads-ml-py)."""

    name = "pymtml"

    def __init__(self, device_index: int | None = 0, mtml: Any = None) -> None:
        super().__init__()
        if mtml is None:
            try:
                import pymtml  # noqa: PLC0415 - optional dependency (mthreads-ml-py)
            except ImportError as exc:
                raise SourceUnavailable("mthreads-ml-py not installed (import pymtml failed)") from exc
            mtml = pymtml
        self._m = mtml
        try:
            mtml.nvmlInit()  # the shim's init is mtmlLibraryInit with pymtml's library handle
            count = int(mtml.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001
            raise SourceUnavailable(f"pymtml: {exc}") from exc
        self._handles: list[tuple[str, Any]] = []
        self._readers: dict[str, dict[str, Callable[[Any], float | None]]] = {}
        self._static: dict[str, Any] = {}
        for key, i in _musa_keys(device_index, count):
            if i >= count:
                continue
            try:
                h = mtml.nvmlDeviceGetHandleByIndex(i)
            except Exception as exc:  # noqa: BLE001
                for s in DEVICE_SERIES:
                    self.unavailable[f"{key}.{s}"] = f"pymtml: cannot open device {i}: {exc}"
                continue
            self._handles.append((key, h))
            self._open_device(key, i, h)
        if not self._handles:
            self._shutdown()
            raise SourceUnavailable(f"pymtml: no device {device_index} among {count}")
        self.notes.append("MUSA telemetry through pymtml is untested on hardware; "
                          "a 0 where 0 is impossible is read as unsupported")

    def _open_device(self, key: str, index: int, h: Any) -> None:
        m = self._m

        def util(dev: Any) -> float | None:
            return float(m.mtmlGpuGetUtilization(dev))

        def mem_util(dev: Any) -> float | None:
            return float(m.mtmlMemoryGetUtilization(dev))

        def mem_used(dev: Any) -> float | None:
            return float(m.nvmlDeviceGetMemoryInfo(dev).used)

        def mem_total(dev: Any) -> float | None:
            return _nonzero(m.nvmlDeviceGetMemoryInfo(dev).total)

        def power(dev: Any) -> float | None:
            mw = _nonzero(m.mtmlDeviceGetPowerUsage(dev))  # milliwatts (MTML header)
            return None if mw is None else mw / 1000.0

        def clock(dev: Any) -> float | None:
            return _nonzero(m.mtmlGpuGetClock(dev))  # the GPU core clock; MUSA has no separate SM clock

        candidates = {"util_pct": util, "mem_util_pct": mem_util, "mem_used_bytes": mem_used,
                      "mem_total_bytes": mem_total, "power_w": power, "sm_clock_mhz": clock}
        readers: dict[str, Callable[[Any], float | None]] = {}
        probed: dict[str, float] = {}
        for series, fn in candidates.items():
            try:
                value = fn(h)
            except Exception as exc:  # noqa: BLE001 - MTMLError (Not Supported ...) or AttributeError
                self.unavailable[f"{key}.{series}"] = f"pymtml: {type(exc).__name__}: {exc}"
                continue
            if value is None:
                self.unavailable[f"{key}.{series}"] = ("pymtml returned 0, which it returns for "
                                                       "unsupported calls: not a measurement")
                continue
            readers[series] = fn
            probed[series] = value
        for series, why in _PYMTML_MISSING.items():
            self.unavailable[f"{key}.{series}"] = why
        self._readers[key] = readers
        self.series += [f"{key}.{s}" for s in readers]
        static: dict[str, Any] = {"source": "pymtml", "index": index, "uuid": None,
                                  "sm_clock_note": "sm_clock_mhz is the MTML GPU clock"}
        for name, getter in (("name", m.nvmlDeviceGetName), ("uuid", getattr(m, "nvmlDeviceGetUUID", None))):
            try:
                static[name] = None if getter is None else _decode(getter(h))
            except Exception:  # noqa: BLE001
                static[name] = None
        if "mem_total_bytes" in readers:
            static["total_memory_bytes"] = int(probed["mem_total_bytes"])
        try:
            pci = m.mtmlDeviceGetPciInfo(h)
            static["pcie_link_gen_current"] = _nonzero_int(getattr(pci, "pciCurGen", 0))
            static["pcie_link_gen_max"] = _nonzero_int(getattr(pci, "pciMaxGen", 0))
            static["pcie_link_width_current"] = _nonzero_int(getattr(pci, "pciCurWidth", 0))
            static["pcie_link_width_max"] = _nonzero_int(getattr(pci, "pciMaxWidth", 0))
        except Exception:  # noqa: BLE001
            pass
        static["pcie_link_peak_gbs"] = link_peak_gbs(static.get("pcie_link_gen_max"),
                                                     static.get("pcie_link_width_max"))
        self._static.update({f"{key}.{k}": v for k, v in static.items()})

    def read(self, captured: Any = None) -> Values:
        out: Values = {}
        for key, h in self._handles:
            for series, fn in self._readers[key].items():
                try:
                    out[f"{key}.{series}"] = fn(h)
                except Exception:  # noqa: BLE001 - a failed read is a missing sample
                    out[f"{key}.{series}"] = None
        return out

    def static(self) -> dict[str, Any]:
        return dict(self._static)

    def processes(self) -> list[dict[str, Any]]:
        return []  # pymtml's shim returns an empty list for running processes: nothing to report

    def close(self) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            self._m.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _nonzero(value: Any) -> float | None:
    return None if value is None or value == 0 else float(value)


def _nonzero_int(value: Any) -> int | None:
    return None if not value else int(value)


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
