"""SVG snapshots of the main screens at 80x24 and 160x48, from recorded event streams of real runs
with a fixed clock (no wall-clock text, no live CPU numbers). Update after a deliberate change:
`pytest tests/test_tui_snapshots.py --snapshot-update`, then look at the SVGs."""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.run.events import MeasurementRecorded, StepMeasured, read_events
from gcdoctor.tui.replay import make_app

DATA = Path(__file__).parent / "data" / "tui"
DIAGNOSE = DATA / "diagnose-cpu-sweep.events.jsonl"
MONITOR = DATA / "monitor-cpu.events.jsonl"
H200 = Path(__file__).parents[1] / "samples" / "h200-llama3-8b-2layers-sweep" / "events.jsonl"
SIZES = [(80, 24), (160, 48)]


def mid_run() -> list:
    """The recording cut in the middle of the sweep: after the 12th row and two steps of the next point."""
    events, rows, steps = [], 0, 0
    for ev in read_events(str(DIAGNOSE)):
        events.append(ev)
        rows += isinstance(ev, MeasurementRecorded)
        steps += rows >= 12 and isinstance(ev, StepMeasured)
        if steps == 2:
            return events
    raise AssertionError("the recording is shorter than expected")


async def settle(pilot) -> None:
    await pilot.pause()
    pilot.app.flush()
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_diagnose_finished(snap_compare, size):
    assert snap_compare(make_app(read_events(str(DIAGNOSE))), terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_diagnose_finished_h200(snap_compare, size):
    """A real H200 run: every telemetry row measured (utilisation, memory, PCIe, power)."""
    assert snap_compare(make_app(read_events(str(H200))), terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_diagnose_mid_run(snap_compare, size):
    assert snap_compare(make_app(mid_run(), "diagnose"), terminal_size=size, run_before=settle)


def test_verdict_detail(snap_compare):
    assert snap_compare(make_app(read_events(str(DIAGNOSE))), press=["v", "enter"], run_before=settle)


def test_help(snap_compare):
    assert snap_compare(make_app(read_events(str(DIAGNOSE))), press=["question_mark"], run_before=settle)


def test_light_theme(snap_compare):
    async def light(pilot):
        pilot.app.theme = "textual-light"
        await settle(pilot)

    assert snap_compare(make_app(read_events(str(DIAGNOSE))), run_before=light)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_monitor_host_only(snap_compare, size):
    assert snap_compare(make_app(read_events(str(MONITOR))), terminal_size=size, run_before=settle)
