"""The live dashboard: `gcdoctor diagnose` on a terminal, `gcdoctor monitor`, `monitor --run DIR`.

Events reach the app through `sink`, from any thread. Telemetry samples (20 Hz from the
sampler thread) go into a deque and are drawn on a 4 Hz timer; every other event is posted
as a message (post_message is thread-safe and does not block the session). See
docs/references.md section 7.
"""
from __future__ import annotations

import functools
import time
from collections import deque
from typing import Any, Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Footer, OptionList, Static

from gcdoctor.run.events import TelemetrySampled
from gcdoctor.tui.gauges import GaugeRow, device_rows, diagnose_rows, host_rows
from gcdoctor.tui.render import Field, fmt_bytes, fmt_seconds
from gcdoctor.tui.screens import HelpScreen, VerdictScreen
from gcdoctor.tui.sources import Source
from gcdoctor.tui.state import DashboardState
from gcdoctor.tui.widgets import (GaugePanel, HeaderBar, LogPane, MeasurementsTable, ProbePanel, StatusBar,
                                  VerdictDetail, VerdictList)

WIDE_COLUMNS = 120  # from here on: more telemetry rows, the verdict detail beside the list


class EventArrived(Message):
    """A session event other than a telemetry sample, forwarded to the UI thread."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event


class SourceDone(Message):
    """The source's thread has ended (the run directory is complete)."""


class DashboardApp(App[None]):
    """mode: 'diagnose' (a live session or a replay), 'follow' (monitor --run), 'monitor'."""

    CSS_PATH = "app.tcss"
    TITLE = "gcdoctor"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_COLUMNS, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]
    BINDINGS = [
        Binding("q", "request_quit", "Quit"),
        Binding("ctrl+c", "request_quit", "Quit", show=False, priority=True),
        Binding("ctrl+q", "request_quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("v", "focus_panel('verdicts')", "Verdicts"),
        Binding("m", "focus_panel('measurements')", "Table"),
        Binding("l", "focus_panel('log')", "Log"),
        Binding("t", "toggle_theme", "Theme"),
    ]

    def __init__(self, source: Source, mode: str = "diagnose", clock: Callable[[], float] = time.monotonic,
                 monitor: Any = None, tick_s: float = 0.25) -> None:
        super().__init__()
        self.source = source
        self.mode = mode
        self.monitor = monitor  # MonitorSession: its processes list, its unavailable reasons
        self.state = DashboardState(clock=clock)
        self.tick_s = tick_s  # telemetry redraw period: 4 Hz
        self._inbox: deque[TelemetrySampled] = deque()
        self._device_panels: dict[str, GaugePanel] = {}
        self._wide = False

    # -- layout ----------------------------------------------------------------------------------
    @property
    def wide(self) -> bool:
        return self.size.width >= WIDE_COLUMNS

    def compose(self) -> ComposeResult:
        yield HeaderBar(self.state, self._header_lines, id="header")
        if self.mode == "monitor":
            with Horizontal(id="middle"):
                yield VerticalScroll(id="devices")
                with Vertical(id="side"):
                    yield GaugePanel(self.state, lambda: host_rows(self.state, True, with_process=False),
                                     id="host", classes="box")
                    yield VerdictList(self.state, "No warnings: GC040 and GC041 watch the last 5 s.",
                                      id="verdicts", classes="box")
                    yield VerticalScroll(VerdictDetail("No warning yet. The highlighted warning is shown here in "
                                                       "full.", id="detail"), id="detail-box", classes="box")
        else:
            with Horizontal(id="top"):
                yield GaugePanel(self.state, lambda: diagnose_rows(self.state, self.wide), id="telemetry",
                                 classes="box")
                yield ProbePanel(self.state, id="probe", classes="box")
            with Horizontal(id="middle"):
                yield MeasurementsTable(self.state, id="measurements", classes="box")
                yield VerdictList(self.state, id="verdicts", classes="box")
                yield VerticalScroll(VerdictDetail(id="detail"), id="detail-box", classes="box")
        yield LogPane(self.state, id="log", classes="box")
        yield StatusBar(self.state, self._status, id="status")
        yield Footer()

    def on_mount(self) -> None:
        titles = {"telemetry": "telemetry", "probe": "probe", "measurements": "measurements",
                  "verdicts": "warnings" if self.mode == "monitor" else "verdicts", "detail-box": "detail",
                  "log": "log", "host": "host", "devices": "GPUs"}
        for wid, title in titles.items():
            for w in self.query(f"#{wid}"):
                w.border_title = title
        self._wide = self.wide
        self.set_interval(self.tick_s, self.flush)
        self.source.start(self.sink, self._source_finished)

    def on_resize(self) -> None:
        if self.wide != self._wide:  # rows depend on the width class: redraw them
            self._wide = self.wide
            self._update({"telemetry", "header", "table"})

    # -- events in ---------------------------------------------------------------------------------
    def _source_finished(self) -> None:
        """Called by the source, from any thread, once it has no more events."""
        self.post_message(SourceDone())

    def sink(self, event: Any) -> None:
        """Called by the source from any thread."""
        if isinstance(event, TelemetrySampled):
            self._inbox.append(event)  # deque.append is atomic: no lock, no message per sample
        else:
            self.post_message(EventArrived(event))

    def on_event_arrived(self, message: EventArrived) -> None:
        self._update(self.state.apply(message.event))

    def flush(self) -> None:
        """Fold the buffered telemetry into the state and redraw (the 4 Hz timer; tests call it too)."""
        changed = {"status"}
        while self._inbox:
            changed |= self.state.apply(self._inbox.popleft())
        if self.mode == "monitor":
            changed.add("telemetry")  # the process lists change without samples
        self._update(changed)

    def on_source_done(self, message: SourceDone) -> None:
        self.flush()
        err = self.source.error
        if err is not None:
            self.state.failure = str(err) or type(err).__name__
            self.state.add_log(f"{type(err).__name__}: {err}", "error")
        self._update({"status", "log", "probe"})
        if self.state.stopping:
            self.exit()

    def _update(self, changed: set[str]) -> None:
        if not changed:
            return
        if "header" in changed:
            for header in self.query(HeaderBar):
                header.refresh(layout=True)
        if "telemetry" in changed:
            if self.mode == "monitor":
                self._sync_device_panels()
            for gauges in self.query(GaugePanel):
                gauges.refresh(layout=True)
        if "probe" in changed:
            for probe in self.query(ProbePanel):
                probe.refresh(layout=True)
        if "table" in changed:
            for table in self.query(MeasurementsTable):
                table.sync()
        if "finished" in changed and self.mode != "monitor":
            # the run is over: the bottom line takes the room of the live telemetry and the table
            self.screen.add_class("-finished")
            for box in self.query("#verdicts"):
                box.border_title = "bottom line and verdicts"
        if "verdicts" in changed:
            for verdicts in self.query(VerdictList):
                verdicts.sync()
                self._show_detail(verdicts)
        if "log" in changed:
            for pane in self.query(LogPane):
                pane.sync()
        if "status" in changed:
            for status in self.query(StatusBar):
                status.refresh()

    # -- monitor: one panel per GPU ----------------------------------------------------------------
    def _sync_device_panels(self) -> None:
        box = self.query("#devices")
        if not box:
            return
        container = box.first()
        keys = self.state.telemetry.device_keys()
        if not keys and not self._device_panels and self.state.run_dir is not None:
            if not container.query("#no-devices"):
                reasons = self.state.environment.get("device_unavailable") or "no GPU telemetry source opened"
                note = Static(Content.styled(f"No GPU telemetry: {reasons}", "dim"), id="no-devices", classes="box")
                note.border_title = "GPUs"
                container.mount(note)
            return
        for key in keys:
            if key in self._device_panels:
                continue
            for old in container.query("#no-devices"):
                old.remove()
            panel = GaugePanel(self.state, functools.partial(self._device_rows, key),
                               extra=functools.partial(self._process_lines, key),
                               id=f"dev-{key}", classes="box device")
            names = self.state.environment.get("device_names") or {}
            panel.border_title = f"{key} {names.get(key, '')}".strip()
            self._device_panels[key] = panel
            container.mount(panel)

    def _device_rows(self, key: str) -> list[GaugeRow]:
        return device_rows(self.state, key, self.wide, with_power=True)

    def _process_lines(self, key: str, width: int) -> list[Content]:
        procs = [p for p in (getattr(self.monitor, "processes_now", None) or []) if p.get("device") == key]
        if not procs:
            return [Content.styled("no processes", "dim")]
        lines = []
        for p in procs[:4]:
            name = p.get("name") or "?"
            used = p.get("used_memory_bytes")
            text = f"pid {p.get('pid')} {name} {fmt_bytes(used) if used is not None else ''}".rstrip()
            lines.append(Content(text[:width]))
        if len(procs) > 4:
            lines.append(Content.styled(f"+{len(procs) - 4} more", "dim"))
        return lines

    # -- texts -------------------------------------------------------------------------------------
    def _header_lines(self) -> list[list[Field]]:
        """The header's two lines as fields; a narrow screen leaves out whole fields, the highest
        rank first (the probes, the optimizer and the versions go before the model and the device)."""
        st = self.state
        s, env = st.settings, st.environment
        if st.run_dir is None:
            return [[(0, ["starting…"])], []]
        if self.mode == "monitor":
            names = env.get("device_names") or {}
            kinds = sorted(set(names.values()))
            devs = f"{len(names)} × {', '.join(kinds)}" if names else "no GPU (host telemetry only)"
            rate = s.get("rate_hz")
            return [[(0, ["monitor"]), (0, [devs]), (3, [f"{rate:g} Hz" if rate else ""])],
                    [(0, [f"recording to {st.run_dir}"])]]
        params = s.get("params")
        name = f"{s.get('model', '?')}"
        if s.get("layers"):
            layers = f"{s['layers']} layers"
            model = [f"{name} ({layers}, {params / 1e6:,.1f} M params)", f"{name} ({layers})"] if params else \
                [f"{name} ({layers})"]
        else:
            model = [name]
        probes = ",".join(s.get("probes") or [])
        line1: list[Field] = [
            (0, [("following " if self.mode == "follow" else "") + (st.command or "diagnose")]), (0, model),
            (2, [f"seq {s['seq_len']}" if s.get("seq_len") else ""]), (2, [s.get("dtype", "")]),
            (4, [s.get("optimizer", ""), ""]), (5, [f"probes {probes}", ""] if probes else [""])]
        mem = env.get("total_memory_bytes")
        device = f"{env.get('device_kind', '?')}: {env.get('device_name', '?')}"
        torch_v, runtime = env.get("torch"), env.get("runtime")
        versions = [f"torch {torch_v} runtime {runtime}"] if torch_v and runtime else []
        versions += [f"torch {torch_v}"] if torch_v else [f"runtime {runtime}"] if runtime else []
        line2: list[Field] = [(0, [f"{device} ({fmt_bytes(mem)})", device] if mem else [device]),
                              (4, [*versions, ""]), (1, [f"run {st.run_dir}", ""])]
        return [line1, line2]

    def _status(self) -> tuple[str, str]:
        st = self.state
        if st.failure:
            return f"failed: {st.failure} — press q to quit", "bold $text-error"
        if st.finished is not None:
            f = st.finished
            where = f.report_path or f.run_dir
            if f.error:
                return f"the run failed ({f.error}) · report: {where} — press q to quit", "bold $text-error"
            if f.interrupted:
                return f"interrupted · partial report: {where} — press q to quit", "bold $text-warning"
            return f"report: {where} — press q to quit", "bold $text-success"
        if st.stopping:
            return ("stopping: finishing the current step, then writing the run directory and report…",
                    "bold $text-warning")
        if st.run_dir is None:
            return "starting…", "dim"
        elapsed = fmt_seconds(st.elapsed_s())
        if self.mode == "follow":
            return f"following {st.run_dir} · {elapsed} · q to quit (the run goes on)", ""
        if self.mode == "monitor":
            return f"monitoring · {elapsed} · q to stop and record to {st.run_dir}", ""
        return f"running · {elapsed} · q to stop (the partial run directory and report are kept)", ""

    # -- actions -----------------------------------------------------------------------------------
    def action_request_quit(self) -> None:
        if self.source.done.is_set() or not self.source.waits_on_stop:
            self.source.request_stop()
            self.exit()
            return
        if not self.state.stopping:
            self.state.stopping = True
            self.state.add_log("stopping: the current step finishes, then the run directory and report are "
                               "written", "warning")
            self.source.request_stop()
            self._update({"status", "log"})
        else:
            self.notify("Still stopping: waiting for the current step to end.", timeout=3)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide the keys of panels this screen does not have (the monitor has no table)."""
        if action == "focus_panel" and parameters:
            return bool(self.screen.query(f"#{parameters[0]}"))
        return True

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen("monitor" if self.mode == "monitor" else "diagnose"))

    def action_focus_panel(self, panel_id: str) -> None:
        if self.screen.has_class("-finished"):  # after the run the table is shown on request (m), the
            self.screen.set_class(panel_id == "measurements", "-table")  # bottom line again with v
        for w in self.query(f"#{panel_id}"):
            w.focus()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-dark" if self.theme == "textual-light" else "textual-light"

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if isinstance(event.option_list, VerdictList):
            self._show_detail(event.option_list)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if isinstance(event.option_list, VerdictList):
            v = event.option_list.selected_verdict()
            if v is not None:
                self.push_screen(VerdictScreen(v))

    def _show_detail(self, verdicts: VerdictList) -> None:
        for d in self.query(VerdictDetail):
            d.show(verdicts.selected_verdict())
