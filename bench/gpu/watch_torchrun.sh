#!/usr/bin/env bash
# NOT RUN YET. `gcdoctor watch` of an unmodified script under torchrun on one H200, the launch that
# failed once before any step was watched and left no log. It now keeps the launch's whole output as
# watch.log in the run directory; this script runs it plainly, with DDP and with FSDP2, and prints a
# compact table plus the last lines of each log. Output under $OUT (default ./out-watch-torchrun).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out-watch-torchrun}
mkdir -p "$OUT"
. .venv/bin/activate 2>/dev/null || true
printf '%-8s %4s %8s %s\n' variant rc steps "bottom line (first row)" | tee "$OUT/summary.txt"
for v in plain ddp fsdp2; do
  flag=$([ "$v" = plain ] && echo "" || echo "--$v")
  run="$OUT/$v"
  rm -rf "$run"
  gcdoctor watch --out "$run" --profile-steps 5,6 -- python -m torch.distributed.run --nproc_per_node 1 \
    samples/watch/train_plain.py $flag --model llama3-8b --layers 4 --seq-len 2048 --steps 12 \
    > "$OUT/$v.console.log" 2>&1
  rc=$?
  steps=$(python - "$run" <<'PY'
import sys, pathlib, json
p = next(pathlib.Path(sys.argv[1]).glob("**/facts.json"), None)
print(len(json.loads(p.read_text())["watch"]["steps"]) if p else 0)
PY
)
  first=$(grep -A1 '^Bottom line' "$OUT/$v.console.log" | tail -1 | cut -c1-60)
  printf '%-8s %4s %8s %s\n' "$v" "$rc" "$steps" "$first" | tee -a "$OUT/summary.txt"
  echo "--- $v: last lines of watch.log"; tail -n 8 "$run/watch.log" 2>/dev/null || echo "(no watch.log)"
done
