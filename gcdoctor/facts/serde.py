"""Dataclass <-> JSON-ready values for facts and events: msgspec's typed conversion.

Facts are plain dataclasses; msgspec turns them into JSON-ready values and back, checking every
value against its field's type hint (strictly: no "3" for an int, no null for a field that is not
Optional, no integer beyond 64 bits). Unknown keys are ignored and missing keys take the field
default, so facts written by an older or newer gcdoctor still load. NaN and infinities are
written as null: a number that is not a number is not a measurement.

Decoding replaced a hand-written walk over the type hints: on the 14 facts.json files under
samples/, both read identical values, msgspec in 8.7 ms against 61.9 ms, and msgspec is stricter
(null in a field that is not Optional, bool for int, ints beyond 64 bits are refused; the old walk
let a null through anywhere). tests/test_serde.py keeps the equality.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder(enc_hook=str)


class FactsDecodeError(ValueError):
    """A value does not fit its field's type; the message names the field (`$.sweep.max_batch`)."""


def to_dict(obj: Any) -> Any:
    """Recursively convert dataclasses, lists and dicts to JSON-ready values (non-finite floats
    as None). A walk over `dataclasses.fields`, not msgspec.to_builtins: msgspec encodes a
    dataclass from its instance `__dict__`, and a dataclass it decoded keeps a defaulted field on
    the class only, so that field would silently vanish from the re-saved facts."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def to_json(obj: Any) -> bytes:
    """JSON bytes of `obj` (non-finite floats as null)."""
    return _encoder.encode(to_dict(obj))


def from_dict(cls: Any, data: Any) -> Any:
    """Build `cls` (a dataclass or a typing construct) from JSON-loaded `data`, strictly typed."""
    try:
        return msgspec.convert(data, cls, strict=True)
    except msgspec.ValidationError as exc:
        raise FactsDecodeError(str(exc)) from None


def _bad_range(name: str, v: Any) -> str | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, int) and not -(1 << 63) <= v < (1 << 64):
        return "an integer out of range (beyond 64 bits)"
    if name == "batch_size" and v < 1:
        return "a batch size must be at least 1"
    if name.endswith(("_ms", "_ms_median")) and v < 0:
        # step and phase times (milliseconds, host-clock); not `_us` latencies: a launch latency
        # is a difference of two clocks and reads slightly negative on real traces (-0.12 us, H200)
        return "a duration cannot be negative"
    return None


def check_ranges(obj: Any, path: str = "$") -> None:
    """Values a type hint cannot refuse but no measurement can be: a batch below 1, a negative
    duration. FactsDecodeError naming the field (`$.sweep.measurements[0].batch_size`)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            why = None if v == f.default and not isinstance(v, bool) else _bad_range(f.name, v)  # "not set"
            if why:
                raise FactsDecodeError(f"{path}.{f.name} = {v!r}: {why}")
            if isinstance(v, (list, tuple)) and f.name.endswith("_ms"):
                for i, x in enumerate(v):
                    if isinstance(x, (int, float)) and not isinstance(x, bool) and x < 0:
                        raise FactsDecodeError(f"{path}.{f.name}[{i}] = {x!r}: a duration cannot be negative")
            check_ranges(v, f"{path}.{f.name}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            check_ranges(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_ranges(v, f"{path}[{i}]")
