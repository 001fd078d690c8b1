"""The dashboard at 80x24, the floor docs/tui.md promises: the measurements table keeps every column
readable once the granularity variant names appear, the footer's `m Table` works after the run, and
the bottom line in the verdict panel is wrapped, never cut."""
from __future__ import annotations

from pathlib import Path

import asyncio

from textual.app import App

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


# -- the header and the probe panel: a field that does not fit is left out whole, never cut ----------
PROGRESS_WORDS = ("starting…", "preparing…", "building the model and the first step…", "between probes…")


def _lines(widget) -> list[str]:
    return widget.render().plain.split("\n")


def _readable(lines: list[str], width: int) -> None:
    for line in lines:
        assert len(line) <= width, (line, width)
        assert "…" not in line or line.strip() in PROGRESS_WORDS, line


def mid_run_long(finished: bool = False) -> list:
    """The recording at the first step of a point with a long variant name, a long probe description
    and a long run directory (the header and the probe panel at their fullest)."""
    import dataclasses
    from gcdoctor.run.events import ProbeStarted, Progress, RunStarted, StepMeasured
    events = []
    for ev in read_events(str(DIAGNOSE)):
        if isinstance(ev, RunStarted):
            ev = dataclasses.replace(ev, run_dir="/home/someone/experiments/gcdoctor-runs/2026-12-02T01-59-07-llama")
        if isinstance(ev, ProbeStarted):
            events.append(ProbeStarted("granularity", "what each checkpointing granularity costs and saves",
                                       total_units=6))
            events.append(Progress("granularity", LONG[2], 16, 2, 6, "measuring at the batch the sweep found"))
            events.append(StepMeasured("granularity", LONG[2], 16, 0, 1234.5, "warmup"))
            return events
        events.append(ev)
    raise AssertionError("no probe in the recording")


async def _t_header_and_probe_panel(events, mode, size=(80, 24)):
    from gcdoctor.tui.widgets import HeaderBar, ProbePanel
    app = make_app(events, mode)
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        header = app.query_one(HeaderBar)
        head = _lines(header)
        _readable(head, header.content_size.width)
        probe = app.query_one(ProbePanel)
        body = _lines(probe)
        _readable(body, probe.content_size.width)
        return head, body


def test_header_and_probe_panel_leave_fields_out_whole_at_80x24():
    head, body = asyncio.run(_t_header_and_probe_panel(mid_run_long(), "diagnose"))
    assert head[0].startswith("gcdoctor diagnose · tiny-llama (4 layers")
    assert "seq 128 · fp32" in head[0]
    assert head[1].startswith("cpu: x86_64")
    # the variant's whole name is on the panel, over two lines if it must be
    assert LONG[2] in "".join(body[1:3]).replace(" ", "") or any(LONG[2] in line for line in body)
    assert body[0] == "granularity"  # the description left out whole


def test_header_and_probe_panel_keep_every_field_on_a_wide_screen():
    head, body = asyncio.run(_t_header_and_probe_panel(mid_run_long(), "diagnose", size=(200, 40)))
    assert "probes " in head[0] and "adamw" in head[0].lower()
    assert "torch " in head[1] and "run /home/someone/" in head[1]
    assert "what each checkpointing granularity costs and saves" in body[0]
    assert "measuring at the batch the sweep found" in body[1]


def test_the_h200_header_at_80x24():
    from gcdoctor.tui.widgets import HeaderBar
    h200 = Path(__file__).parents[1] / "samples" / "h200-llama3-8b-2layers-sweep" / "events.jsonl"

    async def go():
        app = make_app(read_events(str(h200)))
        async with app.run_test(size=(80, 24)) as pilot:
            await _settle(pilot)
            header = app.query_one(HeaderBar)
            head = _lines(header)
            _readable(head, header.content_size.width)
            return head

    head = asyncio.run(go())
    assert head[1].startswith("cuda: NVIDIA H200 (150 GB)") and "run /tmp/early" in head[1]


def test_fit_fields_leaves_out_whole_fields_highest_rank_first_and_wrap_text_keeps_every_character():
    from gcdoctor.tui.render import fit_fields, wrap_text
    fields = [(0, ["model"]), (4, ["adamw", ""]), (1, ["run /tmp/x", ""]), (2, ["torch 2.13 runtime 1", "torch 2.13", ""])]
    assert fit_fields(fields, 80) == "model · adamw · run /tmp/x · torch 2.13 runtime 1"
    assert fit_fields(fields, 40) == "model · adamw · run /tmp/x · torch 2.13"  # given back: it fits
    assert fit_fields(fields, 36) == "model · run /tmp/x · torch 2.13"
    assert fit_fields(fields, 20) == "model · run /tmp/x"
    assert fit_fields(fields, 3) == "model"  # nothing left to leave out: wider than asked
    lines = wrap_text("report: /home/someone/gcdoctor-runs/2026-12-02T01-59-07/report.html", 20)
    assert all(len(x) <= 20 for x in lines) and "".join(lines).replace(" ", "") == \
        "report:/home/someone/gcdoctor-runs/2026-12-02T01-59-07/report.html"


# -- the policies probe's settings ("policy/allocator/optimizer") at 80x24 ------------------------------
KEYS = ["none/default/adamw", "layer/expandable/adamw-fused", "selective-attn/expandable/adamw-fused"]


def with_policies(finished: bool) -> list:
    from gcdoctor.run.events import VerdictIssued
    events = [e for e in read_events(str(DIAGNOSE)) if finished or not isinstance(e, RunFinished)]
    at = next(i for i, e in enumerate(events) if isinstance(e, RunFinished)) if finished else len(events)
    rows = [MeasurementRecorded("policies", {"variant": k, "batch": 8, "step_ms": 1234.5, "peak_gib": 12.25,
                                             "tokens_per_s": 1234.0, "mfu_pct": None, "fits": True}) for k in KEYS]
    verdict = VerdictIssued({"code": "GC007", "severity": "warning", "status": "fired", "subject": "",
                             "headline": f"The fastest setting per token is {KEYS[2]} at micro-batch 8"})
    return events[:at] + rows + [verdict] + events[at:]


async def _t_policies(finished: bool):
    from gcdoctor.tui.widgets import MeasurementsTable, VerdictList
    app = make_app(with_policies(finished), "diagnose")
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        if finished:  # the table beside the bottom line: the verdict panel is at its narrowest
            await pilot.press("m")
            await _settle(pilot)
        table = app.query_one(MeasurementsTable)
        widths = [c.get_render_width(table) for c in table.ordered_columns]
        assert sum(widths) <= table.scrollable_content_region.width
        names = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert all(len(line) <= 14 for n in names for line in n.split("\n"))
        assert [n.replace("\n", "") for n in names[-3:]] == [f"policies:{k}" for k in KEYS]
        panel = app.query_one(VerdictList)
        width = panel.scrollable_content_region.width
        texts = [str(panel.get_option_at_index(i).prompt) for i in range(panel.option_count)]
        if finished:  # every row of the bottom line as written, none re-wrapped by the list
            bottom = texts[:next(i for i, t in enumerate(texts) if t.startswith("─ every verdict"))]
            assert bottom[0].startswith("Bottom line: ")
            assert all("…" not in t and len(t) <= width for t in bottom), (width, bottom)
        assert any(KEYS[2] in t for t in texts)


def test_the_policies_settings_in_the_table_and_the_verdicts_mid_run():
    asyncio.run(_t_policies(finished=False))


def test_the_policies_settings_beside_the_bottom_line_after_the_run():
    asyncio.run(_t_policies(finished=True))


def _status_bar_after_a_run(report_path: str) -> tuple[str, int, int]:
    """The replayed diagnose at 80x24 with its report at `report_path`: the status bar's text, its
    width and its height once the run has finished."""
    import dataclasses
    from gcdoctor.tui.widgets import StatusBar
    events = [dataclasses.replace(e, report_path=report_path) if isinstance(e, RunFinished) else e
              for e in read_events(str(DIAGNOSE))]

    async def go():
        app = make_app(events, "diagnose")
        async with app.run_test(size=(80, 24)) as pilot:
            await _settle(pilot)
            bar = app.query_one(StatusBar)
            return bar.render().plain, bar.content_size.width, bar.size.height

    return asyncio.run(go())


def test_the_status_line_leaves_out_the_key_hint_before_it_cuts_the_report_path():
    path = "/home/someone/experiments/gcdoctor-runs/2026-12-02/report.html"
    line, width, height = _status_bar_after_a_run(path)
    assert line == f"report: {path}" and len(line) <= width and height == 1


def test_a_report_path_wider_than_the_screen_wraps_whole_onto_a_second_status_line():
    path = "/home/someone/experiments/a-rather-long-project-name/gcdoctor-runs/2026-12-02T05-40-00/report.html"
    text, width, height = _status_bar_after_a_run(path)
    lines = text.split("\n")
    assert len(lines) == 2 and height == 2
    assert all(len(t) <= width for t in lines) and "…" not in text
    assert "".join(lines) == f"report: {path}"


def test_an_unavailable_gauges_long_note_wraps_under_itself():
    from gcdoctor.tui.gauges import GaugeRow
    from gcdoctor.tui.state import DashboardState
    from gcdoctor.tui.widgets import GaugePanel
    note = "NVML cannot read the PCIe counters on this driver (nvmlDeviceGetFieldValues returned NOT_SUPPORTED)"
    rows = [GaugeRow("PCIe H→D", None, None, "", note), GaugeRow("CPU", None, None, "", "")]

    class One(App):
        def compose(self):
            yield GaugePanel(DashboardState(), lambda: rows, id="g")

    async def go():
        app = One()
        async with app.run_test(size=(50, 12)) as pilot:
            await pilot.pause()
            panel = app.query_one(GaugePanel)
            return panel.render().plain, panel.content_size.width

    text, width = asyncio.run(go())
    lines = text.split("\n")
    assert lines[0].startswith("PCIe H→D unavailable (NVML ") and lines[-1] == "CPU      unavailable"
    assert len(lines) > 2 and all(len(t) <= width for t in lines) and "…" not in text
    assert all(t.startswith(" " * 9) for t in lines[1:-1])
    assert " ".join(t.strip() for t in lines[:-1]) == f"PCIe H→D unavailable ({note})"
