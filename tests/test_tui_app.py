"""The dashboard driven headless with Textual's pilot: a recorded stream from a real run, and a
real CPU session stopped with q."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gcdoctor.config import RunConfig
from gcdoctor.run.events import MeasurementRecorded, RunFinished, VerdictIssued, read_events
from gcdoctor.facts import Facts
from gcdoctor.tui.app import DashboardApp
from gcdoctor.tui.gauges import diagnose_rows
from gcdoctor.tui.screens import HelpScreen, VerdictScreen
from gcdoctor.tui.sources import ReplaySource, SessionSource
from gcdoctor.tui.widgets import MeasurementsTable, VerdictList

DATA = Path(__file__).parent / "data" / "tui"
DIAGNOSE = DATA / "diagnose-cpu-sweep.events.jsonl"


def recorded() -> list:
    return list(read_events(str(DIAGNOSE)))


def run(coro) -> None:
    asyncio.run(coro)


def test_replayed_run_fills_the_panels_and_shows_its_verdicts():
    events = recorded()
    rows = [e for e in events if isinstance(e, MeasurementRecorded)]
    verdicts = {e.verdict["code"] for e in events if isinstance(e, VerdictIssued)}
    finished = next(e for e in events if isinstance(e, RunFinished))

    async def go():
        app = DashboardApp(ReplaySource(events), clock=lambda: 0.0)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            app.flush()
            await pilot.pause()
            table = app.query_one(MeasurementsTable)
            assert table.row_count == len(rows)
            vl = app.query_one(VerdictList)
            assert {k[0] for k in vl.keys if k[0]} == verdicts
            # the run is over: the list leads with the bottom line, the same rows as the report
            assert str(vl.get_option_at_index(0).prompt).startswith("Bottom line: ")
            assert app.screen.has_class("-finished") and not app.query_one("#top").display
            cpu = {r.label: r for r in diagnose_rows(app.state, wide=False)}["CPU"]
            assert cpu.series == "cpu_pct"
            gpu = {r.label: r for r in diagnose_rows(app.state, wide=False)}["GPU util"]
            assert gpu.series is None and gpu.note == "CPU run"
            assert app._status()[0] == f"report: {finished.report_path} — press q to quit"

    run(go())


def test_enter_on_a_verdict_opens_its_evidence_and_recommendation():
    events = recorded()
    first = min((e.verdict for e in events if isinstance(e, VerdictIssued)),
                key=lambda v: {"critical": 0, "warning": 1, "info": 2, "ok": 3}[v["severity"]])

    async def go():
        app = DashboardApp(ReplaySource(events), clock=lambda: 0.0)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("v")
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, VerdictScreen)
            assert app.screen.verdict["headline"] == first["headline"]
            await pilot.press("escape")
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)

    run(go())


def test_q_mid_run_stops_the_session_and_writes_the_partial_run_directory(tmp_path: Path, micro_llama: str):
    from gcdoctor.run.session import Session

    out = tmp_path / "run"
    session = Session(RunConfig(device="cpu", model=micro_llama, probes=["sweep"], batch_sizes=[1, 2], seq_len=32,
                                out=str(out), profile=False, warmup_steps=1, measure_steps=50))
    source = SessionSource(session)

    async def go():
        app = DashboardApp(source)
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(1200):  # until a step has been measured (at most 60 s)
                await pilot.pause(0.05)
                if app.state.probe is not None and app.state.probe.point_steps_ms:
                    break
            assert app.state.probe.point_steps_ms, "no step was measured"
            await pilot.press("q")
            assert app.state.stopping
            assert session.stop_requested.is_set()
            for _ in range(1200):
                if source.done.is_set():
                    break
                await asyncio.sleep(0.05)
            await pilot.pause()
        assert app.return_code == 0

    run(go())
    source.join(30)
    assert source.error is None
    facts = Facts.load(out / "facts.json")
    assert facts.settings.interrupted is True
    assert (out / "report.md").exists()
    last = json.loads((out / "events.jsonl").read_text().splitlines()[-1])
    assert (last["type"], last["interrupted"]) == ("RunFinished", True)


def test_monitor_run_follows_a_run_directory_and_quits_without_waiting(tmp_path: Path):
    from gcdoctor.tui.alerts import LiveAlerts
    from gcdoctor.tui.sources import FollowSource

    (tmp_path / "events.jsonl").write_text(DIAGNOSE.read_text())
    rows = sum(isinstance(e, MeasurementRecorded) for e in recorded())
    source = FollowSource(tmp_path, alerts=LiveAlerts(), poll_s=0.02)

    async def go():
        app = DashboardApp(source, mode="follow", clock=lambda: 0.0)
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(400):
                await pilot.pause(0.05)
                if app.state.finished is not None:
                    break
            assert app.query_one(MeasurementsTable).row_count == rows
            await pilot.press("q")
            await pilot.pause()
        assert app.return_code == 0

    run(go())
    source.join(5)
    assert source.done.is_set()


def test_when_the_run_finishes_the_answer_is_highlighted_not_the_first_verdict_issued():
    """An experiment's critical verdict issued first keeps no hold on the list once the run is
    over: the bottom line's first verdict row is highlighted, the list at its top."""
    from gcdoctor.run.events import RunStarted
    events = [
        RunStarted("/tmp/r", "diagnose", {"model": "m"}, {"device_name": "d", "device_kind": "cuda"}),
        VerdictIssued({"code": "GC020", "slug": "offload-stall", "status": "fired", "severity": "critical",
                       "headline": "offload variant stalls", "subject": "save_on_cpu", "scope": "experiment",
                       "topic": "offload", "line": "CPU offload costs +191 % here"}),
        *[VerdictIssued({"code": f"GC04{i}", "slug": "x", "status": "inconclusive", "severity": "inconclusive",
                         "headline": f"not judged {i}", "subject": "", "scope": "configuration"})
          for i in range(8)],
        VerdictIssued({"code": "GC001", "slug": "recompute-overhead", "status": "passed", "severity": "ok",
                       "headline": "costs 23 %", "subject": "", "scope": "configuration",
                       "line": "checkpointing costs +23 % step time"}),
        RunFinished("/tmp/r", False, None, "/tmp/r/report.html"),
    ]

    async def go():
        app = DashboardApp(ReplaySource(events), clock=lambda: 0.0)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            app.flush()
            await pilot.pause()
            vl = app.query_one(VerdictList)
            assert vl.keys[vl.highlighted] == ("GC001", "")
            assert vl.keys.index(("GC001", "")) < vl.keys.index(("", "sep"))
            # below the answer: yours (the eight not judged) before the experiment's critical
            below = vl.keys[vl.keys.index(("", "sep")):]
            assert below.index(("GC040", "")) < below.index(("GC020", "save_on_cpu"))

    run(go())
