"""gcdoctor.watch and the Trainer callback on a real (tiny) training loop on the CPU."""
from __future__ import annotations

import json

import torch

import gcdoctor
from gcdoctor.cli import main
from gcdoctor.events import StepMeasured, read_events
from gcdoctor.facts import Facts
from gcdoctor.models import build_model, load_spec


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

    from gcdoctor.hf import GcdoctorCallback

    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=5, per_device_train_batch_size=2,
                             logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True)
    cb = GcdoctorCallback(out=tmp_path / "run", profile_steps=(2,), telemetry_hz=10)
    trainer = Trainer(model=model, args=args, train_dataset=_Tokens(16, 16, 512), callbacks=[cb])
    trainer.train()
    facts = Facts.load(tmp_path / "run" / "facts.json")
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert [s.index for s in facts.watch.steps] == [0, 1, 2, 3, 4]
    assert [s.loss for s in facts.watch.steps] == logged  # the Trainer's own logged losses, step by step
    assert facts.watch.profiled_steps == [2]
    assert "watch/watch-steps-2-2" in facts.trace
    assert (tmp_path / "run" / "report.md").is_file()
