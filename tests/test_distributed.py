"""A diagnose over several ranks, piece by piece, without starting ranks (except one bad launch):
the launch found in the environment, the per-rank states of `gcdoctor.model.sharding` and `plan --shard`,
the communication metrics of a hand-made device trace and of recorded gloo traces, and the sharding
rules GC060-GC063 on the recorded 2-rank CPU run and on edits of it."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gcdoctor.run import distributed as D
from gcdoctor.model import sharding as S
from gcdoctor.engine import evaluate, evaluate_rule
from gcdoctor.errors import UserError
from gcdoctor.facts import Facts
from gcdoctor.model.registry import load_spec
from gcdoctor.rules import find_rule
from gcdoctor.trace import load_trace
from gcdoctor.trace.comm import collective_kind, comm_metrics, is_comm_kernel

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "samples" / "distributed" / "cpu-gloo-2ranks"
COMM_TRACE = REPO / "tests" / "data" / "comm-fsdp.json"


@pytest.fixture
def run() -> Facts:
    return Facts.load(RUN / "facts.json")


def judge(code: str, facts: Facts, **overrides):
    return {v.subject: v for v in evaluate_rule(find_rule(code), facts, {code: overrides} if overrides else None)}


# -- the launch ---------------------------------------------------------------------------------------

def test_a_launch_is_found_in_torchruns_environment():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert D.launch_from_env(env) == D.Launch(1, 2, 1, 2)
    assert D.launch_from_env({}) is None


def test_world_size_1_is_a_launch_only_with_a_launchers_marker():
    # DeepSpeed's one-process initialisation (the offload probe) leaves RANK=0 WORLD_SIZE=1 behind
    assert D.launch_from_env({"RANK": "0", "WORLD_SIZE": "1"}) is None
    assert D.launch_from_env({"RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "x"}) == D.Launch(0, 1, 0, 1)
    assert D.launch_from_env({"RANK": "0", "WORLD_SIZE": "1", D.LAUNCH_KEY: "1"}) == D.Launch(0, 1, 0, 1)


@pytest.mark.parametrize("env, text", [({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x': not an integer"),
                                       ({"RANK": "2", "WORLD_SIZE": "2"}, "not a valid rank")])
def test_a_broken_launch_environment_is_one_clear_error(env, text):
    with pytest.raises(UserError, match=text):
        D.launch_from_env(env)


def test_each_rank_uses_the_device_of_its_local_rank():
    launch = D.Launch(3, 4, 1, 2)
    assert D.rank_device("cuda", launch) == "cuda:1"
    assert D.rank_device("cpu", launch) == "cpu"
    with pytest.raises(UserError, match="each rank uses the device of its LOCAL_RANK"):
        D.rank_device("cuda:0", launch)


def test_the_workers_get_torchruns_environment_and_no_nproc():
    assert D.strip_nproc(["--nproc", "2", "--model", "x", "--nproc=3", "--seq-len", "8"]) == [
        "--model", "x", "--seq-len", "8"]
    env = D.worker_env(1, 2, 29500, base={})
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")} == {
        "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert D.launch_from_env(env) == D.Launch(1, 2, 1, 2)


def test_probes_of_one_device_are_refused_on_several_ranks_and_the_sharding_probe_in_one_process():
    from gcdoctor.probes import select_probes
    assert [p.name for p in select_probes(None, "cpu", distributed=True)] == ["sweep", "granularity", "sharding"]
    assert "sharding" not in [p.name for p in select_probes(None, "cpu")]
    with pytest.raises(UserError, match="--probes offload: it measures one device in one process"):
        select_probes(["offload"], "cpu", distributed=True)
    with pytest.raises(UserError, match="--probes sharding: it compares sharded setups"):
        select_probes(["sharding"], "cpu")


def test_nproc_starts_the_ranks_and_a_bad_argument_is_said_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    p = subprocess.run([sys.executable, "-m", "gcdoctor", "diagnose", "--nproc", "2", "--device", "cpu",
                        "--model", "no-such-model", "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 2
    errors = [line for line in p.stderr.splitlines() if line.startswith("gcdoctor: error:")]
    assert len(errors) == 1 and "unknown model 'no-such-model'" in errors[0]


def test_nproc_is_a_positive_count():
    from gcdoctor.cli import main
    assert main(["diagnose", "--nproc", "0"]) == 2


# -- states per rank and plan --shard -------------------------------------------------------------------

def test_fsdp2_pads_dim_0_and_zero3_keeps_small_tensors_whole(micro_llama):
    spec = load_spec(micro_llama)
    tensors = S.param_tensors(spec)
    assert sum(t.numel for t in tensors) == spec.param_count()
    v = next(t for t in tensors if t.rows == 160)  # an MLP projection [160, 64]
    assert S.local_elements(v, 3, S.FSDP2) == 54 * 64  # ceil(160 / 3) rows
    assert S.local_elements(v, 3, S.ZERO3) == v.numel  # 10,240 elements: under the 1e5 threshold
    big = S.Tensor("root", 1000, 1000 * 128)  # above the threshold: partitioned flat, padded
    assert S.local_elements(big, 3, S.ZERO3) == 42_667


def test_states_per_rank_are_the_shards_of_every_state(micro_llama):
    spec = load_spec(micro_llama)
    one = S.shard_states(spec, 1, "fp32", "adamw", "cpu")
    assert (one.param_bytes, one.gathered_bytes) == (4 * spec.param_count(), 0)
    two = S.shard_states(spec, 2, "fp32", "adamw", "cpu")
    assert two.param_bytes == two.grad_bytes == 2 * spec.param_count()  # every dim 0 is even
    assert two.fraction("params") == 0.5
    layer = sum(t.numel for t in S.param_tensors(spec) if t.unit == "layer0") * 4
    root = sum(t.numel for t in S.param_tensors(spec) if t.unit == "root") * 4
    assert two.gathered_bytes == root + 2 * layer + max(root, layer)
    keep = S.shard_states(spec, 2, "fp32", "adamw", "cpu", reshard_after_forward=False)
    assert keep.gathered_bytes == 4 * spec.param_count() + max(root, layer)


def test_plan_shard_predicts_a_rank(capsys):
    from gcdoctor.cli import main
    assert main(["plan", "--model", "llama3-8b", "--device-memory", "141GB", "--shard", "2", "--json"]) == 0
    import json
    data = json.loads(capsys.readouterr().out)
    sec = data["sharded"]
    full = data["model_state_bytes"]["total"]
    assert sec["world_size"] == 2 and abs(sec["per_rank_state_bytes"]["total"] - full / 2) < 0.001 * full
    assert sec["max_batch_per_rank"]["gc"] >= data["max_batch_gc"]  # half the states: never less room
    assert main(["plan", "--model", "llama3-8b", "--device-memory", "80GB", "--shard", "8"]) == 0
    text = capsys.readouterr().out
    assert "sharded over 8 devices (FSDP2), per rank:" in text and "largest batch per rank    GC:" in text
    assert max(len(line) for line in text[text.index("sharded over"):].splitlines()) <= 80
    assert main(["plan", "--model", "llama3-8b", "--device-memory", "80GB", "--shard", "0"]) == 2


# -- communication in a trace ----------------------------------------------------------------------------

def test_collective_names_and_communication_kernels():
    assert [collective_kind(n) for n in ("c10d::_allgather_base_", "c10d::reduce_scatter_tensor_coalesced_",
                                         "c10d::allreduce_", "_c10d_functional::all_gather_into_tensor",
                                         "c10d::broadcast_", "c10d::send")] == [
        "all_gather", "reduce_scatter", "all_reduce", "all_gather", "broadcast", "other"]
    assert is_comm_kernel("ncclDevKernel_AllGather_RING_LL") and is_comm_kernel("ncclKernel_AllReduce_RING_LL_Sum")
    assert not is_comm_kernel("sm90_xmma_gemm_bf16bf16")


def test_communication_of_a_hand_made_device_trace():
    cm = comm_metrics(load_trace(COMM_TRACE), "sweep/gc", 0)
    assert cm.steps == 1 and cm.step_us == 3500.0
    # a coalesced call counts once, a wait is no call, the recompute's own gather is attributed to it
    assert cm.collectives["all_gather"].by_phase == {"forward": 2.0, "backward": 1.0, "recompute": 1.0}
    assert cm.calls("reduce_scatter", "backward") == 1.0
    assert (cm.comm_kernel_count, cm.comm_busy_us, cm.comm_exposed_us, cm.comm_overlap_compute_us) == (
        3.0, 500.0, 250.0, 250.0)
    assert (cm.recompute_busy_us, cm.comm_overlap_recompute_us, cm.busy_us) == (500.0, 200.0, 2440.0)
    assert cm.exposed_share == pytest.approx(250 / 3500)


def test_communication_of_recorded_gloo_traces():
    t = load_trace(RUN / "traces" / "sweep-gc" / "rank-1.pt.trace.json.gz")
    cm = comm_metrics(t, "sweep/gc", 1)
    assert cm.steps == 2
    assert cm.collectives["all_gather"].by_phase == {"forward": 3.0, "backward": 3.0}
    assert cm.collectives["reduce_scatter"].by_phase == {"backward": 3.0}
    assert cm.host_comm_us > 0 and cm.comm_busy_us is None and "gloo" in cm.device_unavailable
    keep = comm_metrics(load_trace(RUN / "traces" / "sharding-fsdp2-keep-gc" / "rank-0.pt.trace.json.gz"), "k", 0)
    assert keep.collectives["all_gather"].by_phase == {"forward": 3.0}


# -- the rules ---------------------------------------------------------------------------------------------

def test_gc060_passes_on_the_recorded_run_and_fires_when_a_rank_holds_the_whole_model(run):
    v = judge("GC060", run)[""]
    assert v.status == "passed" and v.headline.startswith("Model states are sharded 2 ways:")
    assert v.line.startswith("states sharded 2 ways:") and len(v.line) <= 72
    bad = copy.deepcopy(run)
    for r in bad.distributed.measurements:
        if r.rank == 1:
            r.param_bytes *= 2  # a rank that kept the unsharded parameters
    v = judge("GC060", bad)[""]
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline == "Rank 1 holds 100% more parameters than 1/2 of the model: part of it is not sharded"


def _with_device_comm(run: Facts, key: str, exposed_scale: float = 1.0) -> Facts:
    """The recorded run with `key`'s communication replaced by the hand-made device trace's."""
    f = copy.deepcopy(run)
    f.distributed.comm = [c for c in f.distributed.comm if c.key != key]
    for rank in (0, 1):
        cm = comm_metrics(load_trace(COMM_TRACE), key, rank)
        cm.comm_exposed_us *= exposed_scale
        f.distributed.comm.append(cm)
    return f


def test_gc061_is_inconclusive_on_a_cpu_trace_and_judges_a_device_one(run):
    v = judge("GC061", run)["sweep/gc"]
    assert v.status == "inconclusive" and "gloo" in v.headline
    f = _with_device_comm(_with_device_comm(run, "sweep/gc"), "sweep/no_gc")  # 250 of 3,500 us exposed: 7%
    v = judge("GC061", f)["sweep/gc"]
    assert v.status == "passed" and v.headline.startswith("sweep/gc: 7% of the step is exposed communication")
    v = judge("GC061", f, max_exposed_pct=5)["sweep/gc"]
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline == ("sweep/gc: 7% of the step is communication no compute hides (0.2 of 0.5 ms, rank 0)")
    assert {e.label for e in v.evidence} >= {"beside the recompute", "exposed without checkpointing"}


def test_gc062_passes_when_fsdp2s_backward_gather_serves_the_recompute_and_fires_on_extra_gathers(run):
    vs = judge("GC062", run)
    assert vs["sweep/gc"].status == "passed" and vs["sweep/gc"].scope == "configuration"
    assert "6 per step with and 6 without (the backward's 3 re-gathers" in vs["sweep/gc"].headline
    assert vs["sharding/fsdp2-keep/gc"].scope == "experiment"
    assert "(no parameter is gathered again in backward)" in vs["sharding/fsdp2-keep/gc"].headline


def test_gc062_counts_the_recomputes_extra_gathers(run):
    f = copy.deepcopy(run)
    for c in f.distributed.comm:
        if c.key == "sweep/gc":
            c.collectives["all_gather"].by_phase["recompute"] = 3.0  # each layer gathered again for its recompute
            c.collectives["all_gather"].per_step += 3.0
    v = judge("GC062", f)["sweep/gc"]
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline == ("sweep/gc: checkpointing adds 3 parameter all-gathers per step (9 against 6 without; "
                          "3 issued by the recompute)")
    assert v.line == "checkpointing adds 3 all-gathers per step (sweep/gc)"


def test_gc063_compares_each_variant_with_fsdp2s_defaults(run):
    vs = judge("GC063", run)
    assert set(vs) == {"sharding/fsdp2/gc-wrapper", "sharding/fsdp2-keep/gc", "sharding/fsdp2-keep/no_gc",
                       "sharding/zero3/no_gc", "sharding/zero3/gc"}
    assert all(vs[k].scope == "experiment" for k in vs)
    assert vs["sharding/zero3/gc"].status == "inconclusive" and "ZeRO-3 variants were skipped" in vs[
        "sharding/zero3/gc"].headline
    f = copy.deepcopy(run)
    keep, ref = f.distributed.variant("fsdp2-keep/gc"), f.distributed.variant("fsdp2/gc")
    ref.measurement.step_ms = [100.0, 100.0, 101.0]
    ref.measurement.step_ms_median = 100.0
    keep.measurement.step_ms = [80.0, 80.0, 81.0]
    keep.measurement.step_ms_median = 80.0
    v = judge("GC063", f)["sharding/fsdp2-keep/gc"]
    assert (v.status, v.severity) == ("fired", "info")
    assert v.headline.startswith("fsdp2-keep/gc is 20% faster than fsdp2/gc on this device (-20 % step, ")
    assert "-3 all-gathers/step" in v.headline and "-3 gathers/step" in v.line and v.line.startswith("fsdp2-keep/gc: -20 % step, ") and len(v.line) <= 72
    keep.measurement.step_ms = [80.0, 100.0, 81.0]  # 24% spread: too noisy to rank
    v = judge("GC063", f)["sharding/fsdp2-keep/gc"]
    assert v.status == "passed" and "too noisy to rank" in v.headline


def test_the_prescription_of_a_sharded_run_is_per_rank(run):
    [v] = evaluate_rule(find_rule("GC007"), run)
    if v.status == "fired":
        assert "sharded with FSDP2 over 2 ranks (reshard_after_forward=True)" in v.recommendation
        assert "/rank:" in v.line
    else:  # the CPU's timings may be too noisy to choose: the rule then says so
        assert v.status == "inconclusive" and "vary" in v.headline


def test_the_report_shows_the_sharded_section(run, tmp_path):
    from gcdoctor.report import write_reports
    write_reports(tmp_path, run, evaluate(run))
    md = (tmp_path / "report.md").read_text()
    assert "## Sharded over several ranks: memory and communication" in md
    assert "| sweep/gc | 1 | 6 | 3 | 3 | 0 | 3 |" in md  # all-gathers: per step, forward, backward, recompute
    html = (tmp_path / "report.html").read_text()
    assert "Sharded over several ranks" in html and "Communication per profiled step" in html


def test_sharding_and_communication_code_imports_no_torch():
    code = ("import sys, gcdoctor.model.sharding, gcdoctor.trace.comm, gcdoctor.facts.distributed, gcdoctor.run.distributed, "
            "gcdoctor.report.sections.distributed; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')); "
            "print(bad); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
