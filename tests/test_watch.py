"""gcdoctor.watch and the Trainer callback on a real (tiny) training loop on the CPU."""
from __future__ import annotations

import json

import pytest
import torch

import gcdoctor
from gcdoctor.cli import main
from gcdoctor.run.events import StepMeasured, read_events
from gcdoctor.facts import Facts
from gcdoctor.model.registry import build_model, load_spec


def test_watch_records_every_step_and_profiles_the_chosen_ones(micro_llama, tmp_path):
    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(512, (2, 16), generator=torch.Generator().manual_seed(0))
    losses = []
    out = tmp_path / "watched"
    with gcdoctor.watch(model, opt, out=out, profile_steps=(2, 3), telemetry_hz=10) as w:
        for _ in range(6):
            with w.step() as s:
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                s.loss = loss
                losses.append(loss.item())
    facts = Facts.load(out / "facts.json")
    steps = facts.watch.steps
    assert [s.index for s in steps] == [0, 1, 2, 3, 4, 5]
    assert [s.loss for s in steps] == losses  # the very values the loop computed
    assert losses[-1] < losses[0]  # it trained
    assert [s.profiled for s in steps] == [False, False, True, True, False, False]
    assert facts.watch.profiled_steps == [2, 3]
    assert all(s.step_ms and s.step_ms > 0 for s in steps)
    assert facts.watch.timing == "sync"  # the CPU has no device events
    assert facts.watch.n_params == sum(p.numel() for p in model.parameters())
    # the profiled stretch became a trace with the probes' phase labels
    assert (out / "traces" / "watch-steps-2-3.json.gz").is_file()
    key = "watch/watch-steps-2-3"
    assert {key, f"{key}|forward", f"{key}|backward", f"{key}|optimizer"} <= set(facts.trace)
    # the event stream has one StepMeasured per step, in order
    measured = [e for e in read_events(str(out / "events.jsonl")) if isinstance(e, StepMeasured)]
    assert [e.step_index for e in measured] == [0, 1, 2, 3, 4, 5]
    assert (out / "report.md").read_text().count("## Your training run (watched)") == 1


def test_watch_without_telemetry_says_so_and_still_records_steps(micro_llama, tmp_path):
    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    ids = torch.randint(512, (1, 8), generator=torch.Generator().manual_seed(0))
    out = tmp_path / "quiet"
    with gcdoctor.watch(model, opt, out=out, profile_steps=(), telemetry_hz=0) as w:
        assert w.sampler is None
        for _ in range(2):
            with w.step() as s:
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                s.loss = loss
    facts = Facts.load(out / "facts.json")
    assert facts.unavailable["telemetry"] == "telemetry off (telemetry_hz=0)"
    assert [s.index for s in facts.watch.steps] == [0, 1]
    assert not (out / "telemetry.csv").exists()


def test_analyze_judges_a_watched_run(micro_llama, tmp_path, capsys):
    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids = torch.randint(512, (1, 8))
    with gcdoctor.watch(model, opt, out=tmp_path / "w", profile_steps=(1,), telemetry_hz=10) as w:
        for _ in range(3):
            with w.step():
                model(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad()
    rc = main(["analyze", str(tmp_path / "w"), "--out", str(tmp_path / "an")])
    assert rc == 0
    report = json.loads((tmp_path / "an" / "report.json").read_text())
    by_code = {v["code"]: v for v in report["verdicts"]}
    # a CPU-only trace: the trace rules say why they cannot judge, they do not guess
    assert by_code["GC010"]["status"] == "inconclusive"
    assert "no device events" in by_code["GC010"]["headline"]
    assert report["facts"]["watch"]["profiled_steps"] == [1]


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        self.ids = torch.randint(vocab, (n, seq), generator=torch.Generator().manual_seed(1))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def test_trainer_callback_watches_a_real_trainer(micro_llama, tmp_path):
    from transformers import Trainer, TrainingArguments

    from gcdoctor.watching.hf import GcdoctorCallback

    from transformers import TrainerCallback

    class Tracker(TrainerCallback):  # stands for report_to's TensorBoard/W&B callbacks: they log in on_log
        def __init__(self):
            self.logged = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logged.append(dict(logs))

    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    model.activation_checkpointing_enable({"use_reentrant": False})
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=5, per_device_train_batch_size=2,
                             logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True)
    cb, tracker = GcdoctorCallback(out=tmp_path / "run", profile_steps=(2,), telemetry_hz=10), Tracker()
    trainer = Trainer(model=model, args=args, train_dataset=_Tokens(16, 16, 512), callbacks=[tracker, cb])
    trainer.train()
    assert cb.first_in_callbacks and trainer.callback_handler.callbacks[0] is cb
    train_logs = [entry for entry in tracker.logged if "loss" in entry]
    assert len(train_logs) == 5
    assert all(entry["gcdoctor/step_ms"] > 0 and entry["gcdoctor/forward_ms"] > 0 for entry in train_logs)
    assert all(entry["gcdoctor/optimizer_ms"] > 0 for entry in train_logs)
    assert "gcdoctor/recompute_share" not in train_logs[1]  # before the profiled step 2 was analysed
    assert train_logs[-1]["gcdoctor/recompute_share"] is not None  # ... and after it (host time on the CPU)
    facts = Facts.load(tmp_path / "run" / "facts.json")
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert [s.index for s in facts.watch.steps] == [0, 1, 2, 3, 4]
    assert [s.loss for s in facts.watch.steps] == logged  # the Trainer's own logged losses, step by step
    assert facts.watch.profiled_steps == [2]
    assert "watch/watch-steps-2-2" in facts.trace
    assert (tmp_path / "run" / "report.md").is_file()
    w = facts.watch
    assert (w.batch_size, w.seq_len, w.optimizer) == (2, 16, "AdamW")
    assert w.checkpointing.text() == "2/2 layers, use_reentrant=False"
    assert (w.recompute.found, w.recompute.kind) == (True, "non-reentrant")


def _train(model, opt, ids, w, steps, wait_s=0.0):
    import time
    losses = []
    for _ in range(steps):
        time.sleep(wait_s)  # the data pipeline: the host is busy between steps
        with w.step() as s:
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            s.loss = loss
            losses.append(loss.item())
    return losses


def test_each_step_has_its_phases_and_the_memory_peak_of_each_phase(micro_llama, tmp_path):
    from gcdoctor.model.fitting import memory_model_facts
    spec = load_spec(micro_llama)
    model = build_model(spec, "fp32", "cpu")
    model.activation_checkpointing_enable({"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    ids = torch.randint(512, (2, 16), generator=torch.Generator().manual_seed(0))
    with gcdoctor.watch(model, opt, out=tmp_path / "w", profile_steps=(3,), telemetry_hz=0, memory="count") as w:
        _train(model, opt, ids, w, 5, wait_s=0.05)
    facts = Facts.load(tmp_path / "w" / "facts.json")
    wf = facts.watch
    assert (wf.batch_size, wf.seq_len, wf.micro_batches, wf.tokens_per_step) == (2, 16, 1, 32)
    assert wf.optimizer == "AdamW" and wf.phases_from == "model+optimizer"
    first, *rest = wf.steps
    assert first.data_ms is None  # no previous step to wait from
    for s in rest:
        assert s.data_ms >= 50.0  # the 50 ms sleep between steps is the data wait (host clock on the CPU)
        assert s.forward_ms > 0 and s.backward_ms > 0 and s.optimizer_ms > 0 and s.other_ms >= 0
        total = s.data_ms + s.forward_ms + s.backward_ms + s.optimizer_ms + s.other_ms
        assert abs(total - s.step_ms) < 1.0  # the phases tile the step
        assert s.micro_batches == 1 and s.tokens == 32
    # memory by phase, counted exactly on the CPU, against the memory model of the same step
    mm = memory_model_facts(spec, 16, "fp32", "adamw", "cpu", points=[("gc", 2)])
    pred = mm.get("gc", 2)
    steady = wf.steps[-1].phase_peak_bytes
    for phase, predicted in (("forward", pred.forward_peak_bytes), ("backward", pred.backward_peak_bytes),
                             ("optimizer", pred.optimizer_peak_bytes)):
        assert abs(steady[phase] - predicted) <= 0.002 * predicted, phase
    assert wf.steps[-1].peak_phase == "optimizer" and pred.peak_phase == "optimizer step"  # foreach AdamW's temporaries
    assert facts.memory_model.model_state_bytes == mm.model_state_bytes
    assert wf.model_state_bytes == mm.model_state_bytes
    assert wf.activation_peak_bytes == wf.peak_allocated_bytes - mm.model_state_bytes
    # the settings the run really had
    assert wf.checkpointing.text() == "2/2 layers, use_reentrant=False"
    assert (facts.settings.seq_len, facts.settings.dtype, facts.settings.optimizer) == (16, "fp32", "adamw")
    assert facts.settings.measure_steps == 3  # steps 1, 2, 4: after the first, not profiled
    assert wf.settings_text() == ("batch 2 x seq 16, float32, AdamW, 5 steps (3 profiled), checkpointing 2/2 layers, "
                                  "use_reentrant=False")


def test_profiled_steps_are_profiler_step_windows_with_the_batch_loading_inside(micro_llama, tmp_path):
    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    model.activation_checkpointing_enable({"use_reentrant": True})
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    ids = torch.randint(512, (2, 16), generator=torch.Generator().manual_seed(0))
    with gcdoctor.watch(model, opt, out=tmp_path / "w", profile_steps=(2, 3), telemetry_hz=0) as w:
        _train(model, opt, ids, w, 5, wait_s=0.05)
    facts = Facts.load(tmp_path / "w" / "facts.json")
    key = "watch/watch-steps-2-3"
    assert {f"{key}|step:2", f"{key}|step:3", f"{key}|recompute"} <= set(facts.trace)
    for n in (2, 3):  # each profiled step's window starts at the previous step's end: the wait is inside
        tm = facts.trace[f"{key}|step:{n}"]
        assert tm.wall_us > 50_000 and tm.window_source == "profiler_step"
    rc = facts.watch.recompute
    assert (rc.found, rc.source, rc.kind, rc.regions_per_step, rc.steps, rc.time_basis) == (
        True, "recompute_inferred", "reentrant", 2.0, 2, "host")
    assert 0 < rc.recompute_ms < rc.step_ms and rc.share == rc.recompute_ms / rc.step_ms
    assert 0 < rc.layer_forward_fraction < 1 and rc.expected_recompute_ms == round(
        rc.forward_ms * rc.layer_forward_fraction, 4)
    assert facts.watch.checkpointing.use_reentrant is True


def test_checkpointing_off_is_reported_and_nothing_is_recomputed(micro_llama, tmp_path):
    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    ids = torch.randint(512, (1, 8))
    with gcdoctor.watch(model, opt, out=tmp_path / "w", profile_steps=(1,), telemetry_hz=0) as w:
        _train(model, opt, ids, w, 3)
    facts = Facts.load(tmp_path / "w" / "facts.json")
    assert facts.watch.checkpointing.text() == "off"
    assert facts.watch.recompute.found is False and facts.watch.recompute.recompute_ms == 0.0
    from gcdoctor.engine import evaluate
    gc001 = next(v for v in evaluate(facts) if v.code == "GC001")
    assert (gc001.status, gc001.headline, gc001.scope, gc001.topic) == (
        "passed", "Checkpointing is off in this run: nothing is recomputed", "configuration", "watch")


def test_a_distributed_run_writes_a_directory_per_rank_or_rank_0_only(micro_llama, tmp_path, monkeypatch):
    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    ids = torch.randint(512, (1, 8))
    monkeypatch.setenv("RANK", "1")  # as torchrun sets them before the process group exists
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)  # (another test may have made one)
    with gcdoctor.watch(model, opt, out=tmp_path / "all", profile_steps=(), telemetry_hz=0) as w:
        _train(model, opt, ids, w, 2)
    facts = Facts.load(tmp_path / "all" / "rank-1" / "facts.json")
    assert (facts.watch.rank, facts.watch.world_size) == (1, 2)
    with gcdoctor.watch(model, opt, out=tmp_path / "zero", profile_steps=(), telemetry_hz=0, ranks="0") as w:
        assert not w.enabled
        _train(model, opt, ids, w, 2)
    assert not (tmp_path / "zero").exists()


@pytest.mark.parametrize("form, api, reentrant", [
    ("checkpoint_wrapper", "checkpoint_wrapper", False), ("composable", "composable", False),
    ("deepspeed", "deepspeed", True), ("none", "transformers", None)])
def test_the_checkpointing_the_libraries_report(micro_llama, form, api, reentrant):
    from gcdoctor.watching.watcher import describe_checkpointing
    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    layers = list(model.model.layers)
    if form == "checkpoint_wrapper":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, type(layers[0])))
    elif form == "composable":
        from torch.distributed._composable import checkpoint
        for layer in layers:
            checkpoint(layer)
    elif form == "deepspeed":
        ds = pytest.importorskip("deepspeed.runtime.activation_checkpointing.checkpointing")
        for layer in layers:
            layer.gradient_checkpointing, layer._gradient_checkpointing_func = True, ds.checkpoint
    cs = describe_checkpointing(model)
    assert (cs.api, cs.use_reentrant) == (api, reentrant)
    if form != "none":
        assert (cs.enabled, cs.layers_checkpointed, cs.layers_total) == (True, 2, 2)
    else:  # a transformers model without checkpointing says it is off
        assert cs.enabled is False and cs.text() == "off"
