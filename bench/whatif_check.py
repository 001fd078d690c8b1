"""Predicted against measured step time under an emulated launch cost, variant by variant.

    python bench/whatif_check.py NATIVE_RUN EMULATED_RUN [EMULATED_RUN ...] [--json OUT.json]

NATIVE_RUN is a `gcdoctor diagnose --probes granularity` run directory; each EMULATED_RUN the same
with `--emulate-launch-us N`. The prediction uses the native run's facts only (its measured step,
the census's ops per phase and the max-plus response of its trace, docs/granularity.md "What-if")
and the emulation's extra per op as its microbenchmark read it back. Prints one table per
emulated run, then the largest error per run; --json writes every row.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gcdoctor.facts import Facts
from gcdoctor.facts.granularity import emulation_check
from gcdoctor.facts.serde import to_dict


def _load(path: Path) -> Facts:
    f = path / "facts.json"
    if not f.is_file():
        sys.exit(f"whatif_check: {path}: no facts.json")
    facts = Facts.load(f)
    if facts.granularity is None:
        sys.exit(f"whatif_check: {path}: no granularity facts")
    return facts


def _ms(x: float | None) -> str:
    return "   n/a" if x is None else f"{x:7.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("native", type=Path)
    ap.add_argument("emulated", type=Path, nargs="+")
    ap.add_argument("--json", type=Path, help="write every row here")
    args = ap.parse_args()
    native = _load(args.native)
    rows, worst = [], []
    for path in args.emulated:
        emu_facts = _load(path)
        try:
            checks = emulation_check(native.granularity, emu_facts.granularity)
        except ValueError as exc:
            sys.exit(f"whatif_check: {path}: {exc}")
        e = emu_facts.granularity.emulation
        print(f"\n+{e.target_us:g} us per op ({path.name}): read back +{e.readback_extra_us or 0:.2f} us, "
              f"dispatch mode {e.mode_cost_us or 0:.2f} us + spin {e.spin_us or 0:.2f} us")
        print(f"{'variant':34s} {'ops':>5s} {'native':>7s} {'predict':>7s} {'measure':>7s} {'error':>7s}")
        errs = []
        for c in checks:
            err = c.error_pct
            if err is not None:
                errs.append(abs(err))
            print(f"{c.group + '/' + c.variant:34s} {c.launch_ops_per_step or 0:5d} {_ms(c.native_step_ms)} "
                  f"{_ms(c.predicted_step_ms)} {_ms(c.measured_step_ms)} "
                  f"{'    n/a' if err is None else f'{err:+6.1f}%'}")
            rows.append({**to_dict(c), "error_pct": err, "run": path.name})
        worst.append((e.target_us, max(errs) if errs else None, sum(e <= 10 for e in errs), len(errs)))
    print("\nlargest |error| per emulated launch cost:")
    for target, w, within, n in worst:
        print(f"  +{target:g} us: {'n/a' if w is None else f'{w:.1f}%'} ({within} of {n} variants within 10%)")
    if args.json:
        args.json.write_text(json.dumps({"native": str(args.native), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
