"""A variant clearly slower than its baseline (PATHOLOGICAL_RATIO x after its first timed step) is
timed once and labelled; a normal one is timed as many times as asked."""
import io
import time

from gcdoctor.config import RunConfig
from gcdoctor.run.capture import TrainingStep, _causal_lm_loss
from gcdoctor.run.console import ConsolePrinter
from gcdoctor.run.session import PATHOLOGICAL_RATIO, ProbeContext, Session, measurement_row


def _sleeping(seconds):
    def forward(model, ids):
        time.sleep(seconds)  # dominates the micro model's step, so the ratio does not depend on load
        return _causal_lm_loss(model, ids)
    return forward


def test_a_slow_variant_is_timed_once_and_a_normal_one_n_times(micro_llama, tmp_path):
    cfg = RunConfig(device="cpu", model=micro_llama, probes=["sweep"], seq_len=16, profile=False, measure_steps=4,
                    warmup_steps=1, out=str(tmp_path / "r"), telemetry_hz=5.0)
    s = Session(cfg)
    printed = io.StringIO()
    s.bus.subscribe(ConsolePrinter(printed))
    ctx = ProbeContext(s)
    model = ctx.build_model()

    def measure(variant, sleep_s, baseline=None):
        return ctx.measure("granularity", variant, lambda: TrainingStep(model, s.backend, 1, 16,
                                                                         forward=_sleeping(sleep_s)), 1,
                           compare_with=baseline)

    base = measure("none", 0.05)
    assert len(base.step_ms) == 4 and base.timed_once is None
    normal = measure("layer", 0.05, ("none", base.step_ms_median))
    assert len(normal.step_ms) == 4 and normal.timed_once is None
    # asleep for 1.5 times the threshold: on a loaded machine too, the first step is clearly slow
    slow = measure("fine", 1.5 * PATHOLOGICAL_RATIO * base.step_ms_median / 1e3, ("none", base.step_ms_median))
    assert len(slow.step_ms) == 1 and slow.step_ms_median == slow.step_ms[0]
    assert slow.timed_once.startswith("timed once, not 4 times: its first timed step (")
    assert f"x none's ({base.step_ms_median:.1f} ms)" in slow.timed_once
    assert slow.step_ms[0] >= PATHOLOGICAL_RATIO * base.step_ms_median
    assert slow.tokens_per_s is not None and slow.losses and len(slow.losses) == 1
    assert measurement_row(normal)["timed_once"] is None
    ratio = slow.step_ms[0] / base.step_ms_median
    assert measurement_row(slow)["timed_once"] == f"{ratio:.1f}x none's step"
    text = " ".join(printed.getvalue().split())  # the console wraps at 80 columns
    assert f"tokens_per_s {slow.tokens_per_s:.0f}, timed once ({ratio:.1f}x none's step)" in text
    assert text.count("timed once") == 1
