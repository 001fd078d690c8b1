#!/usr/bin/env bash
# Call E (session 2): are the PCIe counters 32-bit; the sampler's cost with batched processing,
# idle and while the GPU steps (twice, for the spread); the PCIe demonstration with that design.
[ -d /tmp/site ] || source bench/gpu/setup.sh >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
R=/tmp/rese; mkdir -p $R
python3 bench/gpu/counter_width.py 2>&1 | tee $R/counter_width.json
for i in 1 2; do
  python3 bench/telemetry_cost.py --seconds 10 --rates 20 --blocks 6 --steps 300 --out $R/cost$i 2>&1 | grep -v Warning
done
python3 bench/telemetry_cost.py --pcie-demo --out $R/pcie 2>&1 | tail -14
rm -f $R/cost*/events-*.jsonl $R/cost*/telemetry-ab.csv
tar czf $OUT/res-e.tgz -C /tmp rese
