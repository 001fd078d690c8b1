#!/usr/bin/env bash
# Call A: the full default diagnose of Llama-3-8B on the H200, detached (setsid) so that a
# second call can wait for it if it outlasts this one; then quick benches if time is left.
source bench/gpu/setup.sh
START=$(date +%s)
mkdir -p /tmp/res
setsid nohup python3 -m gcdoctor diagnose --no-tui --device cuda --model llama3-8b \
   --out /tmp/res/h200-llama3-8b-diagnose > /tmp/res/diagnose.log 2>&1 < /dev/null &
while pgrep -f "gcdoctor diagnose" >/dev/null && [ $(( $(date +%s) - START )) -lt 545 ]; do sleep 3; done
grep -v USDT /tmp/res/diagnose.log | tail -45
if ! pgrep -f "gcdoctor diagnose" >/dev/null; then
  echo "DIAGNOSE DONE after $(( $(date +%s) - START )) s"
  if [ "${WATCH_BENCH:-0}" = 1 ]; then
    python3 bench/watch_overhead.py --model llama3-8b --layers 4 --seq-len 2048 --blocks 6 --steps 15 --out /tmp/res/watch 2>&1 | grep -v USDT | tail -5
  fi
else
  echo "DIAGNOSE STILL RUNNING"
fi
tar czf $OUT/res-a.tgz -C /tmp res 2>/dev/null
ls -la $OUT
