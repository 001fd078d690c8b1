"""The launch-cost what-if checked on the H200 (bench/gpu/wave3_whatif.sh): each emulated variant's
step predicted from the native run's facts against its measured step. Runs once the recorded runs
are under samples/h200-whatif/ (native, emu25, emu75, emu200: facts.json at least)."""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.facts import Facts
from gcdoctor.facts.granularity import emulation_check

DIR = Path(__file__).resolve().parents[1] / "samples" / "h200-whatif"
EMULATED = ("emu25", "emu75", "emu200")
pytestmark = pytest.mark.skipif(not (DIR / "native" / "facts.json").is_file(),
                                reason="the H200 what-if runs are not recorded yet (bench/gpu/wave3_whatif.sh)")


@pytest.fixture(scope="module")
def native():
    return Facts.load(DIR / "native" / "facts.json").granularity


@pytest.mark.parametrize("name", EMULATED)
def test_the_same_programs_are_compared(native, name):
    checks = emulation_check(native, Facts.load(DIR / name / "facts.json").granularity)
    assert len(checks) == 18
    for c in checks:
        assert c.launch_ops_per_step == c.emulated_launch_ops_per_step, (c.group, c.variant)


@pytest.mark.parametrize("name", EMULATED)
def test_the_whatif_moves_every_model_variant_toward_its_measured_step(native, name):
    """For the Llama variants (what a user's checkpointing policy is) the predicted step is nearer
    the measured emulated step than the native step is: the what-if carries information. How near
    (the error table) is recorded in docs/granularity.md, not asserted: on the H200 the model
    variants came within 9 % at +25 us but within 17 % only at +200 us, the synthetic blocks within 31 %."""
    checks = [c for c in emulation_check(native, Facts.load(DIR / name / "facts.json").granularity)
              if c.group == "model"]
    assert len(checks) == 8
    for c in checks:
        assert abs(c.predicted_step_ms - c.measured_step_ms) < abs(c.native_step_ms - c.measured_step_ms), c.variant


@pytest.mark.parametrize("name", EMULATED)
def test_the_microbenchmark_reads_the_emulated_cost_back(native, name):
    e = Facts.load(DIR / name / "facts.json").granularity.emulation
    assert e.readback_extra_us == pytest.approx(max(e.target_us, e.mode_cost_us), rel=0.10)
