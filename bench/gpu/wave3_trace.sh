#!/usr/bin/env bash
# Wave 3, traces: real H200 traces of each host-side cause of device idle, and the
# profiler-hygiene check. Needs only the image's torch and numpy (gcdoctor's loader falls back to the
# standard json decoder without msgspec). About 60-90 s of GPU time.
#   run: bash bench/gpu/wave3_trace.sh     (files come back under $OUT)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
R=/tmp/w3; rm -rf $R; mkdir -p $R/host $R/hyg
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# 1. one trace per cause: healthy, DataLoader num_workers=0 with CPU work, .item() every step, tiny ops, setup only
python3 bench/record_host_traces.py --device cuda --out $R/host --steps 5 2>&1 | grep -v USDT
# 2. profiler hygiene: A profiled first and after 8 other sessions in one process, then in a fresh process
python3 bench/gpu/profiler_hygiene.py --out $R/hyg --phase late 2>&1 | grep -v USDT
python3 bench/gpu/profiler_hygiene.py --out $R/hyg --phase fresh 2>&1 | grep -v USDT
python3 bench/gpu/profiler_hygiene.py --out $R/hyg --phase compare 2>&1 | grep -v USDT
for f in $R/host/*.json.gz; do cp $f $OUT/; done
gzip -9 -c $R/hyg/a-late.json > $OUT/hyg-a-late.json.gz; gzip -9 -c $R/hyg/a-fresh.json > $OUT/hyg-a-fresh.json.gz
cp $R/hyg/hygiene.json $OUT/hygiene.json
ls -la $OUT
