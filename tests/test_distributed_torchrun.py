"""`gcdoctor diagnose` under torchrun on the CPU: 2 processes, gloo, FSDP2: the sweep, the granularity
probe and the sharding probe. One real run (a 2-layer, 64-wide Llama, one batch, one step per point:
about 45 s on a 2-core machine) read by every test."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.rules import find_rule

pytestmark = pytest.mark.distributed
MICRO = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
}
UNITS = 3  # two decoder layers and the root, each its own FSDP unit


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("dist")
    cfg = tmp / "micro" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(MICRO))
    out = tmp / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        "-m", "gcdoctor", "diagnose", "--no-tui", "--device", "cpu", "--model", str(cfg),
                        "--probes", "sweep,granularity,sharding", "--batch-sizes", "1", "--steps", "1", "--warmup", "0",
                        "--seq-len", "16", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out


def test_rank_0_writes_the_run_and_every_rank_its_own_directory_and_traces(run):
    assert (run / "facts.json").is_file() and (run / "report.md").is_file()
    assert (run / "rank-1" / "facts.json").is_file() and (run / "rank-1" / "telemetry.csv").is_file()
    assert not (run / "rank-1" / "report.md").exists()  # rank 0 reports for every rank
    for key in ("sweep-gc", "sweep-no_gc", "sharding-fsdp2-gc", "sharding-fsdp2-keep-gc"):
        assert sorted(p.name for p in (run / "traces" / key).iterdir()) == [
            "rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"], key


def test_rank_0_facts_hold_every_rank(run):
    d = Facts.load(run / "facts.json").distributed
    assert (d.world_size, d.backend, d.launcher, d.strategy) == (2, "gloo", "torchrun", "fsdp2")
    assert [(r.rank, r.device, r.run_dir) for r in d.ranks] == [(0, "cpu", "."), (1, "cpu", "rank-1")]
    assert {r.rank for r in d.rows("sweep", "gc", 1)} == {0, 1}
    assert {(c.key, c.rank) for c in d.comm} >= {("sweep/gc", 0), ("sweep/gc", 1), ("sweep/no_gc", 1)}


def test_each_rank_holds_half_of_the_model_states(run):
    f = Facts.load(run / "facts.json")
    n_params = f.model.n_params
    for r in f.distributed.rows("sweep", "gc", 1):
        # fp32 on the CPU; every tensor's dim 0 (64, 160, 512, ...) splits evenly over 2 ranks
        assert (r.param_bytes, r.grad_bytes) == (2 * n_params, 2 * n_params), r.rank
        assert r.optimizer_state_bytes == 2 * r.param_bytes  # AdamW's two moments, sharded alike


def test_collectives_per_step_with_and_without_resharding(run):
    d = Facts.load(run / "facts.json").distributed
    for rank in (0, 1):
        by_key = {c.key: c for c in d.comm if c.rank == rank}
        for key in ("sweep/gc", "sweep/no_gc", "sharding/fsdp2/gc", "sharding/fsdp2/gc-wrapper"):
            c = by_key[key]
            # each unit gathered for its forward and, resharded after it, again for its backward;
            # FSDP2's backward gather serves the recompute: none issued by the recompute itself
            assert c.collectives["all_gather"].by_phase == {"forward": UNITS, "backward": UNITS}, key
            assert c.calls("reduce_scatter", "backward") == UNITS
        for key in ("sharding/fsdp2-keep/gc", "sharding/fsdp2-keep/no_gc"):
            assert by_key[key].collectives["all_gather"].by_phase == {"forward": UNITS}, key
        assert by_key["sweep/gc"].device_unavailable.startswith("a CPU trace")


def test_the_sharding_rules_judge_the_run(run):
    f = Facts.load(run / "facts.json")
    verdicts = {(v.code, v.subject): v for v in evaluate(f, [find_rule(c) for c in ("GC060", "GC061", "GC062")])}
    v = verdicts[("GC060", "")]
    assert v.status == "passed" and v.headline.startswith("Model states are sharded 2 ways")
    v = verdicts[("GC062", "sweep/gc")]
    assert (v.status, v.scope) == ("passed", "configuration")
    assert "checkpointing adds no all-gather: 6 per step with and 6 without" in v.headline
    assert verdicts[("GC062", "sharding/fsdp2-keep/gc")].scope == "experiment"
    v = verdicts[("GC061", "sweep/gc")]
    assert v.status == "inconclusive" and "gloo" in v.headline


def test_the_report_has_the_sharded_section_and_the_ranks_in_its_title(run):
    md = (run / "report.md").read_text()
    assert "## Sharded over several ranks: memory and communication" in md
    assert "Bottom line: micro on 2x " in md  # the title names every rank's device


def test_the_granularity_probe_ran_on_the_sharded_model(run):
    f = Facts.load(run / "facts.json")
    [group] = f.granularity.groups  # the synthetic blocks measure one device: left out on several ranks
    assert group.description.endswith("FSDP2 over 2 ranks")
    rows = {v.variant: v for v in group.variants}
    assert (rows["layer"].regions_per_step, rows["sub-layer"].regions_per_step, rows["none"].regions_per_step) == (
        2, 4, 0)
    assert rows["layer"].measurement.param_bytes == 2 * f.model.n_params  # half of the fp32 parameters
    c = {x.key: x for x in f.distributed.comm if x.rank == 1}["granularity/model/layer"]
    assert c.collectives["all_gather"].by_phase == {"forward": UNITS, "backward": UNITS}
    v = {x.subject: x for x in evaluate(f, [find_rule("GC062")])}["granularity/model/layer"]
    assert (v.status, v.scope) == ("passed", "experiment")


def test_the_memory_model_says_why_it_does_not_predict_a_rank(run):
    f = Facts.load(run / "facts.json")
    assert f.memory_model is None
    assert "sharded run (fsdp2 over 2 ranks)" in f.unavailable["memory_model"]
