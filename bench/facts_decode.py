"""facts.json decoding: msgspec's typed conversion against the hand-written type-hint walk it
replaced (gcdoctor.facts.serde before its msgspec rewrite). Same values on every recorded facts.json under
samples/ (checked here too), and the time to decode all of them.

    python bench/facts_decode.py

Recorded on the 2-core CPU machine, 2026-12-01, while other test suites ran (load average ~9):
14 files, identical values in every run. One pass each: old walk 61.9 ms, msgspec 8.7 ms (7x;
first measurement); old 1767 ms, msgspec 139 ms (13x; this script, load average ~9, first pass
pays the type-hint caches of both).
"""
from __future__ import annotations

import dataclasses
import glob
import json
import time
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import msgspec

from gcdoctor.facts import Facts
from gcdoctor.facts.serde import to_dict

_HINTS: dict[type, dict[str, Any]] = {}


def old_from_dict(cls: Any, data: Any) -> Any:  # the walk serde.py had, verbatim in behaviour
    if data is None:
        return None
    origin = get_origin(cls)
    if origin in (typing.Union, types.UnionType):
        for arg in [a for a in get_args(cls) if a is not type(None)]:
            try:
                return old_from_dict(arg, data)
            except (TypeError, ValueError, KeyError):
                continue
        raise ValueError(f"cannot read {data!r} as {cls}")
    if origin in (list, tuple):
        (item,) = get_args(cls)[:1] or (Any,)
        return [old_from_dict(item, v) for v in data]
    if origin is dict:
        _, value_type = get_args(cls) or (str, Any)
        return {k: old_from_dict(value_type, v) for k, v in data.items()}
    if dataclasses.is_dataclass(cls):
        hints = _HINTS.setdefault(cls, get_type_hints(cls))
        return cls(**{f.name: old_from_dict(hints[f.name], data[f.name])
                      for f in dataclasses.fields(cls) if f.name in data})
    if cls is float:
        return float(data)
    return data


def main() -> None:
    repo = Path(__file__).resolve().parents[1]
    docs = [json.loads(Path(p).read_text()) for p in sorted(glob.glob(str(repo / "samples/**/facts.json"),
                                                                          recursive=True))]
    t0 = time.perf_counter()
    old = [old_from_dict(Facts, d) for d in docs]
    t1 = time.perf_counter()
    new = [msgspec.convert(d, Facts, strict=True) for d in docs]
    t2 = time.perf_counter()
    same = all(to_dict(a) == to_dict(b) for a, b in zip(old, new))
    print(f"{len(docs)} facts.json files; identical values: {same}; "
          f"old walk {1e3 * (t1 - t0):.1f} ms, msgspec {1e3 * (t2 - t1):.1f} ms")


if __name__ == "__main__":
    main()
