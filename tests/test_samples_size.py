"""The repository stays small enough to travel: the tracked working tree under 35 MiB (recorded runs
included). A re-recording replaces the old one; trim traces to the steps analysed and leave
TelemetrySampled lines out of a sample's events.jsonl (telemetry.csv holds every sample)."""
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 35 * 2 ** 20
FILE_LIMIT_BYTES = 3 * 2 ** 20


def _tracked() -> list[Path]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, timeout=60)
    if out.returncode != 0:
        pytest.skip("git ls-files failed")
    return [REPO / n for n in out.stdout.decode().split("\0") if n and (REPO / n).is_file()]


def test_the_tracked_tree_stays_under_35_mib():
    sizes = {p: p.stat().st_size for p in _tracked()}
    total = sum(sizes.values())
    biggest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert total < LIMIT_BYTES, (f"{total / 2 ** 20:.1f} MiB tracked; the largest: "
                                 + ", ".join(f"{p.relative_to(REPO)} {sizes[p] / 2 ** 20:.1f} MiB" for p in biggest))
    assert [p for p in biggest if sizes[p] > FILE_LIMIT_BYTES] == []
