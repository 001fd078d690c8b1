"""Record real traces of each host-side class on a GPU, with the truth beside each, and judge them.

    python bench/gpu/host_traces_h200.py --out $OUT          # one GPU; the DDP case needs two

Each case runs a small loop under torch.profiler (CPU + CUDA activities; schedule marks every step
unless the case is about a trace without steps), writes `<case>.json.gz` and `<case>.truth.json`
under --out, then runs `gcdoctor analyze`'s reading (facts_from_trace + the rules) and prints one
line per case: the codes that must fire, the codes that must stay silent, what fired, OK/BAD.

Cases (the truth is what the loop does, measured by the script's own clocks where it varies):
- sync-then-python: work, torch.cuda.synchronize(), 50 ms of Python: GC025, not GC022.
- item-then-logger: work, loss.item(), a 2 ms logger: GC022 (the sync exposes the logger).
- branch-on-tensor: `if x.sum() > 0` mid-step, then more work: the sync named under aten::is_nonzero
  when material; never dispatch.
- first-iteration: no warm-up, no steps: the first allocation, cuBLAS initialisation, first launches:
  a one-off (GC028 info) or one-time setup (GC026), never GC021 dispatch.
- varying-host: Python of 0-20 ms (seeded) per step against ~10 ms of device work: the Python share
  gcdoctor reports agrees with the idle the script expects from its own sleeps (within 5 points).
- two-streams: the compute stream waits on a side stream's spin kernel (torch.cuda._sleep): the
  wait is covered by device work, so no host cause and no queued idle (GC029 silent). (Queued idle
  with nothing running needs a wait on another device or on the host: the DDP case and the
  synthetic queued-streams sample.)
- sampled: a very long active window of tiny kernels (Kineto may drop records): when launch calls
  lack their device op (counted by the script from the JSON), GC026 flags the trace as sampled.
- graph-copy: each step replays a CUDA graph, then copies its output to pageable memory (.cpu()):
  GC022 for the copy, no GC021, no CUDA-graph advice.
- ddp-wait (two GPUs only): NCCL all-reduce, rank 1 runs 30 ms of Python each step: rank 0's
  exposed communication (GC061 on rank/0), rank 1 the straggler (GC027) with GC025.
Not run in the session that wrote it (no GPU was lent); the synthetic twins of these cases are in
samples/traces/host-causes (tests/kineto_synth.py).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

ACT = [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def _save(prof, out: Path, name: str, truth: dict) -> Path:
    raw = out / f"{name}.json"
    prof.export_chrome_trace(str(raw))
    path = out / f"{name}.json.gz"
    with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return path


def _model(width: int = 4096) -> torch.nn.Module:
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)]).cuda()


def _stepped(out: Path, name: str, steps: int, body, truth: dict, warm: int = 2) -> Path:
    for _ in range(warm):  # warm-up outside the profiler: allocator, cuBLAS, modules
        body(-1)
    torch.cuda.synchronize()
    with profile(activities=ACT, schedule=schedule(wait=0, warmup=0, active=steps)) as prof:
        for i in range(steps):
            body(i)
            prof.step()
    torch.cuda.synchronize()
    return _save(prof, out, name, truth)


def sync_then_python(out: Path) -> Path:
    m, x = _model(), torch.randn(8192, 4096, device="cuda")

    def body(i):
        m(x).sum().backward()
        torch.cuda.synchronize()
        t = time.perf_counter()
        while time.perf_counter() - t < 0.05:  # 50 ms of pure Python
            pass
    return _stepped(out, "sync-then-python", 5, body, {"fires": ["GC025"], "silent": ["GC022", "GC021"]})


def item_then_logger(out: Path) -> Path:
    m, x = _model(), torch.randn(8192, 4096, device="cuda")

    def body(i):
        loss = m(x).sum()
        loss.backward()
        loss.item()
        time.sleep(0.002)
    return _stepped(out, "item-then-logger", 6, body, {"fires": ["GC022"], "silent": ["GC025", "GC021"]})


def branch_on_tensor(out: Path) -> Path:
    m, x = _model(), torch.randn(8192, 4096, device="cuda")

    def body(i):
        y = m(x)
        if y.sum() > 0:  # aten::is_nonzero: a sync mid-step
            y = y * 2
        m(y).sum().backward()
    return _stepped(out, "branch-on-tensor", 6, body, {"fires": [], "silent": ["GC021", "GC025"],
                                                       "sync_op": "aten::is_nonzero"})


def first_iteration(out: Path) -> Path:
    with profile(activities=ACT) as prof:  # no warm-up, no steps
        m = torch.nn.Linear(1024, 1024).cuda()
        x = torch.randn(64, 1024, device="cuda")
        for _ in range(5):
            m(x).sum().item()
    return _save(prof, out, "first-iteration", {"fires_any": ["GC028", "GC026"], "silent": ["GC021"]})


def varying_host(out: Path) -> Path:
    m, x = _model(), torch.randn(4096, 4096, device="cuda")
    rng = random.Random(7)
    sleeps: list[float] = []

    def body(i):
        m(x).sum().backward()
        s = rng.uniform(0.0, 0.02)
        if i >= 0:
            sleeps.append(s)
        t = time.perf_counter()
        while time.perf_counter() - t < s:
            pass
    path = _stepped(out, "varying-host", 8, body, {})
    truth = {"python_sleeps_s": sleeps, "check": "python share within 5 points of the expected idle"}
    (out / "varying-host.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return path


def two_streams(out: Path) -> Path:
    a, b = torch.randn(8192, 8192, device="cuda"), torch.randn(8192, 8192, device="cuda")
    side = torch.cuda.Stream()

    def body(i):
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000)  # a spin kernel on the side stream (~1 ms at ~2 GHz)
        cur = torch.cuda.current_stream()
        cur.wait_stream(side)  # the compute stream waits on it: its matmuls are issued now, run later
        for _ in range(4):
            a @ b
        torch.cuda.synchronize()
    # the spin kernel is device work: the compute stream's wait is not idle, and no host cause is named
    return _stepped(out, "two-streams", 5, body, {"fires": [], "silent": ["GC021", "GC022", "GC025", "GC028",
                                                                        "GC029"]})


def sampled(out: Path) -> Path:
    x = torch.randn(256, device="cuda")

    def body(i):
        for _ in range(20000):
            x.add_(1.0)
    return _stepped(out, "sampled", 10, body, {"if_dropped": "GC026 says sampled"}, warm=1)


def graph_copy(out: Path) -> Path:
    m, x = _model(2048), torch.randn(4096, 2048, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = m(x)

    def body(i):
        g.replay()
        y.cpu()  # to pageable memory: a blocking copy
    return _stepped(out, "graph-copy", 6, body, {"fires": ["GC022"], "silent": ["GC021"],
                                                 "no_advice": "CUDA graphs"})


def _ddp_worker(rank: int, out: str) -> None:
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    m = torch.nn.parallel.DistributedDataParallel(_model(2048), device_ids=[rank])
    x = torch.randn(4096, 2048, device="cuda")

    def body(i):
        if rank == 1:
            time.sleep(0.03)
        m(x).sum().backward()
    d = Path(out) / "ddp-wait"
    d.mkdir(parents=True, exist_ok=True)
    _stepped(d, f"rank-{rank}", 5, body, {"fires": {"rank/0": ["GC061"], "rank/1": ["GC027", "GC025"]}})
    dist.destroy_process_group()


def ddp_wait(out: Path) -> Path | None:
    if torch.cuda.device_count() < 2:
        print("ddp-wait: skipped (needs two GPUs)")
        return None
    torch.multiprocessing.spawn(_ddp_worker, args=(str(out),), nprocs=2)
    return out / "ddp-wait"


def judge(path: Path) -> tuple[set[str], list]:
    from gcdoctor.engine import evaluate
    from gcdoctor.trace import facts_from_trace
    facts = facts_from_trace(path)
    verdicts = evaluate(facts)
    return {v.code for v in verdicts if v.status == "fired"}, verdicts


def unmatched_share(path: Path) -> float:
    ev = json.loads(gzip.open(path).read())["traceEvents"]
    dev = {e.get("args", {}).get("correlation") for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    launches = [e for e in ev if e.get("cat") == "cuda_runtime" and "Launch" in e.get("name", "")]
    return sum(e.get("args", {}).get("correlation") not in dev for e in launches) / max(len(launches), 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "host-traces"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{'case':<18} {'must fire':<14} {'fired':<34} ok")
    for case in (sync_then_python, item_then_logger, branch_on_tensor, first_iteration, varying_host,
                 two_streams, sampled, graph_copy):
        name = case.__name__.replace("_", "-")
        path = case(out)
        truth = json.loads((out / f"{name}.truth.json").read_text())
        fired, verdicts = judge(path)
        ok = set(truth.get("fires", [])) <= fired and not set(truth.get("silent", [])) & fired
        if "fires_any" in truth:
            ok = ok and bool(set(truth["fires_any"]) & fired)
        if "no_advice" in truth:
            ok = ok and not any(truth["no_advice"] in v.recommendation for v in verdicts if v.status == "fired")
        if name == "sampled":
            share = unmatched_share(path)
            ok = ("GC026" in fired) == (share >= 0.1)
            name += f" ({100 * share:.0f}%)"
        if name == "varying-host":
            from gcdoctor.trace import compute_metrics, load_trace
            h = compute_metrics(load_trace(path))["steady"].host_idle
            print(f"{'':<18} python share {100 * h.python_us / h.window_us:.0f}% (compare with the sleeps in "
                  "varying-host.truth.json against the device time per step)")
        print(f"{name:<18} {','.join(truth.get('fires', truth.get('fires_any', []))):<14} "
              f"{','.join(sorted(fired)):<34} {'OK' if ok else 'BAD'}")
    d = ddp_wait(out)
    if d is not None:
        from gcdoctor.cli import main as cli
        cli(["analyze", str(d), "--out", str(out / "ddp-wait-report")])
        rep = json.loads((out / "ddp-wait-report" / "report.json").read_text())
        print("ddp-wait", sorted((v["code"], v["subject"]) for v in rep["verdicts"] if v["status"] == "fired"))


if __name__ == "__main__":
    main()
