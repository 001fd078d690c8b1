"""Textual front ends: the live dashboard of `gcdoctor diagnose` and `gcdoctor monitor`.

The engine knows nothing of them: they follow the session's event stream. Textual is imported
only when an app is started, so importing this package is cheap.
"""
from __future__ import annotations

from typing import Any


def run_diagnose_app(session: Any) -> None:
    """Run `session` under the live dashboard; return when the user quits.

    Quitting mid-run stops the session cleanly (the partial run directory and report are
    written) before the app closes. An error raised by the session is re-raised here, after the
    terminal is restored, so the command line reports it as usual.
    """
    from gcdoctor.tui.app import DashboardApp
    from gcdoctor.tui.sources import SessionSource

    source = SessionSource(session)
    app = DashboardApp(source, mode="diagnose")
    try:
        app.run()
    finally:
        if not source.done.is_set():  # the app closed without waiting (it crashed): stop and keep the data
            source.request_stop()
            source.join()
        source.detach()
    if source.error is not None:
        raise source.error


__all__ = ["run_diagnose_app"]
