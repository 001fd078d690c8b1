"""gcdoctor's trace analysis vs Holistic Trace Analysis (HTA) on the same trace, side by side.

    python bench/trace_vs_hta.py TRACE [--out results.json] [--hta-path DIR] [--repeat N]

Each tool runs in a fresh Python subprocess (so imports and peak memory are its own), one after
the other, `--repeat` times (median reported):
- gcdoctor: `load_trace` + `compute_metrics` (every window: whole trace, each profiler step, each
  gcdoctor label).
- HTA (PyPI `traceinsight`, module `hta`): `TraceAnalysis` load of the single-rank trace, then
  `get_idle_time_breakdown` and `get_cuda_kernel_launch_stats` (visualize=False). The file is
  given as {rank 0: path}, HTA's fastest path (no directory scan for rank metadata), and the last
  profiler step is kept (include_last_profiler_step=True) so both tools analyse the same events.
Wall time is measured by the parent from spawn to exit; peak memory is the child's own
ru_maxrss from os.wait4. `--hta-path` is prepended to HTA's PYTHONPATH (HTA installed with
`pip install --no-deps --target DIR`). Target: gcdoctor >= 25x faster at <= 0.15x the peak memory
(earlier targets: 15x and 0.2x, 5x and 0.5x).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

GCDOCTOR_WORKER = r"""
import json, sys, time
t0 = time.perf_counter()
from gcdoctor.trace import compute_metrics, load_trace
from gcdoctor.trace import load as _load
t1 = time.perf_counter()
tables = load_trace(sys.argv[1], **json.loads(sys.argv[2]))
t2 = time.perf_counter()
metrics = compute_metrics(tables)
t3 = time.perf_counter()
a = metrics["all"]
json.dump({"import_s": t1 - t0, "load_s": t2 - t1, "analysis_s": t3 - t2, "windows": len(metrics),
           "events": tables.event_count, "device_ops": len(tables.ops), "kernels": a.kernel_count,
           "idle_us": a.idle_us, "idle_host_wait_us": a.idle_host_wait_us,
           "idle_short_gap_us": a.idle_short_gap_us, "idle_other_us": a.idle_other_us,
           "launched_kernels": a.launched_kernel_count, "load_info": tables.load_info,
           "decoder": "msgspec " + _load.msgspec.__version__ if _load.msgspec else "json (stdlib)"}, sys.stdout)
"""

HTA_WORKER = r"""
import json, logging, os, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
logging.getLogger("hta").setLevel(logging.ERROR)
t1 = time.perf_counter()
path = os.path.abspath(sys.argv[1])
ta = TraceAnalysis(trace_files={0: path}, trace_dir=os.path.dirname(path), include_last_profiler_step=True)
t2 = time.perf_counter()
idle, _ = ta.get_idle_time_breakdown(visualize=False)
launch = ta.get_cuda_kernel_launch_stats(visualize=False)
t3 = time.perf_counter()
by_cat = idle.groupby("idle_category")["idle_time"].sum().to_dict()
json.dump({"import_s": t1 - t0, "load_s": t2 - t1, "analysis_s": t3 - t2,
           "idle_us_by_category": {k: float(v) for k, v in by_cat.items()},
           "launch_stats_rows": int(sum(len(v) for v in launch.values()))}, sys.stdout)
"""


def run_worker(code: str, trace: Path, env: dict[str, str], *args: str) -> dict:
    """Run one worker; wall time from spawn to exit, peak memory of that child and its helper.

    The child's peak RSS (ru_maxrss) plus, where gcdoctor decoded in a forked helper process, the
    helper's peak private memory (what it did not share with the child: its own allocations and
    the pages it copied on write), so the memory compared is all the memory both took."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code, str(trace), *args], stdout=out, stderr=err, env=env,
                                cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"worker failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    res = json.loads(stdout)
    helper = (res.get("load_info") or {}).get("helper_private_peak_bytes") or 0
    res.update(wall_s=wall, peak_rss_mib=usage.ru_maxrss / 1024.0 + helper / 2**20,
               own_peak_rss_mib=usage.ru_maxrss / 1024.0, helper_private_peak_mib=helper / 2**20,
               cpu_s=usage.ru_utime + usage.ru_stime)
    return res


def _versions(env: dict[str, str]) -> dict[str, str | None]:
    code = ("import json, importlib.metadata as m\nout = {}\n"
            "for d in ('traceinsight', 'HolisticTraceAnalysis', 'msgspec', 'numpy', 'pandas', 'gcdoctor'):\n"
            "    try: out[d] = m.version(d)\n    except m.PackageNotFoundError: out[d] = None\n"
            "print(json.dumps(out))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def summarize(runs: list[dict]) -> dict:
    keys = ("wall_s", "peak_rss_mib", "cpu_s", "import_s", "load_s", "analysis_s")
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    out["runs"] = runs
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path, help="a torch.profiler trace, .json or .json.gz")
    ap.add_argument("--out", type=Path, help="write the results as JSON: a .json file, or a directory "
                                             "(trace_vs_hta.json inside)")
    ap.add_argument("--hta-path", help="directory to prepend to PYTHONPATH for HTA")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each tool (median reported)")
    ap.add_argument("--skip-hta", action="store_true", help="time gcdoctor only")
    ap.add_argument("--workers", type=int, help="gcdoctor's decoding processes (default 1; 2 forks a helper)")
    ap.add_argument("--block-kib", type=int, help="gcdoctor's read size in KiB (default: its own)")
    a = ap.parse_args()
    if not a.trace.is_file():
        raise SystemExit(f"{a.trace}: no such file")

    base_env = dict(os.environ)
    base_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base_env.get("PYTHONPATH")) if p)
    hta_env = dict(base_env)
    if a.hta_path:
        hta_env["PYTHONPATH"] = os.pathsep.join([a.hta_path, hta_env["PYTHONPATH"]])

    load_args: dict[str, int] = {}
    if a.workers:
        load_args["workers"] = a.workers
    if a.block_kib:
        load_args["block_bytes"] = a.block_kib << 10
    gc_runs, hta_runs = [], []
    for _ in range(a.repeat):  # alternate, so both see the same machine state
        gc_runs.append(run_worker(GCDOCTOR_WORKER, a.trace, base_env, json.dumps(load_args)))
        if not a.skip_hta:
            hta_runs.append(run_worker(HTA_WORKER, a.trace, hta_env))
    gc = summarize(gc_runs)
    hta = summarize(hta_runs) if hta_runs else None

    result = {
        "trace": str(a.trace), "trace_bytes": a.trace.stat().st_size,
        "events": gc_runs[0]["events"], "device_ops": gc_runs[0]["device_ops"],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "versions": _versions(hta_env),
        "gcdoctor": gc, "hta": hta,
    }
    if hta:
        result["speedup"] = hta["wall_s"] / gc["wall_s"]
        result["memory_ratio"] = gc["peak_rss_mib"] / hta["peak_rss_mib"]
        result["meets_target"] = result["speedup"] >= 25.0 and result["memory_ratio"] <= 0.15

    print(f"trace {a.trace} ({result['trace_bytes'] / 1e6:,.1f} MB on disk, {result['events']:,} events, "
          f"{result['device_ops']:,} device ops), {a.repeat} run(s) each, median; gcdoctor decoder: "
          f"{gc_runs[0]['decoder']}")
    print(f"{'tool':10} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} {'import s':>9} {'load s':>8} {'analysis s':>10}")
    for name, r in (("gcdoctor", gc), ("HTA", hta)):
        if r:
            print(f"{name:10} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['peak_rss_mib']:9.0f} {r['import_s']:9.2f} "
                  f"{r['load_s']:8.2f} {r['analysis_s']:10.2f}")
    if hta:
        print(f"gcdoctor is {result['speedup']:.1f}x faster at {result['memory_ratio']:.2f}x the peak memory "
              f"(target: >= 25x, <= 0.15x): {'met' if result['meets_target'] else 'NOT met'}")
        g0 = gc_runs[0]
        print(f"same trace: gcdoctor {g0['kernels']:,} kernels, idle {g0['idle_us'] / 1e3:,.1f} ms on the device "
              f"(union of streams); HTA {hta_runs[0]['launch_stats_rows']:,} launch-stat rows, idle per stream "
              f"{ {k: round(v / 1e3, 1) for k, v in hta_runs[0]['idle_us_by_category'].items()} } ms")
    if a.out:
        out = a.out if a.out.suffix == ".json" else a.out / "trace_vs_hta.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
