#!/usr/bin/env bash
# Wave 3, the lead's second call (same warm machine as bench/gpu/wave3_lead_1.sh): wait for the full
# diagnose and pack it, unless the first call did; then the memory checks (bench/gpu/wave3_memory.sh,
# DeepSpeed's CPU Adam op already compiled by the diagnose) and the launch-cost what-if
# (bench/gpu/wave3_whatif.sh), its four runs packed as one file (traces of the native run only).
set -u
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
if [ ! -d /tmp/site ]; then echo "a fresh machine: the first call's diagnose is gone"; source bench/gpu/setup.sh; fi
if [ -d /tmp/full ] && [ ! -f /tmp/full/packed ]; then
  while [ ! -f /tmp/full/rc ] && [ $SECONDS -lt 200 ]; do sleep 3; done
  [ -f /tmp/full/rc ] || { echo "diagnose still not done; stopping it"; pkill -TERM -f "gcdoctor diagnose"; sleep 30; }
  [ -f /tmp/full/rc ] && [ ! -f /tmp/full/packed ] && bash bench/gpu/wave3_full_pack.sh && touch /tmp/full/packed
fi
echo "=== memory ($SECONDS s)"
bash bench/gpu/wave3_memory.sh
echo "=== what-if ($SECONDS s)"
mkdir -p /tmp/wo
OUT=/tmp/wo SKIP_SETUP=1 bash bench/gpu/wave3_whatif.sh
cp /tmp/wo/whatif_check.txt /tmp/wo/whatif_check.json "$OUT/" 2>/dev/null
tar czf "$OUT/whatif-runs.tgz" --exclude='emu*/traces' -C /tmp/res-whatif .
echo "done at $SECONDS s"; ls -la "$OUT"
