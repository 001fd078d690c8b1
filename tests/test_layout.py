"""The package layout: import boundaries, no bare probes/rules imports, a complete wheel,
and rules that document themselves."""
from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_judging_and_reporting_never_import_torch_or_textual():
    code = ("import sys, gcdoctor, gcdoctor.facts, gcdoctor.trace, gcdoctor.engine, gcdoctor.rules, "
            "gcdoctor.report, gcdoctor.report.html, gcdoctor.report.compare, gcdoctor.model.memory, gcdoctor.model.plan, "
            "gcdoctor.run.events, gcdoctor.config; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual', 'transformers')); "
            "print(bad); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_no_bare_probes_or_rules_imports():
    pattern = re.compile(r"^\s*(from|import)\s+(probes|rules)(\.|\s|$)", re.M)
    offenders = [str(p.relative_to(REPO)) for folder in ("gcdoctor", "probes", "rules", "tests", "bench")
                 for p in (REPO / folder).rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_probes_and_rules_are_loaded_once_under_the_package_name():
    import gcdoctor.probes
    import gcdoctor.rules
    assert "probes" not in sys.modules and "rules" not in sys.modules
    assert Path(gcdoctor.probes.__file__).parent == REPO / "probes"
    assert Path(gcdoctor.rules.__file__).parent == REPO / "rules"


def test_every_rule_documents_itself():
    from gcdoctor.rules import ALL_RULES
    codes = [r.code for r in ALL_RULES]
    assert len(codes) == len(set(codes))
    for rule in ALL_RULES:
        doc = rule.doc()
        positions = [doc.find(h) for h in ("What it checks:", "Why it matters:", "Evidence:", "How to fix:")]
        assert all(p >= 0 for p in positions) and positions == sorted(positions), rule.code
        assert re.fullmatch(r"GC\d{3}", rule.code) and re.fullmatch(r"[a-z0-9-]+", rule.slug)


@pytest.mark.slow
def test_built_wheel_contains_probes_rules_and_model_configs(tmp_path):
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    [wheel] = tmp_path.glob("gcdoctor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("gcdoctor/probes/__init__.py", "gcdoctor/probes/batch_sweep.py", "gcdoctor/rules/__init__.py",
                   "gcdoctor/rules/recompute_overhead.py", "gcdoctor/model/model_configs/llama3-8b.json",
                   "gcdoctor/tui/app.tcss"):
        assert needed in names, needed
    assert not any(n.startswith(("probes/", "rules/", "tests/")) for n in names)


def test_no_import_cycle_among_the_modules():
    r = subprocess.run([sys.executable, "tools/import_cycles.py"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout.strip().splitlines()[-1]) == (0, "0 import cycles"), r.stdout
