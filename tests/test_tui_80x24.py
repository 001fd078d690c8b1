"""The dashboard at 80x24, the floor docs/tui.md promises: the measurements table keeps every column
readable once the granularity variant names appear, the footer's `m Table` works after the run, and
the bottom line in the verdict panel is wrapped, never cut."""
from __future__ import annotations

from pathlib import Path

import asyncio

from gcdoctor.run.events import MeasurementRecorded, RunFinished, read_events
from gcdoctor.tui.replay import make_app

DIAGNOSE = Path(__file__).parent / "data" / "tui" / "diagnose-cpu-sweep.events.jsonl"
LONG = ["model/selective-attn", "synthetic-small/linear-reentrant", "synthetic-large/block-reentrant"]


def with_granularity(finished: bool) -> list:
    events = [e for e in read_events(str(DIAGNOSE)) if finished or not isinstance(e, RunFinished)]
    at = next(i for i, e in enumerate(events) if isinstance(e, RunFinished)) if finished else len(events)
    rows = [MeasurementRecorded("granularity", {"variant": v, "batch": 1, "step_ms": 12.5, "peak_gib": 0.25,
                                                "tokens_per_s": 1234.0, "mfu_pct": None, "fits": True}) for v in LONG]
    return events[:at] + rows + events[at:]


async def _settle(pilot) -> None:
    await pilot.pause()
    pilot.app.flush()
    await pilot.pause()


async def _t_the_measurements_table_keeps_every_column_once_long_variant_names_appear():
    from gcdoctor.tui.widgets import MeasurementsTable
    app = make_app(with_granularity(finished=False), "diagnose")
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        table = app.query_one(MeasurementsTable)
        widths = [c.get_render_width(table) for c in table.ordered_columns]
        assert sum(widths) <= table.scrollable_content_region.width  # every column on screen, no sideways scroll
        names = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        # every word of a long name is there, over more than one line of its row
        assert all(len(line) <= 14 for n in names for line in n.split("\n"))
        joined = [n.replace("\n", "") for n in names]
        assert [j.split(":")[-1] for j in joined[-3:]] == LONG


async def _t_after_the_run_m_shows_the_table_and_v_the_bottom_line_again():
    from gcdoctor.tui.widgets import MeasurementsTable
    app = make_app(with_granularity(finished=True), "diagnose")
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        table = app.query_one(MeasurementsTable)
        assert not table.display or table.region.width == 0
        await pilot.press("m")
        await _settle(pilot)
        assert table.region.width > 0 and app.focused is table
        await pilot.press("v")
        await _settle(pilot)
        assert table.region.width == 0 and app.focused.id == "verdicts"


async def _t_the_bottom_line_in_the_verdict_panel_is_wrapped_never_cut():
    from gcdoctor.tui.widgets import VerdictList
    app = make_app(with_granularity(finished=True), "diagnose")
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        panel = app.query_one(VerdictList)
        width = panel.scrollable_content_region.width
        texts = [str(panel.get_option_at_index(i).prompt) for i in range(panel.option_count)]
        bottom = texts[:next(i for i, t in enumerate(texts) if t.startswith("─ every verdict"))]
        assert bottom and bottom[0].startswith("Bottom line: ")
        assert all("…" not in t and len(t) <= width for t in bottom), bottom


def test_the_measurements_table_keeps_every_column_once_long_variant_names_appear():
    asyncio.run(_t_the_measurements_table_keeps_every_column_once_long_variant_names_appear())


def test_after_the_run_m_shows_the_table_and_v_the_bottom_line_again():
    asyncio.run(_t_after_the_run_m_shows_the_table_and_v_the_bottom_line_again())


def test_the_bottom_line_in_the_verdict_panel_is_wrapped_never_cut():
    asyncio.run(_t_the_bottom_line_in_the_verdict_panel_is_wrapped_never_cut())
