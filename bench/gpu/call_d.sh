#!/usr/bin/env bash
# Call D: the telemetry sampler's cost after moving the PCIe counters into the 20 Hz tick, and
# the PCIe demonstration again with that design.
[ -d /tmp/site ] || source bench/gpu/setup.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
mkdir -p /tmp/resd
python3 bench/telemetry_cost.py --seconds 10 --rates 20 --blocks 6 --steps 30 --compare-poller --out /tmp/resd/cost 2>&1 | tail -30
python3 bench/telemetry_cost.py --pcie-demo --out /tmp/resd/pcie 2>&1 | tail -14
tar czf $OUT/res-d.tgz -C /tmp resd
