#!/usr/bin/env bash
# Exercise the live TUI in a real terminal: tmux runs `gcdoctor diagnose` in a pane of fixed
# size, we read the screen with capture-pane, open the help, press q mid-run, and check that
# the partial run directory and report were written. Then the same for `gcdoctor monitor`.
#
#   bash bench/tui_tmux.sh [OUT_DIR] [COLSxROWS]      (needs tmux: apt-get install -y tmux)
#
# Screens are saved as text in OUT_DIR/screens/*.txt. Exit status 0 when every check passed.
set -euo pipefail
OUT=${1:-/tmp/gcdoctor-tui-tmux}
SIZE=${2:-100x30}
COLS=${SIZE%x*}; ROWS=${SIZE#*x}
command -v tmux >/dev/null || { echo "tmux not found (apt-get install -y tmux)"; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT/screens"
S=gcdoctor-tui-$$
GCD="$(command -v gcdoctor || echo "python -m gcdoctor")"
cleanup() { tmux kill-session -t "$S" 2>/dev/null || true; }
trap cleanup EXIT

shot() { tmux capture-pane -p -t "$S" > "$OUT/screens/$1.txt"; echo "--- $1 ($SIZE)"; cat "$OUT/screens/$1.txt"; }
wait_for() {  # wait_for TEXT SECONDS: poll the screen until TEXT shows
  local end=$((SECONDS + $2))
  while (( SECONDS < end )); do
    tmux capture-pane -p -t "$S" | grep -qF -- "$1" && return 0
    sleep 0.5
  done
  echo "FAIL: '$1' did not appear within $2 s"; tmux capture-pane -p -t "$S"; exit 1
}

# --- diagnose: start, read the screen mid-run, help, q -------------------------------------------
RUN="$OUT/diagnose"
tmux new-session -d -s "$S" -x "$COLS" -y "$ROWS" \
  "$GCD diagnose --out $RUN --memory-limit 400MB --seq-len 32 --batch-sizes 1,2,4 --steps 30 --no-profile; \
   echo EXIT=\$?; sleep 600"
wait_for "telemetry" 120
wait_for "per step" 300            # a step has been measured: the probe panel shows its time
shot diagnose-running
tmux send-keys -t "$S" "?"; wait_for "Keys" 10; shot diagnose-help
tmux send-keys -t "$S" Escape; sleep 1
tmux send-keys -t "$S" q
wait_for "EXIT=" 600               # the session writes the partial run directory, then the app exits
shot diagnose-after-q
grep -q "EXIT=130" "$OUT/screens/diagnose-after-q.txt" || { echo "FAIL: expected exit status 130 (interrupted)"; exit 1; }
python - "$RUN" <<'PY'
import json, sys, pathlib
run = pathlib.Path(sys.argv[1])
facts = json.loads((run / "facts.json").read_text())
assert facts["settings"]["interrupted"] is True, facts["settings"]
assert (run / "report.md").exists()
print(f"OK diagnose: {run} interrupted={facts['settings']['interrupted']} report.md present")
PY
tmux kill-session -t "$S"

# --- monitor: start, read the screen, q ----------------------------------------------------------
MON="$OUT/monitor"
tmux new-session -d -s "$S" -x "$COLS" -y "$ROWS" "$GCD monitor --out $MON; echo EXIT=\$?; sleep 600"
wait_for "monitoring" 60
sleep 4                            # a few seconds of sparkline
shot monitor-running
tmux send-keys -t "$S" q
wait_for "EXIT=" 60
shot monitor-after-q
test -f "$MON/facts.json" && test -f "$MON/telemetry.csv" && test -f "$MON/report.md"
echo "OK monitor: $MON has facts.json, telemetry.csv, report.md"
