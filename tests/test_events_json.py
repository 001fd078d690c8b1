"""events.jsonl lines: every event type round-trips; telemetry samples take a fast encoder whose
lines read back exactly as the generic path's."""
from __future__ import annotations

import json

from gcdoctor.run.events import (LogMessage, RunStarted, StepMeasured, TelemetrySampled, event_from_json,
                             event_to_json)
from gcdoctor.facts.serde import to_dict


def test_telemetry_line_matches_the_generic_encoding_and_round_trips():
    values = {"gpu0.pcie_rx_gbs": 59.44125, "gpu0.power_w": None, "cpu_pct": 12.5, "gpu0.util_pct": 100.0}
    ev = TelemetrySampled(1234.000125, values)
    line = event_to_json(ev, wall=1.7e9)
    assert "\n" not in line
    assert json.loads(line) == {"type": "TelemetrySampled", "wall": 1.7e9, **to_dict(ev)}
    back = event_from_json(line)
    assert back == ev and list(back.values) == list(values)  # same values, same order


def test_other_events_round_trip():
    for ev in (LogMessage("hello", "warning"), RunStarted("/tmp/run", "diagnose", {"model": "tiny"}, {}),
               StepMeasured("sweep", "gc", 2, 3, 10.5, loss=2.25)):
        line = event_to_json(ev, wall=0.0)
        assert json.loads(line)["type"] == type(ev).__name__
        assert event_from_json(line) == ev
