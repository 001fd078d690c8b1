"""Facts of the offload probe: checkpointing combined with CPU offload, variant by variant.

No torch here. Each variant row holds its Measurement (median step, phases, peaks, telemetry
summary over the measured steps) and the numbers derived from it and from the trace of its two
profiled steps, per step, with units in the names. A value that was not measured is None and the
reason is in `Facts.unavailable` under "offload.<variant>.<field>" (or "offload.<field>").

`read_copies` and `stall_shares` turn one trace window into the copy and stall numbers; the rules
use them too, so a bare user trace is judged with the same arithmetic as a diagnose run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gcdoctor.facts.sweep import Measurement
from gcdoctor.facts.telemetry import SeriesSummary
from gcdoctor.facts.trace import TraceMetrics

OFFLOAD_DIRECTIONS = ("HtoD", "DtoH")  # host <-> device; DtoD and PtoP are not offload traffic


@dataclass
class CopyReading:
    """Host <-> device copies of one trace window, totals (not per step)."""

    h2d_bytes: int = 0
    d2h_bytes: int = 0
    h2d_us: float = 0.0
    d2h_us: float = 0.0
    pageable_bytes: int = 0
    pinned_bytes: int = 0
    pageable_us: float = 0.0
    overlap_us: float = 0.0  # copy time during which a kernel ran on some stream

    @property
    def bytes(self) -> int:
        return self.h2d_bytes + self.d2h_bytes

    @property
    def time_us(self) -> float:
        return self.h2d_us + self.d2h_us

    @property
    def exposed_us(self) -> float:
        """Copy time with no kernel running beside it: the device only moves data."""
        return max(self.time_us - self.overlap_us, 0.0)

    @property
    def pageable_share(self) -> float | None:
        """Of the copied bytes, the share whose host side was pageable memory."""
        return self.pageable_bytes / self.bytes if self.bytes else None

    def bandwidth_gbs(self, direction: str) -> float | None:
        b, us = (self.h2d_bytes, self.h2d_us) if direction == "HtoD" else (self.d2h_bytes, self.d2h_us)
        return b / us / 1e3 if us > 0 else None  # bytes/us = MB/s; /1e3 -> GB/s


def read_copies(tm: TraceMetrics) -> CopyReading:
    r = CopyReading()
    for direction in OFFLOAD_DIRECTIONS:
        cs = tm.memcpy.get(direction)
        if cs is None:
            continue
        if direction == "HtoD":
            r.h2d_bytes, r.h2d_us = cs.bytes, cs.time_us
        else:
            r.d2h_bytes, r.d2h_us = cs.bytes, cs.time_us
        r.pageable_bytes += cs.pageable_bytes
        r.pinned_bytes += cs.pinned_bytes
        r.pageable_us += cs.pageable_time_us
        r.overlap_us += cs.overlap_us
    return r


@dataclass
class StallShares:
    """Shares of the device window (time from the first to the last device op of the steps)."""

    exposed_copy_share: float  # host <-> device copies with no kernel beside them
    host_wait_share: float  # device idle, the next op not yet issued by the host
    idle_share: float | None  # all device idle time

    @property
    def stall_share(self) -> float:
        return self.exposed_copy_share + self.host_wait_share


def stall_shares(tm: TraceMetrics) -> StallShares | None:
    """None when the window has no device metrics (a CPU-only trace)."""
    if tm.device_unavailable or not tm.device_window_us:
        return None
    w = tm.device_window_us
    copies = read_copies(tm)
    return StallShares(exposed_copy_share=copies.exposed_us / w, host_wait_share=(tm.idle_host_wait_us or 0.0) / w,
                       idle_share=None if tm.idle_us is None else tm.idle_us / w)


def device_busy_share(tm: TraceMetrics | None) -> float | None:
    """Device busy time of a phase window over the phase's host time, at most 1. Low when the host
    spends the phase on work the device does not see (a CPU optimizer step); about 1 when the device
    runs what the phase launched."""
    if tm is None or tm.busy_us is None or not tm.wall_us:
        return None
    return min(tm.busy_us / tm.wall_us, 1.0)


def summary_value(telemetry: dict[str, SeriesSummary], series: str, stat: str) -> float | None:
    s = telemetry.get(series)
    return None if s is None or not s.n else getattr(s, stat)


@dataclass
class CheckpointOffloadCheck:
    """Did DeepSpeed's cpu_checkpointing really put the checkpoints (layer inputs) on the host?

    Three independent readings, each per step: the device-to-host bytes in the trace, DeepSpeed's
    own offload counters, and the device memory held after the forward compared with layer
    checkpointing on the device. GC020 judges them (`min_offloaded_ratio`); `detail` says what the
    deciding reading showed, or why there was none.
    """

    method: str = ""  # which reading decided
    detail: str = ""
    layer_input_bytes: int | None = None  # one checkpoint: batch x seq x hidden x dtype bytes
    n_checkpoints: int | None = None  # checkpointed layers per step
    kept_on_device: int | None = None  # newest checkpoints DeepSpeed keeps on the device
    expected_offload_bytes_per_step: int | None = None
    trace_d2h_bytes_per_step: float | None = None
    trace_h2d_bytes_per_step: float | None = None
    ds_offloaded_bytes_per_step: float | None = None
    ds_restored_bytes_per_step: float | None = None
    saved_after_forward_bytes: int | None = None  # this variant: allocated after forward+loss - before
    saved_after_forward_gc_bytes: int | None = None  # the same for layer checkpointing on the device


@dataclass
class LinkWhatIf:
    """One variant's copies on another host link (docs/offload.md, "What-if: a slower link").

    Each direction's copy bandwidth becomes min(the bandwidth measured, the run's link efficiency x
    the link's peak): pinned copies, which ran at the link's pace, slow down with the link; pageable
    copies, which ran at the host's staging pace, only where the link is slower still. The copy time
    that ran beside kernels is compute the copies can hide behind; two bounds on the exposed time:
    the overlapped time stays (every extra millisecond of copy is exposed: `exposed_copy_ms`, the
    prediction) or the overlapped share stays (`exposed_copy_ms_if_overlap_scales`, a lower bound).
    """

    link: str = ""  # e.g. "PCIe Gen4 x16", or "pageable copies as measured" for the check
    peak_gbs: float | None = None  # per direction
    h2d_gbs: float | None = None  # host-to-device copy bandwidth assumed
    d2h_gbs: float | None = None  # device-to-host copy bandwidth assumed
    copy_ms: float | None = None  # per step
    exposed_copy_ms: float | None = None  # copy time beyond what overlapped kernels here (the prediction)
    exposed_copy_ms_if_overlap_scales: float | None = None  # the overlapped share kept instead (a lower bound)
    step_ms: float | None = None  # measured step + the change in exposed copy time
    stall_share: float | None = None  # (host-wait idle + exposed copies) / predicted step, at most 1
    slowdown_pct: float | None = None  # vs the reference ("gc") as measured


@dataclass
class LinkCheck:
    """The link what-if checked on two measured points: a variant's copies predicted at the copy
    bandwidth its pageable twin measured, against the pageable twin's measured step."""

    source: str = ""  # the pinned variant the prediction starts from
    target: str = ""  # its pageable twin
    prediction: LinkWhatIf | None = None
    measured_step_ms: float | None = None  # the pageable twin's

    @property
    def error_pct(self) -> float | None:
        p = self.prediction.step_ms if self.prediction is not None else None
        if p is None or not self.measured_step_ms:
            return None
        return 100.0 * (p / self.measured_step_ms - 1.0)


@dataclass
class OffloadVariant:
    """One variant at the probe's batch size; derived numbers are per step."""

    variant: str
    description: str = ""
    engine: str = "torch"  # torch | deepspeed
    checkpointing: str = ""  # how checkpoints are taken (API call)
    on_host: str = ""  # what lives in host memory during the step
    offloads: bool = False  # moves data between host and device every step
    pin_memory: bool | None = None
    optimizer: str = ""  # e.g. torch AdamW (on the device), DeepSpeedCPUAdam (on the host)
    skipped: str | None = None  # why it did not run
    measurement: Measurement | None = None
    ds_config: str | None = None  # generated DeepSpeed config, file name in the run directory
    setup_s: float | None = None  # model build + engine init, CPU Adam compile excluded
    # timing
    step_ms: float | None = None
    forward_ms: float | None = None
    backward_ms: float | None = None
    optimizer_ms: float | None = None
    optimizer_share: float | None = None  # optimizer phase / step
    slowdown_pct: float | None = None  # step time vs the "gc" reference
    # memory
    peak_allocated_bytes: int | None = None  # device
    saved_after_forward_bytes: int | None = None  # device memory held for backward after forward+loss
    host_rss_before_bytes: int | None = None  # process RSS before the model was built
    host_rss_after_bytes: int | None = None  # after the measured steps, before anything was freed
    host_rss_max_bytes: int | None = None  # telemetry maximum over the measured steps
    host_state_bytes: int | None = None  # optimizer states held on the host (DeepSpeed)
    # trace of the profiled steps, per step
    trace_key: str | None = None
    profiled_steps: int | None = None
    h2d_bytes: float | None = None
    d2h_bytes: float | None = None
    h2d_ms: float | None = None
    d2h_ms: float | None = None
    pageable_bytes: float | None = None
    pinned_bytes: float | None = None
    pageable_share: float | None = None  # of the host <-> device bytes
    copy_ms: float | None = None  # host <-> device copies
    exposed_copy_ms: float | None = None  # of which no kernel ran beside them
    copy_overlap_share: float | None = None
    h2d_copy_gbs: float | None = None  # bandwidth while copying (bytes / copy time)
    d2h_copy_gbs: float | None = None
    device_window_ms: float | None = None
    device_idle_share: float | None = None
    host_wait_share: float | None = None  # device idle waiting for the host, of the device window
    exposed_copy_share: float | None = None
    stall_share: float | None = None  # exposed copies + host-wait idle
    # device busy time inside the optimizer phase / its host time: low when the host runs the optimizer
    optimizer_device_busy_share: float | None = None
    # telemetry over the measured steps
    pcie_tx_gbs_mean: float | None = None  # device -> host
    pcie_tx_gbs_max: float | None = None
    pcie_rx_gbs_mean: float | None = None  # host -> device
    pcie_rx_gbs_max: float | None = None
    pcie_peak_gbs: float | None = None  # per direction, the link's
    util_pct_mean: float | None = None
    util_pct_min: float | None = None
    cpu_pct_mean: float | None = None  # whole host, 0-100
    cpu_max_core_pct_mean: float | None = None
    proc_cpu_pct_mean: float | None = None  # this process, 100 = one core
    proc_cpu_pct_max: float | None = None
    ckpt_check: CheckpointOffloadCheck | None = None  # deepspeed-ckpt-cpu only
    link_whatif: list[LinkWhatIf] = field(default_factory=list)  # at OffloadFacts.whatif_links
    notes: list[str] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return self.measurement is not None and self.measurement.fits and self.step_ms is not None


@dataclass
class OffloadFacts:
    batch_size: int = 0
    seq_len: int = 0
    n_layers: int = 0
    dtype: str = ""
    reference: str = "gc"  # the variant the others are compared with
    warmup_steps: int = 0
    measure_steps: int = 0
    device_key: str = "gpu0"  # telemetry series prefix of the device
    host_cpus: int | None = None
    deepspeed: str | None = None  # version, when importable
    dist_backend: str | None = None
    cpu_adam_prebuilt: bool | None = None
    cpu_adam_cached: bool | None = None  # JIT build already in the torch extensions cache
    cpu_adam_load_s: float | None = None  # compile (first time) or load
    variants: list[OffloadVariant] = field(default_factory=list)
    # the link what-if: the links each variant is predicted on, the measured link's efficiency
    # (fastest pinned copy bandwidth / link peak) and the pinned -> pageable check
    whatif_links: list[str] = field(default_factory=list)
    link_efficiency: float | None = None
    link_check: LinkCheck | None = None
    notes: list[str] = field(default_factory=list)

    def get(self, variant: str) -> OffloadVariant | None:
        return next((v for v in self.variants if v.variant == variant), None)


# -- the link what-if ------------------------------------------------------------------------

# PCIe links a user may have instead (peak per direction after line encoding: gcdoctor.model.hardware)
WHATIF_LINKS = (("PCIe Gen4 x16", 4, 16), ("PCIe Gen3 x16", 3, 16))
# the pinned variant whose pageable twin checks the what-if on two measured points
LINK_CHECK_PAIR = ("gc+save_on_cpu-pinned", "gc+save_on_cpu-pageable")


def link_efficiency(of: OffloadFacts, peak_gbs: float | None) -> float | None:
    """The fastest pinned copy bandwidth of the run over the link's peak: what copies reach of it."""
    if not peak_gbs:
        return None
    rates = [r for v in of.variants if v.ran and v.pinned_bytes and not v.pageable_bytes
             for r in (v.h2d_copy_gbs, v.d2h_copy_gbs) if r]
    return min(max(rates) / peak_gbs, 1.0) if rates else None


def predict_on_link(v: OffloadVariant, h2d_gbs: float | None, d2h_gbs: float | None, link: str,
                    peak_gbs: float | None, reference_step_ms: float | None) -> LinkWhatIf | None:
    """`v`'s step with its copies at these bandwidths (GB/s); None without copy measurements."""
    step_ms = v.step_ms  # set whenever v.ran
    if not v.ran or step_ms is None or v.copy_ms is None or v.exposed_copy_ms is None or v.h2d_bytes is None \
            or v.d2h_bytes is None:
        return None
    copy = 0.0
    for nbytes, rate in ((v.h2d_bytes, h2d_gbs), (v.d2h_bytes, d2h_gbs)):
        if nbytes:
            if not rate:
                return None
            copy += nbytes / rate / 1e6  # bytes / (GB/s) -> ms
    overlapped = max(v.copy_ms - v.exposed_copy_ms, 0.0)
    share = overlapped / v.copy_ms if v.copy_ms > 0 else 0.0
    exposed = max(copy - overlapped, 0.0)
    step = step_ms + (exposed - v.exposed_copy_ms)
    host_wait = (v.host_wait_share or 0.0) * (v.device_window_ms or 0.0)
    return LinkWhatIf(
        link=link, peak_gbs=peak_gbs, h2d_gbs=h2d_gbs, d2h_gbs=d2h_gbs, copy_ms=copy, exposed_copy_ms=exposed,
        exposed_copy_ms_if_overlap_scales=copy * (1.0 - share), step_ms=step,
        stall_share=min((host_wait + exposed) / step, 1.0) if step > 0 else None,
        slowdown_pct=100.0 * (step / reference_step_ms - 1.0) if reference_step_ms else None)


def derive_link_whatif(of: OffloadFacts, peak_gbs: float | None) -> None:
    """Every offloading variant on the WHATIF_LINKS, and the pinned -> pageable check."""
    from gcdoctor.model.hardware import pcie_peak_gbs  # a table of constants, no torch

    of.link_efficiency = eff = link_efficiency(of, peak_gbs)
    of.whatif_links = [name for name, _, _ in WHATIF_LINKS]
    ref = of.get(of.reference)
    ref_ms = ref.step_ms if ref is not None and ref.ran else None
    for v in of.variants:
        v.link_whatif = []
        if not v.ran or not v.offloads or eff is None:
            continue
        for name, gen, lanes in WHATIF_LINKS:
            link = pcie_peak_gbs(gen, lanes)
            assert link is not None  # WHATIF_LINKS are generations the table knows
            rates = [min(r, eff * link) if r else None for r in (v.h2d_copy_gbs, v.d2h_copy_gbs)]
            p = predict_on_link(v, rates[0], rates[1], name, link, ref_ms)
            if p is not None:
                v.link_whatif.append(p)
    src, dst = (of.get(n) for n in LINK_CHECK_PAIR)
    of.link_check = None
    if src is not None and dst is not None and src.ran and dst.ran:
        p = predict_on_link(src, dst.h2d_copy_gbs, dst.d2h_copy_gbs, "pageable copies as measured", None, ref_ms)
        if p is not None:
            of.link_check = LinkCheck(source=src.variant, target=dst.variant, prediction=p,
                                      measured_step_ms=dst.step_ms)
