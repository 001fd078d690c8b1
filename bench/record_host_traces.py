"""Record small real torch.profiler traces of each host-side cause of device idle, on any device.

    python bench/record_host_traces.py --out samples/traces/host [--device cuda] [--steps 4]

One trace per cause, each a few steps of a 2-layer MLP (or plain tiny ops), every step marked with
prof.step() so that ProfilerStep#N ranges exist; the first step is included (no schedule), so the
warm-up detection has something to find:
- healthy:    forward/backward/SGD step, nothing else.
- dataloader: a DataLoader with num_workers=0 whose dataset does CPU work per item (20 us per item on CUDA, batches of 8192).
- item:       .item() of the loss every step, then a little Python (a logging-like sleep).
- tiny:       hundreds of tiny elementwise ops per step (dispatch/launch-bound).
- setup:      model creation, first allocations and the first forward only (no training step).
On a CPU the traces have no device timing: gcdoctor must say so and judge nothing about a device.
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def _activities(device: str) -> list:
    acts = [ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(ProfilerActivity.CUDA)
    return acts


def _save(prof, path: Path) -> None:
    raw = path.with_suffix("")
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.unlink(raw)


def _model(device: str, width: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)).to(device)


class _SlowDataset(torch.utils.data.Dataset):
    def __init__(self, width: int, work_ms: float):
        self.width, self.work_ms = width, work_ms

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, i: int) -> torch.Tensor:
        t_end = time.perf_counter() + self.work_ms / 1e3  # CPU work per item (decoding, augmenting)
        acc = 0
        while time.perf_counter() < t_end:
            acc += sum(range(100))  # pure Python: no op in the trace
        return torch.full((self.width,), float(acc % 7))


def record(cause: str, device: str, steps: int, out: Path, width: int = 1024, batch: int = 64) -> Path:
    if device == "cuda" and cause != "tiny":  # kernels of ~1 ms, so that a healthy step keeps the device busy
        width, batch = 4096, 8192
    path = out / f"{cause}.json.gz"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if cause == "setup":
        with profile(activities=_activities(device)) as prof:
            model = _model(device, width)
            x = torch.randn(batch, width, device=device)
            model(x).sum()
            sync()
        _save(prof, path)
        return path
    model = _model(device, width)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, device=device)
    loader = iter(torch.utils.data.DataLoader(_SlowDataset(width, 0.5 if device == 'cpu' else 0.02),
                                               batch_size=batch, num_workers=0))

    def step() -> None:
        nonlocal x
        if cause == "dataloader":
            x = next(loader).to(device, non_blocking=True)
        if cause == "tiny":
            y = model[0].weight[:4, :4]
            for _ in range(300):
                y = y * 1.0001 + 0.0001
            loss = y.sum()
        else:
            loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cause == "item":
            _ = loss.item()  # a synchronisation every step
            time.sleep(0.002)  # what a logger does with it

    # every step active (the first included, so warm-up detection has something to find); a schedule
    # makes torch write the ProfilerStep#N ranges
    with profile(activities=_activities(device), schedule=schedule(wait=0, warmup=0, active=steps + 1)) as prof:
        for _ in range(steps):
            step()
            prof.step()
        sync()
    _save(prof, path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="samples/traces/host")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--causes", default="setup,healthy,dataloader,item,tiny")  # setup first: a fresh allocator
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for cause in a.causes.split(","):
        p = record(cause, a.device, a.steps, out)
        print(f"{p}: {p.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
