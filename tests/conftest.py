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
