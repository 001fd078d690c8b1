"""Record the jitter probe's real CPU cases under samples/jitter/ (facts.json and report.md each):

    python bench/record_jitter_samples.py samples/jitter            # every case
    python bench/record_jitter_samples.py samples/jitter --case cpu-fp32

- cpu-fp32: the default CPU run (tiny-llama, seq 128, fp32). Checkpointing is bitwise identical
  on the CPU; the dropout control (preserve_rng_state=False) differs systematically.
- cpu-bf16-microbatch: bf16, batch 2, every checkpointed run accumulates two micro-batches of 1:
  the same gradient summed in another order, a real rounding difference that training grows.
- cpu-fp32-microbatch: fp32, batch 4, four micro-batches: a rounding difference that stays at
  rounding level over the steps.

The micro-batch split is the only way to get a benign non-identical case on a CPU, whose kernels
are deterministic and give the same bits with checkpointing on or off. The rule tests
(tests/test_rule_GC030.py) judge these files.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from gcdoctor.config import RunConfig
from gcdoctor.probes.jitter import JitterProbe
from gcdoctor.run.session import Session

CASES = {
    "cpu-fp32": (dict(), dict()),
    "cpu-bf16-microbatch": (dict(dtype="bf16", probe_batch=2), dict(gc_micro_batches=2, dropout=False)),
    "cpu-fp32-microbatch": (dict(probe_batch=4), dict(gc_micro_batches=4, dropout=False)),
}


def record(case: str, out: Path) -> None:
    run_kw, probe_kw = CASES[case]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig(device="cpu", probes=["jitter"], out=tmp, tui=False, telemetry_hz=2.0, **run_kw)
        session = Session(cfg)
        session.probes = [JitterProbe(**probe_kw)]
        t0 = time.monotonic()
        session.run()
        dest = out / case
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("facts.json", "report.md"):
            shutil.copy(Path(tmp) / name, dest / name)
    for v in session.verdicts:
        if v.code == "GC030":
            print(f"{case:22s} {time.monotonic() - t0:6.1f} s  [{v.status}/{v.severity}] {v.subject}: {v.headline}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder for the cases (samples/jitter)")
    ap.add_argument("--case", choices=sorted(CASES), action="append", help="case(s) to record (default: all)")
    args = ap.parse_args()
    for case in args.case or list(CASES):
        record(case, args.out)


if __name__ == "__main__":
    main()
