"""Dataclass <-> JSON-ready dict conversion for facts, driven by type hints.

Facts are plain dataclasses; this module turns them into dicts for `facts.json` and back,
so every section can be added without writing its own (de)serialiser.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, get_args, get_origin, get_type_hints

_HINTS: dict[type, dict[str, Any]] = {}


def to_dict(obj: Any) -> Any:
    """Recursively convert dataclasses, lists and dicts to JSON-ready values.

    NaN and infinities become None: a number that is not a number is not a measurement.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def from_dict(cls: Any, data: Any) -> Any:
    """Build `cls` (a dataclass or a typing construct) from JSON-loaded `data`.

    Unknown keys are ignored and missing keys take the field default, so facts written by
    an older or newer gcdoctor still load.
    """
    if data is None:
        return None
    origin = get_origin(cls)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(cls) if a is not type(None)]
        for arg in args:
            try:
                return from_dict(arg, data)
            except (TypeError, ValueError, KeyError):
                continue
        raise ValueError(f"cannot read {data!r} as {cls}")
    if origin in (list, tuple):
        (item,) = get_args(cls)[:1] or (Any,)
        if not isinstance(data, list):
            raise TypeError(f"expected a list, got {type(data).__name__}")
        return [from_dict(item, v) for v in data]
    if origin is dict:
        _, value_type = get_args(cls) or (str, Any)
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        return {k: from_dict(value_type, v) for k, v in data.items()}
    if dataclasses.is_dataclass(cls):
        if not isinstance(data, dict):
            raise TypeError(f"expected an object for {cls.__name__}, got {type(data).__name__}")
        hints = _hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                kwargs[f.name] = from_dict(hints[f.name], data[f.name])
        return cls(**kwargs)
    if cls is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise TypeError(f"expected a number, got {data!r}")
        return float(data)
    if cls is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise TypeError(f"expected an integer, got {data!r}")
        return data
    if cls is str:
        if not isinstance(data, str):
            raise TypeError(f"expected a string, got {data!r}")
        return data
    if cls is bool:
        if not isinstance(data, bool):
            raise TypeError(f"expected true/false, got {data!r}")
        return data
    return data
