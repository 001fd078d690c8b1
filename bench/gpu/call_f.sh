#!/usr/bin/env bash
# Call F (session 2): the sampler with captures at the tick and decoding once a second: where its
# CPU goes (busy and idle GPU), its cost in the step-time A/B (twice), and the PCIe demo again.
[ -d /tmp/site ] || source bench/gpu/setup.sh >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
R=/tmp/resf; mkdir -p $R
python3 bench/sampler_split.py --busy --seconds 8 --batch 1 4 20 --out $R/split-busy.json 2>&1 | grep -v Warn
python3 bench/sampler_split.py --seconds 8 --batch 20 --out $R/split-idle.json 2>&1 | grep -v Warn
for i in 1 2; do
  python3 bench/telemetry_cost.py --seconds 10 --rates 20 --blocks 6 --steps 300 --out $R/cost$i 2>&1 | grep -v -e Warning -e "us CPU"
done
python3 bench/telemetry_cost.py --pcie-demo --out $R/pcie 2>&1 | tail -14
rm -f $R/cost*/events-*.jsonl $R/cost*/telemetry-ab.csv
tar czf $OUT/res-f.tgz -C /tmp resf
