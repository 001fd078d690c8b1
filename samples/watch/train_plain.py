"""A plain PyTorch training loop that knows nothing of gcdoctor: what `gcdoctor watch --` watches.

    gcdoctor watch --out runs/plain -- python samples/watch/train_plain.py
    gcdoctor watch --out runs/ddp -- torchrun --nproc_per_node 2 samples/watch/train_plain.py --ddp
    gcdoctor analyze runs/ddp            # merges the rank-<r> directories

tiny-llama (or --model), random tokens, transformers' own checkpointing (--no-gc to leave it off),
AdamW; with --ddp, DistributedDataParallel over gloo (CPU) or nccl (GPU) with one rank per process;
--slow-rank R makes rank R's data loading slower (a straggler); --data-ms adds CPU work per batch
on every rank (a slow data pipeline).
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from gcdoctor.model.registry import build_model, load_spec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--no-gc", action="store_true")
    ap.add_argument("--ddp", action="store_true")
    ap.add_argument("--fsdp2", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    ap.add_argument("--data-ms", type=float, default=0.0, help="host work per batch on every rank")
    ap.add_argument("--slow-rank", type=int, default=None)
    args = ap.parse_args()

    gpu = torch.cuda.is_available()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if gpu else "cpu")
    if gpu:
        torch.cuda.set_device(device)
    if args.ddp or args.fsdp2:
        torch.distributed.init_process_group("nccl" if gpu else "gloo")
    spec = load_spec(args.model, layers=args.layers)
    model = build_model(spec, "bf16" if gpu else "fp32", device)
    if not args.no_gc:
        model.activation_checkpointing_enable({"use_reentrant": False})
    if args.fsdp2:
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        train = model
    elif args.ddp:
        train = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if gpu else None)
    else:
        train = model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        wait = args.data_ms + (4 * max(args.data_ms, 20.0) if args.slow_rank == rank else 0.0)
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < wait:  # CPU work: tokenising, augmenting, collating
            pass
        ids = torch.randint(spec.vocab_size, (args.batch, args.seq_len), generator=gen).to(device)
        loss = train(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if args.ddp or args.fsdp2:
        torch.distributed.destroy_process_group()
    if rank == 0:
        print(f"trained {args.steps} steps on {world} rank(s), last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
