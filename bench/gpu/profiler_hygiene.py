"""Does a variant profiled late in a process give the same kernels and busy time as in a fresh
process? (PyTorch issues 175790 and 192021: second and later profiler sessions in one process
shift or drop GPU kernels.) gcdoctor profiles many variants in one process, so its verdicts rest
on this.

    python bench/gpu/profiler_hygiene.py --out DIR --phase late|fresh

late:  profile variant A, then 8 other profiler sessions (variant B), then A again -> a-first, a-late
fresh: profile A once in this (new) process -> a-fresh
Then `--phase compare` prints kernel count, busy time and total kernel time of each trace (gcdoctor's
loader), and the differences.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def variant(kind: str):
    import torch
    x = torch.randn(2048, 2048, device="cuda")
    w = torch.randn(2048, 2048, device="cuda", requires_grad=True)

    def step():
        y = x @ w if kind == "A" else (x * 2) @ w
        y.relu().sum().backward()
        w.grad = None
    return step


def profile(step, path: Path, steps: int = 3) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile as prof_
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with prof_(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            step()
            p.step()
        torch.cuda.synchronize()
    p.export_chrome_trace(str(path))


def summary(path: Path) -> dict:
    from gcdoctor.trace import compute_metrics, load_trace
    t = load_trace(path)
    m = compute_metrics(t)
    s = m.get("steady") or m["all"]
    return {"trace": path.name, "kernels": s.kernel_count, "kernel_time_us": s.kernel_time_us, "busy_us": s.busy_us,
            "steps": len(t.profiler_steps())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--phase", choices=("late", "fresh", "compare"), required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.phase == "late":
        A, B = variant("A"), variant("B")
        profile(A, out / "a-first.json")
        for i in range(8):
            profile(B, out / f"b-{i}.json")
        profile(A, out / "a-late.json")
    elif a.phase == "fresh":
        profile(variant("A"), out / "a-fresh.json")
    else:
        rows = [summary(out / n) for n in ("a-first.json", "a-late.json", "a-fresh.json")]
        for r in rows:
            print(json.dumps(r))
        fresh = rows[2]
        for r in rows[:2]:
            print(f"{r['trace']} vs a-fresh: kernels {r['kernels'] - fresh['kernels']:+d}, busy "
                  f"{100 * (r['busy_us'] / fresh['busy_us'] - 1):+.1f}%, kernel time "
                  f"{100 * (r['kernel_time_us'] / fresh['kernel_time_us'] - 1):+.1f}%")
        (out / "hygiene.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
