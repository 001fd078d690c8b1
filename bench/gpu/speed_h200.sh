#!/usr/bin/env bash
# The full default `gcdoctor diagnose` on one H200, installed with the README's own command, timed:
# seconds for the install, for the diagnose (target: at most 180 s), and per probe and phase
# (bench/diagnose_phases.py). Run from the repo root on the lent machine; with no internet there,
# carry the wheels as .whl/ (pip then reads them: PIP_NO_INDEX + PIP_FIND_LINKS, the command
# itself unchanged). Output under $OUT: install.log, diagnose.log, phases.txt, phases.json,
# the run's facts.json and events.jsonl (no traces), summary.txt.
set -u
OUT=${OUT:-/tmp/speed-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/.whl"; fi
# the README's install-and-run line, as written there, with the run directory named
readme_cmd=$(grep -m1 '^python3 tools/mkvenv.py .venv' README.md)
[ -n "$readme_cmd" ] || { echo "README.md has no install line starting 'python3 tools/mkvenv.py .venv'"; exit 2; }
install_cmd=${readme_cmd% && gcdoctor diagnose}
[ "$install_cmd" != "$readme_cmd" ] || { echo "the README's line does not end in '&& gcdoctor diagnose'"; exit 2; }
echo "install: $install_cmd"
t0=$(date +%s.%N)
bash -c "$install_cmd" > "$OUT/install.log" 2>&1; rc_install=$?
t1=$(date +%s.%N)
. .venv/bin/activate
gcdoctor diagnose --out /tmp/speed-run > "$OUT/diagnose.log" 2>&1; rc=$?
t2=$(date +%s.%N)
python bench/diagnose_phases.py /tmp/speed-run --json "$OUT/phases.json" | tee "$OUT/phases.txt"
cp /tmp/speed-run/facts.json /tmp/speed-run/events.jsonl "$OUT/" 2>/dev/null
python - "$t0" "$t1" "$t2" "$rc_install" "$rc" <<'PY' | tee "$OUT/summary.txt"
import json, sys
t0, t1, t2 = map(float, sys.argv[1:4])
rc_install, rc = sys.argv[4:6]
f = json.load(open("/tmp/speed-run/facts.json"))
d = t2 - t1
print(f"install {t1 - t0:.0f} s (exit {rc_install}); diagnose {d:.0f} s wall (exit {rc}), "
      f"facts wall_s {f['settings'].get('wall_s')}: target <= 180 s {'met' if d <= 180 else 'NOT met'}")
for r in (f.get("allocator") or {}).get("runs") or []:
    print("fresh", r.get("variant"), r.get("allocator"), r.get("batches"), "wall_s", r.get("wall_s"), r.get("error") or "")
print("probes", f["settings"].get("probes"), "unavailable", sorted((f.get("unavailable") or {}).keys()))
PY
