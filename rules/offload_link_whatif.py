"""GC012 offload-link-whatif."""
from __future__ import annotations

from gcdoctor.types import EXPERIMENT, Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.offload import OffloadFacts, OffloadVariant


class OffloadLinkWhatIfRule(Rule):
    """What it checks:
    What each offload variant of the offload probe would cost on a host with a slower link (PCIe
    Gen4 x16, Gen3 x16): its copies per step at the bandwidth such a link allows (the bandwidth
    this run's pinned copies reached of its own link, scaled; pageable copies keep their measured
    host-bound pace where the link is faster), exposed as far as they outgrow the compute they
    overlapped here. It reports a variant that stalls the device for less than `min_stall_share`
    of its step here but at least that much on the slowest link, and checks the arithmetic on two
    measured points: the pinned variant's copies predicted at the bandwidth its pageable twin
    measured, against the pageable twin's measured step.

    Why it matters:
    An offload setting that is cheap on a PCIe Gen5 host can be expensive on the Gen4 or Gen3 host
    a job actually runs on; the copies per step do not change with the host, their time does.

    Evidence:
    Per offloading variant: copy bytes per step each way, copy time and its exposed part here, and
    on each link the bandwidth assumed, the copy time, the exposed copy time (and its lower bound if
    the overlapped share stayed), the predicted step and its slowdown over layer checkpointing
    alone. The check: predicted and measured step of the pageable twin and the error.

    How to fix:
    On a slower link prefer offload that overlaps with compute (DeepSpeed cpu_checkpointing on its
    own stream) over copies on the compute stream (save_on_cpu), pin host memory, offload only what
    the memory budget needs (fewer layers' checkpoints), or keep activations on the device with
    layer checkpointing.
    """

    code = "GC012"
    slug = "offload-link-whatif"
    title = "Offload on a slower host link"
    requires = ("offload",)
    scope = EXPERIMENT
    topic = "offload"
    defaults = {
        # GC020's "material" stall: a tenth of the step (run-to-run spread and telemetry gaps below it)
        "min_stall_share": 0.10,
        # the check on two measured points: beyond this error the what-if is not trusted
        "max_check_error_pct": 25.0,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        of = facts.offload
        if of is None:
            return [self.inconclusive(facts.missing_reason("offload"))]
        rows = [v for v in of.variants if v.link_whatif]
        if not rows:
            return [self.inconclusive(facts.missing_reason("offload.link_whatif"))]
        ev = _check_evidence(of)
        check = of.link_check
        pred = check.prediction if check is not None else None
        if check is not None and pred is not None and check.error_pct is not None \
                and abs(check.error_pct) > t["max_check_error_pct"]:
            return [self.inconclusive(
                f"the slower-link arithmetic missed its check: {check.source}'s copies at {check.target}'s measured "
                f"bandwidth predict {pred.step_ms:,.0f} ms, {check.target} measured "
                f"{check.measured_step_ms:,.0f} ms ({check.error_pct:+.0f}%)")]
        out = []
        for v in rows:
            here = v.exposed_copy_share if v.exposed_copy_share is not None else 0.0
            worst = v.link_whatif[-1]
            ev_v = _variant_evidence(v) + ev
            if here < t["min_stall_share"] and worst.stall_share is not None and worst.exposed_copy_ms is not None \
                    and worst.step_ms is not None and worst.exposed_copy_ms / worst.step_ms >= t["min_stall_share"]:
                out.append(self.fired(
                    "info", f"{v.variant}: {_pct(v.slowdown_pct)} here, predicted {_pct(worst.slowdown_pct)} on a "
                    f"{worst.link} host (copies exposed {worst.exposed_copy_ms:.0f} ms of {worst.step_ms:.0f} ms)",
                    ev_v, f"{v.variant} moves {_mb(v.h2d_bytes)} MB host-to-device and {_mb(v.d2h_bytes)} MB "
                    f"device-to-host per step; here they take {v.copy_ms:.1f} ms, {v.exposed_copy_ms:.1f} ms of it with "
                    f"no kernel beside it. At the {worst.h2d_gbs:.1f} GB/s a {worst.link} link allows they take "
                    f"{worst.copy_ms:.1f} ms, and the compute they hid behind here does not grow with them.",
                    "On such a host, offload less (fewer checkpoints on the host), keep copies off the compute "
                    "stream, or keep the activations on the device.", subject=f"offload/{v.variant}"))
            else:
                out.append(self.passed(
                    f"{v.variant}: {_pct(v.slowdown_pct)} here; " + ", ".join(
                        f"{w.link} {_pct(w.slowdown_pct)}" for w in v.link_whatif) + " predicted",
                    ev_v, subject=f"offload/{v.variant}"))
        return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+,.0f}%"


def _mb(x: float | None) -> str:
    return "?" if x is None else f"{x / 1e6:,.0f}"


def _variant_evidence(v: OffloadVariant) -> list[Evidence]:
    ev = [Evidence("copies per step, host-to-device / device-to-host", f"{_mb(v.h2d_bytes)} / {_mb(v.d2h_bytes)} MB"),
          Evidence("copy time here (exposed)", f"{v.copy_ms or 0:.1f} ms ({v.exposed_copy_ms or 0:.1f} ms)"),
          Evidence("step here", v.step_ms, "ms")]
    for w in v.link_whatif:
        low = ("" if w.exposed_copy_ms_if_overlap_scales is None or w.exposed_copy_ms is None
               or abs(w.exposed_copy_ms_if_overlap_scales - w.exposed_copy_ms) < 0.05
               else f", {w.exposed_copy_ms_if_overlap_scales:.1f} ms if the overlap scaled")
        ev.append(Evidence(f"{w.link}: {w.h2d_gbs:.1f} / {w.d2h_gbs:.1f} GB/s",
                           f"copies {w.copy_ms:.1f} ms, exposed {w.exposed_copy_ms:.1f} ms{low}; step "
                           f"{w.step_ms:,.1f} ms ({_pct(w.slowdown_pct)})"))
    return ev


def _check_evidence(of: OffloadFacts) -> list[Evidence]:
    c = of.link_check
    ev = [Evidence("copy bandwidth reached of this run's link (pinned)",
                   None if of.link_efficiency is None else 100 * of.link_efficiency, "%")]
    if c is None or c.prediction is None:
        return ev + [Evidence("check on two measured points", "not available (no pinned and pageable pair ran)")]
    return ev + [Evidence(f"check: {c.source} at {c.target}'s bandwidth, predicted / measured",
                          f"{c.prediction.step_ms:,.0f} / {c.measured_step_ms:,.0f} ms ({_pct(c.error_pct)})")]
