"""`gcdoctor plan`: memory strings, the largest batch (checked against real CPU steps under
an allocation limit), the reasons it gives, and its JSON."""
from __future__ import annotations

import json

import pytest
import torch

from gcdoctor import memory as M
from gcdoctor.backends.cpu import CpuBackend
from gcdoctor.errors import UserError
from gcdoctor.models import build_model, load_spec
from gcdoctor.plan import parse_memory, run_plan


@pytest.mark.parametrize("text,expected", [
    ("48GB", 48 * 10 ** 9),
    ("80GiB", 80 * 2 ** 30),
    ("141e9", 141 * 10 ** 9),
    ("49152MiB", 49152 * 2 ** 20),
    (" 1.5 TB ", 15 * 10 ** 11),
    ("80gib", 80 * 2 ** 30),
    (150754820096, 150754820096),
])
def test_memory_strings_parse_to_bytes(text, expected):
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text,says", [
    ("48G", "say GB or GiB"),
    ("48 gigs", "unknown unit"),
    ("lots", "expected a size"),
    ("-5GB", "expected a size"),
    ("0GB", "must be at least 1,048,576 bytes"),
    ("1e400", "not a finite size"),
    ("", "expected a size"),
])
def test_bad_memory_strings_are_user_errors(text, says):
    with pytest.raises(UserError, match=says):
        parse_memory(text)


def test_plan_rejects_an_unknown_gc_mode():
    with pytest.raises(UserError, match="--gc 'maybe'"):
        run_plan("tiny-llama", "1GiB", gc_modes="maybe")


def test_model_states_that_exceed_the_card_are_named_as_the_reason():
    text, data = run_plan("llama3-8b", "48GB")
    assert (data["max_batch_no_gc"], data["max_batch_gc"]) == (0, 0)
    assert "model states alone (59.8 GiB" in text
    assert "exceed the usable 39.6 GiB" in text


def test_json_has_both_largest_batches_and_every_point():
    text, data = run_plan("llama3-8b", "150754820096", as_json=True)
    loaded = json.loads(text)
    assert (loaded["max_batch_no_gc"], loaded["max_batch_gc"]) == (2, 11)  # measured on the H200
    assert {(p["variant"], p["batch_size"]) for p in loaded["points"]} >= {("no_gc", 2), ("no_gc", 3), ("gc", 11), ("gc", 12)}
    n = 8030261248
    states = loaded["model_state_bytes"]
    assert (states["params"], states["grads"], states["optimizer_states"]) == (2 * n, 2 * n, 4 * n)


def test_largest_batch_is_the_last_whose_predicted_peak_fits():
    _, data = run_plan("llama2-7b", "80GB", seq_len=2048)
    usable = data["usable_bytes"]
    for mode in ("no_gc", "gc"):
        best = data[f"max_batch_{mode}"]
        fits = {p["batch_size"]: p["fits"] for p in data["points"] if p["variant"] == mode}
        assert fits[best] and not fits[best + 1]
        spec = load_spec("llama2-7b")
        peak = M.predict(spec, M.Workload(best + 1, 2048, gc=mode == "gc")).peak_bytes
        assert peak > usable


def _fits_on_cpu(spec, batch, seq, gc, limit) -> bool:
    """gcdoctor's own step (a warm-up, then a measured step) under CpuBackend's allocation limit."""
    from gcdoctor.capture import TrainingStep, enable_layer_checkpointing

    torch.manual_seed(0)
    model = build_model(spec, "bf16", "cpu")
    if gc:
        enable_layer_checkpointing(model)
    be = CpuBackend()
    with be.tracking(*model.parameters(), *model.buffers()):
        step = TrainingStep(model, be, batch, seq, "adamw")
        step.run()
        be.set_memory_limit(limit)
        try:
            step.run()
        except torch.OutOfMemoryError:
            return False
    return True


def test_plan_predicts_the_largest_batch_that_really_fits_on_a_fake_device(tmp_path):
    cfg = dict(load_spec("tiny-llama").config, num_hidden_layers=2, vocab_size=1024)
    path = tmp_path / "small.json"
    path.write_text(json.dumps(cfg))
    limit = 23 * 10 ** 6
    _, data = run_plan(str(path), "23MB", seq_len=64, dtype="bf16", device="cpu")
    spec = load_spec(str(path))
    assert (data["max_batch_no_gc"], data["max_batch_gc"]) == (4, 7)
    for mode in ("no_gc", "gc"):
        best = data[f"max_batch_{mode}"]
        assert _fits_on_cpu(spec, best, 64, mode == "gc", limit)
        assert not _fits_on_cpu(spec, best + 1, 64, mode == "gc", limit)


def test_plan_takes_the_cli_namespace_with_diagnose_defaults():
    import argparse
    args = argparse.Namespace(model=None, device_memory="80GiB", seq_len=None, dtype=None, optimizer=None,
                              layers=None, device=None, json=True, master_weights="none", batch_sizes="1,3")
    text, data = run_plan(args)
    assert (data["model"], data["dtype"], data["seq_len"], data["optimizer"]) == ("llama3-8b", "bf16", 4096, "adamw")
    assert sorted({p["batch_size"] for p in data["points"]}) == [1, 3]
    assert json.loads(text)["max_batch_gc"] == data["max_batch_gc"]


def test_bad_batch_sizes_are_user_errors():
    with pytest.raises(UserError, match="--batch-sizes"):
        run_plan("tiny-llama", "1GiB", batch_sizes="1,two")
