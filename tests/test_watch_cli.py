"""`gcdoctor watch -- CMD` on unmodified scripts (a plain loop; torchrun with gloo, 2 processes),
`gcdoctor analyze` merging the rank directories, and GC050 (rank-straggler)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.engine import evaluate_rule
from gcdoctor.facts import Facts
from gcdoctor.facts.watch import RankSummary, WatchFacts
from gcdoctor.rules import find_rule

REPO = Path(__file__).resolve().parents[1]
PLAIN = REPO / "samples" / "watch" / "train_plain.py"


def watch(tmp_path: Path, *cmd: str, profile: str = "2,3") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "gcdoctor", "watch", "--out", str(tmp_path / "run"),
                           "--profile-steps", profile, "--telemetry-hz", "0", "--", *cmd],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)


def test_an_unmodified_loop_is_watched_step_by_step(micro_llama, tmp_path):
    p = watch(tmp_path, sys.executable, str(PLAIN), "--model", micro_llama, "--seq-len", "16", "--steps", "6",
              "--data-ms", "30")
    assert p.returncode == 0, p.stderr
    assert "trained 6 steps on 1 rank(s)" in p.stdout
    assert f"run directory {tmp_path / 'run'}" in p.stderr
    # it ends with its own bottom line, and the profiler's USDT lines stay in watch.log, off the console
    tail = p.stdout[p.stdout.index("trained 6 steps"):]
    assert "\nBottom line: " in tail and tail.rstrip().endswith(f"the command's output: {tmp_path / 'run' / 'watch.log'}")
    assert "USDT" not in p.stdout + p.stderr
    log = (tmp_path / "run" / "watch.log").read_text()
    assert "trained 6 steps on 1 rank(s)" in log and "profiler_start" in log
    assert max(len(x) for x in tail.splitlines() if not x.startswith(("report: ", "the command's"))) <= 80
    facts = Facts.load(tmp_path / "run" / "facts.json")
    w = facts.watch
    assert [s.index for s in w.steps] == [0, 1, 2, 3, 4, 5]
    assert w.settings_text() == ("batch 2 x seq 16, float32, AdamW, 6 steps (2, 3 profiled), checkpointing 2/2 "
                                 "layers, use_reentrant=False")
    assert all(s.loss is not None for s in w.steps)  # the model output's loss
    assert all(s.host_wait_ms >= 30.0 for s in w.steps[1:])  # the loop's 30 ms of CPU work per batch
    assert (w.recompute.found, w.recompute.kind, w.recompute.regions_per_step) == (True, "non-reentrant", 2.0)
    assert not list(tmp_path.glob(".run-site"))  # the sitecustomize folder is gone


def test_watch_without_a_command_is_a_one_line_error(capsys):
    assert main(["watch", "--"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gcdoctor: error: watch: give the command to run after --, e.g. gcdoctor watch -- python train.py"]
    assert main(["watch", "--profile-steps", "a,b", "--", "true"]) == 2


def test_a_failed_launch_leaves_its_log_in_the_run_directory(tmp_path):
    p = watch(tmp_path, sys.executable, "-c", "import sys; print('loading the data'); sys.exit('no such dataset')")
    assert p.returncode == 3  # the watched command failed: incomplete (1 is --fail-on's)
    assert p.stderr.splitlines()[-2:] == [
        f"gcdoctor watch: nothing was watched: the command exited with 1; its output: {tmp_path / 'run' / 'watch.log'}",
        "gcdoctor watch: the command exited with 1: the watched run is incomplete (exit 3)"]
    # stdout and stderr are two pipes: their lines interleave in either order
    assert sorted((tmp_path / "run" / "watch.log").read_text().splitlines()) == ["loading the data", "no such dataset"]


@pytest.mark.slow
def test_torchrun_with_one_process_is_watched_on_the_cpu_with_gloo(micro_llama, tmp_path):
    p = watch(tmp_path, sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", str(PLAIN), "--ddp",
              "--model", micro_llama, "--seq-len", "16", "--steps", "6")
    assert p.returncode == 0, p.stderr[-2000:]
    f = Facts.load(next((tmp_path / "run").glob("**/facts.json")))
    assert (f.watch.world_size, len(f.watch.steps)) == (1, 6)
    assert "\nBottom line: " in p.stdout and (tmp_path / "run" / "watch.log").is_file()


def test_a_process_that_never_trains_writes_nothing(tmp_path):
    p = watch(tmp_path, sys.executable, "-c", "import torch; print(torch.ones(2).sum().item())")
    assert p.returncode == 0 and "2.0" in p.stdout
    assert "nothing was watched" in p.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_torchrun_gloo_two_ranks_are_watched_and_merged_with_the_straggler_named(micro_llama, tmp_path):
    p = watch(tmp_path, sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(PLAIN), "--ddp",
              "--model", micro_llama, "--seq-len", "16", "--steps", "8", "--slow-rank", "1")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "2 rank directories under" in p.stderr
    for r in (0, 1):
        f = Facts.load(tmp_path / "run" / f"rank-{r}" / "facts.json")
        assert (f.watch.rank, f.watch.world_size, len(f.watch.steps)) == (r, 2, 8)
    assert main(["analyze", str(tmp_path / "run"), "--out", str(tmp_path / "an")]) == 0
    merged = Facts.load(tmp_path / "an" / "facts.json")
    assert [r.rank for r in merged.watch.ranks] == [0, 1]
    assert {"watch/rank-0/watch-steps-2-3", "watch/rank-1/watch-steps-2-3"} <= set(merged.trace)
    slow, fast = merged.watch.ranks[1], merged.watch.ranks[0]
    assert slow.phase_ms_median["host_wait"] >= 80.0 > 10.0 > fast.phase_ms_median["host_wait"]
    # DDP's buffer broadcast at the forward's start makes rank 0 wait for rank 1 there: both "data" phases are long
    assert fast.phase_ms_median["data"] >= 60.0
    report = json.loads((tmp_path / "an" / "report.json").read_text())
    gc050 = next(v for v in report["verdicts"] if v["code"] == "GC050")
    assert (gc050["status"], gc050["severity"]) == ("fired", "warning")
    assert gc050["headline"].startswith("Rank 1 holds the others back: its data loading makes it")


def ranks(*own: tuple[float, float], step: float = 100.0) -> Facts:
    return Facts(watch=WatchFacts(ranks=[
        RankSummary(rank=i, steps=10, step_ms_median=step, phase_ms_median={"host_wait": h, "forward": f})
        for i, (h, f) in enumerate(own)]))


@pytest.mark.parametrize("own, status, start", [
    (((1.0, 30.0), (1.2, 30.5), (25.0, 30.2), (0.9, 29.8)), "fired", "Rank 2 holds the others back: its data loading"),
    (((1.0, 30.0), (1.0, 48.0)), "fired", "Rank 1 holds the others back: its forward makes it 18.0 ms"),
    (((1.0, 30.0), (1.5, 35.0)), "passed", "The 2 ranks are balanced"),  # 5.5 ms: under a tenth of the step
    (((0.1, 0.3), (0.2, 1.0)), "passed", "The 2 ranks are balanced"),  # under a millisecond
])
def test_gc050_names_the_rank_the_others_wait_for(own, status, start):
    [v] = evaluate_rule(find_rule("GC050"), ranks(*own))
    assert v.status == status and v.headline.startswith(start), v.headline
    assert (v.scope, v.topic) == ("configuration", "watch")


def test_gc050_needs_two_ranks():
    [v] = evaluate_rule(find_rule("GC050"), Facts(watch=WatchFacts()))
    assert v.status == "inconclusive"
    [v] = evaluate_rule(find_rule("GC050"), ranks((1.0, 30.0)))
    assert v.status == "inconclusive" and "nothing to compare" in v.headline


def test_the_sitecustomize_runs_a_sitecustomize_it_shadows(tmp_path):
    from gcdoctor.watching.autowatch import write_site
    site = write_site(tmp_path / "gc-site")
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITECUSTOMIZE'] = 'ran'\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(other)]))
    env.pop("GCDOCTOR_WATCH_OUT", None)
    p = subprocess.run([sys.executable, "-c", "import os, sitecustomize; print(os.environ.get('OTHER_SITECUSTOMIZE'))"],
                       capture_output=True, text=True, env=env)
    assert (p.returncode, p.stdout.strip(), p.stderr) == (0, "ran", "")


def test_a_script_that_fails_keeps_its_steps_and_says_its_exit_code(micro_llama, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(
        "import sys, torch\nfrom gcdoctor.model.registry import build_model, load_spec\n"
        "spec = load_spec(sys.argv[1]); model = build_model(spec, 'fp32', 'cpu')\n"
        "opt = torch.optim.SGD(model.parameters(), lr=1e-3); ids = torch.randint(spec.vocab_size, (1, 8))\n"
        "for _ in range(3):\n    model(input_ids=ids, labels=ids).loss.backward(); opt.step(); opt.zero_grad()\n"
        "raise RuntimeError('the job failed')\n")
    p = watch(tmp_path, sys.executable, str(script), micro_llama, profile="")
    # 1 is --fail-on's: the script's failure is an incomplete watched run (3), its own code said
    assert p.returncode == 3 and "RuntimeError: the job failed" in p.stderr
    assert "gcdoctor watch: the command exited with 1: the watched run is incomplete (exit 3)" in p.stderr
    facts = Facts.load(tmp_path / "run" / "facts.json")
    assert len(facts.watch.steps) == 3
    assert facts.settings.error == "RuntimeError('the job failed')"
    assert (tmp_path / "run" / "report.md").is_file()
