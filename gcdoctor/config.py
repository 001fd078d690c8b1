"""RunConfig (what a run does) and thresholds, from the command line and an optional TOML file.

A TOML file may hold `[run]` keys with the names of RunConfig's fields and `[thresholds.CODE]`
(or `[thresholds.slug]`) tables overriding rule defaults:

    [run]
    seq_len = 2048
    [thresholds.GC001]
    max_overhead_pct = 40
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcdoctor.errors import UserError

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass
class RunConfig:
    command: str = "diagnose"
    model: str | None = None  # None: llama3-8b on a GPU, tiny-llama on the CPU
    layers: int | None = None  # truncate the decoder stack
    device: str | None = None  # None/auto, cpu, cuda[:N], musa[:N]
    dtype: str | None = None  # None: bf16 on a GPU, fp32 on the CPU
    seq_len: int | None = None  # None: 4096 on a GPU, 128 on the CPU
    batch_sizes: list[int] | None = None  # fixed list instead of the search
    max_batch: int = 256  # the search never goes beyond this
    target_batch: int | None = None  # the per-device batch the user wants to train at
    optimizer: str = "adamw"  # adamw | sgd
    warmup_steps: int = 1
    measure_steps: int = 3
    probes: list[str] | None = None  # None: every probe that applies
    probe_layers: int | None = None  # layers for the many-variant probes (granularity, offload, jitter)
    probe_batch: int = 1  # batch size of those probes
    profile: bool = True  # profile measured steps (traces + trace metrics)
    telemetry_hz: float = 20.0
    memory_limit_bytes: int | None = None  # injected allocation limit (testing, what-if)
    # what-if: the granularity probe adds this much host time (us) per dispatched op (docs/granularity.md)
    emulate_launch_us: float | None = None
    seed: int = 0
    out: str | None = None
    tui: bool | None = None  # None: on when stdout is a terminal
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    # several ranks (--nproc N, or a launch under torchrun): how the sweep shards the model
    nproc: int | None = None  # diagnose starts this many ranks on this host
    shard: str = "fsdp2"  # fsdp2 | zero3
    reshard_after_forward: bool = True  # FSDP2's setting (free gathered parameters after each unit's forward)
    checkpoint_impl: str = "transformers"  # under FSDP2: transformers (outside each unit) | checkpoint_wrapper

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_size(text: str | int | float, what: str = "size") -> int:
    """'48GB' -> 48e9, '80GiB' -> 80*2**30, '141e9' -> 141e9 bytes."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]i?[bB]?|[bB])?\s*", str(text))
        if not m:
            raise UserError(f"{what} {text!r}: expected a number of bytes such as 48GB, 80GiB or 141e9")
        value = float(m.group(1))
        unit = (m.group(2) or "").lower().rstrip("b")
        scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
                 "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}[unit]
        value *= scale
    if value <= 0:
        raise UserError(f"{what} {text!r}: must be positive")
    return int(value)


def parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UserError(f"--batch-sizes {text!r}: expected comma-separated positive integers, e.g. 1,2,4") from None
    if not sizes or sizes[0] < 1:
        raise UserError(f"--batch-sizes {text!r}: batch sizes must be positive integers")
    return sizes


def parse_threshold(text: str) -> tuple[str, str, float]:
    """'GC001.max_overhead_pct=40' -> ('GC001', 'max_overhead_pct', 40.0)."""
    m = re.fullmatch(r"([A-Za-z0-9_-]+)\.([A-Za-z0-9_]+)=(.+)", text.strip())
    if not m:
        raise UserError(f"--threshold {text!r}: expected RULE.name=value, e.g. GC001.max_overhead_pct=40")
    try:
        return m.group(1), m.group(2), float(m.group(3))
    except ValueError:
        raise UserError(f"--threshold {text!r}: {m.group(3)!r} is not a number") from None


def validate_thresholds(overrides: dict[str, dict[str, float]], source: str) -> None:
    from gcdoctor.engine import known_threshold_names
    from gcdoctor.rules import ALL_RULES
    known = known_threshold_names(ALL_RULES)
    for rule, values in overrides.items():
        if rule not in known and rule.upper() not in known:
            raise UserError(f"{source}: unknown rule {rule!r} (see `gcdoctor rules`)")
        names = known.get(rule) or known.get(rule.upper()) or set()
        for name in values:
            if name not in names:
                raise UserError(f"{source}: rule {rule} has no threshold {name!r} "
                                f"(it has: {', '.join(sorted(names)) or 'none'})")


def load_toml(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """(run settings, threshold overrides) from a TOML file; one-line errors for bad files."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file {path}: not found")
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"config file {path}: not valid TOML ({exc})") from None
    unknown = set(data) - {"run", "thresholds"}
    if unknown:
        raise UserError(f"config file {path}: unknown section(s) {', '.join(sorted(unknown))} (use [run], [thresholds.RULE])")
    run = data.get("run", {})
    names = {f.name for f in dataclasses.fields(RunConfig)} - {"thresholds", "command"}
    bad = set(run) - names
    if bad:
        raise UserError(f"config file {path}: unknown [run] key(s) {', '.join(sorted(bad))}")
    thresholds: dict[str, dict[str, float]] = {}
    for rule, values in data.get("thresholds", {}).items():
        if not isinstance(values, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()):
            raise UserError(f"config file {path}: [thresholds.{rule}] must hold numbers")
        thresholds[rule] = {k: float(v) for k, v in values.items()}
    validate_thresholds(thresholds, f"config file {path}")
    return run, thresholds
