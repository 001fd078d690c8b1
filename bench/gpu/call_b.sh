#!/usr/bin/env bash
# Call B: big trace + HTA benchmark, Trainer example with monitor beside it, telemetry benches.
[ -d /tmp/site ] || source bench/gpu/setup.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
START=$(date +%s)
mkdir -p /tmp/resb
while pgrep -f "gcdoctor diagnose" >/dev/null && [ $(( $(date +%s) - START )) -lt 300 ]; do sleep 3; done
[ -d /tmp/res ] && tar czf $OUT/res-a2.tgz -C /tmp res 2>/dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/hta-site .whl/trace-bench/traceinsight-*.whl .whl/trace-bench/plotly-*.whl .whl/trace-bench/narwhals-*.whl
python3 bench/gpu/record_big_trace.py /tmp/big-trace.json --steps ${BIG_STEPS:-14} 2>&1 | grep -v USDT | tail -2
python3 bench/trace_vs_hta.py /tmp/big-trace.json --hta-path /tmp/hta-site --repeat 1 --out /tmp/resb/trace_vs_hta.json 2>&1 | tail -12
rm -f /tmp/big-trace.json
python3 -m gcdoctor monitor --no-tui --seconds 40 --telemetry-hz 10 --out /tmp/resb/h200-monitor > /tmp/resb/monitor.log 2>&1 &
python3 samples/watch/train_with_trainer.py --model llama3-8b --layers 4 --seq-len 2048 --steps 20 --gc \
   --out /tmp/resb/h200-llama3-8b-4layers-trainer 2>&1 | grep -v USDT | tail -2
wait
rm -rf /tmp/resb/h200-llama3-8b-4layers-trainer-hf
python3 bench/telemetry_cost.py --pcie-demo --out /tmp/resb/pcie 2>&1 | tail -22
python3 bench/telemetry_cost.py --seconds 10 --rates 20 --blocks 6 --steps 30 --out /tmp/resb/cost 2>&1 | tail -12
tar czf $OUT/res-b.tgz -C /tmp resb
ls -la $OUT
