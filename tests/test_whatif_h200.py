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
def test_every_variant_is_predicted_within_ten_percent(native, name):
    emulated = Facts.load(DIR / name / "facts.json").granularity
    checks = emulation_check(native, emulated)
    assert len(checks) == 18
    for c in checks:
        assert c.launch_ops_per_step == c.emulated_launch_ops_per_step, (c.group, c.variant)
        assert abs(c.error_pct) <= 10.0, (c.group, c.variant, c.predicted_step_ms, c.measured_step_ms)


@pytest.mark.parametrize("name", EMULATED)
def test_the_microbenchmark_reads_the_emulated_cost_back(native, name):
    e = Facts.load(DIR / name / "facts.json").granularity.emulation
    assert e.readback_extra_us == pytest.approx(max(e.target_us, e.mode_cost_us), rel=0.10)
