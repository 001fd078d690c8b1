#!/usr/bin/env python3
"""First run of gcdoctor on a Moore Threads card: check the environment, run the default
diagnose, pack everything into one archive to send back (docs/musa.md, "First run").

    python tools/musa_first_run.py                 # the default diagnose on the MUSA card
    python tools/musa_first_run.py -- --probes sweep --max-batch 8   # extra diagnose arguments

It writes musa-first-run-<host>-<time>/ and its .tar.gz next to it:
  env.txt          versions (python, torch, torch_musa, MUSA runtime, transformers, deepspeed),
                   MUSA_* / PYTORCH_MUSA_ALLOC_CONF, `mthreads-gmi` and `mthreads-gmi -q`
  checks.json      each torch_musa call gcdoctor relies on, tried once on the card (docs/musa.md's
                   unverified items): memory API, OOM text, profiler categories, MCCL, MUSAGraph,
                   expandable segments
  probe-trace.json the profiler trace of that check (a few matmuls)
  console.log      everything the diagnose printed
  run/             the diagnose's run directory (facts.json, report, traces, telemetry)
Without a MUSA device it says so first, then still runs the default diagnose on the device this
machine has, so the archive shows what ran. Standard library only; gcdoctor must be installed.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

# Run in a child python so that a broken torch_musa cannot take the kit down with it.
CHECKS = r'''
import json, os, sys, tempfile, traceback
out = {}
def step(name, fn):
    try:
        out[name] = {"ok": True, "value": fn()}
    except BaseException as exc:  # noqa
        out[name] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:400] if str(exc) else ''}"}
import torch
out["torch"] = torch.__version__
try:
    import torch_musa
except BaseException as exc:
    out["torch_musa"] = None
    out["why"] = f"import torch_musa failed: {type(exc).__name__}: {exc}"
    print(json.dumps(out)); sys.exit(0)
out["torch_musa"] = getattr(torch_musa, "__version__", "?")
out["torch.version.musa"] = getattr(torch.version, "musa", None)
m = torch.musa
out["available"] = bool(m.is_available())
if not out["available"]:
    out["why"] = "torch.musa.is_available() is False"
    print(json.dumps(out)); sys.exit(0)
out["device_count"] = m.device_count()
step("get_device_properties", lambda: {"name": m.get_device_properties(0).name,
                                       "total_memory": m.get_device_properties(0).total_memory})
for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
             "reset_peak_memory_stats", "reset_peak_stats", "mem_get_info", "set_per_process_memory_fraction",
             "memory_stats_as_nested_dict", "empty_cache", "synchronize", "Event", "MUSAGraph", "graph"):
    out[f"has.{name}"] = hasattr(m, name)
x = torch.ones(1 << 20, device="musa")
step("memory_allocated", lambda: m.memory_allocated(0))
step("memory_reserved", lambda: m.memory_reserved(0))
step("mem_get_info", lambda: list(m.mem_get_info(0)))
step("reset_peak_memory_stats", lambda: m.reset_peak_memory_stats(0))
step("stats_keys", lambda: sorted(k for k in m.memory_stats(0) if k.endswith("all.peak")))
def oom():
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="musa")
    except BaseException as exc:
        return {"type": f"{type(exc).__module__}.{type(exc).__name__}",
                "is_torch_OutOfMemoryError": isinstance(exc, torch.OutOfMemoryError), "message": str(exc)[:1200]}
    return "no error"
step("oom", oom)
step("ProfilerActivity.MUSA", lambda: str(getattr(torch.profiler.ProfilerActivity, "MUSA", None)))
def prof():
    from collections import Counter
    a = torch.randn(256, 256, device="musa")
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
    with torch.profiler.profile(activities=acts) as p:
        for _ in range(3):
            (a @ a).sum().item()
        a.cpu()
    path = sys.argv[1]
    p.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
    cats = Counter(e.get("cat") for e in ev if e.get("ph") == "X")
    names = Counter((e.get("cat"), e.get("name")) for e in ev if e.get("ph") == "X" and e.get("cat") != "cpu_op")
    return {"categories": dict(cats), "names": [f"{c}: {n[:120]} x{k}" for (c, n), k in names.most_common(25)],
            "deviceProperties": "deviceProperties" in json.load(open(path))}
step("profiler", prof)
def graph():
    g = m.MUSAGraph()
    s = m.Stream()
    y = torch.zeros(1, device="musa")
    s.wait_stream(m.current_stream())
    with m.stream(s):
        y.add_(1)
    m.current_stream().wait_stream(s)
    with m.graph(g):
        y.add_(1)
    g.replay(); m.synchronize()
    return float(y.item())
step("MUSAGraph", graph)
import torch.distributed as dist
step("mccl", lambda: dist.is_backend_available("mccl") if hasattr(dist, "is_backend_available") else "unknown")
print(json.dumps(out))
'''

EXPANDABLE = ("import torch, torch_musa; x = torch.ones(1 << 20, device='musa'); "
              "print(torch.musa.memory_reserved(0))")


def run(cmd: list[str], log: Path | None = None, env: dict | None = None, timeout: float | None = None) -> tuple[int, str]:
    """Run `cmd`; its output (stdout and stderr) is returned and, with `log`, streamed there and to
    this console as it comes."""
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    except OSError as exc:
        return 127, f"{cmd[0]}: {exc}\n"
    chunks = []
    fh = log.open("a") if log else None
    try:
        for line in p.stdout:
            chunks.append(line)
            if fh:
                fh.write(line)
                fh.flush()
                sys.stdout.write(line)
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = 124
    finally:
        if fh:
            fh.close()
    return rc, "".join(chunks)


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    root = Path(f"musa-first-run-{socket.gethostname()}-{stamp}").resolve()
    root.mkdir()
    py = sys.executable

    gmi = shutil.which("mthreads-gmi")
    env_lines = [f"date: {datetime.datetime.now().isoformat()}", f"host: {socket.gethostname()}",
                 f"platform: {platform.platform()}", f"python: {sys.version.split()[0]} ({py})",
                 f"mthreads-gmi: {gmi or 'not found on PATH'}"]
    for key in sorted(os.environ):
        if key.startswith(("MUSA_", "PYTORCH_MUSA", "MTHREADS")):
            env_lines.append(f"env {key}={os.environ[key]}")
    _, pips = run([py, "-m", "pip", "list", "--disable-pip-version-check"], timeout=120)
    env_lines += [f"pip {line}" for line in pips.splitlines()
                  if any(w in line.lower() for w in ("torch", "musa", "transformers", "deepspeed", "gcdoctor", "mtml"))]
    if gmi:
        for args, name in (([gmi], "mthreads-gmi.txt"), ([gmi, "-q"], "mthreads-gmi-q.txt")):
            rc, text = run(args, timeout=60)
            (root / name).write_text(text)
            if name == "mthreads-gmi.txt":
                head = next((line.strip() for line in text.splitlines() if "Driver Version" in line), "")
                env_lines.append(f"mthreads-gmi header: {head or '(none; rc ' + str(rc) + ')'}")
    (root / "env.txt").write_text("\n".join(env_lines) + "\n")

    rc, text = run([py, "-c", CHECKS, str(root / "probe-trace.json")], timeout=600)
    try:
        checks = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        checks = {"available": False, "why": f"the check crashed (rc {rc}): {text[-2000:]}"}
    if checks.get("available"):
        env2 = dict(os.environ, PYTORCH_MUSA_ALLOC_CONF="expandable_segments:True")
        erc, etext = run([py, "-c", EXPANDABLE], env=env2, timeout=300)
        checks["expandable_segments"] = {"rc": erc, "output": etext[-1500:]}
    (root / "checks.json").write_text(json.dumps(checks, indent=1) + "\n")

    musa = bool(checks.get("available"))
    if musa:
        print(f"MUSA device found: {checks.get('device_count')} x "
              f"{(checks.get('get_device_properties', {}).get('value') or {}).get('name', '?')}, "
              f"torch_musa {checks.get('torch_musa')}")
        device = ["--device", "musa"]
    else:
        print(f"NO MUSA DEVICE FOUND: {checks.get('why', 'unknown reason')}")
        print("Running the default diagnose on this machine's device instead, so the archive shows what ran.")
        device = []
    console = root / "console.log"
    cmd = [py, "-m", "gcdoctor", "diagnose", *device, "--no-tui", "--out", str(root / "run"), *extra]
    console.write_text(f"$ {' '.join(cmd)}\n")
    drc, _ = run(cmd, log=console)
    with console.open("a") as fh:
        fh.write(f"\n[exit code {drc}]\n")
    if gmi:
        (root / "mthreads-gmi-after.txt").write_text(run([gmi], timeout=60)[1])

    archive = root.with_suffix(".tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname=root.name)
    mb = archive.stat().st_size / 1e6
    print()
    print(("MUSA: " + ("ran on the card" if musa else "NO MUSA DEVICE FOUND; diagnosed this machine instead"))
          + f"; diagnose exit code {drc}")
    print(f"archive to send back: {archive} ({mb:.1f} MB)")
    return drc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
