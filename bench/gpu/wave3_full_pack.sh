#!/usr/bin/env bash
# Pack the full diagnose of bench/gpu/wave3_lead_1.sh (in /tmp/full): `gcdoctor analyze` of it with
# --fail-on warning (exits 0 on a healthy configuration, whatever the experiments showed)
# and with --fail-on-experiments, the run directory (traces included) as $OUT/full-run.tgz.part-*
# (15 MB parts), the console outputs, and a few facts printed.
set -u
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
R=/tmp/full
echo "diagnose: exit $(cat $R/rc) after $(( $(date +%s) - $(cat $R/t0) )) s (wall clock, to packing)"
cp $R/console.log "$OUT/full-console.log"; cp $R/console.log $R/run/diagnose-console.log
python3 -m gcdoctor analyze $R/run --fail-on warning --out $R/analyze1 > "$OUT/full-analyze.log" 2>&1
echo "analyze --fail-on warning: exit $?"
python3 -m gcdoctor analyze $R/run --fail-on warning --fail-on-experiments --out $R/analyze2 > /dev/null 2>&1
echo "analyze --fail-on warning --fail-on-experiments: exit $?"
tar czf - -C $R run | split -b 15M - "$OUT/full-run.tgz.part-"
python3 - <<'PY'
import json
f = json.load(open("/tmp/full/run/facts.json"))
s = f.get("sweep") or {}
print("wall_s", f["settings"].get("wall_s"), "sweep wall_s", s.get("wall_s"), "search_ooms", s.get("search_ooms"))
print("max_batch", s.get("max_batch"))
for r in (f.get("allocator") or {}).get("boundaries") or []:
    print("allocator", *(f"{k}={r.get(k)}" for k in ("variant", "allocator", "largest_batch", "first_oom_batch",
          "first_oom_kind", "predicted", "in_process", "tokens_per_s")))
for r in (f.get("allocator") or {}).get("runs") or []:
    print("fresh", r.get("variant"), r.get("allocator"), r.get("batches"), "wall_s", r.get("wall_s"), r.get("error"))
for m in (f.get("optimizer") or {}).get("measurements") or []:
    print("optimizer", m.get("variant"), "fits", m.get("fits"), "peak_opt", m.get("peak_optimizer_allocated_bytes"),
          "step_ms", m.get("step_ms_median"))
print("unavailable", list((f.get("unavailable") or {}).keys()))
PY
grep -v USDT $R/console.log | grep -E "probe .* done" | cut -c1-100
sed -n '/^gcdoctor/,$p' "$OUT/full-analyze.log" | head -16
ls -la "$OUT"
