#!/usr/bin/env bash
# Wave 3, engineer F (checkpointing under FSDP2 and ZeRO-3), on ONE lent H200: world size 1.
# About 100 s of GPU time in all (each measurement builds its own sharded model):
#   setup ~20 s
#   A  gcdoctor diagnose --nproc 1 (gcdoctor's own launcher, NCCL, world size 1) on 4 layers of
#      Llama-3-8B, seq 4096, bf16: the sweep sharded with FSDP2 (transformers' checkpointing outside
#      each unit, reshard_after_forward=True) at batch 1, then the sharding probe at batch 1:
#      fsdp2/{no_gc,gc,gc-wrapper}, fsdp2-keep/{no_gc,gc} (reshard_after_forward=False) and
#      zero3/{no_gc,gc} (DeepSpeed ZeRO-3); 1 warm-up + 2 measured + 2 profiled steps each   ~60 s
#   B  torchrun --nproc-per-node 1 (the users' launcher), the sweep with --shard zero3 on 1 layer
#      at seq 1024, unprofiled                                                               ~20 s
# Gives what world size 1 can show: the FSDP2 and ZeRO-3 paths run on CUDA/NCCL; per-rank facts
# (states, peak, step) of rank 0; whether NCCL launches communication kernels for a group of one
# and how long they run; the all-gathers per step with and without resharding (forward, backward,
# issued by the recompute) for each checkpointing order; the verdicts GC060-GC063. It does NOT
# give the acceptance figures (2 H200s: largest batch per rank, step time, exposed communication
# of Llama-3-8B with FSDP2, checkpointing on and off): for those run the same command with
# --nproc 2 on nvidia-h200-x2 (docs/distributed.md, "What awaits a multi-GPU machine").
# Results: $OUT/dist-ws1.tgz (both run directories; traces above 15 MiB left out) and
# $OUT/summary.txt; the table printed last.
# CPU rehearsal: SKIP_SETUP=1 PY=python W3D_ARGS="--device cpu --model tiny-llama --layers 2 --seq-len 32 --steps 1
#   --warmup 0" W3D_ARGS_B="--device cpu --model tiny-llama --layers 1 --seq-len 16" OUT=/tmp/o bash bench/gpu/wave3_dist.sh
set -u
[ "${SKIP_SETUP:-0}" = 1 ] || source bench/gpu/setup.sh >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
PY=${PY:-python3}
ARGS=${W3D_ARGS:---model llama3-8b --layers 4 --seq-len 4096 --steps 2 --warmup 1}
ARGS_B=${W3D_ARGS_B:---model llama3-8b --layers 1 --seq-len 1024 --steps 2 --warmup 1}
BATCHES=${W3D_BATCHES:-1}
R=/tmp/w3d; rm -rf $R; mkdir -p $R $OUT
t0=$(date +%s)
step() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }
quiet() { grep -v -e USDT -e FutureWarning -e "return func" -e "^\*\*\*" -e OMP_NUM_THREADS || true; }

step "A diagnose --nproc 1: FSDP2 sweep and the sharding probe"
$PY -m gcdoctor diagnose --nproc 1 $ARGS --probes sweep,sharding --batch-sizes $BATCHES \
  --out $R/fsdp2-ws1 2>&1 | quiet | tail -30
step "B torchrun --nproc-per-node 1: ZeRO-3 sweep"
$PY -m torch.distributed.run --standalone --nproc-per-node 1 -m gcdoctor diagnose --no-tui $ARGS_B \
  --probes sweep --shard zero3 --batch-sizes 1 --no-profile --out $R/zero3-ws1 2>&1 | quiet | tail -12
step "pack"
find $R -name "*.json.gz" -size +15M -delete
tar czf $OUT/dist-ws1.tgz -C /tmp w3d
$PY - "$R" > $OUT/summary.txt <<'PY'
import json, sys
from pathlib import Path
from gcdoctor.facts import Facts
R = Path(sys.argv[1])
f = lambda x, d=1: "-" if x is None else f"{x:.{d}f}"
for run in ("fsdp2-ws1", "zero3-ws1"):
    p = R / run / "facts.json"
    if not p.is_file():
        print(f"{run}: no facts"); continue
    facts = Facts.load(p)
    d = facts.distributed
    print(f"{run}: world {d.world_size}, {d.backend}, {d.launcher}, {facts.environment.device_name}, "
          f"torch {facts.environment.torch}, deepspeed {facts.environment.deepspeed}")
    print(f"  {'variant':24s} {'b':>2s} {'step ms':>8s} {'peak GiB':>8s} {'states GiB':>10s} {'AG f/b/r':>9s} "
          f"{'RS':>3s} {'kern':>5s} {'comm ms':>8s} {'exp ms':>7s} {'@rec ms':>7s}")
    comm = {c.key: c for c in d.comm if c.rank == 0}
    rows = [("sweep/" + m.variant, m) for m in facts.sweep.measurements] if facts.sweep else []
    rows += [("sharding/" + v.name, v.measurement) for v in d.variants if v.measurement is not None]
    for key, m in rows:
        c = comm.get(key)
        dash = c is None
        ag = "-" if dash else "/".join(f"{c.calls('all_gather', ph):g}" for ph in ("forward", "backward", "recompute"))
        rs = "-" if dash else f"{c.calls('reduce_scatter'):g}"
        st = None if m.model_state_bytes is None else m.model_state_bytes / 2**30
        peak = None if m.peak_allocated_bytes is None else m.peak_allocated_bytes / 2**30
        kern = "-" if dash else f(c.comm_kernel_count)
        busy = "-" if dash else f(None if c.comm_busy_us is None else c.comm_busy_us / 1e3, 2)
        exp = "-" if dash else f(None if c.comm_exposed_us is None else c.comm_exposed_us / 1e3, 2)
        rec = "-" if dash else f(None if c.comm_overlap_recompute_us is None else c.comm_overlap_recompute_us / 1e3, 2)
        print(f"  {key:24s} {m.batch_size:>2d} {f(m.step_ms_median):>8s} {f(peak, 2):>8s} {f(st, 2):>10s} "
              f"{ag:>9s} {rs:>3s} {kern:>5s} {busy:>8s} {exp:>7s} {rec:>7s}")
    names = sorted({n for c in d.comm for n in c.comm_kernel_names})
    print(f"  communication kernels seen: {', '.join(names) or 'none'}")
    for v in d.variants:
        if v.skipped:
            print(f"  skipped {v.name}: {v.skipped}")
    rep = R / run / "report.json"
    if rep.is_file():
        for v in json.loads(rep.read_text())["verdicts"]:
            if v["code"] in ("GC060", "GC061", "GC062", "GC063", "GC007") or v["status"] == "error":
                print(f"    {v['code']} {v['status']:12s} {v['headline'][:120]}")
PY
step "done"
cat $OUT/summary.txt
