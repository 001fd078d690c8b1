"""Record a small real torch.profiler trace of a tiny Llama on the CPU, with gcdoctor labels.

Reproduces samples/traces/cpu-tiny-llama.json.gz (the CPU trace the trace tests load):

    python bench/record_cpu_trace.py samples/traces/cpu-tiny-llama.json.gz

Each training step is one ProfilerStep, with `gcdoctor/forward` (holding `gcdoctor/loss`),
`gcdoctor/backward` and `gcdoctor/optimizer` ranges around the phases, and every decoder layer
checkpointed (non-reentrant) with gcdoctor.run.capture's `labelled_context_fn`, which labels each
region's forward `gcdoctor/ckpt-forward/layer<n>` and its recomputation `gcdoctor/recompute/layer<n>`:
the labels gcdoctor's own capture writes. `--steps` and `--layers` make bigger traces for
development benchmarks.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from transformers import LlamaConfig, LlamaForCausalLM

from gcdoctor.run.capture import LABEL_PREFIX, labelled_context_fn


def build_model(layers: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                      max_position_embeddings=128, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    model.activation_checkpointing_enable({"use_reentrant": False, "context_fn": labelled_context_fn()})
    model.train()
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="trace file to write (.json or .json.gz)")
    ap.add_argument("--steps", type=int, default=2, help="profiled steps (default 2)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    args = ap.parse_args()

    torch.set_num_threads(1)  # one intra-op thread: a smaller, steadier trace
    model = build_model(args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    ids = torch.randint(0, 256, (2, args.seq))
    sched = schedule(wait=0, warmup=1, active=args.steps, repeat=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(args.out))) as prof:
        for _ in range(1 + args.steps):
            with record_function(LABEL_PREFIX + "forward"):
                logits = model(input_ids=ids, use_cache=False).logits
                with record_function(LABEL_PREFIX + "loss"):
                    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                             ids[:, 1:].reshape(-1))
            with record_function(LABEL_PREFIX + "backward"):
                loss.backward()
            with record_function(LABEL_PREFIX + "optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            prof.step()
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes), loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
