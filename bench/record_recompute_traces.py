"""Record small real CPU traces of the checkpointing people actually run, with no gcdoctor labels,
for gcdoctor.trace.recompute (recompute found without labels) and its tests.

    python bench/record_recompute_traces.py samples/traces/recompute

One trace per form, each 2 profiled steps (ProfilerStep#1, #2 after one warm-up step) of the same
tiny Llama (2 decoder layers, 64 wide, seq 32, batch 2) and the same AdamW step:

- `labelled`: gcdoctor's own labels (`labelled_context_fn`): the reference the others compare to;
- `hf-non-reentrant`, `hf-reentrant`: transformers' `activation_checkpointing_enable`;
- `fsdp-checkpoint-wrapper`: torch.distributed's `apply_activation_checkpointing` (FSDP's
  `checkpoint_wrapper`, non-reentrant), no process group needed;
- `composable`: torch.distributed's composable `checkpoint(module)` (what FSDP2 users apply);
- `deepspeed`: `deepspeed.checkpointing.checkpoint` as the layers' checkpoint function (skipped
  when DeepSpeed is absent);
- `own-loop`: a plain torch model (no transformers) calling `torch.utils.checkpoint` itself;
- `none`: no checkpointing; `double-backward`: no checkpointing, a gradient penalty
  (`create_graph=True`) whose backward records graph nodes everywhere: neither recomputes.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

FORMS = ("labelled", "hf-non-reentrant", "hf-reentrant", "fsdp-checkpoint-wrapper", "composable", "deepspeed",
         "own-loop", "none", "double-backward")


def llama(attn: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, attn_implementation=attn)
    return LlamaForCausalLM(cfg).train()


def decoder_layers(model):
    return list(model.model.layers)


class OwnBlock(torch.nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.norm, self.up, self.down = torch.nn.LayerNorm(h), torch.nn.Linear(h, 4 * h), torch.nn.Linear(4 * h, h)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class OwnModel(torch.nn.Module):
    """A user's own model that checkpoints its blocks itself."""

    def __init__(self, h: int = 64, n: int = 2, vocab: int = 256) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.head = torch.nn.Embedding(vocab, h), torch.nn.Linear(h, vocab)
        self.blocks = torch.nn.ModuleList(OwnBlock(h) for _ in range(n))

    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
        return self.head(x)


def build(form: str):
    """(model, loss function of the batch)."""
    if form == "own-loop":
        model = OwnModel()
        return model, lambda ids: torch.nn.functional.cross_entropy(model(ids).reshape(-1, 256), ids.reshape(-1))
    model = llama("eager" if form == "double-backward" else "sdpa")  # CPU SDPA has no double backward
    if form == "labelled":
        from gcdoctor.run.capture import labelled_context_fn
        model.activation_checkpointing_enable({"use_reentrant": False, "context_fn": labelled_context_fn()})
    elif form in ("hf-non-reentrant", "hf-reentrant"):
        model.activation_checkpointing_enable({"use_reentrant": form == "hf-reentrant"})
    elif form == "fsdp-checkpoint-wrapper":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
        layer_type = type(decoder_layers(model)[0])
        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, layer_type))
    elif form == "composable":
        from torch.distributed._composable import checkpoint
        for layer in decoder_layers(model):
            checkpoint(layer)
    elif form == "deepspeed":
        from deepspeed.runtime.activation_checkpointing import checkpointing as ds
        for layer in decoder_layers(model):
            layer.gradient_checkpointing, layer._gradient_checkpointing_func = True, ds.checkpoint
    if form == "double-backward":
        def loss_fn(ids):
            emb = model.model.embed_tokens(ids)
            loss = model(inputs_embeds=emb, labels=ids, use_cache=False).loss
            (g,) = torch.autograd.grad(loss, emb, create_graph=True)
            return loss + 1e-3 * g.pow(2).sum()
        return model, loss_fn
    return model, lambda ids: model(input_ids=ids, labels=ids, use_cache=False).loss


def record(form: str, out: Path) -> Path:
    torch.set_num_threads(1)  # one intra-op thread: smaller, steadier traces
    model, loss_fn = build(form)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    path = out / f"cpu-{form}.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            loss_fn(ids).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
    import gzip
    import shutil
    gz = path.with_suffix(".json.gz")
    with open(path, "rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return gz


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--forms", default=",".join(FORMS))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for form in args.forms.split(","):
        if form == "deepspeed":
            try:
                import deepspeed  # noqa: F401
            except ImportError:
                print("deepspeed: not installed, skipped")
                continue
        gz = record(form, args.out)
        print(f"{form}: {gz} ({gz.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
