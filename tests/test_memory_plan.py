"""`gcdoctor plan`: memory strings, the largest batch (checked against real CPU steps under
an allocation limit), the reasons it gives, and its JSON."""
from __future__ import annotations

import json

import pytest
import torch

from gcdoctor.model import memory as M
from gcdoctor.backends.cpu import CpuBackend
from gcdoctor.errors import UserError
from gcdoctor.model.registry import build_model, load_spec
from gcdoctor.model.plan import parse_memory, run_plan


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
    assert data["max_batch_by_allocator"]["expandable"] == {"no_gc": 0, "gc": 0}
    flat = " ".join(text.split())
    assert "model states alone (59.8 GiB" in flat
    assert "exceed the usable 44.0 GiB" in flat  # 48e9 bytes less the 768 MiB context
    assert all(len(line) <= 80 for line in text.splitlines())


def test_when_nothing_fits_plan_lists_what_would_best_first():
    text, data = run_plan("llama3-8b", device="mtt-s4000")
    assert data["device"] == "musa" and data["device_memory_bytes"] == 48 * 2**30
    opts = {o["key"]: o for o in data["fit_options"]}
    assert set(opts) == {"zero-offload", "adamw-8bit", "adafactor", "sgd", "lora", "shard"}
    # ZeRO-Offload leaves the 15 GiB of bf16 weights and two 1 GB reduce buckets on the device
    off = opts["zero-offload"]
    assert off["device_state_bytes"] == 2 * 8030261248 + 2 * 500_000_000 * 2
    assert off["max_batch_gc"] >= 1 and "host memory" in off["host"]
    # 8-bit states: 2 bytes per parameter of the big tensors (weights, grads: 4 more)
    assert opts["adamw-8bit"]["device_state_bytes"] > 4 * 8030261248
    # sharding: the smallest device count that fits
    assert opts["shard"]["n_devices"] == 2 and opts["shard"]["max_batch_gc"] >= 1
    ranks = [o["max_batch_gc"] for o in data["fit_options"]]
    assert ranks == sorted(ranks, reverse=True)
    assert "what would fit" in text and "ZeRO-Offload" in text
    assert all(len(line) <= 80 for line in text.splitlines())


@pytest.mark.parametrize("card", ["mtt-s4000", "mtt-s5000", "a100-40gb", "a100-80gb", "h100-80gb", "h200"])
def test_plan_takes_every_card_by_name(card):
    from gcdoctor.model import hardware
    _, data = run_plan("llama3-8b", device=card, layers=2, batch_sizes="1")
    spec = hardware.preset(card)
    assert data["device_memory_bytes"] == spec.capacity_bytes
    assert data["card"]["bf16_tflops"] == spec.bf16_tflops
    assert data["device"] == spec.kind


def test_an_unknown_card_is_a_one_line_error():
    with pytest.raises(UserError, match="not a known card"):
        run_plan("llama3-8b", device="rtx-9090")
    with pytest.raises(UserError, match="--device-memory is required"):
        run_plan("llama3-8b", device="cuda")


def test_json_has_both_largest_batches_and_every_point():
    text, data = run_plan("llama3-8b", "150754820096", as_json=True)
    loaded = json.loads(text)
    assert (loaded["max_batch_no_gc"], loaded["max_batch_gc"]) == (2, 11)  # measured on the H200
    assert {(p["variant"], p["batch_size"]) for p in loaded["points"]} >= {("no_gc", 2), ("no_gc", 3), ("gc", 11), ("gc", 12)}
    n = 8030261248
    states = loaded["model_state_bytes"]
    assert (states["params"], states["grads"], states["optimizer_states"]) == (2 * n, 2 * n, 4 * n)


def test_largest_batch_is_the_last_that_the_replayed_allocator_fits():
    _, data = run_plan("llama2-7b", "80GB", seq_len=2048)
    usable = data["usable_bytes"]
    spec = load_spec("llama2-7b")
    for alloc, key in (("default", "fits"), ("expandable", "fits_expandable")):
        for mode in ("no_gc", "gc"):
            best = data["max_batch_by_allocator"][alloc][mode]
            fits = {p["batch_size"]: p[key] for p in data["points"] if p["variant"] == mode}
            assert fits[best] and not fits[best + 1], (alloc, mode)
            # no allocator fits more than its allocated peak allows
            assert best <= M.max_batch(spec, usable, 2048, gc=mode == "gc")
    assert (data["max_batch_no_gc"], data["max_batch_gc"]) == tuple(
        data["max_batch_by_allocator"]["default"][m] for m in ("no_gc", "gc"))


def _fits_on_cpu(spec, batch, seq, gc, limit) -> bool:
    """gcdoctor's own step (a warm-up, then a measured step) under CpuBackend's allocation limit."""
    from gcdoctor.run.capture import TrainingStep, enable_layer_checkpointing

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


def test_plan_on_the_command_line_with_a_card(capsys):
    from gcdoctor.cli import main
    assert main(["plan", "--device", "mtt-s4000", "--layers", "32"]) == 0
    out = capsys.readouterr().out
    assert "Moore Threads MTT S4000" in out and "what would fit" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert main(["plan", "--device", "rtx-9090"]) == 2
    assert "not a known card" in capsys.readouterr().err
    assert main(["plan", "--device", "cuda"]) == 2  # no card, no --device-memory
