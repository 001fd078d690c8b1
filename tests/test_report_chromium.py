"""report.html of a real run opened in headless Chromium: no console message of any kind (script
errors, SVG attribute errors, blocked loads) and every plot laid out with a non-zero size.

The page itself carries no script. The test appends one (to a copy) that runs after the content
is parsed and writes what it found into a <pre> that `--dump-dom` returns; console messages come
from Chromium's own log on stderr (`--enable-logging=stderr --v=0`: lines with ":CONSOLE").
Skips only where no Chromium can be found (install: apt-get install -y chromium).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.report.compare import load_run, render_compare_html
from gcdoctor.report.html import render_html

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))

CHECK = """<script>
(function () {
  var out = {svgs: 0, bad: [], empty: [], errors: []};
  try {
    var svgs = document.querySelectorAll('svg');
    out.svgs = svgs.length;
    svgs.forEach(function (s) {
      var r = s.getBoundingClientRect(), cs = getComputedStyle(s);
      var name = s.getAttribute('aria-label') || '?';
      if (!(r.width > 0 && r.height > 0) || cs.display === 'none' || cs.visibility === 'hidden') out.bad.push(name);
      var drawn = Array.prototype.some.call(s.querySelectorAll('path.series, circle, rect.bar'), function (el) {
        var b = el.getBoundingClientRect(); return b.width > 0 || b.height > 0; });
      if (!drawn) out.empty.push(name);
    });
  } catch (e) { out.errors.push(String(e)); }
  var pre = document.createElement('pre'); pre.id = 'gcdoctor-check';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
})();
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium not found (apt-get install -y chromium)")


def open_in_chromium(html: str, tmp_path: Path) -> tuple[dict, list[str]]:
    page = tmp_path / "page.html"
    page.write_text(html.replace("</body>", CHECK + "</body>"))
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           "--enable-logging=stderr", "--v=0", "--window-size=1280,2000", "--virtual-time-budget=2000",
           "--dump-dom", page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    m = re.search(r'<pre id="gcdoctor-check">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"no result from Chromium (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")), console


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_report_of_a_real_run_shows_every_plot_without_console_errors(tmp_path, run):
    facts = Facts.load(run / "facts.json")
    html = render_html(facts, evaluate(facts), run_dir=run)
    result, console = open_in_chromium(html, tmp_path)
    assert console == []
    assert result["errors"] == []
    assert result["svgs"] == html.count("<svg") > 0
    assert result["bad"] == [] and result["empty"] == []


def test_compare_page_shows_every_plot_without_console_errors(tmp_path):
    if len(RUNS) < 2:
        pytest.skip("needs two recorded runs under samples/")
    html = render_compare_html(load_run(RUNS[0]), load_run(RUNS[1]))
    result, console = open_in_chromium(html, tmp_path)
    assert console == [] and result["errors"] == []
    assert result["svgs"] == html.count("<svg") > 0
    assert result["bad"] == [] and result["empty"] == []


def test_the_check_itself_catches_a_broken_plot(tmp_path):
    broken = ('<!DOCTYPE html><html><body><svg class="plot" aria-label="broken" width="0" height="0">'
              '<path class="series" d="M NaN 1"/></svg></body></html>')
    result, console = open_in_chromium(broken, tmp_path)
    assert result["bad"] == ["broken"] and result["empty"] == ["broken"]
    assert any("attribute d" in line for line in console)
