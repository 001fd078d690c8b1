#!/usr/bin/env bash
# Wave 3, the lead: the README's default GPU run, `gcdoctor diagnose` on Llama-3-8B with every
# default probe (sweep, allocator, optimizer, granularity, offload, jitter), as a new user runs it,
# then `gcdoctor analyze` of that run with `--fail-on warning` (issue 15: a healthy configuration
# exits 0 whatever the experiments showed). About 450 s on one H200. A SIGTERM from the timeout
# stops the run at the next boundary and keeps what was measured.
# Writes the run directory (traces included) as $OUT/full-run.tgz.part-* (split at 15 MB) and the
# console outputs as $OUT/full-console.log and $OUT/full-analyze.log.
# CPU dry run: SKIP_SETUP=1 GCD_ARGS="--device cpu --model tiny-llama" OUT=/tmp/o bash bench/gpu/wave3_full.sh
set -u
if [ "${SKIP_SETUP:-0}" != 1 ]; then
  source bench/gpu/setup.sh
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
GCD_ARGS=${GCD_ARGS:-""}
R=/tmp/full; rm -rf $R; mkdir -p $R "$OUT"
t0=$(date +%s)
# shellcheck disable=SC2086
timeout -s TERM "${LIMIT_S:-520}" python3 -m gcdoctor diagnose --no-tui $GCD_ARGS --out $R/run > "$OUT/full-console.log" 2>&1
echo "diagnose: exit $? after $(( $(date +%s) - t0 )) s"
python3 -m gcdoctor analyze $R/run --fail-on warning --out $R/analyze1 > "$OUT/full-analyze.log" 2>&1
echo "analyze --fail-on warning: exit $?"
python3 -m gcdoctor analyze $R/run --fail-on warning --fail-on-experiments --out $R/analyze2 > /dev/null 2>&1
echo "analyze --fail-on warning --fail-on-experiments: exit $?"
cp "$OUT/full-console.log" $R/run/diagnose-console.log
tar czf - -C $R run | split -b 15M - "$OUT/full-run.tgz.part-"
python3 - <<'PY'
import json
f = json.load(open("/tmp/full/run/facts.json"))
s = f.get("sweep") or {}
print("wall_s", f["settings"].get("wall_s"), "sweep wall_s", s.get("wall_s"), "search_ooms", s.get("search_ooms"))
print("max_batch", s.get("max_batch"))
a = f.get("allocator") or {}
for r in a.get("boundaries") or []:
    print("allocator", *(f"{k}={r.get(k)}" for k in ("variant", "allocator", "largest_batch", "first_oom_batch",
          "first_oom_kind", "predicted", "in_process", "tokens_per_s")))
o = f.get("optimizer") or {}
for m in o.get("measurements") or []:
    print("optimizer", m.get("variant"), "fits", m.get("fits"), "peak_opt", m.get("peak_optimizer_allocated_bytes"),
          "step_ms", m.get("step_ms_median"))
print("unavailable", f.get("unavailable"))
PY
sed -n 1,24p "$OUT/full-console.log" | grep -v USDT
ls -la "$OUT"
