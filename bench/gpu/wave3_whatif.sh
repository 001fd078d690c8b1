#!/usr/bin/env bash
# Wave 3: the launch-cost what-if checked on the H200. About 160 s of GPU
# time: `gcdoctor diagnose --probes granularity --model llama3-8b` (4 probe layers) natively
# (~30 s), then at three emulated launch costs, +25, +75 and +200 us of host time per launching op
# (~35, ~40, ~50 s), then bench/whatif_check.py: each emulated variant's step time predicted from
# the native run's facts against its measured step (the 10 % acceptance figure).
# Writes $OUT/whatif-{native,emu25,emu75,emu200}.tgz (one run directory each, traces included,
# ~6 MB each) and $OUT/whatif_check.{txt,json}; prints the check table last.
# CPU dry run: SKIP_SETUP=1 GCD_ARGS="--device cpu --model tiny-llama --seq-len 32 --steps 1" OUT=/tmp/o bash bench/gpu/wave3_whatif.sh
set -u
if [ "${SKIP_SETUP:-0}" != 1 ]; then
  source bench/gpu/setup.sh >/dev/null 2>&1
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
GCD_ARGS=${GCD_ARGS:-"--device cuda --model llama3-8b"}
NS=${NS:-"25 75 200"}
R=/tmp/res-whatif; rm -rf $R; mkdir -p $R "$OUT"
START=$(date +%s)
run() {  # name, extra args
  local name=$1; shift
  local t0=$(date +%s)
  python3 -m gcdoctor diagnose --no-tui --probes granularity $GCD_ARGS "$@" --out $R/$name > $R/$name.log 2>&1
  echo "$name: exit $? after $(( $(date +%s) - t0 )) s"
  grep -E "launch cost|emulated launch" $R/$name.log | grep -v USDT | head -3
  cp $R/$name.log $R/$name/console.log 2>/dev/null
  tar czf "$OUT/whatif-$name.tgz" -C $R $name
}
run native
runs=""
for n in $NS; do
  run emu$n --emulate-launch-us $n
  runs="$runs $R/emu$n"
done
echo "all runs: $(( $(date +%s) - START )) s"
python3 bench/whatif_check.py $R/native $runs --json "$OUT/whatif_check.json" > "$OUT/whatif_check.txt" 2>&1
cat "$OUT/whatif_check.txt"
ls -la "$OUT"
