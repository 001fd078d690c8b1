"""What does a job pay for being watched? Interleaved blocks of the same training steps,
unwatched, under gcdoctor.watch without telemetry, and under gcdoctor.watch with telemetry at
20 Hz (no profiled steps), timed from outside with a synchronised clock around each block. The
middle arm separates the telemetry sampler's share from the per-step watching (--no-bare-watch
leaves it out, as the first version of this bench did).

    python bench/watch_overhead.py --model llama3-8b --layers 4 --seq-len 2048 --out DIR   # GPU
    python bench/watch_overhead.py --model tiny-llama --seq-len 64 --blocks 4 --steps 5     # CPU
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import gcdoctor
from gcdoctor.backends import get_backend
from gcdoctor.run.capture import make_optimizer
from gcdoctor.model.registry import build_model, load_spec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=8, help="blocks per arm, interleaved A B A B ...")
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-bare-watch", action="store_true", help="only the unwatched and watched arms")
    args = ap.parse_args()

    backend = get_backend(args.device)
    dtype = "bf16" if backend.kind != "cpu" else "fp32"
    spec = load_spec(args.model, layers=args.layers)
    model = build_model(spec, dtype, backend.device)
    opt = make_optimizer(model.parameters(), "adamw")
    ids = torch.randint(spec.vocab_size, (args.batch, args.seq_len)).to(backend.device)

    def train_step() -> torch.Tensor:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(3):  # warm-up: allocator, kernels, optimizer state
        train_step()
    backend.synchronize()

    tmp = Path(tempfile.mkdtemp(prefix="watch-overhead-"))
    arms = ["unwatched", "watched"] if args.no_bare_watch else ["unwatched", "watched, no telemetry", "watched"]
    times: dict[str, list[float]] = {a: [] for a in arms}
    for block in range(len(arms) * args.blocks):
        arm = arms[block % len(arms)]
        watcher = None
        if arm != "unwatched":
            hz = 0.0 if arm == "watched, no telemetry" else 20.0
            watcher = gcdoctor.watch(model, opt, out=tmp / f"b{block}", profile_steps=(), telemetry_hz=hz).start()
        backend.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            if watcher is not None:
                with watcher.step() as s:
                    s.loss = train_step()
            else:
                train_step()
        backend.synchronize()
        times[arm].append((time.perf_counter() - t0) * 1e3 / args.steps)
        if watcher is not None:
            watcher.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    spread = {k: (min(v), max(v)) for k, v in times.items()}
    overhead = 100.0 * (med["watched"] / med["unwatched"] - 1.0)
    per_arm = {k: round(100.0 * (med[k] / med["unwatched"] - 1.0), 3) for k in arms[1:]}
    env = backend.describe()
    result = {"device": env.device_name, "driver": env.driver, "torch": env.torch, "model": args.model,
              "layers": args.layers, "seq_len": args.seq_len, "batch": args.batch, "dtype": dtype,
              "blocks_per_arm": args.blocks, "steps_per_block": args.steps, "ms_per_step": times,
              "median_ms": med, "overhead_pct": overhead, "overhead_pct_per_arm": per_arm}
    print(f"{'arm':22s} {'median ms/step':>15s} {'min':>8s} {'max':>8s} {'vs unwatched':>13s}")
    for k in arms:
        vs = f"{per_arm[k]:+.2f}%" if k in per_arm else ""
        print(f"{k:22s} {med[k]:15.2f} {spread[k][0]:8.2f} {spread[k][1]:8.2f} {vs:>13s}")
    print(f"overhead of watching: {overhead:+.2f}% ({env.device_name}, {args.model} {args.layers} layers, "
          f"seq {args.seq_len}, batch {args.batch}, {dtype})")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "watch_overhead.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    sys.exit(main())
