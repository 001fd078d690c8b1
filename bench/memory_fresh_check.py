"""Predicted vs measured, on a model and a sequence length the H200 run did not cover: the largest
batch under each allocator setting in fresh processes, and the allocated peak at each point.

    python bench/memory_fresh_check.py --model qwen2.5-7b --seq-len 2048 --out $OUT/fresh

For each variant (checkpointing off and on) and allocator (default, expandable segments), one
fresh process (gcdoctor's allocator-probe worker) measures the predicted largest batch, then the
one above it: the prediction holds when the first fits and the second does not. Predictions come
from gcdoctor.model.memory (the timeline for the peaks, the caching-allocator replay for the fits) with
the device's own memory and the context measured in the first process. Writes
`fresh_check.json` and prints a table. `--device cpu --memory-limit 30MB --model tiny-llama`
runs the same logic on the CPU (there the allocator is the counter: both settings agree).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


from gcdoctor.model import fitting as F  # noqa: E402


from gcdoctor.model import memory as M  # noqa: E402
from gcdoctor.model.registry import load_spec  # noqa: E402
from gcdoctor.probes.allocator import ALLOC_CONF, run_worker  # noqa: E402

GiB = 2**30


def _device_memory(device: str) -> tuple[int, str]:
    """torch's total_memory and the device's name, read in a subprocess: this process must hold
    no CUDA context while the fresh processes run (it would take their memory)."""
    if device == "cpu":
        return 0, "cpu"
    import subprocess
    kind = device.split(":")[0]
    code = (f"import torch; m = getattr(torch, {kind!r}); p = m.get_device_properties(0); "
            "print(p.total_memory); print(m.get_device_name(0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    return int(out[0]), out[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-7b")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--memory-limit", type=float, default=None, help="bytes (a CPU run needs one)")
    ap.add_argument("--variants", default="no_gc,gc")
    ap.add_argument("--steps", type=int, default=1, help="measured steps per point, after one warm-up")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = load_spec(args.model)
    kind = args.device.split(":")[0]
    dtype = "fp32" if kind == "cpu" else "bf16"
    total, name = _device_memory(args.device)
    limit = int(args.memory_limit) if args.memory_limit else None
    capacity = total if kind != "cpu" else limit
    mm = F.memory_model_facts(spec, args.seq_len, dtype, "adamw", kind if kind in M.DEVICE_KINDS else "cuda",
                              capacity_bytes=capacity, limit_bytes=limit if kind != "cpu" else None)
    rows = []
    context = None
    t_all = time.monotonic()
    for variant in args.variants.split(","):
        for alloc in (M.ALLOCATORS if kind != "cpu" else ("default",)):
            p = mm.max_batch_by_allocator[alloc][variant]
            batches = [b for b in (p, p + 1) if b >= 1]
            label = f"{variant}-{alloc}"
            d = out / label
            d.mkdir(exist_ok=True)
            cfg = {"device": args.device, "model": args.model, "seq_len": args.seq_len, "dtype": dtype,
                   "optimizer": "adamw", "warmup_steps": 1, "measure_steps": args.steps, "profile": False,
                   "memory_limit_bytes": limit, "out": str(d), "probes": ["sweep"], "telemetry_hz": 5.0}
            (d / "work.json").write_text(json.dumps({"config": cfg, "variant": variant, "batches": batches,
                                                     "mode": "list", "low": 1, "high": 1 << 16, "max_trials": 4}))
            env = dict(os.environ)
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            if ALLOC_CONF[alloc]:
                env["PYTORCH_CUDA_ALLOC_CONF"] = ALLOC_CONF[alloc]
            t0 = time.monotonic()
            res = run_worker(d / "work.json", env)
            wall = round(time.monotonic() - t0, 1)
            if isinstance(res, str):
                rows.append({"variant": variant, "allocator": alloc, "predicted": p, "error": res, "wall_s": wall})
                print(f"{label}: {res}", flush=True)
                continue
            context = context or res.get("context_bytes")
            for m in res["measurements"]:
                pred = M.predict(spec, M.Workload(m["batch_size"], args.seq_len, dtype, "adamw", variant == "gc",
                                                  kind if kind in M.DEVICE_KINDS else "cuda")).peak_bytes
                rows.append({"variant": variant, "allocator": alloc, "predicted_max_batch": p,
                             "batch_size": m["batch_size"], "fits": m["fits"], "predicted_fits": m["batch_size"] <= p,
                             "peak_allocated_bytes": m["peak_allocated_bytes"], "predicted_peak_bytes": pred,
                             "peak_reserved_bytes": m["peak_reserved_bytes"], "tokens_per_s": m["tokens_per_s"],
                             "oom": m["oom"], "wall_s": wall})
    report = {"model": args.model, "seq_len": args.seq_len, "device": name, "device_memory_bytes": total,
              "memory_limit_bytes": limit, "context_bytes_measured": context,
              "context_bytes_assumed": mm.context_bytes, "predicted": mm.max_batch_by_allocator,
              "predicted_allocated_bound": mm.max_batch_allocated, "rows": rows,
              "wall_s": round(time.monotonic() - t_all, 1)}
    (out / "fresh_check.json").write_text(json.dumps(report, indent=1))
    print(f"{args.model} seq {args.seq_len} on {name}: predicted {mm.max_batch_by_allocator}")
    print(f"{'variant':6} {'alloc':10} {'batch':>5} {'fits':>5} {'pred':>5} {'peak GiB':>9} {'pred GiB':>9} "
          f"{'err MiB':>8} {'reserved':>9} {'tok/s':>7} oom")
    def gib(n):
        return "" if n is None else f"{n / GiB:.2f}"

    for r in rows:
        if "error" in r:
            print(f"{r['variant']:6} {r['allocator']:10} error: {r['error']}")
            continue
        peak, pred = r["peak_allocated_bytes"], r["predicted_peak_bytes"]
        err = "" if peak is None else f"{(pred - peak) / 2**20:.1f}"
        oom = "" if r["oom"] is None else f"{r['oom']['kind']} req {gib(r['oom']['request_bytes'])}"
        tps = "" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:.0f}"
        print(f"{r['variant']:6} {r['allocator']:10} {r['batch_size']:5d} {str(r['fits']):>5} "
              f"{str(r['predicted_fits']):>5} {gib(peak):>9} {gib(pred):>9} {err:>8} "
              f"{gib(r['peak_reserved_bytes']):>9} {tps:>7} {oom}")
    print(f"wall {report['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
