"""RunConfig (what a run does) and thresholds, from the command line and an optional TOML file.

A TOML file may hold `[run]` keys with the names of RunConfig's fields and `[thresholds.CODE]`
(or `[thresholds.slug]`) tables overriding rule defaults:

    [run]
    seq_len = 2048
    memory_limit_bytes = "48GB"
    [thresholds.GC001]
    max_overhead_pct = 40

RunConfig is frozen and checks itself in one place (`__post_init__`): every size, count, rate and
seed against its range, before any work starts. The TOML file is decoded strictly (msgspec): a
wrong type or an unknown key is one line naming it (exit code 2), never a traceback.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import msgspec

from gcdoctor import experiments
from gcdoctor.errors import UserError

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

# ranges of what a run can be asked to do: beyond them a request is a typo, not a workload
MAX_SEQ_LEN = 1 << 20  # 1,048,576 tokens
MAX_BATCH = 1 << 20
MAX_LAYERS = 10_000
MAX_STEPS = 10_000
MAX_TELEMETRY_HZ = 1000.0
MIN_TELEMETRY_HZ = 0.01  # a sample every 100 s; slower is no time series (and 1e-300 Hz overflows a period)
MAX_SEED = (1 << 32) - 1  # what every RNG gcdoctor seeds (torch, numpy, random) accepts
MAX_BYTES = 1 << 60  # an exabyte: beyond any device or host
DEVICE_RE = re.compile(r"auto|cpu|(cuda|musa)(:\d{1,3})?")

# field -> the command-line flag that sets it, for one-line errors that say what to change
FLAGS = {"layers": "--layers", "seq_len": "--seq-len", "batch_sizes": "--batch-sizes", "max_batch": "--max-batch",
         "target_batch": "--target-batch", "global_batch": "--global-batch", "warmup_steps": "--warmup", "measure_steps": "--steps",
         "probe_layers": "--probe-layers", "probe_batch": "--probe-batch", "telemetry_hz": "--telemetry-hz",
         "memory_limit_bytes": "--memory-limit", "seed": "--seed", "probes": "--probes", "device": "--device",
         "dtype": "--dtype", "optimizer": "--optimizer", "model": "--model", "out": "--out"}


def _name(f: str) -> str:
    return FLAGS.get(f, f)


def _int_in(cfg: Any, f: str, lo: int, hi: int, optional: bool = True) -> None:
    v = getattr(cfg, f)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, int):
        raise UserError(f"{_name(f)} {v!r}: expected an integer")
    if not lo <= v <= hi:
        raise UserError(f"{_name(f)} {v}: must be between {lo:,} and {hi:,}")


@dataclass(frozen=True)
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
    # the global batch the user trains at (micro-batch x accumulation x devices): the recipe may accumulate
    global_batch: int | None = None
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
    memory_snapshot: bool = False  # record the allocator's history at the sweep's peak point (CUDA/MUSA)
    seed: int = 0
    out: str | None = None
    force: bool = False  # --force: empty a non-empty --out (a finished run) first instead of refusing it
    tui: bool | None = None  # None: on when stdout is a terminal
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    # several ranks (--nproc N, or a launch under torchrun): how the sweep shards the model
    nproc: int | None = None  # diagnose starts this many ranks on this host
    shard: str = "fsdp2"  # fsdp2 | zero3
    reshard_after_forward: bool = True  # FSDP2's setting (free gathered parameters after each unit's forward)
    checkpoint_impl: str = "transformers"  # under FSDP2: transformers (outside each unit) | checkpoint_wrapper

    def __post_init__(self) -> None:
        """The one place a run's settings are checked: ranges, types, known names."""
        _check_names(self)
        _check_counts(self)
        _check_lists(self)
        _check_sharding(self)
        _check_rates(self)
        _check_flags(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)


def _one_of(value: Any, flag: str, allowed: tuple[str, ...], said: str) -> None:
    if value not in allowed:
        raise UserError(f"{flag} {value!r}: use {said}")


def _check_names(cfg: RunConfig) -> None:
    for f in ("model", "device", "dtype", "out", "command", "optimizer"):
        v = getattr(cfg, f)
        if v is not None and not isinstance(v, str):
            raise UserError(f"{_name(f)} {v!r}: expected a string")
    if cfg.model is not None and not cfg.model.strip():
        raise UserError("--model '': name an embedded model (`gcdoctor models`) or a config.json")
    if cfg.device is not None and not DEVICE_RE.fullmatch(cfg.device.lower()):
        raise UserError(f"--device {cfg.device!r}: expected cpu, cuda, cuda:N, musa or musa:N (or auto)")
    if cfg.dtype is not None:
        _one_of(cfg.dtype, "--dtype", ("bf16", "fp16", "fp32"), "bf16, fp16 or fp32")
    _one_of(cfg.optimizer, "--optimizer", ("adamw", "sgd"), "adamw or sgd")


def _check_counts(cfg: RunConfig) -> None:
    _int_in(cfg, "layers", 1, MAX_LAYERS)
    _int_in(cfg, "seq_len", 2, MAX_SEQ_LEN)
    _int_in(cfg, "max_batch", 1, MAX_BATCH, optional=False)
    _int_in(cfg, "target_batch", 1, MAX_BATCH)
    _int_in(cfg, "global_batch", 1, MAX_BATCH)
    if cfg.target_batch is not None and cfg.global_batch is not None:
        raise UserError("--target-batch and --global-batch: give one (the per-device batch, or the global "
                        "batch that gradient accumulation may reach)")
    _int_in(cfg, "warmup_steps", 0, MAX_STEPS, optional=False)
    _int_in(cfg, "measure_steps", 1, MAX_STEPS, optional=False)
    _int_in(cfg, "probe_layers", 1, MAX_LAYERS)
    _int_in(cfg, "probe_batch", 1, MAX_BATCH, optional=False)
    _int_in(cfg, "seed", 0, MAX_SEED, optional=False)
    _int_in(cfg, "memory_limit_bytes", 1, MAX_BYTES)


def _is_batch(b: Any) -> bool:
    return isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= MAX_BATCH


def _check_lists(cfg: RunConfig) -> None:
    sizes = cfg.batch_sizes
    if sizes is not None and (not isinstance(sizes, list) or not sizes or not all(_is_batch(b) for b in sizes)):
        raise UserError(f"--batch-sizes {sizes!r}: expected positive integers up to {MAX_BATCH:,}")
    probes = cfg.probes
    if probes is None:
        return
    if not isinstance(probes, list) or not all(isinstance(p, str) for p in probes):
        raise UserError(f"--probes {probes!r}: expected probe names")
    if not probes:
        raise UserError(f"--probes: no probe named (available: {', '.join(PROBE_NAMES)})")


def _check_sharding(cfg: RunConfig) -> None:
    _int_in(cfg, "nproc", 1, 4096)
    _one_of(cfg.shard, "--shard", ("fsdp2", "zero3"), "fsdp2 or zero3")
    _one_of(cfg.checkpoint_impl, "--checkpoint-impl", ("transformers", "checkpoint_wrapper"),
            "transformers or checkpoint_wrapper")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_rates(cfg: RunConfig) -> None:
    e = cfg.emulate_launch_us
    if e is not None:
        if not _is_number(e):
            raise UserError(f"--emulate-launch-us {e!r}: expected a number")
        if not math.isfinite(e) or not 0 <= e <= 100_000:
            raise UserError(f"--emulate-launch-us {e:g}: use 0 to 100000 microseconds")
    hz = cfg.telemetry_hz
    if not _is_number(hz) or not math.isfinite(hz) or not MIN_TELEMETRY_HZ <= hz <= MAX_TELEMETRY_HZ:
        raise UserError(f"--telemetry-hz {hz!r}: use a rate from {MIN_TELEMETRY_HZ:g} to {MAX_TELEMETRY_HZ:g} Hz")


def _check_flags(cfg: RunConfig) -> None:
    if not isinstance(cfg.profile, bool):
        raise UserError(f"profile {cfg.profile!r}: expected true or false")
    if cfg.tui is not None and not isinstance(cfg.tui, bool):
        raise UserError(f"tui {cfg.tui!r}: expected true or false")


_UNITS = {
    "": 1, "b": 1,
    "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
    "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int | float, what: str = "size", minimum: int = 1) -> int:
    """The one size parser: '48GB' -> 48e9, '80GiB' -> 80*2**30, '49152MiB', '141e9' or a plain number.

    Single-letter suffixes ('48G') are refused: GB and GiB differ by 7%, which is a batch size.
    Refused too: not a number, not finite, below `minimum`, above an exabyte.
    """
    if isinstance(text, bool):
        raise UserError(f"{what} {text!r}: expected a size such as 48GB, 80GiB or 141e9")
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise UserError(f"{what} {text!r}: expected a size such as 48GB, 80GiB or 141e9")
        value, unit = float(m.group(1)), m.group(2).lower()
        if unit not in _UNITS:
            hint = f" (say {unit.upper()}B or {unit.upper()}iB)" if unit in ("k", "m", "g", "t") else ""
            raise UserError(f"{what} {text!r}: unknown unit {m.group(2)!r}{hint}; "
                            f"use B, KB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2)")
    nbytes = value * _UNITS[unit]
    if not math.isfinite(nbytes):
        raise UserError(f"{what} {text!r}: not a finite size")
    if nbytes < minimum:
        raise UserError(f"{what} {text!r}: must be at least {minimum:,} bytes")
    if nbytes > MAX_BYTES:
        raise UserError(f"{what} {text!r}: {nbytes:.3g} bytes is beyond any device")
    return int(nbytes)


def parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UserError(f"--batch-sizes {text!r}: expected comma-separated positive integers, e.g. 1,2,4") from None
    if not sizes or sizes[0] < 1 or sizes[-1] > MAX_BATCH:
        raise UserError(f"--batch-sizes {text!r}: batch sizes must be positive integers up to {MAX_BATCH:,}")
    return sizes


PROBE_NAMES = experiments.PROBE_NAMES  # the probes, in the order they run


def parse_probes(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise UserError(f"--probes {text!r}: no probe named (available: {', '.join(PROBE_NAMES)})")
    return names


def parse_threshold(text: str) -> tuple[str, str, float]:
    """'GC001.max_overhead_pct=40' -> ('GC001', 'max_overhead_pct', 40.0)."""
    m = re.fullmatch(r"([A-Za-z0-9_-]+)\.([A-Za-z0-9_]+)=(.+)", text.strip())
    if not m:
        raise UserError(f"--threshold {text!r}: expected RULE.name=value, e.g. GC001.max_overhead_pct=40")
    try:
        value = float(m.group(3))
    except ValueError:
        raise UserError(f"--threshold {text!r}: {m.group(3)!r} is not a number") from None
    if not math.isfinite(value):
        raise UserError(f"--threshold {text!r}: a threshold must be a finite number")
    return m.group(1), m.group(2), value


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


def _toml_run_fields() -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(RunConfig) if f.name not in ("thresholds", "command", "tui", "force")}


def _one_line(exc: msgspec.ValidationError) -> str:
    # "Expected `int`, got `str` - at `$.seq_len`" -> "seq_len: expected int, got str"
    text = str(exc).splitlines()[0]
    m = re.fullmatch(r"(.*?) - at `\$\.?(.*)`", text)
    msg, where = (m.group(1), m.group(2)) if m else (text, "")
    msg = msg.replace("`", "")
    msg = msg[:1].lower() + msg[1:]
    return f"{where}: {msg}" if where else msg


def decode_run_table(run: dict[str, Any], source: str) -> dict[str, Any]:
    """A `[run]` table as RunConfig keyword arguments, each value of its field's exact type."""
    fields = _toml_run_fields()
    bad = sorted(set(run) - set(fields))
    if bad:
        raise UserError(f"{source}: unknown [run] key(s) {', '.join(bad)} (known: {', '.join(sorted(fields))})")
    run = dict(run)
    if "memory_limit_bytes" in run and isinstance(run["memory_limit_bytes"], str):
        run["memory_limit_bytes"] = parse_size(run["memory_limit_bytes"], f"{source}: [run] memory_limit_bytes")
    hints = get_type_hints(RunConfig)
    spec = msgspec.defstruct("Run", [(name, hints[name]) for name in fields if name in run],
                             forbid_unknown_fields=True, kw_only=True)
    try:
        decoded = msgspec.convert(run, spec, strict=True)
    except msgspec.ValidationError as exc:
        raise UserError(f"{source}: [run] {_one_line(exc)}") from None
    return {name: getattr(decoded, name) for name in run}


def load_toml(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """(run settings, threshold overrides) from a TOML file; one-line errors for bad files."""
    p = Path(path)
    source = f"config file {path}"
    if not p.is_file():
        raise UserError(f"{source}: not found")
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{source}: not valid TOML ({str(exc).splitlines()[0]})") from None
    except OSError as exc:
        raise UserError(f"{source}: cannot read ({exc.strerror})") from None
    unknown = set(data) - {"run", "thresholds"}
    if unknown:
        raise UserError(f"{source}: unknown section(s) {', '.join(sorted(unknown))} (use [run], [thresholds.RULE])")
    run_table = data.get("run", {})
    if not isinstance(run_table, dict):
        raise UserError(f"{source}: run = {run_table!r}: expected a [run] table")
    table = data.get("thresholds", {})
    if not isinstance(table, dict):
        raise UserError(f"{source}: thresholds = {table!r}: expected [thresholds.RULE] tables of numbers")
    thresholds: dict[str, dict[str, float]] = {}
    for rule, values in table.items():
        if not isinstance(values, dict):
            raise UserError(f"{source}: thresholds.{rule} = {values!r}: expected a [thresholds.{rule}] table of numbers")
        for name, v in values.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise UserError(f"{source}: thresholds.{rule}.{name} = {v!r}: expected a finite number")
        thresholds[rule] = {k: float(v) for k, v in values.items()}
    run = decode_run_table(run_table, source)
    validate_thresholds(thresholds, source)
    return run, thresholds
