"""Facts: everything a rule may read, serialised to `facts.json`.

Facts are the contract between measuring and judging. This package never imports torch,
so recorded runs can be re-judged anywhere. Units are in the names; a value that was not
measured is None, with the reason in `Facts.unavailable` under its dotted path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcdoctor.facts.against import AgainstFacts
from gcdoctor.facts.distributed import DistributedFacts
from gcdoctor.facts.granularity import GranularityFacts
from gcdoctor.facts.jitter import JitterFacts
from gcdoctor.facts.memory import MemoryModelFacts
from gcdoctor.facts.monitor import MonitorFacts
from gcdoctor.facts.offload import OffloadFacts
from gcdoctor.facts.policies import PolicyFacts
from gcdoctor.facts.serde import from_dict, to_dict
from gcdoctor.facts.sweep import AllocatorFacts, Measurement, OomInfo, OptimizerFacts, SearchTrial, SweepFacts
from gcdoctor.facts.telemetry import SeriesSummary, TelemetryFacts
from gcdoctor.facts.trace import RankSummary, TraceMetrics
from gcdoctor.facts.watch import WatchFacts

SCHEMA_VERSION = 1


@dataclass
class Environment:
    """Where the numbers came from: a figure without its device and versions is not evidence."""

    device_kind: str = ""  # cuda | musa | cpu
    device_name: str = ""
    device_count: int | None = None
    total_memory_bytes: int | None = None
    driver: str | None = None
    runtime: str | None = None  # CUDA / MUSA runtime version
    torch: str | None = None
    transformers: str | None = None
    deepspeed: str | None = None
    torch_musa: str | None = None
    python: str | None = None
    host: str | None = None
    cpu_count: int | None = None
    host_memory_bytes: int | None = None
    peak_bf16_tflops: float | None = None  # from gcdoctor.model.hardware, None where unknown
    peak_fp32_tflops: float | None = None
    memory_bandwidth_gbs: float | None = None
    pcie_peak_gbs: float | None = None
    gcdoctor: str | None = None


@dataclass
class ModelInfo:
    name: str = ""
    source: str = ""  # registry name or config path
    architecture: str = ""
    n_layers: int = 0  # layers actually built
    n_layers_full: int = 0  # layers in the config
    hidden_size: int = 0
    intermediate_size: int = 0
    n_heads: int = 0
    n_kv_heads: int = 0
    vocab_size: int = 0
    n_params: int = 0  # of the model as built
    dtype: str = ""
    attn_implementation: str = ""


@dataclass
class RunSettings:
    command: str = "diagnose"
    seq_len: int = 0
    dtype: str = ""
    optimizer: str = "adamw"
    warmup_steps: int = 1
    measure_steps: int = 3
    probes: list[str] = field(default_factory=list)
    memory_limit_bytes: int | None = None  # --memory-limit: the allocation cap in force, if any
    started_at: str = ""  # ISO time
    finished_at: str | None = None
    wall_s: float | None = None
    interrupted: bool = False
    error: str | None = None


@dataclass
class ProfilerOverhead:
    """Step time with and without the profiler, same variant and batch."""

    variant: str = ""
    batch_size: int = 0
    unprofiled_step_ms: float | None = None
    profiled_step_ms: float | None = None

    @property
    def overhead_pct(self) -> float | None:
        if not self.unprofiled_step_ms or self.profiled_step_ms is None:
            return None
        return 100.0 * (self.profiled_step_ms / self.unprofiled_step_ms - 1.0)

PROBE_FAILED = "probe failed: "  # the prefix of a crashed probe's reason in `unavailable`


@dataclass
class Facts:
    schema_version: int = SCHEMA_VERSION
    environment: Environment = field(default_factory=Environment)
    settings: RunSettings = field(default_factory=RunSettings)
    model: ModelInfo | None = None
    sweep: SweepFacts | None = None
    memory_model: MemoryModelFacts | None = None
    allocator: AllocatorFacts | None = None  # the boundary per allocator, in fresh processes
    optimizer: OptimizerFacts | None = None  # the optimizer step's peak and the AdamW alternatives
    # metrics of profiled windows, keyed "<probe>/<variant>" or the trace file name
    trace: dict[str, TraceMetrics] = field(default_factory=dict)
    profiler_overhead: list[ProfilerOverhead] = field(default_factory=list)
    telemetry: TelemetryFacts | None = None
    granularity: GranularityFacts | None = None
    offload: OffloadFacts | None = None
    policies: PolicyFacts | None = None  # the policy search at the full model and the recipe's confirmation
    jitter: JitterFacts | None = None
    watch: WatchFacts | None = None
    monitor: MonitorFacts | None = None  # gcdoctor monitor: telemetry windows of another process's job
    ranks: RankSummary | None = None  # gcdoctor analyze DIR of per-rank traces: the cross-rank summary
    distributed: DistributedFacts | None = None  # a diagnose over N ranks (FSDP2 / ZeRO-3): every rank's numbers
    against: AgainstFacts | None = None  # a watched job held against a diagnose run's recipe (--against)
    unavailable: dict[str, str] = field(default_factory=dict)  # dotted path -> why not measured
    # probe name -> "ExcType: message": the probes that crashed, which make the run incomplete
    failed_probes: dict[str, str] = field(default_factory=dict)

    def probe_failed(self, name: str, error: str) -> None:
        """Record a crashed probe: incomplete (failed_probes), and the reason its facts are missing."""
        self.failed_probes[name] = error
        self.unavailable[name] = f"{PROBE_FAILED}{error}"

    def get(self, path: str) -> Any:
        """Value at a dotted path ('sweep.max_batch'), or None if any part is missing/empty."""
        obj: Any = self
        for part in path.split("."):
            if obj is None:
                return None
            obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
        if obj in ({}, []):
            return None
        return obj

    def missing_reason(self, path: str) -> str:
        """Why `path` has no value: the recorded reason of it or of a parent, or a default."""
        parts = path.split(".")
        for i in range(len(parts), 0, -1):
            reason = self.unavailable.get(".".join(parts[:i]))
            if reason:
                return reason
        return f"no {path} in the facts (its probe did not run)"

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Facts":
        """Typed (msgspec, strict) and range-checked: FactsDecodeError naming the field otherwise."""
        from gcdoctor.facts.serde import check_ranges
        facts = from_dict(cls, data)
        check_ranges(facts)
        for name, reason in facts.unavailable.items():  # recorded before failed_probes existed
            if "." not in name and reason.startswith(PROBE_FAILED):
                facts.failed_probes.setdefault(name, reason[len(PROBE_FAILED):])
        return facts

    def save(self, path: str | Path) -> None:
        """Write atomically (a unique temporary file, then a rename), so an interrupted run never
        leaves half a facts.json and two writers never share a temporary file."""
        import msgspec

        from gcdoctor.atomic import atomic_write_bytes
        from gcdoctor.facts.serde import to_json
        atomic_write_bytes(path, msgspec.json.format(to_json(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "Facts":
        """Read a facts.json; anything that is not one (bad JSON, wrong types, a schema from a
        newer gcdoctor) is a one-line UserError naming the file and the field."""
        import msgspec

        from gcdoctor.errors import UserError
        p = Path(path)
        try:
            data = msgspec.json.decode(p.read_bytes())
        except OSError as exc:
            raise UserError(f"{p}: cannot read ({exc.strerror or exc})") from None
        except (msgspec.DecodeError, RecursionError) as exc:
            raise UserError(f"{p}: not a valid gcdoctor facts file (not JSON: {str(exc).splitlines()[0][:200]})") from None
        if not isinstance(data, dict):
            raise UserError(f"{p}: not a valid gcdoctor facts file (expected a JSON object)")
        version = data.get("schema_version", SCHEMA_VERSION)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise UserError(f"{p}: not a valid gcdoctor facts file (schema_version {version!r})")
        if version > SCHEMA_VERSION:
            raise UserError(f"{p}: written by a newer gcdoctor (facts schema {version}; this one reads up to "
                            f"{SCHEMA_VERSION}): upgrade gcdoctor")
        try:
            return cls.from_dict(data)
        except (ValueError, TypeError, RecursionError) as exc:
            raise UserError(f"{p}: not a valid gcdoctor facts file ({str(exc).splitlines()[0][:300]})") from None


__all__ = [
    "AgainstFacts", "AllocatorFacts", "DistributedFacts", "Environment", "Facts", "GranularityFacts", "JitterFacts", "Measurement", "MemoryModelFacts",
    "ModelInfo", "MonitorFacts", "OffloadFacts", "OomInfo", "PolicyFacts", "OptimizerFacts", "ProfilerOverhead", "RunSettings", "SCHEMA_VERSION", "SearchTrial",
    "SeriesSummary", "SweepFacts", "TelemetryFacts", "TraceMetrics", "WatchFacts",
]
