"""report.html of a real run opened in headless Chromium: no console message of any kind (script
errors, SVG attribute errors, blocked loads), every plot laid out with a non-zero size, and no
element wider than the viewport (at 1280 px for every run, at 800 px for the widest pages) unless a
box that scrolls holds it (wide tables scroll inside their own box; the page never scrolls sideways).

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
    // layout: nothing wider than the viewport unless it sits in a box that scrolls or clips it
    var vw = document.documentElement.clientWidth;
    out.viewport = vw; out.page_width = document.documentElement.scrollWidth; out.wide = [];
    document.querySelectorAll('body *').forEach(function (el) {
      var r = el.getBoundingClientRect();
      if (el.id === 'gcdoctor-check' || (r.right <= vw + 1 && r.left >= -1)) return;
      for (var p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        var ox = getComputedStyle(p).overflowX;
        if (ox === 'auto' || ox === 'scroll' || ox === 'hidden') return;
      }
      var cls = typeof el.className === 'string' && el.className ? '.' + el.className.split(' ')[0] : '';
      out.wide.push(el.tagName.toLowerCase() + cls + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
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


def open_in_chromium(html: str, tmp_path: Path, width: int = 1280) -> tuple[dict, list[str]]:
    page = tmp_path / "page.html"
    page.write_text(html.replace("</body>", CHECK + "</body>"))
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           "--enable-logging=stderr", "--v=0", f"--window-size={width},2000", "--virtual-time-budget=2000",
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
    assert result["viewport"] > 1200 and result["wide"] == [] and result["page_width"] <= result["viewport"]


# the recorded runs whose pages are widest: the most sections, the longest names and tables
NARROW = [r for r in RUNS if r.name in ("h200-llama3-8b-diagnose-w3", "h200-llama3-8b-diagnose", "cpu-gloo-2ranks",
                                        "h200-llama3-8b-4layers-trainer", "cpu-tiny-llama-offload")]


@pytest.mark.parametrize("run", NARROW, ids=[r.name for r in NARROW])
def test_report_does_not_scroll_sideways_at_800_px(tmp_path, run):
    facts = Facts.load(run / "facts.json")
    result, console = open_in_chromium(render_html(facts, evaluate(facts), run_dir=run), tmp_path, width=800)
    assert 760 < result["viewport"] <= 800
    assert result["wide"] == [] and result["page_width"] <= result["viewport"]


def test_compare_page_shows_every_plot_without_console_errors(tmp_path):
    if len(RUNS) < 2:
        pytest.skip("needs two recorded runs under samples/")
    html = render_compare_html(load_run(RUNS[0]), load_run(RUNS[1]))
    result, console = open_in_chromium(html, tmp_path)
    assert console == [] and result["errors"] == []
    assert result["svgs"] == html.count("<svg") > 0
    assert result["bad"] == [] and result["empty"] == []
    assert result["wide"] == [] and result["page_width"] <= result["viewport"]


def test_the_check_itself_catches_a_broken_plot(tmp_path):
    broken = ('<!DOCTYPE html><html><body><svg class="plot" aria-label="broken" width="0" height="0">'
              '<path class="series" d="M NaN 1"/></svg></body></html>')
    result, console = open_in_chromium(broken, tmp_path)
    assert result["bad"] == ["broken"] and result["empty"] == ["broken"]
    assert any("attribute d" in line for line in console)


def test_the_layout_check_catches_a_line_that_cannot_break(tmp_path):
    page = ('<!DOCTYPE html><html><body><nav class="toc">' + "".join(
        f'<a style="white-space: nowrap" href="#s{i}">Section {i}</a>' for i in range(200)) + "</nav></body></html>")
    result, _ = open_in_chromium(page, tmp_path, width=800)
    assert any(w.startswith("a ") for w in result["wide"]) and result["page_width"] > 800
