#!/usr/bin/env bash
# Wave 3, the lead's first call: set up, then the full default `gcdoctor diagnose` (Llama-3-8B, every
# default probe) started in its own process session, so that it may outlast this call (about 560 s
# with the allocator and optimizer probes, over one call's 600 s); this call waits for it up to
# WAIT_S seconds and packs it if it finished. bench/gpu/wave3_lead_2.sh, the next call on the same
# warm machine, waits for the rest and packs it. Packing: bench/gpu/wave3_full_pack.sh.
set -u
source bench/gpu/setup.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
rm -rf /tmp/full; mkdir -p /tmp/full
date +%s > /tmp/full/t0
setsid nohup bash -c 'timeout -s TERM 1000 python3 -m gcdoctor diagnose --no-tui --out /tmp/full/run \
  > /tmp/full/console.log 2>&1; echo $? > /tmp/full/rc' > /dev/null 2>&1 < /dev/null &
while [ ! -f /tmp/full/rc ] && [ $SECONDS -lt "${WAIT_S:-560}" ]; do sleep 5; done
if [ -f /tmp/full/rc ]; then
  bash bench/gpu/wave3_full_pack.sh && touch /tmp/full/packed
else
  echo "diagnose still running after $(( $(date +%s) - $(cat /tmp/full/t0) )) s"
  grep -v USDT /tmp/full/console.log | grep -E "probe .* done|^\[.*probe " | tail -8
  tail -3 /tmp/full/console.log | cut -c1-150
fi
