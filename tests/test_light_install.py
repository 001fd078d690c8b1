"""The light core: a clean venv (no system site packages, so no torch) gets `pip install .` with
the core dependencies only, and analyze, plan, rules, explain and compare work there on recorded
data. Marked `install` (CI runs it: `.ci/run` runs every test); about 20 s with a warm pip cache."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "cpu-tiny-llama-sweep"

pytestmark = pytest.mark.install


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=600, **kw)


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("light") / "venv"
    r = _run([sys.executable, "-m", "venv", str(venv)])
    assert r.returncode == 0, r.stderr
    r = _run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(REPO)])
    assert r.returncode == 0, r.stderr[-3000:]
    return venv


def test_core_has_no_torch(light_venv: Path) -> None:
    r = _run([str(light_venv / "bin" / "python"), "-c",
              "import importlib.util as u; print([m for m in ('torch', 'transformers', 'textual', 'pandas', "
              "'deepspeed', 'accelerate') if u.find_spec(m)])"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_analyze_plan_rules_without_torch(light_venv: Path, tmp_path: Path) -> None:
    gc = str(light_venv / "bin" / "gcdoctor")
    r = _run([gc, "analyze", str(SAMPLE), "--out", str(tmp_path / "a"), "--json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["verdicts"]
    assert (tmp_path / "a" / "report.html").is_file()
    r = _run([gc, "plan", "--model", "llama3-8b", "--device-memory", "80GB", "--json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)
    r = _run([gc, "rules", "--json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert any(rule["code"] == "GC001" for rule in json.loads(r.stdout))
    r = _run([gc, "explain", "GC001"], cwd=tmp_path)
    assert r.returncode == 0 and "GC001" in r.stdout, r.stderr
    r = _run([gc, "compare", str(SAMPLE), str(REPO / "samples" / "cpu-tiny-llama-sgd"), "--json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)
    # running needs the `run` extra: one line, exit 2, never a traceback
    r = _run([gc, "diagnose", "--no-tui", "--out", str(tmp_path / "d")], cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
