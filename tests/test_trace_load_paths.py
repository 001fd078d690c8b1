"""The loader's fast paths give the tables of its general path: the column pass over a chunk's
events and the second decoding process, against the event-by-event path in one process (the
loader as it was before either), on every recorded trace of samples/traces and on the handmade
trace with its odd events (string ids, events that cannot be placed, huge timestamps)."""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.trace import load as L
from gcdoctor.trace import load_trace
from tests.test_trace_load import HANDMADE, table_dump

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "traces"
TRACES = sorted(p for p in SAMPLES.rglob("*.json*") if 4096 < p.stat().st_size < 600_000) + [HANDMADE]  # not the summaries


def everything(t) -> dict:
    out = table_dump(t)
    for k in ("device_kind", "event_count", "skipped", "dropped", "dropped_examples", "profiler_ranges"):
        out[k] = getattr(t, k)
    return out


@pytest.fixture
def general_only(monkeypatch):
    """The loader with only the general (event by event) way of tabling a chunk."""
    monkeypatch.setattr(L._Builder, "_add_columns", lambda self, events: False)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_fast_paths_give_the_general_tables(path, monkeypatch):
    fast = load_trace(path, workers=1)
    two = load_trace(path, workers=2, block_bytes=16 << 10)  # many chunks, half of them in the helper
    assert fast.load_info == {"processes": 1}
    assert two.load_info["processes"] == 2
    monkeypatch.setattr(L._Builder, "_add_columns", lambda self, events: False)
    general = load_trace(path, workers=1)
    want = everything(general)
    assert everything(fast) == want
    assert everything(two) == want


def test_helper_tables_chunks_and_hands_back_the_odd_ones():
    """On the handmade trace (string pids, unplaceable events, timestamps past 2^43 us) in chunks
    of 1 KB the helper tables some chunks and returns the others, which this process reads again."""
    t = load_trace(HANDMADE, workers=2, block_bytes=1024)
    n_chunks_sent = t.load_info.get("helper_chunks")
    assert n_chunks_sent is not None and n_chunks_sent > 0
    assert everything(t) == everything(load_trace(HANDMADE, workers=1, block_bytes=1024))
