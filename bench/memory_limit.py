"""`diagnose --memory-limit` on a card where the model states alone do not fit, with the ZeRO-Offload
line measured: the sweep (batch 1 runs out of memory with and without checkpointing; GC004 fires
from the memory model with what would fit) and, of the offload probe, only its reference and
DeepSpeed ZeRO-2 with the optimizer on the host (the other variants say nothing about fitting and
take a minute). The run directory is an ordinary gcdoctor run: `gcdoctor analyze` re-judges it.

    python bench/memory_limit.py --model llama3-8b --memory-limit 48GB --out $OUT/limit48

`--device cpu --model tiny-llama --memory-limit 1MB` exercises the same path on the CPU.
"""
from __future__ import annotations

import argparse
import sys


from gcdoctor.config import RunConfig, parse_size  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--device", default=None)
    ap.add_argument("--memory-limit", default="48GB")
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from gcdoctor.probes import offload
    offload.VARIANTS = tuple(v for v in offload.VARIANTS if v.name in (offload.REFERENCE, offload.ZERO2))
    from gcdoctor.report.console import summary
    from gcdoctor.run.session import Session

    cfg = RunConfig(model=args.model, device=args.device, seq_len=args.seq_len, probes=["sweep", "offload"],
                    memory_limit_bytes=parse_size(args.memory_limit, "--memory-limit"), profile=False,
                    out=args.out, tui=False)
    s = Session(cfg)
    s.run()
    print(summary(s.facts, s.verdicts, str(s.report_path)))
    for v in s.verdicts:
        if v.code == "GC004":
            print(f"\n{v.code} [{v.severity}] {v.headline}")
            for e in v.evidence:
                print(f"  - {e.text()}")
            print(f"  do: {v.recommendation}")
    mm = s.facts.memory_model
    if mm is not None:
        for o in mm.fit_options:
            line = (f"{o.key:13} x{o.n_devices:<2} peak@b1+GC {o.peak_bytes_batch1_gc / 2**30:6.2f} GiB  "
                    f"max batch GC {o.max_batch_gc:3d} / no GC {o.max_batch_no_gc:3d}")
            if o.predicted_probe_peak_bytes:
                line += f"  probe ({o.probe_layers} layers, b{o.probe_batch}) predicted " \
                        f"{o.predicted_probe_peak_bytes / 2**30:.2f} GiB"
            print(line)
    row = s.facts.offload.get(offload.ZERO2) if s.facts.offload else None
    if row is not None and row.measurement is not None:
        m = row.measurement
        print(f"ZeRO-Offload measured: fits {m.fits}, peak {(m.peak_allocated_bytes or 0) / 2**30:.2f} GiB, "
              f"step {m.step_ms_median} ms")
    elif row is not None:
        print(f"ZeRO-Offload not measured: {row.skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
