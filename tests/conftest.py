"""Shared fixtures: a very small Llama config so CPU tests run in seconds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"

MICRO_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
}


@pytest.fixture
def micro_llama(tmp_path: Path) -> str:
    """Path to a config.json of a 2-layer, 64-wide Llama (about 0.1 M parameters)."""
    path = tmp_path / "micro-llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(MICRO_LLAMA))
    return str(path)


OFFLOAD_SAMPLE = SAMPLES / "cpu-tiny-llama-offload" / "facts.json"
H200_PCIE_GBS = 63.008  # Gen5 x16, per direction


@pytest.fixture
def offload_gpu_like():
    """Builder for GC020/GC021 tests: the recorded CPU offload run with each named variant's trace
    replaced by a hand-made device trace (tests/data/offload-<name>.json), its measurement given the
    telemetry summary and optimizer share passed in, and its row derived again as the probe does."""
    from gcdoctor.facts import Facts
    from gcdoctor.probes.offload import derive
    from gcdoctor.trace import compute_metrics, load_trace

    def build(traces: dict, telemetry: dict | None = None, optimizer_share: dict | None = None):
        facts = Facts.load(OFFLOAD_SAMPLE)
        facts.environment.device_kind, facts.environment.pcie_peak_gbs = "cuda", H200_PCIE_GBS
        for variant, name in traces.items():
            key = f"offload/{variant}"
            facts.trace = {k: v for k, v in facts.trace.items() if k != key and not k.startswith(key + "|")}
            for window, tm in compute_metrics(load_trace(REPO / "tests" / "data" / f"offload-{name}.json")).items():
                facts.trace[key if window == "all" else f"{key}|{window}"] = tm
            row = facts.offload.get(variant)
            row.measurement.telemetry = (telemetry or {}).get(variant, {})
            if optimizer_share and variant in optimizer_share:
                row.measurement.optimizer_ms_median = optimizer_share[variant] * row.measurement.step_ms_median
            derive(row, row.measurement, facts, facts.offload, H200_PCIE_GBS)
        return facts

    return build


# what a skip needs to run instead: reason (start) -> the one command that includes those tests
INCLUDE = {"Chromium not found": "python3 tools/mkvenv.py --browser && python -m pytest tests/test_report_chromium.py"}


def skip_summary(reasons: list[str]) -> list[str]:
    """The end of the test run, in plain words: how many tests skipped, why, and the one command that
    includes each group (the README's test command installs all of it where apt-get exists)."""
    if not reasons:
        return []
    counts: dict[str, int] = {}
    for r in reasons:
        counts[r] = counts.get(r, 0) + 1
    lines = [f"gcdoctor: {len(reasons)} test(s) skipped, by reason:"]
    for reason, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {n:>4}  {reason}")
        fix = next((cmd for start, cmd in INCLUDE.items() if reason.startswith(start)), None)
        if fix:
            lines.append(f"        to include them: {fix}")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001 - pytest's hook signature
    reasons = []
    for rep in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(rep, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reasons.append(reason.removeprefix("Skipped: "))
    for line in skip_summary(reasons):
        terminalreporter.write_line(line)
