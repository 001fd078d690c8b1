"""Modal screens: keyboard help (?) and one verdict in full (Enter on a verdict)."""
from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from gcdoctor.tui.widgets import verdict_detail

KEYS = [
    ("q  Ctrl-C", "quit; a run first stops cleanly, keeping its report"),
    ("?", "this help"),
    ("Tab", "next panel (Shift-Tab: previous)"),
    ("v  m  l", "go to the verdicts, the measurements, the log"),
    ("↑ ↓ PgUp PgDn", "move in the panel"),
    ("Enter", "the highlighted verdict in full"),
    ("t", "dark / light theme"),
    ("Esc", "close this window"),
]

PANELS = {
    "diagnose": [
        ("Telemetry", "sparklines of the last seconds, one cell per second, scaled to the limit: GPU "
                      "utilisation (0-100%), GPU memory used against the card's total, PCIe host-to-device and "
                      "device-to-host against the link's peak, CPU (with its busiest core). A series the "
                      "device cannot measure says 'unavailable'."),
        ("Probe", "the experiment in progress: variant, batch, step, a progress bar and the time left, "
                  "estimated from the median step of the point being measured."),
        ("Measurements", "one row per measured point: step time, peak memory, tokens/s, MFU; OOM rows in red."),
        ("Verdicts", "findings as the rules issue them: your configuration's, then the experiments', most "
                     "severe first (✖ critical, ▲ warning, ● info, ✔ ok)."),
        ("Log", "what the run is doing, warnings and errors."),
    ],
    "monitor": [
        ("GPU panels", "one per GPU: utilisation, memory used against the total, PCIe each way against the "
                       "link's peak, power, and the processes using the GPU."),
        ("Host", "system CPU with its busiest core, and host memory."),
        ("Warnings", "telemetry-only rules on the last 5 s: GC040 PCIe saturated while the device idles, "
                     "GC041 device starving while a CPU core is saturated. Enter for details."),
        ("Log", "processes starting and stopping, warnings clearing."),
    ],
}


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: 90%; border: round $primary;
                                  background: $surface; padding: 0 1; }
    """

    def __init__(self, mode: str = "diagnose") -> None:
        super().__init__()
        self.mode = mode

    def compose(self) -> ComposeResult:
        parts = [Content.styled("Keys", "bold underline")]
        for key, what in KEYS:
            parts.append(Content.assemble((f"{key:<14}", "bold $text-primary"), what))
        parts.append(Content.styled("\nPanels", "bold underline"))
        for name, what in PANELS.get(self.mode, PANELS["diagnose"]):
            parts.append(Content.assemble((f"{name}: ", "bold"), what))
        parts.append(Content.styled("\nMore: docs/tui.md. Esc closes this window.", "dim"))
        with VerticalScroll():
            yield Static(Content("\n").join(parts))


class VerdictScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close")]
    DEFAULT_CSS = """
    VerdictScreen { align: center middle; }
    VerdictScreen > VerticalScroll { width: 90%; max-width: 110; height: 90%; border: round $primary;
                                     background: $surface; padding: 0 1; }
    """

    def __init__(self, verdict: dict[str, Any]) -> None:
        super().__init__()
        self.verdict = verdict

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(verdict_detail(self.verdict))
