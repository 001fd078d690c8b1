"""Print a run's policy search and recipe confirmation as compact tables (80 columns).

Usage: python bench/policies_table.py RUN_DIR [RUN_DIR ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

from gcdoctor.facts import Facts

GiB = 1024 ** 3


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:.1f}"


def table(run: Path) -> None:
    facts = Facts.load(run / "facts.json")
    pol = facts.policies
    print(f"== {run.name}: {facts.model.name if facts.model else '?'}")
    if pol is None:
        print("   no policy search in this run:", facts.unavailable.get("policies", ""))
        return
    print(f"{'policy':<13}{'ok':>3}{'kept/L MiB':>11}{'pred b':>7}{'b':>4}{'tok/s':>9}{'peak GiB':>9}  dropped")
    for c in pol.candidates:
        m = c.measurement
        chk = c.check
        kept = "-" if chk is None or chk.saved_bytes_per_layer is None else f"{chk.saved_bytes_per_layer / 2**20:.1f}"
        ok = "-" if chk is None or chk.ok is None else ("y" if chk.ok else "N")
        tok = "-" if m is None or not m.tokens_per_s else f"{m.tokens_per_s:,.0f}"
        peak = _gib(m.peak_allocated_bytes) if m is not None else "-"
        extra = ("+chunk" if c.setting.chunked_loss else "")
        print(f"{(c.setting.policy + extra)[:13]:<13}{ok:>3}{kept:>11}{c.predicted_largest_batch or 0:>7}"
              f"{c.largest_batch or 0:>4}{tok:>9}{peak:>9}  {(c.dropped or '')[:24]}")
    for i, conf in enumerate(pol.confirmations):
        ch = conf.choice
        print(f"confirm {i}: {ch.setting.key} micro {ch.micro_batch} x{ch.accumulation}: predicted "
              f"{ch.predicted_tokens_per_s or 0:,.0f} tok/s, confirmed {conf.tokens_per_s or 0:,.0f} "
              f"({conf.off_pct if conf.off_pct is not None else '-'} %), peak {_gib(conf.peak_allocated_bytes)} GiB"
              f"{'; rejected: ' + conf.rejected if conf.rejected else ''}")
    print(f"search {pol.search_seconds} s, confirmation {pol.confirm_seconds} s")
    for n in pol.notes:
        print("  note:", n[:74])


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        table(Path(arg))
