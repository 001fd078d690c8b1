"""The granularity probe, run for real on the CPU with tiny-llama (4 layers), once for the module."""
from __future__ import annotations

import pytest
import torch

from gcdoctor.config import RunConfig
from gcdoctor.facts import Facts
from gcdoctor.report.markdown import render_markdown
from gcdoctor.run.session import Session

MODEL_VARIANTS = ["none", "layer", "every-2", "every-4", "selective-mlp", "selective-attn", "sub-layer", "fine"]
SYNTHETIC_VARIANTS = ["none", "block", "linear", "block-reentrant", "linear-reentrant"]


def _probe_run(out, **settings):
    cfg = RunConfig(device="cpu", model="tiny-llama", probes=["granularity"], seq_len=32, measure_steps=1,
                    warmup_steps=1, out=str(out), telemetry_hz=5.0, **settings)
    # one intra-op thread: on a shared 2-core machine two threads wait on each other at every
    # parallel op and a run takes several times longer; nothing here depends on threads
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        session = Session(cfg)
        session.run()
    finally:
        torch.set_num_threads(threads)
    return session, out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _probe_run(tmp_path_factory.mktemp("granularity"))


def test_every_variant_is_measured(run):
    g = run[0].facts.granularity
    assert [grp.name for grp in g.groups] == ["model", "synthetic-large", "synthetic-small"]
    assert [v.variant for v in g.group("model").variants] == MODEL_VARIANTS
    for name in ("synthetic-large", "synthetic-small"):
        assert [v.variant for v in g.group(name).variants] == SYNTHETIC_VARIANTS
    assert all(v.fits and v.step_ms > 0 for grp in g.groups for v in grp.variants)


def test_regions_are_counted_per_granularity(run):
    model = run[0].facts.granularity.group("model")
    regions = {v.variant: v.regions_per_step for v in model.variants}
    # tiny-llama: 4 decoder layers, each with 7 Linear projections (q, k, v, o, gate, up, down)
    assert regions == {"none": 0, "layer": 4, "every-2": 2, "every-4": 1, "selective-mlp": 4,
                       "selective-attn": 4, "sub-layer": 8, "fine": 28}
    synthetic = run[0].facts.granularity.group("synthetic-small")
    assert {v.variant: v.regions_per_step for v in synthetic.variants} == {
        "none": 0, "block": 8, "linear": 16, "block-reentrant": 8, "linear-reentrant": 16}


def test_recomputation_is_counted_and_early_stop_skips_single_linears(run):
    model = run[0].facts.granularity.group("model")
    ops = {v.variant: v.recomputed_ops_per_step for v in model.variants}
    assert ops["none"] == 0
    assert ops["layer"] > ops["every-2"] > ops["every-4"] > 0
    # a Linear's saved tensors are its own inputs: non-reentrant checkpoint recomputes nothing
    assert ops["fine"] == 0
    synthetic = run[0].facts.granularity.group("synthetic-small")
    ops = {v.variant: v.recomputed_ops_per_step for v in synthetic.variants}
    # per block: Linear and GELU run again, the last Linear is skipped by early stop (8 blocks)
    assert ops["block"] == 16
    assert ops["linear"] == 0
    # reentrant reruns every region whole: 3 ops per block, 1 per Linear
    assert ops["block-reentrant"] == 24
    assert ops["linear-reentrant"] == 16


def test_layer_checkpointing_holds_less_activation_memory_than_none(run):
    model = run[0].facts.granularity.group("model")
    none, layer, fine = model.get("none"), model.get("layer"), model.get("fine")
    assert none.saved_activation_bytes > layer.saved_activation_bytes
    assert none.activation_peak_bytes >= layer.activation_peak_bytes
    assert layer.memory_saved_bytes == none.saved_activation_bytes - layer.saved_activation_bytes > 0
    assert none.time_added_pct == 0.0 and none.memory_saved_bytes == 0
    # wrapping single Linears keeps what the surrounding ops save: no activation memory saved
    assert fine.saved_activation_bytes == none.saved_activation_bytes and fine.memory_saved_pct == 0.0


def test_launch_cost_is_measured_and_graphs_are_not_applicable_on_the_cpu(run):
    facts = run[0].facts
    lc = facts.granularity.launch
    assert lc.device_kind == "cpu" and lc.launches == 2000 and len(lc.launch_us_all) == lc.repeats
    assert lc.launch_us > 0 and lc.enqueue_us > 0
    # a Linear saves its inputs: nothing to recompute; a chain of blocks recomputes all but the last Linear
    assert [(p.name, p.forward_ops, p.recomputed_ops) for p in lc.region_points] == [
        ("linear", 1, 0), ("1 block", 3, 2), ("4 blocks", 12, 11), ("16 blocks", 48, 47)]
    assert all(p.checkpoint_us > 0 and p.extra_us >= 0 for p in lc.region_points)
    assert lc.region_fixed_us >= 0 and lc.region_per_op_us >= 0
    assert lc.graph_replay_us_per_op is None
    assert "no device graphs" in facts.unavailable["granularity.launch.graph_replay_us_per_op"]


def test_profiled_variants_carry_their_trace_metrics(run):
    facts = run[0].facts
    model = facts.granularity.group("model")
    profiled = {v.variant for v in model.variants if v.trace_key}
    assert profiled == {"none", "layer", "fine"}
    for v in model.variants:
        if v.trace_key:
            assert v.trace_key in facts.trace and v.cpu_ops_per_step > 0
            assert v.kernels_per_step is None  # a CPU trace has no device kernels
    assert "no device kernels" in facts.unavailable["granularity.kernels_per_step"]


def test_facts_reload_and_report_shows_the_variants(run):
    session, out = run
    facts = Facts.load(out / "facts.json")
    assert facts.to_dict()["granularity"] == session.facts.to_dict()["granularity"]
    md = render_markdown(facts, session.verdicts)
    assert "## Checkpoint granularity: memory saved versus time added" in md
    assert "| one kernel launch (back to back, synchronised) |" in md
    fine = next(x for x in md.splitlines() if x.startswith("| model | fine | each nn.Linear of each layer, separately |"))
    assert "| 28 |" in fine  # regions per step: one per Linear of each of the 4 layers' 7 Linears
    assert md.count("| best trade-off, ") == 3


def test_the_live_rows_of_the_synthetic_blocks_use_their_own_flop_count(run):
    # the rows shown live (console, TUI, events.jsonl) and the facts agree: the synthetic stack's tokens
    # and FLOPs, never the language model's (which read as MFU of 611-2210% on the H200)
    session, out = run
    import json
    rows = {json.loads(x)["row"]["variant"]: json.loads(x)["row"] for x in (out / "events.jsonl").read_text().splitlines()
            if '"MeasurementRecorded"' in x}
    for g in session.facts.granularity.groups:
        if not g.name.startswith("synthetic"):
            continue
        for v in g.variants:
            if v.fits:
                m = v.measurement
                assert rows[f"{g.name}/{v.variant}"]["tokens_per_s"] == round(m.tokens_per_s)
                assert m.seq_len == g.tokens_per_step


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """The same probe with --emulate-launch-us 40."""
    return _probe_run(tmp_path_factory.mktemp("granularity-emulated"), emulate_launch_us=40.0)


def test_census_counts_the_ops_a_launch_delay_is_charged_to(run):
    g = run[0].facts.granularity
    for group in g.groups:
        for v in group.variants:
            assert set(v.launch_ops_by_phase) == {"forward", "backward", "optimizer"}
            assert all(n > 0 for n in v.launch_ops_by_phase.values()) and v.passthrough_ops_per_step > 0
            assert v.host_ms is not None and 0 < v.host_ms <= v.step_ms
    model = g.group("model")
    ops = {v.variant: v.launch_ops_by_phase for v in model.variants}
    # the same forward and optimizer everywhere; recomputation adds backward ops; per-Linear and no
    # checkpointing run the same ops (non-reentrant checkpoint recomputes nothing for a Linear)
    assert len({o["forward"] for o in ops.values()}) == 1 and len({o["optimizer"] for o in ops.values()}) == 1
    assert ops["layer"]["backward"] > ops["every-2"]["backward"] > ops["none"]["backward"]
    assert ops["fine"]["backward"] == ops["none"]["backward"]


def test_cpu_whatif_is_the_host_itself(run):
    g = run[0].facts.granularity
    assert g.whatif_launch_us == [20.0, 50.0, 100.0]
    for v in g.group("model").variants:
        assert v.whatif.method == "host" and v.break_even_launch_us == g.launch.launch_us
        extra_ms = sum(v.launch_ops_by_phase.values()) * (100.0 - g.launch.launch_us) / 1e3
        assert v.predicted_step_ms[2] == pytest.approx(v.step_ms + max(extra_ms, 0.0))


def test_emulated_run_reads_the_emulated_cost_back_and_runs_every_variant(run, emulated):
    native, emu_session = run[0].facts.granularity, emulated[0].facts.granularity
    e = emu_session.emulation
    assert e.target_us == 40.0 and e.native is not None and e.native.launch_us > 0
    assert e.spin_us == pytest.approx(max(40.0 - e.mode_cost_us, 0.0))
    assert e.readback_extra_us == pytest.approx(emu_session.launch.launch_us - e.native.launch_us)
    assert e.readback_extra_us > 0
    assert [v.variant for v in emu_session.group("model").variants] == MODEL_VARIANTS
    # the emulation changes the time an op takes, never which ops run
    for group in emu_session.groups:
        for v in group.variants:
            n = native.group(group.name).get(v.variant)
            assert v.fits and v.launch_ops_by_phase == n.launch_ops_by_phase, (group.name, v.variant)
            assert v.regions_per_step == n.regions_per_step and v.recomputed_ops_per_step == n.recomputed_ops_per_step
    back = Facts.load(emulated[1] / "facts.json")
    assert back.granularity.emulation.readback_extra_us == e.readback_extra_us
    assert any(v.code == "GC010" for v in emulated[0].verdicts)
