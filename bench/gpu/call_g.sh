#!/usr/bin/env bash
# Call G (session 2): a real diagnose session with the final sampler (Llama-3-8B cut to 4 layers,
# batch sweep at 1,2,4): the sampler's self-reported cost in a training process; then the
# capture/processing split again (busy and idle) with events.jsonl encoded by msgspec.
source bench/gpu/setup.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
R=/tmp/resg; rm -rf $R; mkdir -p $R
python3 -m gcdoctor diagnose --no-tui --device cuda --model llama3-8b --layers 4 --probes sweep \
   --batch-sizes 1,2,4 --steps 5 --out $R/h200-llama3-8b-4layers-sweep 2>&1 | grep -v USDT | tail -25
python3 - <<'PY'
import json
t = json.load(open("/tmp/resg/h200-llama3-8b-4layers-sweep/facts.json"))["telemetry"]
print({k: t[k] for k in ("overhead_cpu_pct", "rate_hz", "achieved_rate_hz", "samples", "missed_ticks", "duration_s")})
PY
python3 bench/sampler_split.py --busy --seconds 8 --batch 20 --out $R/split-busy.json 2>&1 | grep -v Warn
python3 bench/sampler_split.py --seconds 8 --batch 20 --out $R/split-idle.json 2>&1 | grep -v Warn
tar czf $OUT/res-g.tgz -C /tmp resg
