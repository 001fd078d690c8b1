#!/usr/bin/env bash
# Wave 3, memory: about 200 s of GPU time on one H200 (about 240 s if DeepSpeed's CPU
# Adam op has to be compiled on this machine first), in three bounded parts:
#  A. `--memory-limit 48GB` on Llama-3-8B (sweep, and of the offload probe only its reference and
#     ZeRO-2 with the optimizer on the host): GC004 fires from the memory model with the list of
#     what fits; the ZeRO-Offload line measured on 4 layers beside its prediction (~40 s)
#  B. a memory snapshot at the sweep's peak point (4 layers, seq 4096, batch capped at 4), its
#     live tensors attributed (~30 s)
#  C. predicted vs measured on a second model and sequence length: Qwen2.5-7B at seq 2048, the
#     largest batch per allocator in four fresh processes, the allocated peak at each point (~90 s)
# The lead's full `gcdoctor diagnose --model llama3-8b` gives the rest: the new sweep's wall time and
# OOM count (facts.sweep.wall_s, search_ooms), the boundaries in fresh processes under both
# allocators (facts.allocator, GC009), the optimizer-peak verdict with the alternatives measured at
# batch 1 (facts.optimizer, GC008).
source bench/gpu/setup.sh >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
R=/tmp/resm; rm -rf $R; mkdir -p $R
START=$(date +%s)
timeout 150 python3 bench/memory_limit.py --model llama3-8b --memory-limit 48GB --out $R/limit48 \
  > $R/limit48.log 2>&1; echo "A rc=$? after $(( $(date +%s) - START )) s"
timeout 60 python3 -m gcdoctor diagnose --no-tui --model llama3-8b --layers 4 --probes sweep --max-batch 4 \
  --memory-snapshot --no-profile --out $R/snapshot > $R/snapshot.log 2>&1; echo "B rc=$? after $(( $(date +%s) - START )) s"
timeout 170 python3 bench/memory_fresh_check.py --model qwen2.5-7b --seq-len 2048 --out $R/fresh \
  > $R/fresh.log 2>&1; echo "C rc=$? after $(( $(date +%s) - START )) s"
tar czf $OUT/res-wave3-memory.tgz --exclude="*.pickle" -C /tmp resm; ls -la $R/snapshot/memory 2>/dev/null
echo "== A: --memory-limit 48GB"; grep -v USDT $R/limit48.log | sed -n '/^GC004 \[/,$p' | cut -c1-160
echo "== B: snapshot"; python3 - <<'PY'
import json
try:
    f = json.load(open("/tmp/resm/snapshot/facts.json"))
except Exception as e:
    print("no facts:", e); raise SystemExit
s = f["sweep"].get("snapshot")
print("unavailable:", {k: v for k, v in f["unavailable"].items() if "snapshot" in k})
if s:
    print(s["path"], s["variant"], s["batch_size"], "peak GiB", round(s["peak_bytes"] / 2**30, 2), "entries", s["entries"])
    for k, v in sorted(s["by_kind_bytes"].items(), key=lambda kv: -kv[1]):
        print(f"  {k:22} {v / 2**30:7.2f} GiB")
    for t in s["largest"][:6]:
        print(f"  {t['bytes'] / 2**30:7.2f} GiB {t['kind']:20} {t['frame']}")
PY
echo "== C: fresh processes, Qwen2.5-7B seq 2048"; grep -v USDT $R/fresh.log | tail -12
echo "total $(( $(date +%s) - START )) s"; ls -la $OUT
