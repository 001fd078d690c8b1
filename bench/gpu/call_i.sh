#!/usr/bin/env bash
# Call I (session 2): what watching costs a real training loop, with the telemetry sampler's share
# separated (unwatched / watched without telemetry / watched), twice.
source bench/gpu/setup.sh >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
R=/tmp/resi; rm -rf $R; mkdir -p $R
for i in 1 2; do
  python3 bench/watch_overhead.py --model llama3-8b --layers 4 --seq-len 2048 --blocks 8 --steps 15 --out $R/watch$i 2>&1 | grep -v USDT | tail -5
done
tar czf $OUT/res-i.tgz -C /tmp resi
