"""Read a torch.profiler Chrome-trace JSON (plain or gzip) into column tables, streaming.

How, and why this way (measured on a 215 MB trace, see docs/benchmarks.md):
- The file is read in blocks of a few MB (gzip decompressed on the fly). The traceEvents array
  is cut at event boundaries (`}` `,` `{`) into chunks and each chunk is decoded by msgspec
  into small typed structs that hold only the fields the metrics need (ph, cat, name, ts, dur,
  pid, tid and four args); msgspec skips every other field in C. Memory stays at about one
  chunk plus the compact output tables, whatever the file size.
- Timestamps: torch writes `ts`/`dur` in microseconds with three decimals (nanoseconds). A float64
  holds every such value below 2^43 us exactly enough to recover the integer nanosecond; chunks
  whose timestamps are larger are decoded again with `ts` as Decimal. No rounding to whole us.
- A cut inside a string or an object makes the chunk fail to decode at its very end; the chunk
  is then extended to a later boundary. A decode error anywhere else is a malformed file.
- Without msgspec the standard library's json decodes the chunks (same results, slower).
- Tabling a chunk: the common case (every event placeable, float timestamps, integer ids) takes
  each field of a category's events in one list pass straight into a column; anything else goes
  the general way, event by event, with the same result.
- With `workers=2`, a forked helper process decodes and tables every other chunk while this one
  does the next; its columns are merged in file order, so the tables are the same as from one
  process. Any chunk the helper cannot table the common way comes back undone and is read again
  here. Not the default: on a 2-core machine, idle or busy, it was no faster than one process and
  took more memory (docs/benchmarks.md).

Every input a user can get wrong raises UserError with one line naming the file.
"""
from __future__ import annotations

import gzip
import json
import re
import sys
import zlib
from collections import Counter
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import IO, Any, Callable, Optional, Sequence, Union

import numpy as np

from gcdoctor.errors import UserError
from gcdoctor.trace.tables import (
    COPY_DIRECTIONS, HOST_MEM_NONE, HOST_MEM_OTHER, HOST_MEM_PAGEABLE, HOST_MEM_PINNED, KERNEL, MEMCPY,
    MEMSET, CpuOps, DeviceOps, Ranges, RuntimeCalls, TraceTables,
)

try:  # optional fast decoder; the stdlib path gives identical tables
    import msgspec
except ImportError:  # pragma: no cover - exercised by forcing decoder="json" in the tests
    msgspec = None  # type: ignore[assignment]  # the name stays bound: `msgspec is None` means not installed

BLOCK_BYTES = 1 << 20  # read size; a chunk is about one block (8 MB: same speed, 20 MB more memory)
HEAD_LIMIT_BYTES = 64 << 20  # traceEvents must start within this many bytes
TAIL_LIMIT_BYTES = 64 << 20  # metadata after the traceEvents array
EXACT_FLOAT_US = float(2**43)  # below this a float64 resolves 3-decimal microseconds to the ns

_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_WS = b" \t\r\n"

# event buckets
_DEV, _RT, _CPU, _ANN, _GANN = range(5)
_SKIP = -1


# Categories torch.profiler (Kineto) has written across versions and vendors. Device ops: `kernel`
# (CUDA, ROCm, XPU, MUSA, PrivateUse1), older Kineto's `Kernel`, MTIA's `mtia_ccp_events`;
# `gpu_memcpy`/`gpu_memset` and older `Memcpy`/`Memset`. Host API calls: `<vendor>_runtime`,
# `<vendor>_driver` (cuda, hip via cuda, musa, xpu, mtia, privateuse1, glow) and older `Runtime`.
# Host ops: `cpu_op`, older `Operator`. `cuda_profiler_range`: CUPTI range-profiler ranges, which
# carry no per-kernel timing (counted, so the trace can say so).
_DEVICE_KERNEL_CATS = ("kernel", "mtia_ccp_events", "concurrent_kernel")
_RANGE_PROFILER_CATS = ("cuda_profiler_range",)
_PROFILER_RANGE = -2


def _classify(cat: Any) -> tuple[int, int]:
    """(bucket, detail) of a complete event's category. Category names differ by backend
    (cuda_runtime, musa_runtime, privateuse1_runtime...), so they are matched by suffix."""
    if not isinstance(cat, str):
        return _SKIP, 0
    low = cat.lower()
    if low in _DEVICE_KERNEL_CATS or low.endswith("_kernel"):
        return _DEV, KERNEL
    if low.endswith("memcpy"):
        return _DEV, MEMCPY
    if low.endswith("memset"):
        return _DEV, MEMSET
    if low == "runtime" or low.endswith("_runtime"):
        return _RT, 0
    if low == "driver" or low.endswith("_driver"):
        return _RT, 1
    if low in ("cpu_op", "operator"):
        return _CPU, 0
    if low == "user_annotation":
        return _ANN, 0
    if low == "gpu_user_annotation":
        return _GANN, 0
    if low in _RANGE_PROFILER_CATS:
        return _PROFILER_RANGE, 0
    return _SKIP, 0


_COPY_NAME = re.compile(r"\b(HtoD|DtoH|DtoD|PtoP|HtoH|DtoA|AtoD|AtoH|HtoA|AtoA)\b(?:\s*\((\w+)\s*->\s*(\w+)\))?")
_MEMSET_NAME = re.compile(r"\((\w+)\)")


def parse_copy_name(name: str, kind: int) -> tuple[int, int]:
    """(COPY_DIRECTIONS index, HOST_MEM_*) from a memcpy/memset name such as
    'Memcpy HtoD (Pageable -> Device)' or 'Memset (Device)'."""
    if kind == MEMSET:
        m = _MEMSET_NAME.search(name)
        mem = m.group(1).lower() if m else ""
        host = HOST_MEM_PAGEABLE if mem == "pageable" else HOST_MEM_PINNED if mem == "pinned" else HOST_MEM_NONE
        return -1, host
    m = _COPY_NAME.search(name)
    if not m:
        return COPY_DIRECTIONS.index("other"), HOST_MEM_NONE
    word = m.group(1)
    direction = COPY_DIRECTIONS.index(word) if word in COPY_DIRECTIONS else COPY_DIRECTIONS.index("other")
    src, dst = (m.group(2) or "").lower(), (m.group(3) or "").lower()
    host_side = src if word.startswith("H") else dst if word.endswith("H") else ""
    if word == "HtoH":
        host_side = src if src in ("pageable", "pinned") else dst
    host = (HOST_MEM_PAGEABLE if host_side == "pageable" else HOST_MEM_PINNED if host_side == "pinned"
            else HOST_MEM_OTHER if host_side else HOST_MEM_NONE)
    return direction, host


# -- decoding --------------------------------------------------------------------------------

class _Signal(Exception):
    """A decoder's finding about a chunk, handled by the reading loop."""


class _Trailing(_Signal):
    """The JSON array ended before the end of the decoded text, at `end` (exclusive)."""

    def __init__(self, end: int):
        self.end = end


class _AtEnd(_Signal):
    """Decoding failed at the very end of the text: a cut inside a value, or a truncated file."""


class _Malformed(_Signal):
    def __init__(self, pos: int | None, msg: str):
        self.pos, self.msg = pos, msg


class _Ev:
    """Event fields used by the tables, for the dict (stdlib / fallback) path."""

    __slots__ = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args")

    def __init__(self, ph, cat, name, ts, dur, pid, tid, args):
        self.ph, self.cat, self.name, self.ts, self.dur = ph, cat, name, ts, dur
        self.pid, self.tid, self.args = pid, tid, args


class _EvArgs:
    __slots__ = ("correlation", "stream", "nbytes", "seq")

    def __init__(self, correlation, stream, nbytes, seq=None):
        self.correlation, self.stream, self.nbytes, self.seq = correlation, stream, nbytes, seq


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _num_or_none(v: Any) -> Any:
    return v if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) else None


_NAN = float("nan")


def _id_value(v: Any) -> int | str:
    """pid/tid: an integer or a string as written; an integral float as its integer; else 0."""
    if isinstance(v, bool):
        return 0
    if isinstance(v, (int, str)):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return 0


def _events_from_dicts(items: Any) -> list[_Ev]:
    """Tolerant conversion of decoded JSON values into events, total over any JSON value: entries
    that are not objects are skipped; a field of an unexpected type reads as absent (ts: None, so
    the event is dropped and counted, never placed at 0; dur: not a number, dropped and counted)."""
    out = []
    for d in items if isinstance(items, list) else ():
        if not isinstance(d, dict):
            continue
        a = d.get("args")
        args = None
        if isinstance(a, dict):
            args = _EvArgs(_int_or_none(a.get("correlation")), _int_or_none(a.get("stream")),
                           _int_or_none(a.get("bytes")), _int_or_none(a.get("Sequence number")))
        ph, cat, name = d.get("ph", ""), d.get("cat", ""), d.get("name", "")
        if "dur" in d:
            dur = _num_or_none(d["dur"])
            dur = _NAN if dur is None else dur
        else:
            dur = 0.0
        out.append(_Ev(ph if isinstance(ph, str) else "", cat if isinstance(cat, str) else "",
                       name if isinstance(name, str) else str(name) if _num_or_none(name) is not None else "",
                       _num_or_none(d.get("ts")), dur, _id_value(d.get("pid", 0)), _id_value(d.get("tid", 0)),
                       args))
    return out


class _Deep(_Signal):
    """A value nested deeper than the decoders recurse."""


if msgspec is not None:
    class _MArgs(msgspec.Struct, rename={"nbytes": "bytes", "seq": "Sequence number"}, gc=False):
        correlation: Optional[int] = None
        stream: Optional[int] = None
        nbytes: Optional[int] = None
        seq: Optional[int] = None  # cpu_op: autograd sequence number (gcdoctor.trace.recompute)

    class _MEvent(msgspec.Struct, gc=False):
        ph: str = ""
        cat: str = ""
        name: str = ""
        ts: Optional[float] = None
        dur: float = 0.0
        pid: Union[int, str] = 0
        tid: Union[int, str] = 0
        args: Optional[_MArgs] = None

    class _MExactEvent(msgspec.Struct, gc=False):
        ph: str = ""
        cat: str = ""
        name: str = ""
        ts: Optional[Decimal] = None
        dur: Decimal = Decimal(0)
        pid: Union[int, str] = 0
        tid: Union[int, str] = 0
        args: Optional[_MArgs] = None


def _make_msgspec_decoders() -> tuple[Callable[[bytes], list], Callable[[bytes], list]] | None:
    if msgspec is None:
        return None
    fast = msgspec.json.Decoder(list[_MEvent])
    exact = msgspec.json.Decoder(list[_MExactEvent])
    # the lenient path reads every number that does not fit a float64 (1e400) as a Decimal
    generic = msgspec.json.Decoder(float_hook=Decimal)

    json_fast, json_exact = _make_json_decoders()

    def wrap(typed, fallback):
        def decode(text: bytes) -> list:
            try:
                try:
                    return typed.decode(text)
                except msgspec.ValidationError:  # (a DecodeError) an unexpected type: decode leniently
                    return _events_from_dicts(generic.decode(text))
            except msgspec.DecodeError as exc:
                err = _classify_msgspec_error(str(exc), text)
                if isinstance(err, _Malformed) and _VALUE_LEVEL.search(err.msg):
                    # valid JSON that msgspec refuses (a lone surrogate escape, an integer of thousands
                    # of digits): the standard library reads it
                    return fallback(text)
                try:
                    raise err from None
                finally:  # no cycle error -> traceback -> this frame -> error: the chunk and its
                    del err  # decoded events are freed at once, not at the next garbage collection
            except RecursionError:
                raise _Deep() from None
        return decode

    return wrap(fast, json_fast), wrap(exact, json_exact)


_VALUE_LEVEL = re.compile(r"surrogate|out of range", re.I)


_BYTE_POS = re.compile(r"\(byte (\d+)\)")


def _classify_msgspec_error(msg: str, text: bytes) -> Exception:
    if "truncated" in msg:
        return _AtEnd()
    m = _BYTE_POS.search(msg)
    pos = int(m.group(1)) if m else None
    if "trailing characters" in msg and pos is not None:
        # the array closed just before the trailing byte (msgspec reports one past it)
        for cut in (pos - 1, pos):
            end = len(text[:cut].rstrip(_WS))
            if text[end - 1:end] == b"]":
                return _Trailing(end)
    if pos is not None and pos >= len(text) - 2:
        return _AtEnd()
    return _Malformed(pos, msg.replace("JSON is malformed: ", "").split(" (byte")[0])


def _make_json_decoders() -> tuple[Callable[[bytes], list], Callable[[bytes], list]]:
    def parse_int(text: str) -> Any:  # no str->int digit limit (a 5,000-digit ts is a number, not a crash)
        return int(text) if len(text) < 4000 else Decimal(text)

    def make(parse_float):
        dec = json.JSONDecoder(parse_float=parse_float, parse_int=parse_int)

        def decode(text: bytes) -> list:
            try:
                s = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _Malformed(exc.start, "invalid UTF-8") from None
            try:
                value = dec.decode(s)
            except RecursionError:
                raise _Deep() from None
            except json.JSONDecodeError as exc:
                if exc.msg == "Extra data":  # exc.pos is the first trailing character
                    raise _Trailing(len(s[:exc.pos].rstrip().encode("utf-8"))) from None
                if exc.pos >= len(s) - 2 or exc.msg.startswith("Unterminated string"):
                    raise _AtEnd() from None
                raise _Malformed(len(s[:exc.pos].encode("utf-8")), exc.msg) from None
            return _events_from_dicts(value)
        return decode

    return make(float), make(Decimal)


# -- reading ---------------------------------------------------------------------------------

class _Reader:
    """Blocks of the (decompressed) file, with I/O and gzip errors turned into UserErrors."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.raw: IO[bytes] = open(path, "rb")
        except FileNotFoundError:
            raise UserError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise UserError(f"{path}: is a directory, not a trace file") from None
        except OSError as exc:
            raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
        try:
            magic = self.raw.read(2)
            self.raw.seek(0)
        except OSError as exc:  # /proc/self/mem, a device that refuses reads, a pipe that cannot seek
            self.raw.close()
            raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
        self.gzip = magic == b"\x1f\x8b"
        self.fh: IO[bytes] | gzip.GzipFile = gzip.GzipFile(fileobj=self.raw, mode="rb") if self.gzip else self.raw
        self.eof = False

    def read(self, n: int) -> bytes:
        parts, got = [], 0
        while got < n and not self.eof:
            try:
                b = self.fh.read(n - got)
            except EOFError:
                raise UserError(f"{self.path}: truncated gzip file (the compressed data ends early)") from None
            except (gzip.BadGzipFile, zlib.error) as exc:
                raise UserError(f"{self.path}: corrupt gzip data ({exc})") from None
            except OSError as exc:
                raise UserError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
            if not b:
                self.eof = True
                break
            parts.append(b)
            got += len(b)
        return b"".join(parts)

    def close(self) -> None:
        if self.fh is not self.raw:
            self.fh.close()
        self.raw.close()


def _last_boundary(buf: bytes, lo: int) -> tuple[int, int] | None:
    """(end of an event, start of the next) for the last `}` `,` `{` in buf[lo:], or None."""
    i = len(buf)
    n = len(buf)
    while True:
        i = buf.rfind(b"},", lo, i)
        if i < 0:
            break
        j = i + 2
        while j < n and buf[j] in _WS:
            j += 1
        if j < n and buf[j] == 0x7B:  # "{"
            return i + 1, j
    last = None
    for last in _BOUNDARY.finditer(buf, lo):
        pass
    return (last.start() + 1, last.end() - 1) if last is not None else None


# -- tables ----------------------------------------------------------------------------------

class _NeedExact(Exception):
    """A float timestamp is too large to resolve nanoseconds."""


# |ts| and dur must stay below this (about 146 years in us) so that start + dur fits int64 ns
LIMIT_US = float(2**62 // 1000)
_LIMIT_D = Decimal(2**62 // 1000)

DROP_NO_TS = "no numeric ts"
DROP_BAD_TS = "ts not a finite number within +-1.4e17 s"
DROP_NEG_DUR = "negative dur"
DROP_BAD_DUR = "dur not a finite number within 1.4e17 s"
DROP_OUTSIDE = "ts far outside the trace's span"
DROP_TOO_LONG = "dur longer than the trace could hold"

# Impossible events (a ts of 0 among real timestamps, a duration of days): dropped and counted by
# `_impossible`, so that one of them cannot decide a verdict.
MAX_EVENT_NS = 86_400 * 10**9  # no profiled op, call or range lasts a day (a trace that long cannot be held)
SPLIT_MIN_NS = 10**9  # a gap under a second never splits a trace
SPLIT_FACTOR = 100  # ...and one that splits it is 100 times longer than the events' own spread
MINORITY = 0.01  # what is cut off is at most this share of the events (at least 2 events)
LONG_FACTOR = 1000  # an event 1000 times longer than the spread of every start (and over a minute)
LONG_MIN_NS = 60 * 10**9


def _finite(v: Any) -> bool:
    if isinstance(v, Decimal):
        return v.is_finite() and abs(v) < _LIMIT_D
    if isinstance(v, float):
        return v == v and abs(v) < LIMIT_US
    return isinstance(v, int) and abs(v) < LIMIT_US


def _why_dropped(e: Any) -> str | None:
    """Why a complete event cannot be placed on the timeline, or None when it can."""
    if e.ts is None:
        return DROP_NO_TS
    if not _finite(e.ts):
        return DROP_BAD_TS
    if not _finite(e.dur):
        return DROP_BAD_DUR
    if e.dur < 0:
        return DROP_NEG_DUR
    return None


def _ns(values: list[Any], exact: bool) -> np.ndarray:
    """Integer nanoseconds from microsecond values: floats below 2^43 us (exact for the 3-decimal
    values torch writes), else Decimals (`exact`). Values are finite and within LIMIT_US."""
    if exact:
        return np.array([int((Decimal(v) * 1000).to_integral_value(ROUND_HALF_EVEN)) for v in values],
                        dtype=np.int64)
    f = np.asarray(values, dtype=np.float64)
    if len(f) and float(np.abs(f).max()) >= EXACT_FLOAT_US:
        raise _NeedExact
    whole = np.floor(f)
    return whole.astype(np.int64) * 1000 + np.rint((f - whole) * 1000).astype(np.int64)


def _ns_float(f: np.ndarray) -> np.ndarray:
    """_ns of float microseconds already checked to be finite and below 2^43."""
    whole = np.floor(f)
    return whole.astype(np.int64) * 1000 + np.rint((f - whole) * 1000).astype(np.int64)


_NO_ARGS = _EvArgs(None, None, None, None)


def _i64_opt(values: list) -> np.ndarray:
    """int64 column of optional integers: None, or a value beyond 64 bits, reads as -1."""
    if None in values:
        values = [-1 if v is None else v for v in values]
    return _i64(values, -1)


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _i64(values: list[Any], default: int) -> np.ndarray:
    """int64 column; a value beyond 64 bits reads as `default` (unknown)."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return np.array([v if _I64_MIN <= v <= _I64_MAX else default for v in values], dtype=np.int64)


@dataclass
class _Grouped:
    """A chunk's complete events of the tabled categories, per bucket (_DEV.._GANN), with each
    category's detail per event; and the counts of the rest."""

    buckets: list[list]
    kinds: list[list[np.ndarray]]  # detail per event, per bucket
    skipped: Counter
    rt_cats: Counter
    ranges: int = 0  # cuda_profiler_range events


def _placed_times(group: list) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(start_ns, dur_ns, tid) of a bucket's events the columnar way, or None when one of them is
    not for it: no ts, a string or huge tid, nan, negative, too large for nanoseconds in a float."""
    ts = [e.ts for e in group]
    if None in ts:
        return None
    try:
        f = np.array(ts, dtype=np.float64)
        d = np.array([e.dur for e in group], dtype=np.float64)
        tids = np.array([e.tid for e in group], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # a string or huge id, a Decimal
        return None
    if not (bool((np.abs(f) < EXACT_FLOAT_US).all()) and bool((d >= 0).all())
            and bool((d < EXACT_FLOAT_US).all())):
        return None
    return _ns_float(f), _ns_float(d), tids


def _args_of(group: list) -> list:
    args = [e.args for e in group]
    if None in args:
        args = [_NO_ARGS if a is None else a for a in args]
    return args


def _pids(group: list) -> np.ndarray | None:
    try:
        return np.array([e.pid for e in group], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return None


def _bucket_columns(b: int, group: list,
                    kinds: list[np.ndarray]) -> tuple[str, dict[str, np.ndarray], list[str]] | None:
    """(table, columns, names) of one bucket's events, the columnar way; None when an event is
    not for it (the chunk then goes the general way)."""
    placed = _placed_times(group)
    if placed is None:
        return None
    start, length, tids = placed
    names = [e.name for e in group]
    if b == _RT:
        args = _args_of(group)
        return "rt", dict(start_ns=start, dur_ns=length, tid=tids,
                          correlation=_i64_opt([a.correlation for a in args]),
                          driver=np.concatenate(kinds) == 1), names
    if b == _CPU:
        args = _args_of(group)
        return "cpu", dict(start_ns=start, dur_ns=length, tid=tids, seq=_i64_opt([a.seq for a in args])), names
    pids = _pids(group)
    if pids is None:
        return None
    if b != _DEV:
        return "ann", dict(start_ns=start, dur_ns=length, pid=pids, tid=tids,
                           on_device=np.full(len(group), b == _GANN, dtype=np.bool_)), names
    args = _args_of(group)
    stream = [a.stream for a in args]
    if None in stream:
        stream = [e.tid if s is None else s for s, e in zip(stream, group)]
    try:
        stream_col = np.array(stream, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return None
    return "dev", dict(kind=np.concatenate(kinds), start_ns=start, dur_ns=length, device=pids, stream=stream_col,
                       correlation=_i64_opt([a.correlation for a in args]),
                       nbytes=_i64_opt([a.nbytes for a in args])), names


class _Builder:
    """Accumulates per-chunk columns; `finish` sorts, joins and returns the tables."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.name_ids: dict[str, int] = {}
        self.cats: dict[Any, tuple[int, int]] = {}
        self.str_ids: dict[str, int] = {}
        self.cols: dict[str, dict[str, list[np.ndarray]]] = {k: {} for k in ("dev", "rt", "cpu", "ann")}
        self.runtime_cats: Counter = Counter()
        self.skipped: Counter = Counter()
        self.dropped: Counter = Counter()  # complete events of a tabled category that could not be placed
        self.dropped_examples: dict[str, str] = {}
        self.profiler_ranges = 0  # cuda_profiler_range events (CUPTI range profiler, no kernel timing)
        self.event_count = 0

    def _intern(self, names: Sequence[str]) -> np.ndarray:
        ids = self.name_ids
        for n in set(names):
            if n not in ids:
                ids[n] = len(self.names)
                try:
                    n.encode("utf-8")
                    clean = n
                except UnicodeEncodeError:  # a lone surrogate escape ("\ud800"): no writer could encode it
                    clean = n.encode("utf-8", "replace").decode("utf-8")
                self.names.append(clean)
        return np.fromiter(map(ids.__getitem__, names), dtype=np.int32, count=len(names))

    def _ints(self, values: list[Any]) -> np.ndarray:
        try:
            return np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            # a string pid/tid, or an integer beyond 64 bits: a stable negative id per distinct value
            out = []
            for v in values:
                if isinstance(v, int) and _I64_MIN // 2 <= v <= _I64_MAX:
                    out.append(v)
                else:
                    out.append(self.str_ids.setdefault(str(v), -1 - len(self.str_ids)))
            return np.array(out, dtype=np.int64)

    def _placeable(self, lst: list) -> list:
        """The events of `lst` that can be placed on the timeline; the others are counted by reason."""
        ts = [e.ts for e in lst]
        if None not in ts:  # the common case, checked in bulk
            try:
                f = np.asarray(ts, dtype=np.float64)
                d = np.asarray([e.dur for e in lst], dtype=np.float64)
                if bool((np.abs(f) < LIMIT_US).all() and (d >= 0).all() and (d < LIMIT_US).all()):
                    return lst
            except (TypeError, ValueError, OverflowError):
                pass
        why = [_why_dropped(e) for e in lst]
        if not any(why):
            return lst
        keep = []
        for e, w in zip(lst, why):
            if w is None:
                keep.append(e)
            else:
                self.dropped[w] += 1
                if w not in self.dropped_examples:
                    name = e.name if len(e.name) <= 80 else e.name[:77] + "..."
                    self.dropped_examples[w] = f"{e.cat} event {name!r}"
        return keep

    def _put(self, table: str, **cols: np.ndarray) -> None:
        t = self.cols[table]
        for k, v in cols.items():
            t.setdefault(k, []).append(v)

    def add(self, events: list, exact: bool) -> None:
        """Table one decoded chunk. Raises _NeedExact (and keeps nothing) when a float timestamp
        is too large to hold nanoseconds; the caller then decodes the chunk with Decimals."""
        dropped, examples, ranges = self.dropped.copy(), dict(self.dropped_examples), self.profiler_ranges
        try:
            self._add(events, exact)
        except _NeedExact:
            self.dropped, self.dropped_examples, self.profiler_ranges = dropped, examples, ranges
            raise

    def _add(self, events: list, exact: bool) -> None:
        if not exact and self._add_columns(events):
            return
        self._add_events(events, exact)

    def _group(self, events: list, place: bool) -> _Grouped:
        """A chunk's complete events in buckets; with `place`, only those _placeable keeps."""
        by_cat = _complete_events_by_category(events)
        g = _Grouped([[], [], [], [], []], [[], [], [], [], []], Counter(), Counter())
        for c, lst in by_cat.items():
            k = self.cats.get(c)
            if k is None:
                k = self.cats[c] = _classify(c)
            if k[0] == _PROFILER_RANGE:
                g.ranges += len(lst)
            if k[0] < 0:
                g.skipped[c] += len(lst)
                continue
            if place:
                lst = self._placeable(lst)
                if not lst:
                    continue
            g.buckets[k[0]].extend(lst)
            g.kinds[k[0]].append(np.full(len(lst), k[1], dtype=np.int8))
            if k[0] == _RT:
                g.rt_cats[c] += len(lst)
        return g

    def _add_columns(self, events: list) -> bool:
        """The common case in one pass per field: every event of a tabled category placeable, float
        timestamps below 2^43 us, integer ids. Tables nothing and returns False otherwise (the
        general path, _add_events, then gives the same tables)."""
        g = self._group(events, place=False)
        staged: list[tuple[str, dict[str, np.ndarray], list[str]]] = []
        for b, group in enumerate(g.buckets):
            if not group:
                continue
            tabled = _bucket_columns(b, group, g.kinds[b])
            if tabled is None:
                return False
            staged.append(tabled)
        for table, cols, names in staged:
            cols["name_id"] = self._intern(names)
            self._put(table, **cols)
        self.profiler_ranges += g.ranges
        self._count(events, g)
        return True

    def _count(self, events: list, g: _Grouped) -> None:
        self.event_count += len(events)
        self.skipped.update(g.skipped)
        self.runtime_cats.update(g.rt_cats)

    def _add_events(self, events: list, exact: bool) -> None:
        g = self._group(events, place=True)
        self.profiler_ranges += g.ranges
        dev, rt, cpu, ann, gann = g.buckets
        staged: list[tuple[str, dict[str, np.ndarray]]] = []
        if dev:
            staged.append(("dev", self._dev_events(dev, g.kinds[_DEV], exact)))
        if rt:
            staged.append(("rt", self._rt_events(rt, g.kinds[_RT], exact)))
        if cpu:
            staged.append(("cpu", self._cpu_events(cpu, exact)))
        for group, on_dev in ((ann, False), (gann, True)):
            if group:
                staged.append(("ann", self._ann_events(group, on_dev, exact)))
        for table, cols in staged:
            self._put(table, **cols)
        self._count(events, g)

    def _dev_events(self, dev: list, kinds: list[np.ndarray], exact: bool) -> dict[str, np.ndarray]:
        args = [e.args for e in dev]
        return dict(
            kind=np.concatenate(kinds),
            start_ns=_ns([e.ts for e in dev], exact), dur_ns=_ns([e.dur for e in dev], exact),
            device=self._ints([e.pid for e in dev]),
            stream=self._ints([a.stream if a is not None and a.stream is not None else e.tid
                               for a, e in zip(args, dev)]),
            correlation=_i64([a.correlation if a is not None and a.correlation is not None else -1
                              for a in args], -1),
            nbytes=_i64([a.nbytes if a is not None and a.nbytes is not None else -1 for a in args], -1),
            name_id=self._intern([e.name for e in dev]))

    def _rt_events(self, rt: list, kinds: list[np.ndarray], exact: bool) -> dict[str, np.ndarray]:
        return dict(
            start_ns=_ns([e.ts for e in rt], exact), dur_ns=_ns([e.dur for e in rt], exact),
            tid=self._ints([e.tid for e in rt]),
            correlation=_i64([e.args.correlation if e.args is not None and e.args.correlation is not None
                              else -1 for e in rt], -1),
            name_id=self._intern([e.name for e in rt]),
            driver=np.concatenate(kinds) == 1)

    def _cpu_events(self, cpu: list, exact: bool) -> dict[str, np.ndarray]:
        return dict(
            start_ns=_ns([e.ts for e in cpu], exact), dur_ns=_ns([e.dur for e in cpu], exact),
            tid=self._ints([e.tid for e in cpu]), name_id=self._intern([e.name for e in cpu]),
            seq=np.array([e.args.seq if e.args is not None and e.args.seq is not None else -1
                          for e in cpu], dtype=np.int64))

    def _ann_events(self, group: list, on_dev: bool, exact: bool) -> dict[str, np.ndarray]:
        return dict(
            start_ns=_ns([e.ts for e in group], exact), dur_ns=_ns([e.dur for e in group], exact),
            pid=self._ints([e.pid for e in group]), tid=self._ints([e.tid for e in group]),
            name_id=self._intern([e.name for e in group]),
            on_device=np.full(len(group), on_dev, dtype=np.bool_))

    def part(self) -> tuple:
        """What a helper process hands back for one chunk (see merge)."""
        return (list(self.name_ids), self.cols, self.event_count, dict(self.skipped), dict(self.runtime_cats),
                self.profiler_ranges)

    def merge(self, part: tuple) -> None:
        """Add a chunk tabled by another _Builder (a helper process), as if added here: its name
        ids mapped to this builder's, its counters added in the same order."""
        names, cols, events, skipped, rt_cats, ranges = part
        remap = self._intern(names) if names else np.zeros(0, dtype=np.int32)
        for table, tcols in cols.items():
            for k, arrays in tcols.items():
                self.cols[table].setdefault(k, []).extend(remap[a] if k == "name_id" else a for a in arrays)
        self.event_count += events
        self.skipped.update(skipped)
        self.runtime_cats.update(rt_cats)
        self.profiler_ranges += ranges

    def _cat(self, table: str, cls: type) -> Any:
        cols = self.cols[table]
        if not cols:
            return cls()
        return cls(**{k: np.concatenate(v) for k, v in cols.items()})

    def finish(self, path: Path, metadata: dict[str, Any]) -> TraceTables:
        d = self.cols["dev"]
        if d:
            n = sum(len(a) for a in d["kind"])
            d["copy_dir"] = [np.full(n, -1, dtype=np.int8)]
            d["host_mem"] = [np.zeros(n, dtype=np.int8)]
            d["launch"] = [np.full(n, -1, dtype=np.int64)]
        ops = self._cat("dev", DeviceOps)
        runtime = self._cat("rt", RuntimeCalls)
        cpu_ops = self._cat("cpu", CpuOps)
        ranges = self._cat("ann", Ranges)
        self._drop_impossible((ops, runtime, cpu_ops, ranges), ("device", "runtime", "cpu_op", "annotation"))
        for t in (ops, runtime, cpu_ops, ranges):
            if len(t):
                t.take(np.argsort(t.start_ns, kind="stable"))
        if len(ops):
            self._copy_columns(ops)
            ops.launch = _join_launches(ops.correlation, runtime.correlation)
        return TraceTables(path=path, names=self.names, ops=ops, runtime=runtime, cpu_ops=cpu_ops, ranges=ranges,
                           metadata=metadata, device_kind=self._device_kind(runtime, len(ops)),
                           event_count=self.event_count, skipped=dict(self.skipped), dropped=dict(self.dropped),
                           dropped_examples=dict(self.dropped_examples), profiler_ranges=self.profiler_ranges)

    def _drop_impossible(self, tables: tuple, kinds: tuple[str, ...]) -> None:
        """Drop (and count, by reason) events whose times are impossible against the rest of the
        trace: outside its span (ts 0 among real timestamps, a kernel hours before the process's
        other events) or longer than it could hold (a day, or 1000 times the spread of all starts)."""
        starts = np.concatenate([t.start_ns for t in tables])
        if not len(starts):
            return
        lo, hi = _main_span(starts)
        spread = max(hi - lo, 0)
        too_long = max(LONG_FACTOR * spread, LONG_MIN_NS)
        for t, kind in zip(tables, kinds):
            if not len(t):
                continue
            outside = (t.start_ns < lo) | (t.start_ns > hi)
            long = ~outside & ((t.dur_ns >= MAX_EVENT_NS) | (t.dur_ns > too_long))
            for mask, why in ((outside, DROP_OUTSIDE), (long, DROP_TOO_LONG)):
                n = int(mask.sum())
                if not n:
                    continue
                self.dropped[why] += n
                if why not in self.dropped_examples:
                    name = self.names[int(t.name_id[np.flatnonzero(mask)[0]])]
                    name = name if len(name) <= 80 else name[:77] + "..."
                    self.dropped_examples[why] = f"{kind} event {name!r}"
            bad = outside | long
            if bad.any():
                t.take(np.flatnonzero(~bad))

    def _device_kind(self, runtime: RuntimeCalls, n_ops: int) -> str | None:
        """The prefix of the most frequent runtime category ("cuda_runtime" -> "cuda"); ROCm writes
        cuda_runtime with hip* call names, so those read "rocm"; older Kineto's plain `Runtime`
        reads from the call names too. None without runtime calls and device ops (CPU-only)."""
        if not self.runtime_cats:
            return "unknown" if n_ops else None
        cat = self.runtime_cats.most_common(1)[0][0].lower()
        kind = cat.rsplit("_", 1)[0] if "_" in cat else ""
        if kind in ("cuda", "", "privateuse1"):
            ids, counts = np.unique(runtime.name_id, return_counts=True)
            top = self.names[int(ids[np.argmax(counts)])].lower() if len(ids) else ""
            if top.startswith("hip"):
                return "rocm"
            # torch_musa's Kineto (MUPTI) names its calls musa*/mu*: read them as MUSA whatever
            # category a build files them under
            if top.startswith("mu") and not top.startswith("mutex"):
                return "musa"
            if not kind:
                kind = "cuda" if top.startswith("cu") else "unknown"
        return kind

    def _copy_columns(self, ops: DeviceOps) -> None:
        copies = np.flatnonzero(ops.kind != KERNEL)
        if not len(copies):
            return
        parsed: dict[tuple[int, int], tuple[int, int]] = {}
        dirs = np.empty(len(copies), dtype=np.int8)
        mems = np.empty(len(copies), dtype=np.int8)
        for j, (nid, kd) in enumerate(zip(ops.name_id[copies].tolist(), ops.kind[copies].tolist())):
            key = (nid, kd)
            if key not in parsed:
                parsed[key] = parse_copy_name(self.names[nid], kd)
            dirs[j], mems[j] = parsed[key]
        ops.copy_dir[copies] = dirs
        ops.host_mem[copies] = mems


def _main_span(starts: np.ndarray) -> tuple[int, int]:
    """[first, last] start of the trace's main body: the starts left after cutting off, again and
    again, a few events (at most 1 %, or 2) separated from all the others by a gap over a second
    and 100 times the others' own spread. Two recorded windows of a trace both stay; a stray ts of
    0 among timestamps of hours does not."""
    s = np.sort(starts)
    a, b = 0, len(s) - 1  # the kept run s[a..b]
    while b > a:
        n = b - a + 1
        small = max(2, int(MINORITY * n))
        gaps = np.diff(s[a:b + 1])
        i = int(np.argmax(gaps))
        g = int(gaps[i])
        left, right = i + 1, n - i - 1  # events before and after the gap
        rest = (s[b] - s[a + i + 1]) if left <= right else (s[a + i] - s[a])
        if g <= SPLIT_MIN_NS or g <= SPLIT_FACTOR * max(int(rest), 0) or min(left, right) > small \
                or left == right:
            break
        if left < right:
            a += left
        else:
            b -= right
    return int(s[a]), int(s[b])


def _join_launches(op_corr: np.ndarray, rt_corr: np.ndarray) -> np.ndarray:
    """Row of the runtime call with the same correlation id as each device op, -1 if none."""
    out = np.full(len(op_corr), -1, dtype=np.int64)
    if not len(rt_corr):
        return out
    order = np.argsort(rt_corr, kind="stable")
    sorted_corr = rt_corr[order]
    pos = np.searchsorted(sorted_corr, op_corr)
    pos_c = np.minimum(pos, len(sorted_corr) - 1)
    hit = (op_corr >= 0) & (sorted_corr[pos_c] == op_corr)
    out[hit] = order[pos_c[hit]]
    return out


# -- a second decoding process ----------------------------------------------------------------

_FORK = sys.platform.startswith("linux")  # fork is cheap and safe here (the helper needs no import)


def _private_bytes() -> int:
    """Memory of this process not shared with its parent (Linux), 0 where unknown."""
    total = 0
    try:
        with open("/proc/self/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith((b"Private_Clean:", b"Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


def _helper_main(conn: Any, decoder: str) -> None:
    """The helper's loop: decode and table each chunk sent; send back the tabled part, or None
    when this process should do the chunk itself (a cut inside a value, the end of the array, an
    event that cannot be placed, a string id, timestamps too large for floats: every rare case).
    An empty message ends it; it answers with its counts."""
    decoders = _make_msgspec_decoders() if decoder == "msgspec" else _make_json_decoders()
    fast = decoders[0] if decoders is not None else None
    peak = chunks = 0
    try:
        while True:
            text = conn.recv_bytes()
            if not text:
                break
            part = None
            try:
                if fast is not None:
                    b = _Builder()
                    events = fast(text)
                    del text
                    b._add(events, exact=False)
                    if not (b.dropped or b.str_ids):
                        part, chunks = b.part(), chunks + 1
                    peak = max(peak, _private_bytes())  # the decoded chunk is still alive here
                    del events, b
            except Exception:  # noqa: BLE001 - whatever it is, the parent decodes the chunk and says
                part = None
            conn.send(part)
            del part
        conn.send({"helper_chunks": chunks, "helper_private_peak_bytes": peak})
    except (EOFError, OSError):  # the parent has gone or stopped listening
        return


class _Helper:
    """A forked process that tables every other chunk while this one tables the next."""

    def __init__(self, decoder: str):
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_helper_main, args=(child, decoder), daemon=True)
        self.proc.start()
        child.close()
        self.alive = True

    def send(self, text: bytes) -> None:
        try:
            self.conn.send_bytes(text)
        except OSError:
            self.alive = False

    def result(self) -> tuple | None:
        if not self.alive:
            return None
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.alive = False
            return None

    def close(self) -> dict[str, Any] | None:
        info = None
        try:
            if self.alive:
                self.conn.send_bytes(b"")
                if self.conn.poll(5):
                    info = self.conn.recv()
        except (EOFError, OSError):
            pass
        self.conn.close()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join()
        return info if isinstance(info, dict) else None


# -- the file --------------------------------------------------------------------------------

def _describe_start(b: bytes) -> str:
    if b.startswith(b"["):
        return "a JSON array"
    if b[:1] in (b'"',) or b[:1].isdigit() or b[:1] == b"-" or b[:4] in (b"true", b"fals", b"null"):
        return "a JSON scalar"
    return "data that is not JSON"


def _parse_head(path: Path, head: bytes) -> dict[str, Any]:
    text = head.strip()
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:].lstrip()
    body = text[1:].rstrip(_WS).rstrip(b",")
    doc = b"{" + body + b"}"
    try:
        meta = json.loads(doc)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path}: malformed JSON before traceEvents") from None
    except RecursionError:
        raise UserError(f"{path}: {_deep_field(doc, 'before traceEvents', head.find(b'{'))}") from None
    return meta if isinstance(meta, dict) else {}


def _parse_tail(path: Path, tail: bytes, offset: int) -> dict[str, Any]:
    """The top-level keys after the traceEvents array (`tail` starts right after its `]`, at
    byte `offset` of the file)."""
    lead = len(tail) - len(tail.lstrip(_WS))
    text = tail.strip(_WS)
    if text == b"}":
        return {}
    if not text:
        raise UserError(f"{path}: truncated trace (the top-level object is not closed)")
    if not text.startswith(b","):
        raise UserError(f"{path}: malformed JSON after traceEvents at byte {offset + lead}")
    try:
        meta = json.loads(b"{" + text[1:])
    except RecursionError:
        raise UserError(f"{path}: {_deep_field(b'{' + text[1:], 'after traceEvents', offset + lead)}") from None
    except json.JSONDecodeError as exc:
        if exc.msg.startswith("Expecting") and exc.pos >= len(text) - 2:
            raise UserError(f"{path}: truncated trace (the top-level object is not closed)") from None
        at = offset + lead + len(text.decode("utf-8", "replace")[:exc.pos].encode("utf-8"))
        raise UserError(f"{path}: malformed JSON after traceEvents at byte {at} ({exc.msg})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: malformed JSON after traceEvents at byte {offset + lead} (invalid UTF-8)") from None
    return meta if isinstance(meta, dict) else {}


def load_trace(path: str | Path, *, decoder: str = "auto", block_bytes: int = BLOCK_BYTES,
               workers: int = 1) -> TraceTables:
    """Load a torch.profiler Chrome trace (.json or .json.gz; gzip is recognised by content).

    decoder: "auto" (msgspec when installed), "msgspec" or "json" (standard library).
    workers: processes that decode (1 or 2). 2 forks a helper on Linux: ask for it only where no
    other thread of this process could be caught by the fork holding a lock. The tables are the
    same either way.
    Raises UserError for anything that is not a readable torch.profiler trace.
    """
    path = Path(path)
    if decoder == "auto":
        decoder = "msgspec" if msgspec is not None else "json"
    decoders = _make_msgspec_decoders() if decoder == "msgspec" else _make_json_decoders()
    if decoders is None:
        raise UserError("msgspec is not installed (pip install msgspec), use decoder='json'")
    fast, exact = decoders
    reader = _Reader(path)
    helper = None
    try:
        if workers > 1 and _FORK:
            helper = _Helper(decoder)
        tables = _load(path, reader, fast, exact, block_bytes, helper)
    finally:
        reader.close()
        info = helper.close() if helper is not None else None
    tables.load_info = {"processes": 2 if helper is not None else 1, **(info or {})}
    _return_freed_heap()
    return tables


def _return_freed_heap() -> None:
    """Give the heap pages the decoded chunks left free back to the OS (glibc's malloc_trim): they
    are tens of MB after a large trace, which the metrics would otherwise add their peak to."""
    if not _FORK:  # Linux; malloc_trim is glibc's (musl has none: then nothing happens)
        return
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _load(path: Path, reader: _Reader, fast: Callable, exact: Callable, block: int,
          helper: "_Helper | None" = None) -> TraceTables:
    metadata, buf, base = _read_head(path, reader, block)
    events = _EventsReader(path, reader, fast, exact, block, helper, buf, base)
    del buf
    tail, tail_offset = events.run()
    metadata.update(_parse_tail(path, tail, tail_offset))
    tables = events.builder.finish(path, metadata)
    if not (len(tables.ops) or len(tables.runtime) or len(tables.cpu_ops) or len(tables.ranges)):
        raise UserError(f"{path}: not a torch.profiler trace (traceEvents has no cpu_op, kernel, runtime "
                        f"or annotation events)")
    return tables


def _read_head(path: Path, reader: _Reader, block: int) -> tuple[dict[str, Any], bytes, int]:
    """(metadata before traceEvents, the bytes read after its `[`, their offset in the stream):
    everything up to the traceEvents array is metadata."""
    head = reader.read(block)
    first = head.lstrip(_WS + b"\xef\xbb\xbf")[:8]
    if not first:
        raise UserError(f"{path}: empty file, not a torch.profiler trace")
    if not first.startswith(b"{"):
        raise UserError(f"{path}: not a torch.profiler trace (expected a JSON object with traceEvents, "
                        f"found {_describe_start(first)})")
    m = _TRACE_EVENTS.search(head)
    while m is None and not reader.eof and len(head) < HEAD_LIMIT_BYTES:
        head += reader.read(block)
        m = _TRACE_EVENTS.search(head)
    if m is None:
        raise UserError(f"{path}: not a torch.profiler trace (no traceEvents array)")
    return _parse_head(path, head[:m.start()]), head[m.end():], m.end()


class _EventsReader:
    """The traceEvents array, chunk by chunk into `builder`: each chunk is cut at the last event
    boundary read (`cut`: (end of an event, start of the next); None for the final chunk, at the
    end of the file), decoded here or handed to the helper process."""

    def __init__(self, path: Path, reader: _Reader, fast: Callable, exact: Callable, block: int,
                 helper: "_Helper | None", buf: bytes, base: int):
        self.path, self.reader, self.fast, self.exact, self.block, self.helper = path, reader, fast, exact, block, helper
        self.builder = _Builder()
        self.buf = buf
        self.base = base  # offset of buf[0] in the decompressed stream
        self.need_more = False
        # a chunk handed to the helper process: (buf before it was cut off, its base, blocks read since);
        # should the helper not table it, reading goes back to that chunk and this process decodes it
        self.pending: tuple[bytes, int, list[bytes]] | None = None
        self.local_next = False

    def run(self) -> tuple[bytes, int]:
        """(what follows the array, its offset in the stream): every chunk tabled."""
        while True:
            self._fill()
            cut = None if self.reader.eof else _last_boundary(self.buf, 0)
            if cut is None and not self.reader.eof:
                self.need_more = True
                continue
            text = b"[" + self.buf if cut is None else b"[" + self.buf[:cut[0]] + b"]"
            if cut is not None and self._hand_over(text, cut):
                continue
            self.local_next = False
            err: _Signal | None = None
            try:
                events = self.fast(text)
            except _Signal as exc:
                events, err = None, exc
            if not self._merge_pending():
                continue
            if err is not None:
                # the error's traceback holds this frame: drop it before anything else is decoded
                end, err = self._signalled(err, text, cut), None
                if end is not None:
                    return end
                continue
            if cut is None:  # decoded to the very end without the closing of the top-level object
                raise UserError(f"{self.path}: truncated trace (the top-level object is not closed)")
            _add(self.builder, events, text, self.exact)
            self._advance(cut)

    def _fill(self) -> None:
        if not self.reader.eof and (self.need_more or len(self.buf) < self.block):
            more = self.reader.read(self.block)
            self.buf += more
            self.need_more = False
            if self.pending is not None:
                self.pending[2].append(more)

    def _advance(self, cut: tuple[int, int]) -> None:
        self.buf = self.buf[cut[1]:]
        self.base += cut[1]

    def _hand_over(self, text: bytes, cut: tuple[int, int]) -> bool:
        """Send the chunk to the helper process when it is free (and the chunk is not one it gave back)."""
        helper = self.helper
        if helper is None or not helper.alive or self.pending is not None or self.local_next:
            return False
        helper.send(text)
        self.pending = (self.buf, self.base, [])
        self._advance(cut)
        return True

    def _merge_pending(self) -> bool:
        """The chunk before this one, at the helper, comes first: merge it. False when the helper
        did not table it: reading then goes back to it, to decode it here."""
        pending = self.pending
        if pending is None:
            return True
        part = self.helper.result() if self.helper is not None else None
        self.pending = None
        if part is None:
            self.buf, self.base = pending[0] + b"".join(pending[2]), pending[1]
            self.need_more, self.local_next = False, True
            return False
        self.builder.merge(part)
        return True

    def _signalled(self, err: _Signal, text: bytes, cut: tuple[int, int] | None) -> tuple[bytes, int] | None:
        """A decoder's finding about the chunk: the end of the array (what follows it, and its
        offset), a cut inside a value (None: take a later boundary), or a one-line UserError."""
        path = self.path
        if isinstance(err, _Trailing):  # the array ends inside this text: what follows is metadata
            return self._end_of_array(text, err.end, cut)
        if isinstance(err, _Deep):
            raise UserError(f"{path}: {_deep_event(text, self.builder.event_count)}") from None
        if isinstance(err, _AtEnd):
            if cut is None:
                raise UserError(f"{path}: truncated trace (the traceEvents array is not closed)") from None
            self.need_more = True  # the cut fell inside a value: take a later boundary
            return None
        if isinstance(err, _Malformed):
            at = f" at byte {self.base + err.pos - 1}" if err.pos is not None else ""
            raise UserError(f"{path}: malformed JSON in traceEvents{at} ({err.msg})") from None
        raise err

    def _end_of_array(self, text: bytes, end: int, cut: tuple[int, int] | None) -> tuple[bytes, int]:
        try:
            events = self.fast(text[:end])
        except (_Trailing, _AtEnd, _Malformed):
            raise UserError(f"{self.path}: malformed JSON in traceEvents at byte {self.base + end - 1}") from None
        _add(self.builder, events, text[:end], self.exact)
        rest = text[end:] if cut is None else text[end:-1] + self.buf[cut[0]:]
        tail = rest + self.reader.read(TAIL_LIMIT_BYTES)
        if not self.reader.eof:
            raise UserError(f"{self.path}: malformed JSON after traceEvents (over 64 MB of trailing data)")
        return tail, self.base + end - 1


def _add(builder: _Builder, events: list, text: bytes, exact: Callable) -> None:
    """Add a decoded chunk; decode it again with exact timestamps when floats cannot hold them."""
    try:
        builder.add(events, exact=False)
    except _NeedExact:
        builder.add(exact(text), exact=True)


MAX_DEPTH = 64  # deeper than any field torch writes; past the decoders' recursion it is refused


def _deep_field(doc: bytes, where: str, offset: int) -> str:
    """The one-line refusal of top-level metadata (`doc`, a JSON object whose byte 1 is byte
    `offset` + 1 of the file) nested too deeply to decode: which field, and where it gets too deep."""
    depth, in_str, esc, key_start, last_key = 0, False, False, -1, ""
    for i, ch in enumerate(doc):
        if in_str:
            if esc:
                esc = False
            elif ch == 0x5C:
                esc = True
            elif ch == 0x22:
                in_str = False
                if depth == 1 and key_start >= 0:
                    last_key = doc[key_start:i].decode("utf-8", "replace")[:80]
            continue
        if ch == 0x22:
            in_str = True
            key_start = i + 1 if depth == 1 else -1
        elif ch in (0x7B, 0x5B):
            depth += 1
            if depth > MAX_DEPTH:
                return (f"metadata {where}: field {last_key!r} is nested more than {MAX_DEPTH} levels deep "
                        f"(at byte {max(offset + i, 0)}), too deep to decode")
        elif ch in (0x7D, 0x5D):
            depth -= 1
    return f"metadata {where} is nested too deeply to decode"


def _deep_event(text: bytes, before: int) -> str:
    """The one-line refusal of a chunk holding a value nested too deeply to decode: which event
    (its index in traceEvents and its name) and which top-level field."""
    depth, index, in_str, esc, key_start, last_key, start = 0, before - 1, False, False, -1, "", 0
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == 0x5C:  # backslash
                esc = True
            elif ch == 0x22:
                in_str = False
                if depth == 2 and key_start >= 0:
                    last_key = text[key_start:i].decode("utf-8", "replace")
            continue
        if ch == 0x22:
            in_str = True
            key_start = i + 1 if depth == 2 else -1
        elif ch in (0x7B, 0x5B):  # { [
            depth += 1
            if depth == 2:
                index, start, last_key = index + 1, i, ""
            if depth > MAX_DEPTH:
                m = re.search(rb'"name"\s*:\s*"((?:[^"\\]|\\.){0,80})', text[start:])
                name = f" ({m.group(1).decode('utf-8', 'replace')!r})" if m else ""
                return (f"event {index} of traceEvents{name}: field {last_key!r} is nested more than "
                        f"{MAX_DEPTH} levels deep, too deep to decode")
        elif ch in (0x7D, 0x5D):
            depth -= 1
    return "a value in traceEvents is nested too deeply to decode"


def _complete_events_by_category(events: list) -> dict[Any, list]:
    """The complete ("X") events, grouped by category in the order they came."""
    by_cat: dict[Any, list] = {}
    for e in events:
        if e.ph == "X":
            lst = by_cat.get(e.cat)
            if lst is None:
                lst = by_cat[e.cat] = []
            lst.append(e)
    return by_cat
