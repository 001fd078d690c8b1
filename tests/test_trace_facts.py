"""Facts for `gcdoctor analyze` on a bare trace: the device from the trace's metadata, the trace
metrics per window, and a reason for everything a bare trace cannot give."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gcdoctor.facts import Facts
from gcdoctor.trace import facts_from_trace

DATA = Path(__file__).parent / "data"
HANDMADE = DATA / "handmade-trace.json"
CPU_SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "traces" / "cpu-tiny-llama.json.gz"


def test_environment_comes_from_device_properties_and_versions():
    env = facts_from_trace(HANDMADE).environment
    assert (env.device_kind, env.device_name, env.device_count) == ("cuda", "NVIDIA H200", 1)
    assert env.total_memory_bytes == 150110011392
    assert (env.runtime, env.host) == ("CUDA 12.8", "handmade")
    assert env.peak_bf16_tflops == 989.0  # from gcdoctor.model.hardware, matched by the device name


def test_trace_metrics_are_keyed_by_window_and_readable_by_dotted_path():
    facts = facts_from_trace(HANDMADE)
    assert list(facts.trace) == ["all", "steady", "step:5", "forward", "backward", "recompute"]
    assert facts.trace["all"].source == "handmade-trace.json"
    assert facts.get("trace.all.idle_host_wait_us") == 16.5
    assert facts.get("trace.recompute.busy_us") == 19.997
    assert facts.settings.command == "analyze"


def test_what_a_bare_trace_cannot_give_has_a_reason():
    facts = facts_from_trace(HANDMADE)
    for path in ("sweep", "telemetry", "memory_model", "model", "granularity", "offload", "jitter"):
        assert facts.get(path) is None
        assert "bare trace" in facts.missing_reason(path)
    assert "trace.all" not in facts.unavailable


def test_cpu_trace_records_why_device_metrics_are_missing():
    facts = facts_from_trace(CPU_SAMPLE)
    assert facts.environment.device_kind == "cpu"
    assert facts.get("trace.all.busy_us") is None
    assert facts.missing_reason("trace.all.busy_us") == (
        "no device metrics: the trace has no device events (a CPU-only profile)")
    assert facts.get("trace.all.cpu_busy_us") > 0


def test_facts_round_trip_through_json(tmp_path):
    facts = facts_from_trace(HANDMADE)
    p = tmp_path / "facts.json"
    facts.save(p)
    again = Facts.load(p)
    assert again.trace["all"].memcpy["HtoD"].bandwidth_gbs == 100.0
    assert again.trace["all"].streams[1].stream == 20
    assert again.to_dict() == json.loads(p.read_text())


def test_trace_package_imports_neither_torch_nor_pandas():
    code = ("import sys; from gcdoctor.trace import facts_from_trace; facts_from_trace(sys.argv[1]); "
            "print(sorted(m for m in ('torch', 'pandas', 'textual') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(HANDMADE)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_same_trace_gives_the_same_facts_whatever_the_hash_seed(tmp_path):
    import os
    trace = Path(__file__).resolve().parents[1] / "samples" / "traces" / "h200-host" / "healthy.json.gz"
    dumps = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-m", "gcdoctor", "analyze", str(trace), "--out", str(out), "--json"],
                       env=env, check=True, capture_output=True)
        dumps.append(json.dumps(json.loads((out / "facts.json").read_text())["trace"]))
    assert dumps[0] == dumps[1]
