#!/usr/bin/env bash
# Wave 3, engineer P: the README's set-up command on a GPU machine whose torch lives in
# its own environment (python3 = /opt/torch/.venv/bin/python3, torch 2.11.0+cu130), then a short
# diagnose. About 240 s: install ~90 s (DeepSpeed's CPU Adam compiled at install time, ~65 s),
# diagnose ~120 s (llama3-8b, 2 layers, seq 1024, sweep + offload at batch 1,2).
# MODE=full runs the README's own `gcdoctor diagnose` (the default llama3-8b run, ~290 s) instead.
# Needs .whl carried (bench/gpu/wave3_platform_wheels.sh fills it). Results: $OUT/wave3-platform.tgz.
# It checks: the vendor's torch is the one gcdoctor runs on (not replaced); CPU Adam is prebuilt
# (no compile inside the run); torch/Kineto/NCCL noise is in gcdoctor.log, not on the console;
# the traces carry telemetry counter tracks and are named as tensorboard_trace_handler names them;
# the exit code.
set -uo pipefail
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
R=/tmp/w3p; rm -rf "$R"; mkdir -p "$R/src" "$R/whl"
# the carried wheels, less DeepSpeed's built wheel: the install builds DeepSpeed from its sdist as
# a user's would (with CPU Adam compiled), not from the wheel setup.sh uses
for f in .whl/*; do case "$f" in *deepspeed-*.whl) ;; *) ln -s "$PWD/$f" "$R/whl/";; esac; done
if [ "${LOCAL_TEST:-0}" != 1 ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="$R/whl"; fi
# a clean copy of the checkout (no .venv), as a user's fresh clone would be
tar --exclude=./.venv --exclude=./.whl --exclude=./build --exclude='./*.egg-info' -cf - . | tar -xf - -C "$R/src"
cd "$R/src" || exit 1
vendor=$(python3 -c 'import sys, torch; print(sys.prefix, torch.__version__)' 2>/dev/null || echo "none")
t0=$(date +%s.%N)
# --- the README's first command, verbatim but for its last step (run below) ---
python3 tools/mkvenv.py .venv && . .venv/bin/activate && (python -c 'import torch' 2>/dev/null || pip install -q torch==2.13.0) && pip install -q -e '.[run,nvidia]' && DS_BUILD_CPU_ADAM=$(python tools/mkvenv.py --cpu-adam) pip install -q --no-build-isolation deepspeed > "$R/install.log" 2>&1
install_rc=$?
t1=$(date +%s.%N)
. .venv/bin/activate 2>/dev/null
python - > "$R/env.txt" 2>&1 <<'PY'
import sys, torch
try:
    from deepspeed.git_version_info import installed_ops
    cpu_adam = installed_ops.get("cpu_adam")
except Exception as exc:
    cpu_adam = f"? {exc}"
print("venv", sys.prefix, "torch", torch.__version__, torch.__file__, "cuda", torch.cuda.is_available(),
      "cpu_adam_prebuilt", cpu_adam)
PY
if [ "${MODE:-short}" = full ]; then
  args=(diagnose --no-tui --out "$R/run")
elif [ "${LOCAL_TEST:-0}" = 1 ]; then
  args=(diagnose --no-tui --device cpu --model tiny-llama --seq-len 32 --probes sweep,offload --batch-sizes 1,2 --out "$R/run")
else
  args=(diagnose --no-tui --model llama3-8b --layers 2 --seq-len 1024 --probes sweep,offload --batch-sizes 1,2 --out "$R/run")
fi
t2=$(date +%s.%N)
gcdoctor "${args[@]}" > "$R/console.log" 2>&1
rc=$?
t3=$(date +%s.%N)
noise_console=$(grep -cE 'USDT|destroy_process_group|ProcessGroupNCCL|Profiler clears events' "$R/console.log")
noise_log=$(grep -cE 'USDT|destroy_process_group|ProcessGroupNCCL|Profiler clears events' "$R/run/gcdoctor.log" 2>/dev/null || echo 0)
python - "$R/run" > "$R/checks.txt" 2>&1 <<'PY'
import gzip, json, re, sys
from pathlib import Path
run = Path(sys.argv[1])
traces = sorted(p for p in (run / "traces").rglob("*.json.gz"))
named = all(re.fullmatch(r".+_\d+\.\d{13}\.pt\.trace\.json\.gz", p.name) for p in traces)
counters = {}
for p in traces:
    doc = json.loads(gzip.decompress(p.read_bytes()))
    counters[str(p.relative_to(run))] = sorted({e["name"] for e in doc["traceEvents"] if e.get("ph") == "C"})
facts = json.loads((run / "facts.json").read_text())
off = facts.get("offload") or {}
print("traces", len(traces), "tensorboard_names", named)
print("counter_series_per_trace", {k: len(v) for k, v in counters.items()})
print("series", sorted({s for v in counters.values() for s in v}))
print("cpu_adam_prebuilt", off.get("cpu_adam_prebuilt"), "cpu_adam_cached", off.get("cpu_adam_cached"),
      "cpu_adam_load_s", off.get("cpu_adam_load_s"))
print("wall_s", facts["settings"].get("wall_s"), "unavailable", facts.get("unavailable"))
PY
cp "$R/run/gcdoctor.log" "$R/gcdoctor.log" 2>/dev/null
tar czf "$OUT/wave3-platform.tgz" --exclude='w3p/run/traces' --exclude='w3p/src' -C /tmp w3p
cp "$R/console.log" "$R/checks.txt" "$R/env.txt" "$OUT/" 2>/dev/null
echo "vendor python/torch : $vendor"
cat "$R/env.txt"
printf 'install rc %s in %.0f s; diagnose rc %s in %.0f s\n' "$install_rc" "$(echo "$t1 - $t0" | bc)" "$rc" "$(echo "$t3 - $t2" | bc)"
echo "noise lines: console $noise_console, gcdoctor.log $noise_log"
cat "$R/checks.txt"
