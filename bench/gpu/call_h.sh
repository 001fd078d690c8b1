#!/usr/bin/env bash
# Call H (session 2): `gcdoctor monitor` at its new 20 Hz default beside a job in another process
# (matmuls with a 1 GiB pinned host-to-device copy every second), then the watch overhead again
# with the final sampler.
source bench/gpu/setup.sh >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
R=/tmp/resh; rm -rf $R; mkdir -p $R
python3 - <<'PY' > $R/job.log 2>&1 &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
t_end, last = time.time() + 30, 0.0
while time.time() < t_end:
    for _ in range(8):
        a @ a
    if time.time() - last > 1.0:
        dev.copy_(host, non_blocking=True)
        last = time.time()
    torch.cuda.synchronize()
PY
JOB=$!
sleep 4
python3 -m gcdoctor monitor --gpu 0 --seconds 20 --no-tui --out $R/h200-monitor-20hz 2>&1 | grep -v USDT | tail -8
python3 - <<'PY'
import json
t = json.load(open("/tmp/resh/h200-monitor-20hz/facts.json"))["telemetry"]
print({k: t[k] for k in ("overhead_cpu_pct", "rate_hz", "achieved_rate_hz", "samples", "missed_ticks", "duration_s")})
PY
wait $JOB
python3 bench/watch_overhead.py --model llama3-8b --layers 4 --seq-len 2048 --blocks 6 --steps 15 --out $R/watch 2>&1 | grep -v USDT | tail -6
tar czf $OUT/res-h.tgz -C /tmp resh
