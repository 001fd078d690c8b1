"""The fast paths for start-up: the model built without its random initialisation, the phase
timings a run records, the phases bench that reads them, the CPU Adam compile's estimate."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from gcdoctor.model import registry as models
from gcdoctor.run.events import PhaseTimed, RunStarted, event_from_json, event_to_json, process_age_s

REPO = Path(__file__).resolve().parents[1]


def test_fast_build_has_the_random_builds_shapes_buffers_and_a_finite_loss():
    torch = pytest.importorskip("torch")
    spec = models.load_spec("tiny-llama", layers=2)
    ref = models.build_model(spec, "fp32", "cpu")
    fast = models.build_model(spec, "fp32", "cpu", init="fast")
    assert {n: tuple(p.shape) for n, p in fast.named_parameters()} == \
        {n: tuple(p.shape) for n, p in ref.named_parameters()}
    assert not any(p.is_meta for p in fast.parameters())
    for (name, b), (_, rb) in zip(fast.named_buffers(), ref.named_buffers()):
        assert torch.equal(b, rb), name  # the rotary frequencies are computed, not left empty
    assert fast.training
    norms = [p for n, p in fast.named_parameters() if p.dim() == 1 and "norm" in n]
    assert norms and all(bool((p == 1).all()) for p in norms)
    w = fast.model.layers[0].mlp.up_proj.weight.detach()
    assert 0.001 < float(w.std()) < 0.05 and len(torch.unique(w)) > 1000  # a tile of normal values
    again = models.build_model(spec, "fp32", "cpu", init="fast")
    assert torch.equal(again.lm_head.weight, fast.lm_head.weight)  # seeded
    ids = torch.randint(0, spec.vocab_size, (1, 16))
    loss = fast(input_ids=ids, labels=ids).loss
    loss.backward()
    assert math.isfinite(float(loss))


def test_phase_events_round_trip_and_the_process_age():
    ev = PhaseTimed("allocator", "model build", 1.25, "llama3-8b, 2 layers, init fast")
    assert event_from_json(event_to_json(ev)) == ev
    rs = RunStarted("/r", "diagnose", {}, {}, 3.5)
    assert event_from_json(event_to_json(rs)).startup_s == 3.5
    age = process_age_s()
    assert age is None or 0 <= age < 3600


def _phases_module():
    spec = importlib.util.spec_from_file_location("diagnose_phases", REPO / "bench" / "diagnose_phases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_diagnose_phases_adds_steps_build_and_analysis_per_probe(tmp_path, capsys):
    mod = _phases_module()
    lines = [
        {"type": "RunStarted", "wall": 100.0, "run_dir": "r", "command": "diagnose", "startup_s": 4.0},
        {"type": "ProbeStarted", "wall": 100.0, "probe": "sweep"},
        {"type": "PhaseTimed", "wall": 101.0, "probe": "sweep", "phase": "model build", "seconds": 1.0},
        {"type": "StepMeasured", "wall": 102.0, "probe": "sweep", "variant": "gc", "batch_size": 1,
         "step_index": 0, "step_ms": 500.0, "phase": "warmup"},
        {"type": "StepMeasured", "wall": 103.0, "probe": "sweep", "variant": "gc", "batch_size": 1,
         "step_index": 1, "step_ms": 250.0, "phase": "measure"},
        {"type": "StepMeasured", "wall": 103.5, "probe": "sweep", "variant": "gc", "batch_size": 2,
         "step_index": 0, "step_ms": 250.0, "phase": "search"},
        {"type": "StepMeasured", "wall": 104.0, "probe": "sweep", "variant": "gc", "batch_size": 1,
         "step_index": 0, "step_ms": 300.0, "phase": "profile"},
        {"type": "PhaseTimed", "wall": 105.0, "probe": "sweep", "phase": "trace analysis", "seconds": 0.7},
        {"type": "ProbeFinished", "wall": 106.0, "probe": "sweep", "ok": True, "seconds": 6.0},
        {"type": "RunFinished", "wall": 108.0, "run_dir": "r"},
    ]
    (tmp_path / "events.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    res = mod.phases(mod.read(tmp_path / "events.jsonl"))
    ph = res["probes"]["sweep"]["phases"]
    assert ph == pytest.approx({"model build": 1.0, "warm-up": 0.5, "timed steps": 0.5, "profiled steps": 0.3,
                                "trace analysis": 0.7, "other": 3.0})
    assert res["startup_s"] == 4.0 and res["after_s"] == 2.0 and res["total_s"] == 12.0
    import sys
    sys.argv = ["diagnose_phases.py", str(tmp_path)]
    assert mod.main() == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["probe", "total"] and max(len(x) for x in out) <= 80
    sys.argv = ["diagnose_phases.py", str(tmp_path / "nope")]
    assert mod.main() == 2


def test_cpu_adam_compile_estimate_is_said_in_seconds():
    from gcdoctor.probes import _deepspeed
    assert _deepspeed.cpu_adam_compile_estimate(16).startswith("about 46 s")
    assert _deepspeed.cpu_adam_compile_estimate(2).startswith("about 69 s")
