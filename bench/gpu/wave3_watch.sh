#!/usr/bin/env bash
# Wave 3, engineer W (the user's own run, judged as deeply as diagnose), on the lent H200.
# About 190 s of GPU time in all (each python start imports torch and builds 4 layers of Llama-3-8B):
#   setup ~25 s
#   A  Trainer fine-tune, transformers' own checkpointing (no labels), 24 steps, profiled 5-6   ~25 s
#   B  the same model and settings, checkpointed with gcdoctor's labelled context_fn           ~25 s
#   C  A with a slow data pipeline (60 ms of CPU work per sample in the Dataset), 16 steps      ~25 s
#   D  `gcdoctor watch -- torchrun --nproc_per_node 1 train_plain.py --ddp` (DDP, world 1)       ~20 s
#   E  the same with --fsdp2 (FSDP2 fully_shard, world 1)                                        ~20 s
#   F  bench/watch_overhead.py: unwatched / watched without telemetry / watched, 5x15 steps    ~40 s
#   then gcdoctor analyze of each run and the unlabelled-vs-labelled recompute shares (CPU only)
# Gives: the H200 samples/watch/ runs of the acceptance (A with transformers' checkpointing, C the
# slow data pipeline), each run's verdicts, the unlabelled recompute share against the labelled one
# (the same trace with labels dropped, and run A against run B: within 2 points?), the watching
# overhead (<= 1 %?), DDP and FSDP2 at world size 1 watched unmodified.
# Results: $OUT/wave3-watch.tgz (every run directory and analysis, without traces over 16 MiB) and
# $OUT/summary.txt; the table printed last.
# CPU rehearsal: SKIP_SETUP=1 W3W_MODEL="--model tiny-llama --seq-len 64 --batch 2" OUT=/tmp/o bash bench/gpu/wave3_watch.sh
set -u
[ "${SKIP_SETUP:-0}" = 1 ] || source bench/gpu/setup.sh >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
PY=${PY:-python3}
M=${W3W_MODEL:---model llama3-8b --layers 4 --seq-len 2048 --batch 2}
OV=${W3W_OVERHEAD:---model llama3-8b --layers 4 --seq-len 2048 --blocks 5 --steps 15}
R=/tmp/w3w; rm -rf $R; mkdir -p $R $OUT
t0=$(date +%s)
step() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
quiet() { grep -v -e USDT -e "^{'loss'" -e "^\*\*\*" -e OMP_NUM_THREADS || true; }

step "A trainer, transformers' checkpointing"
$PY samples/watch/train_with_trainer.py $M --steps 24 --gc --out $R/trainer-gc 2>&1 | quiet | tail -3
step "B trainer, gcdoctor's labels"
$PY samples/watch/train_with_trainer.py $M --steps 24 --gc-labelled --out $R/trainer-gc-labelled 2>&1 | quiet | tail -3
step "C trainer, slow data pipeline"
$PY samples/watch/train_with_trainer.py $M --steps 16 --gc --data-ms 60 --out $R/trainer-slow-data 2>&1 | quiet | tail -3
step "D DDP world size 1, unmodified script"
$PY -m gcdoctor watch --out $R/ddp-world1 -- $PY -m torch.distributed.run --nproc_per_node 1 \
  samples/watch/train_plain.py --ddp $M --steps 12 2>&1 | quiet | tail -3
step "E FSDP2 world size 1, unmodified script"
$PY -m gcdoctor watch --out $R/fsdp2-world1 -- $PY -m torch.distributed.run --nproc_per_node 1 \
  samples/watch/train_plain.py --fsdp2 $M --steps 12 2>&1 | quiet | tail -3
step "F watch overhead"
$PY bench/watch_overhead.py $OV --out $R/overhead 2>&1 | quiet | tail -6
step "analysis"
rm -rf $R/*-hf
for run in trainer-gc trainer-gc-labelled trainer-slow-data ddp-world1 fsdp2-world1; do
  [ -f $R/$run/facts.json ] && $PY -m gcdoctor analyze $R/$run --out $R/analyze-$run > $R/analyze-$run.txt 2>&1
done
$PY bench/recompute_vs_labels.py --same-trace $R/trainer-gc-labelled --runs $R/trainer-gc $R/trainer-gc-labelled \
  --out $R/recompute_vs_labels.json > $R/recompute_vs_labels.txt 2>&1
find $R -name "*.json.gz" -size +15M -delete
tar czf $OUT/wave3-watch.tgz -C /tmp w3w
$PY - "$R" > $OUT/summary.txt <<'PY'
import json, sys
from pathlib import Path
from gcdoctor.facts import Facts
R = Path(sys.argv[1])
print(f"{'run':22s} {'step ms':>8s} {'data':>6s} {'fwd':>6s} {'bwd':>6s} {'opt':>6s} {'peak GiB':>8s} {'phase':>9s} "
      f"{'rec %':>6s} {'found':>18s}")
for run in ("trainer-gc", "trainer-gc-labelled", "trainer-slow-data", "ddp-world1", "fsdp2-world1"):
    p = R / run / "facts.json"
    if not p.is_file():
        print(f"{run:22s} (no facts)"); continue
    w = Facts.load(p).watch
    rc = w.recompute
    f = lambda x: "-" if x is None else f"{x:.1f}"
    print(f"{run:22s} {f(w.step_ms_median):>8s} {f(w.phase_ms_median('data')):>6s} {f(w.phase_ms_median('forward')):>6s} "
          f"{f(w.phase_ms_median('backward')):>6s} {f(w.phase_ms_median('optimizer')):>6s} "
          f"{f(w.peak_allocated_bytes / 2**30 if w.peak_allocated_bytes else None):>8s} {str(w.peak_phase):>9s} "
          f"{f(100 * rc.share if rc and rc.share is not None else None):>6s} "
          f"{(rc.source + '/' + rc.kind) if rc and rc.found else 'none':>18s}")
    rep = R / f"analyze-{run}" / "report.json"
    if rep.is_file():
        for v in json.loads(rep.read_text())["verdicts"]:
            if v["status"] in ("fired", "error") or v["code"] in ("GC001", "GC005"):
                print(f"    {v['code']} {v['status']:12s} {v['headline'][:100]}")
rv = json.loads((R / "recompute_vs_labels.json").read_text())
for r in rv["same_trace"]:
    d = r["difference_points"]
    print(f"same trace {Path(r['trace']).name}: labelled {r['labelled']['share']}, unlabelled {r['unlabelled']['share']}, "
          f"difference {d} points")
if rv["runs"]:
    print(f"run A (transformers) vs run B (labels): difference {rv['runs']['difference_points']} points")
ov = R / "overhead" / "watch_overhead.json"
if ov.is_file():
    o = json.loads(ov.read_text())
    print(f"watch overhead: {o['overhead_pct']:+.2f}% (per arm {o['overhead_pct_per_arm']})")
PY
cp $R/recompute_vs_labels.json $OUT/ 2>/dev/null
step "done"
cat $OUT/summary.txt
