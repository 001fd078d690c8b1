"""Registry of embedded Hugging Face model configs (no hub access) and the model builder.

Specs and parameter counts need no torch, so `gcdoctor models` and `gcdoctor plan` start fast;
`build_model` imports torch and transformers when called. Weights are randomly initialised.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeGuard

from gcdoctor.errors import UserError

DEFAULT_GPU_MODEL = "llama3-8b"
DEFAULT_CPU_MODEL = "tiny-llama"
SUPPORTED_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "phi3")
_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
# what a decoder can be; beyond these a config is a typo or an attack (vocab 10^30, heads 2^40)
_RANGES = {"hidden_size": 1 << 17, "intermediate_size": 1 << 20, "num_hidden_layers": 10_000,
           "num_attention_heads": 4096, "num_key_value_heads": 4096, "head_dim": 4096, "vocab_size": 1 << 24,
           "max_position_embeddings": 1 << 24}


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive_int(v: Any) -> bool:
    return _is_int(v) and v > 0


@dataclass
class ModelSpec:
    """The numbers of a decoder-only model that memory and FLOP estimates need."""

    name: str
    source: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    n_layers: int  # as it will be built (after --layers)
    n_layers_full: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    config: dict[str, Any] = field(default_factory=dict)  # the HF config, layers as built

    def param_count(self) -> int:
        """Parameters of the model as built (exact for Llama/Mistral/Qwen2-style decoders)."""
        h, f, hd = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.n_heads * hd, self.n_kv_heads * hd
        attn = h * q + 2 * h * kv + q * h
        if self.attention_bias:
            attn += q + 2 * kv + (h if self.model_type == "llama" else 0)
        mlp = 3 * h * f + (2 * f + h if self.mlp_bias else 0)
        per_layer = attn + mlp + 2 * h
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return embed + self.n_layers * per_layer + h + head

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token without recomputation: 6 x matmul params + attention.

        Attention scores and values: 2 matmuls of s x head_dim per head, forward 4*s*q_width per
        token per layer, times 3 for forward+backward, halved for the causal mask (PaLM appendix B
        counts 6N + 12*L*h*s without the causal halving; we count what flash attention computes).
        """
        # the embedding lookup is no matmul; a tied LM head reuses that matrix as one
        embed = self.vocab_size * self.hidden_size
        matmul_params = self.param_count() - embed + (embed if self.tie_word_embeddings else 0)
        attn = 12 * self.n_layers * self.n_heads * self.head_dim * seq_len / 2
        return 6.0 * matmul_params + attn

    def layer_forward_share(self, seq_len: int, n_layers: int) -> float:
        """The share of a forward's FLOPs in `n_layers` decoder layers, counted as flops_per_token
        counts (the embedding, final norm and LM head are the rest): what recomputing those layers
        once costs, as a share of one forward (the analytic extra forward)."""
        if n_layers <= 0:
            return 0.0
        h, f, hd = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.n_heads * hd, self.n_kv_heads * hd
        layer = 6.0 * (2 * h * q + 2 * h * kv + 3 * h * f) + 12 * self.n_heads * hd * seq_len / 2
        return round(min(1.0, n_layers * layer / self.flops_per_token(seq_len)), 4)


def registry() -> dict[str, Path]:
    folder = resources.files(__package__ or "gcdoctor") / "model_configs"
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".json")}


def _read_config(name_or_path: str) -> tuple[str, str, dict[str, Any]]:
    reg = registry()
    if name_or_path in reg:
        return name_or_path, f"embedded:{name_or_path}", json.loads(reg[name_or_path].read_text())
    path = Path(name_or_path)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if not path.is_file():
        known = ", ".join(sorted(reg))
        raise UserError(f"unknown model {name_or_path!r}: use one of {known}, or a path to a config.json")
    try:
        cfg = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"model config {path}: not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"model config {path}: expected a JSON object")
    return path.stem if path.name != "config.json" else path.parent.name, str(path), cfg


def load_spec(name_or_path: str, layers: int | None = None) -> ModelSpec:
    """A spec from a registry name or a config.json path; `layers` truncates the decoder stack."""
    name, source, cfg = _read_config(name_or_path)
    return spec_from_config(cfg, name, source, layers)


def spec_from_config(cfg: dict[str, Any], name: str, source: str, layers: int | None = None) -> ModelSpec:
    """A spec from a Hugging Face config as a dict (a config.json's, or a live model's `config.to_dict()`)."""
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    missing = [k for k in _REQUIRED if not _positive_int(cfg.get(k))]
    if missing:
        raise UserError(f"model config {source}: missing or invalid {', '.join(missing)}")
    for key, hi in _RANGES.items():
        v = cfg.get(key)
        if v is None and key not in _REQUIRED:
            continue
        if not _is_int(v) or not 1 <= v <= hi:
            raise UserError(f"model config {source}: {key} = {v!r}: must be an integer from 1 to {hi:,}")
    for key in ("tie_word_embeddings", "attention_bias", "mlp_bias"):
        if key in cfg and not isinstance(cfg[key], bool):
            raise UserError(f"model config {source}: {key} = {cfg[key]!r}: must be true or false")
    mtype = str(cfg.get("model_type", ""))
    if mtype not in SUPPORTED_TYPES:
        raise UserError(f"model config {source}: model_type {mtype!r} is not a supported decoder "
                        f"(supported: {', '.join(SUPPORTED_TYPES)})")
    full = cfg["num_hidden_layers"]
    if layers is not None:
        if layers < 1 or layers > full:
            raise UserError(f"--layers {layers}: {name} has {full} decoder layers (use 1..{full})")
        cfg["num_hidden_layers"] = layers
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    if cfg["hidden_size"] % heads or heads % kv:
        raise UserError(f"model config {source}: hidden_size/heads/kv_heads do not divide evenly")
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    return ModelSpec(
        name=name, source=source, model_type=mtype, hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"], n_layers=cfg["num_hidden_layers"], n_layers_full=full,
        n_heads=heads, n_kv_heads=kv, head_dim=head_dim, vocab_size=cfg["vocab_size"],
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", mtype == "qwen2")), mlp_bias=bool(cfg.get("mlp_bias", False)),
        config=cfg,
    )


DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def torch_dtype(name: str):
    import torch
    if name not in DTYPES:
        raise UserError(f"--dtype {name!r}: use one of {', '.join(DTYPES)}")
    return getattr(torch, DTYPES[name])


def build_model(spec: ModelSpec, dtype: str, device: Any, seed: int = 0,
                attn_implementation: str = "sdpa", dropout: float | None = None, init: str = "random"):
    """A model built directly on `device` (no host copy of 8B weights).

    init "random": the model's own random initialisation (what training starts from). init
    "fast": built on the meta device, storage allocated on `device` (`to_empty`) and filled with a
    seeded tile of small normal values (norm weights 1): the same shapes, memory and step time
    without the initialisation pass, for runs that measure memory and time, not learning; a
    model with buffers other than the rotary frequencies (recomputed) falls back to "random"."""
    import torch
    import transformers

    cfg = dict(spec.config)
    if dropout is not None:
        cfg["attention_dropout"] = dropout
    cfg["use_cache"] = False
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    if init == "fast":
        model = _build_fast(config, torch_dtype(dtype), device, seed)
        if model is not None:
            return model
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch_dtype(dtype))
    model.train()
    return model


FILL_TILE = 1 << 16  # distinct values in the fast fill, repeated through each parameter


def _build_fast(config: Any, dtype: Any, device: Any, seed: int):
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    buffers = {name for name, _ in model.named_buffers()}
    model.to_empty(device=device)
    with torch.no_grad():
        for prefix, mod in model.named_modules():
            if "inv_freq" not in mod._buffers or not hasattr(mod, "rope_type"):
                continue
            fn = getattr(mod, "compute_default_rope_parameters", None) if mod.rope_type == "default" else \
                transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS.get(mod.rope_type)
            if fn is None:
                return None
            inv_freq, _ = fn(mod.config, device=torch.device(device))
            for name in ("inv_freq", "original_inv_freq"):
                if mod._buffers.get(name) is not None:
                    mod._buffers[name].copy_(inv_freq)
                    buffers.discard(f"{prefix}.{name}" if prefix else name)
        if buffers:  # a buffer this fill does not know how to compute
            return None
        gen = torch.Generator(device="cpu").manual_seed(seed)
        tile = (torch.randn(FILL_TILE, generator=gen) * 0.02).to(device=device, dtype=dtype)
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.fill_(1.0)
                continue
            flat = p.view(-1)
            whole = flat.numel() // FILL_TILE
            if whole:
                flat[:whole * FILL_TILE].view(whole, FILL_TILE).copy_(tile.expand(whole, FILL_TILE))
            rest = flat.numel() - whole * FILL_TILE
            if rest:
                flat[whole * FILL_TILE:].copy_(tile[:rest])
    model.train()
    return model
