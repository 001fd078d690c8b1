"""The fresh-process allocator probe: its worker measures given batches in a new process and
returns them as JSON; the probe walks the default allocator down from the sweep's boundary and
the expandable-segments process up from it. On the CPU (no caching allocator) the mechanics run
the same; what the allocator does is the H200 run's to show."""
from __future__ import annotations

import json
import os

import pytest

from gcdoctor.config import RunConfig
from gcdoctor.errors import UserError
from gcdoctor.probes import select_probes
from gcdoctor.probes.allocator import AllocatorProbe, run_worker
from gcdoctor.run.session import ProbeContext, Session


def _config(micro_llama, out, **kw):
    return RunConfig(device="cpu", model=micro_llama, probes=["sweep"], seq_len=32, profile=False, measure_steps=1,
                     warmup_steps=1, out=str(out), telemetry_hz=5.0, **kw)


def test_the_worker_measures_in_a_fresh_process_and_answers_in_json(micro_llama, tmp_path):
    free = Session(_config(micro_llama, tmp_path / "free", batch_sizes=[3]))
    free.run()
    limit = free.facts.sweep.get("no_gc", 3).peak_allocated_bytes  # batch 3 fits, 4 does not
    work = tmp_path / "w" / "work.json"
    work.parent.mkdir()
    cfg = _config(micro_llama, tmp_path / "w", memory_limit_bytes=limit).to_dict()
    cfg["measure_steps"] = 2
    work.write_text(json.dumps({"config": cfg, "variant": "no_gc", "batches": [2], "mode": "boundary",
                                "low": 1, "high": 16, "max_trials": 4}))
    result = run_worker(work, dict(os.environ))
    assert isinstance(result, dict), result
    got = [(m["batch_size"], m["fits"]) for m in result["measurements"]]
    assert got == [(2, True), (3, True), (4, False)]  # up from 2 while it fits
    # the first point is timed as configured; the later ones only say fit or OOM: warm-up + one step
    assert [len(m["step_ms"]) for m in result["measurements"][:2]] == [2, 1]
    assert result["measurements"][2]["oom"]["kind"] == "capacity"
    assert (tmp_path / "w" / "run" / "events.jsonl").is_file()  # its own run directory, beside WORK.json


def test_a_worker_that_fails_says_why(tmp_path):
    work = tmp_path / "work.json"
    work.write_text(json.dumps({"config": {"device": "cpu", "model": "no-such-model"}, "variant": "gc",
                                "batches": [1], "mode": "list", "low": 1, "high": 1, "max_trials": 1}))
    result = run_worker(work, dict(os.environ))
    assert isinstance(result, str) and result.startswith("exit code")


def test_the_probe_applies_only_where_there_is_a_caching_allocator():
    assert "allocator" not in [p.name for p in select_probes(None, "cpu")]
    assert "allocator" in [p.name for p in select_probes(None, "cuda")]
    with pytest.raises(UserError, match="no caching allocator"):
        select_probes(["allocator"], "cpu")


def test_the_probe_checks_the_sweeps_boundary_fresh_and_searches_expandable_segments(micro_llama, tmp_path):
    free = Session(_config(micro_llama, tmp_path / "free", batch_sizes=[3]))
    free.run()
    limit = free.facts.sweep.get("gc", 3).peak_allocated_bytes
    s = Session(_config(micro_llama, tmp_path / "run", memory_limit_bytes=limit, max_batch=8))
    s.run()
    sweep = s.facts.sweep
    assert sweep.max_batch["gc"] == 3
    sweep.max_batch["no_gc"] = None  # only the checkpointed variant, to keep to two processes
    ctx = ProbeContext(s)
    AllocatorProbe().run(ctx)
    al = s.facts.allocator
    assert [(r.variant, r.allocator, r.batches) for r in al.runs] == [
        ("gc", "default", [3]), ("gc", "expandable", [4, 3])]
    default, expandable = al.get("gc", "default"), al.get("gc", "expandable")
    assert (default.largest_batch, default.order_moves_boundary, default.first_oom_batch) == (3, False, 4)
    assert default.exact and default.tokens_per_s > 0 and al.reliable_batch("gc") == 3
    # the expandable process started one above the boundary, ran out of memory there, stepped down
    assert (expandable.largest_batch, expandable.first_oom_batch, expandable.exact) == (3, 4, True)
    assert al.runs[1].alloc_conf == "expandable_segments:True"
    assert all((s.rundir.path / r.run_dir / "result.json").is_file() for r in al.runs)


@pytest.mark.parametrize("variant", ["no_gc", "gc"])
def test_the_second_step_sets_the_peak_every_later_step_repeats(micro_llama, tmp_path, variant):
    """Why a fit-or-OOM point runs two steps, not one: the first step's forward and backward run
    before the optimizer states exist, so its peak can be below the second's (never above); from
    the second on, the peak is the same byte for byte (the CPU allocator's counter)."""
    from gcdoctor.run.capture import TrainingStep, enable_layer_checkpointing
    s = Session(_config(micro_llama, tmp_path / "r"))
    ctx = ProbeContext(s)
    with s.backend.tracking():
        model = ctx.build_model(init="fast")
        s.backend.track([*model.parameters(), *model.buffers()])
        if variant == "gc":
            enable_layer_checkpointing(model)
        step = TrainingStep(model, s.backend, 4, 32)
        peaks = [step.run().peak_allocated_bytes for _ in range(4)]
        step.release()
    assert peaks[1] == peaks[2] == peaks[3]
    # with checkpointing, the activations are small here and the first step's optimizer phase (the
    # states created) can be its peak too: the same bytes; without it, the second step is above
    assert peaks[0] < peaks[1] if variant == "no_gc" else peaks[0] <= peaks[1]
