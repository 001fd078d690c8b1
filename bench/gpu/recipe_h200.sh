#!/usr/bin/env bash
# The recipe on the H200 (NOT RUN YET: no device this session). Two cases, one per call (each can
# take most of a call's 10 minutes):
#   bash bench/gpu/recipe_h200.sh full   # the full default diagnose of Llama-3-8B
#   bash bench/gpu/recipe_h200.sh half   # half the model on a 48 GB budget
# Prints the policy table (policy, check, kept bytes per layer, predicted and measured largest
# batch, tokens/s, peak, why dropped), the confirmations and the bottom line; the run directory
# goes to $OUT as a tarball (traces left out: the policy checks' traces are kept).
source bench/gpu/setup.sh
CASE=${1:-full}
RES=/tmp/recipe-$CASE
case "$CASE" in
  full) ARGS="--model llama3-8b" ;;
  half) ARGS="--model llama3-8b --layers 16 --memory-limit 48GB" ;;
  *) echo "usage: $0 full|half"; exit 2 ;;
esac
START=$(date +%s)
timeout 570 python3 -m gcdoctor diagnose --no-tui --device cuda $ARGS --out $RES > $RES.log 2>&1
echo "diagnose ($CASE) exit $? after $(( $(date +%s) - START )) s"
python3 bench/policies_table.py $RES 2>&1 | grep -v USDT
sed -n '/^Bottom line/,/^$/p' $RES.log | head -16
tar czf $OUT/recipe-$CASE.tgz --exclude='*.pt.trace.json.gz' -C /tmp recipe-$CASE recipe-$CASE.log
ls -la $OUT
