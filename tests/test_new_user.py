"""What a new user meets first: the README's test command is the one CI runs, it installs the browser
the HTML-report tests need, and a test run that skips anything says why and how to include it."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)


def test_ci_runs_exactly_the_readme_test_command_and_it_installs_the_browser():
    test_cmd = readme_commands()[1]
    assert test_cmd.startswith("python3 tools/mkvenv.py --browser && ") and test_cmd.endswith("python -m pytest")
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert test_cmd in ci  # the whole line, verbatim
    assert "apt-get" not in "\n".join(ci)  # the browser comes from the README's command, not from CI alone


def test_a_run_without_chromium_says_what_it_skipped_and_the_command_that_includes_it(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # no browser on PATH
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "tests/test_report_chromium.py::test_the_check_itself_catches_a_broken_plot"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 0, out[-2000:]
    assert "gcdoctor: 1 test(s) skipped, by reason:" in out
    assert "     1  Chromium not found (apt-get install -y chromium)" in out
    assert ("        to include them: python3 tools/mkvenv.py --browser && python -m pytest "
            "tests/test_report_chromium.py") in out


def test_mkvenv_browser_reports_what_it_found_in_one_line():
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "mkvenv.py"), "--browser"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0
    assert len(proc.stdout.splitlines()) == 1 and proc.stdout.startswith("browser: ")
