"""The trace loader: same tables from every encoding of the same trace, exact nanoseconds,
correlation joins, copy names, backend-neutral categories."""
from __future__ import annotations

import gzip
import json
import re
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from gcdoctor.trace import load_trace
from gcdoctor.trace.load import parse_copy_name
from gcdoctor.trace.tables import COPY_DIRECTIONS, HOST_MEM_NONE, HOST_MEM_PAGEABLE, HOST_MEM_PINNED, MEMCPY, MEMSET

DATA = Path(__file__).parent / "data"
HANDMADE = DATA / "handmade-trace.json"
BASE_US = 5_000_000_000_000  # the handmade trace's timestamps are this + a few hundred us


def table_dump(t) -> dict:
    """The tables with names decoded, for comparing two loads of the same trace."""
    names = np.asarray(t.names, dtype=object)
    out = {}
    for tn in ("ops", "runtime", "cpu_ops", "ranges"):
        tab = getattr(t, tn)
        for f in fields(tab):
            col = getattr(tab, f.name)
            out[f"{tn}.{f.name}"] = (names[col] if f.name == "name_id" and len(col) else col).tolist()
    out["metadata"] = t.metadata
    return out


@pytest.fixture(scope="module")
def handmade():
    return load_trace(HANDMADE)


def test_tables_count_each_kind_of_event(handmade):
    t = handmade
    assert (len(t.ops), len(t.runtime), len(t.cpu_ops), len(t.ranges)) == (10, 11, 5, 5)
    assert t.event_count == 55
    assert t.skipped == {"python_function": 1}
    assert t.device_kind == "cuda"


def test_timestamps_are_integer_nanoseconds_not_rounded_to_microseconds(handmade):
    k7 = handmade.names.index("k7_recompute")
    row = int(np.flatnonzero(handmade.ops.name_id == k7)[0])
    assert handmade.ops.start_ns[row] == BASE_US * 1000 + 95_003
    assert handmade.ops.dur_ns[row] == 4_997


def test_device_ops_are_joined_to_their_launch_call_by_correlation(handmade):
    ops, rt = handmade.ops, handmade.runtime
    assert (ops.launch >= 0).all()
    assert (rt.correlation[ops.launch] == ops.correlation).all()
    memcpy = int(np.flatnonzero(ops.kind == MEMCPY)[0])
    assert handmade.names[rt.name_id[ops.launch[memcpy]]] == "cudaMemcpyAsync"


def test_profiler_steps_are_found_by_name(handmade):
    assert handmade.profiler_steps() == {5: (BASE_US * 1000, (BASE_US + 200) * 1000)}


def test_copies_carry_bytes_direction_and_host_memory_kind(handmade):
    ops = handmade.ops
    cp = int(np.flatnonzero(ops.kind == MEMCPY)[0])
    ms = int(np.flatnonzero(ops.kind == MEMSET)[0])
    assert (ops.nbytes[cp], COPY_DIRECTIONS[ops.copy_dir[cp]], ops.host_mem[cp]) == (1_000_000, "HtoD",
                                                                                      HOST_MEM_PAGEABLE)
    assert (ops.nbytes[ms], ops.stream[ms]) == (4096, 7)


@pytest.mark.parametrize("name, kind, expected", [
    ("Memcpy HtoD (Pageable -> Device)", MEMCPY, ("HtoD", HOST_MEM_PAGEABLE)),
    ("Memcpy DtoH (Device -> Pinned)", MEMCPY, ("DtoH", HOST_MEM_PINNED)),
    ("Memcpy HtoD (Pinned -> Device)", MEMCPY, ("HtoD", HOST_MEM_PINNED)),
    ("Memcpy DtoD (Device -> Device)", MEMCPY, ("DtoD", HOST_MEM_NONE)),
    ("Memcpy PtoP (Device -> Device)", MEMCPY, ("PtoP", HOST_MEM_NONE)),
    ("Memcpy DtoH", MEMCPY, ("DtoH", HOST_MEM_NONE)),
    ("some copy", MEMCPY, ("other", HOST_MEM_NONE)),
])
def test_copy_names_give_direction_and_pageable_or_pinned(name, kind, expected):
    d, mem = parse_copy_name(name, kind)
    assert (COPY_DIRECTIONS[d], mem) == expected


def test_gzip_and_plain_give_the_same_tables(tmp_path, handmade):
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(HANDMADE.read_bytes()))
    assert table_dump(load_trace(gz)) == table_dump(handmade)


def test_gzip_is_recognised_by_content_not_by_name(tmp_path, handmade):
    odd = tmp_path / "trace.json"
    odd.write_bytes(gzip.compress(HANDMADE.read_bytes()))
    assert table_dump(load_trace(odd)) == table_dump(handmade)


@pytest.mark.parametrize("block", [16, 97, 1000, 4096])
def test_chunking_does_not_change_the_tables(block, handmade):
    assert table_dump(load_trace(HANDMADE, block_bytes=block)) == table_dump(handmade)


def test_stdlib_json_decoder_gives_the_same_tables(handmade):
    assert table_dump(load_trace(HANDMADE, decoder="json", block_bytes=512)) == table_dump(handmade)


def test_other_key_order_and_no_whitespace_give_the_same_tables(tmp_path, handmade):
    """Traces re-saved by other tools: keys sorted, one line. Numbers keep their exact text."""
    doc = json.loads(HANDMADE.read_text(), parse_float=lambda s: f"\u00a7{s}\u00a7")
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    text = re.sub('"\u00a7([^"]*)\u00a7"', r"\1", text)
    assert text.startswith('{"cuda_driver_version":13000,') and "\n" not in text
    other = tmp_path / "sorted.json"
    other.write_text(text)
    assert table_dump(load_trace(other, block_bytes=300)) == table_dump(handmade)


def test_timestamps_beyond_float_precision_stay_exact(tmp_path):
    """At 2^43 us and above a float64 cannot hold a nanosecond: those chunks are read as decimals."""
    shift = 4_000_000_000_000  # pushes the handmade trace to 9.0e12 us > 2^43 us (8.8e12)
    text = HANDMADE.read_text().replace('"ts": 5000000000', '"ts": 9000000000')
    far = tmp_path / "far.json"
    far.write_text(text)
    for decoder in ("msgspec", "json"):
        t = load_trace(far, decoder=decoder, block_bytes=700)
        row = int(np.flatnonzero(t.ops.name_id == t.names.index("k7_recompute"))[0])
        assert t.ops.start_ns[row] == (BASE_US + shift) * 1000 + 95_003


def test_runtime_categories_of_other_backends_are_recognised(tmp_path):
    """MUSA (and other PrivateUse1 backends) spell the categories differently."""
    events = [
        {"ph": "X", "cat": "musa_runtime", "name": "musaLaunchKernel", "pid": 1, "tid": 1, "ts": 10.0, "dur": 2.0,
         "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 3, "ts": 13.5, "dur": 1.0,
         "args": {"correlation": 5, "stream": 3}},
        {"ph": "X", "cat": "musa_driver", "name": "muLaunchKernel", "pid": 1, "tid": 1, "ts": 20.0, "dur": 1.0},
    ]
    p = tmp_path / "musa.json"
    p.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(p)
    assert t.device_kind == "musa"
    assert len(t.runtime) == 2 and t.runtime.driver.tolist() == [False, True]
    assert t.ops.launch.tolist() == [0]


@pytest.mark.parametrize("decoder", ["msgspec", "json"])
def test_events_with_unexpected_types_are_skipped_not_fatal(tmp_path, decoder):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "no time", "ts": "soon", "dur": 1.0, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "odd ids", "ts": 5.25, "dur": 1.0, "pid": 1.5, "tid": "main"},
        {"ph": "X", "cat": "cpu_op", "name": "plain", "ts": 7.0, "dur": 2.0, "pid": 1, "tid": 1},
        [1, 2],
    ]
    p = tmp_path / "odd.json"
    p.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(p, decoder=decoder)
    assert [t.names[i] for i in t.cpu_ops.name_id] == ["odd ids", "plain"]
    assert t.cpu_ops.start_ns.tolist() == [5250, 7000]
    assert t.cpu_ops.tid.tolist() == [-1, 1]  # a string thread id gets a stable negative id
    assert t.dropped == {"no numeric ts": 1}  # never placed at 0, and said
    assert "1 with no numeric ts (first: cpu_op event 'no time')" in t.dropped_note()


def test_cpu_only_trace_has_no_device_tables():
    t = load_trace(Path(__file__).resolve().parents[1] / "samples" / "traces" / "cpu-tiny-llama.json.gz")
    assert t.device_kind is None
    assert len(t.ops) == 0 and len(t.runtime) == 0
    assert len(t.cpu_ops) > 1000
