#!/usr/bin/env bash
# Call C: a >= 200 MB real trace of full Llama-3-8B steps, then gcdoctor vs HTA on it.
[ -d /tmp/site ] || source bench/gpu/setup.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1
mkdir -p /tmp/resc
[ -d /tmp/hta-site ] || python3 -m pip install -q --no-index --no-deps --target /tmp/hta-site .whl/trace-bench/traceinsight-*.whl .whl/trace-bench/plotly-*.whl .whl/trace-bench/narwhals-*.whl
python3 bench/gpu/record_big_trace.py /tmp/big-trace.json --steps ${BIG_STEPS:-12} 2>&1 | grep -v USDT | tail -2
ls -la /tmp/big-trace.json
python3 bench/trace_vs_hta.py /tmp/big-trace.json --hta-path /tmp/hta-site --repeat ${REPEAT:-2} --out /tmp/resc/trace_vs_hta.json 2>&1 | tail -14
nproc; free -g | head -2
tar czf $OUT/res-c.tgz -C /tmp resc
