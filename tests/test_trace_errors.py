"""Input that is not a readable torch.profiler trace: one clear line naming the file, exit code 2."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.errors import UserError
from gcdoctor.trace import load_trace

HANDMADE = (Path(__file__).parent / "data" / "handmade-trace.json").read_bytes()
NOT_A_TRACE = "not a torch.profiler trace"


def _bad_number() -> bytes:
    return HANDMADE.replace(b'"dur": 20.000,', b'"dur": 20.0.0,', 1)


CASES = {
    "empty": (b"", "empty file, not a torch.profiler trace"),
    "whitespace": (b" \n\t ", "empty file, not a torch.profiler trace"),
    "array": (b"[1, 2, 3]", f"{NOT_A_TRACE} (expected a JSON object with traceEvents, found a JSON array)"),
    "text": (b"hello world", f"{NOT_A_TRACE} (expected a JSON object with traceEvents, found data that is not JSON)"),
    "binary": (bytes(range(256)), f"{NOT_A_TRACE} (expected a JSON object with traceEvents, "
                                  "found data that is not JSON)"),
    "no traceEvents": (b'{"schemaVersion": 1, "events": []}', f"{NOT_A_TRACE} (no traceEvents array)"),
    "traceEvents not an array": (b'{"traceEvents": {}}', f"{NOT_A_TRACE} (no traceEvents array)"),
    "other tool's trace": (b'{"traceEvents": [{"ph": "X", "cat": "devtools.timeline", "name": "Paint", '
                           b'"ts": 1, "dur": 2, "pid": 1, "tid": 1}]}',
                           f"{NOT_A_TRACE} (traceEvents has no cpu_op, kernel, runtime or annotation events)"),
    "empty traceEvents": (b'{"traceEvents": []}',
                          f"{NOT_A_TRACE} (traceEvents has no cpu_op, kernel, runtime or annotation events)"),
    "truncated in the events": (HANDMADE[:len(HANDMADE) * 6 // 10],
                                "truncated trace (the traceEvents array is not closed)"),
    "truncated after the events": (HANDMADE[:HANDMADE.rindex(b"]") + 1],
                                   "truncated trace (the top-level object is not closed)"),
    "truncated in the metadata after": (HANDMADE[:-3], "truncated trace (the top-level object is not closed)"),
    "malformed before traceEvents": (HANDMADE.replace(b'"schemaVersion": 1,', b'"schemaVersion" 1,', 1),
                                     "malformed JSON before traceEvents"),
    "malformed in the events": (_bad_number(), f"malformed JSON in traceEvents at byte "
                                               f"{_bad_number().index(b'20.0.0') + 4} (expected ',' or '}}')"),
    "malformed after the events": (HANDMADE + b"xyz", f"malformed JSON after traceEvents at byte "
                                                      f"{len(HANDMADE)} (Extra data)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_trace_raises_one_line_user_error(tmp_path, case):
    data, expected = CASES[case]
    p = tmp_path / "trace.json"
    p.write_bytes(data)
    with pytest.raises(UserError) as exc:
        load_trace(p, block_bytes=256)
    assert str(exc.value) == f"{p}: {expected}"


@pytest.mark.parametrize("case", ["truncated in the events", "malformed in the events", "empty"])
def test_stdlib_decoder_reports_the_same_problem(tmp_path, case):
    data, expected = CASES[case]
    p = tmp_path / "trace.json"
    p.write_bytes(data)
    with pytest.raises(UserError) as exc:
        load_trace(p, decoder="json", block_bytes=256)
    same_up_to_the_decoder_detail = f"{p}: {expected}".split(" (expected")[0]
    assert str(exc.value).startswith(same_up_to_the_decoder_detail)


def test_truncated_gzip(tmp_path):
    p = tmp_path / "trace.json.gz"
    p.write_bytes(gzip.compress(HANDMADE)[:-40])
    with pytest.raises(UserError) as exc:
        load_trace(p)
    assert str(exc.value) == f"{p}: truncated gzip file (the compressed data ends early)"


def test_corrupt_gzip(tmp_path):
    data = bytearray(gzip.compress(HANDMADE))
    data[200:260] = bytes(60)
    p = tmp_path / "trace.json.gz"
    p.write_bytes(bytes(data))
    with pytest.raises(UserError) as exc:
        load_trace(p)
    assert str(exc.value).startswith(f"{p}: corrupt gzip data (")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(UserError) as exc:
        load_trace(tmp_path / "nope.json")
    assert str(exc.value) == f"{tmp_path / 'nope.json'}: no such file"
    with pytest.raises(UserError) as exc:
        load_trace(tmp_path)
    assert str(exc.value) == f"{tmp_path}: is a directory, not a trace file"


def test_analyze_on_a_bad_trace_prints_one_line_and_exits_2(tmp_path, capsys):
    p = tmp_path / "trace.json"
    p.write_bytes(HANDMADE[: len(HANDMADE) // 2])
    rc = main(["analyze", str(p), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"gcdoctor: error: {p}: truncated trace (the traceEvents array is not closed)\n"
