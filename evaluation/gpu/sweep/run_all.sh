#!/usr/bin/env bash
# Everything the calibration needs from the GPU, in one call (about 5 minutes planned):
#   bash evaluation/gpu/sweep/run_all.sh OUTDIR
# 1. the sweep under native, expandable_segments:True, max_split_size_mb:128 (one process each);
# 2. evaluation/gpu/overhead.py (non-PyTorch memory per stage);
# 3. the sweep under backend:cudaMallocAsync and cudaMallocAsync + expandable_segments:True;
# 4. table.py joins the sweep into OUTDIR/gpu-sweep.{json,md}; one tar.gz of it all.
# Each part has its own timeout and deadline; a part that fails or times out does not stop the
# others (a crashed sweep process is resumed once: the point it died in is recorded "crashed").
# Env: SETTINGS ("native es ms128 overhead async async_es"), SWEEP_ONLY (point names or group
# letters), SETTING_TIMEOUT_S (70), OVERHEAD_TIMEOUT_S (200), TOTAL_BUDGET_S (570).
set -u
OUT=${1:?usage: run_all.sh OUTDIR}
mkdir -p "$OUT/sweep"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
SETTINGS=${SETTINGS:-"native es ms128 overhead async async_es"}
SETTING_TIMEOUT_S=${SETTING_TIMEOUT_S:-70}
OVERHEAD_TIMEOUT_S=${OVERHEAD_TIMEOUT_S:-200}
TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-570}
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( TOTAL_BUDGET_S - $(el) )); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }

cd "$REPO" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | tail -2
nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>&1 | tail -3
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
$PY "$HERE/sweep.py" --dry-run | tail -7

gpu_clean() {  # wait up to 15 s for no compute process on the GPU; report any left
  local i apps
  for i in $(seq 30); do
    apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null)
    [ -z "$apps" ] && return 0
    sleep 0.5
  done
  echo "    warning: GPU processes still present: $(echo "$apps" | tr '\n' ' ')"
}

probe_env() {  # the OOM probe loaded as a job loads it (NO_PROBE=1 to run without it)
  [ -n "${NO_PROBE:-}" ] && return
  echo "PYTHONPATH=$REPO/probe${PYTHONPATH:+:$PYTHONPATH} GPU_AUDITOR_PROBE=1 GPU_AUDITOR_PROBE_PATH=/tmp/sweep-probe-$1.rec"
}

sweep() {  # sweep SETTING
  local s=$1 t rc
  gpu_clean
  t=$(min "$SETTING_TIMEOUT_S" "$(left)")
  if [ "$t" -lt 20 ]; then echo "=== sweep $s skipped: $(left) s left"; return; fi
  echo "=== sweep $s at $(el) s (timeout $t s)"
  timeout -k 5 "$t" env $(probe_env "$s") $PY "$HERE/sweep.py" --setting "$s" --out "$OUT/sweep" \
    --ref "$OUT/sweep/ref.json" --deadline-s $(( t - 12 )) ${SWEEP_ONLY:+--only "$SWEEP_ONLY"} \
    >> "$OUT/sweep-$s.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ "$(left)" -gt 30 ]; then
    t=$(min $(( SETTING_TIMEOUT_S / 2 )) "$(left)")
    echo "    rc=$rc: resuming once (timeout $t s)"
    timeout -k 5 "$t" env $(probe_env "$s") $PY "$HERE/sweep.py" --setting "$s" --out "$OUT/sweep" \
      --ref "$OUT/sweep/ref.json" --deadline-s $(( t - 12 )) ${SWEEP_ONLY:+--only "$SWEEP_ONLY"} \
      >> "$OUT/sweep-$s.log" 2>&1
    rc=$?
  fi
  echo "    rc=$rc at $(el) s: $(grep -c '^\[.*\] [A-Z]-' "$OUT/sweep-$s.log") points run;" \
       "$(grep -E '^\[.*\] [A-Z]-' "$OUT/sweep-$s.log" | awk '{print $3}' | sort | uniq -c | tr '\n' ' ')"
  tail -n 2 "$OUT/sweep-$s.log" | cut -c1-300
}

overhead() {
  local t rc
  gpu_clean
  t=$(min "$OVERHEAD_TIMEOUT_S" "$(left)")
  if [ "$t" -lt 40 ]; then echo "=== overhead skipped: $(left) s left"; return; fi
  echo "=== overhead at $(el) s (timeout $t s)"
  timeout -k 5 "$t" $PY evaluation/gpu/overhead.py --out-json "$OUT/gpu-overhead.json" \
    --out-md "$OUT/gpu-overhead.md" --deadline-s $(( t * 2 / 3 )) > "$OUT/overhead.log" 2>&1
  rc=$?
  echo "    rc=$rc at $(el) s"
  grep -E '^\[' "$OUT/overhead.log" | tail -n 30 | cut -c1-160
}

for part in $SETTINGS; do
  case $part in
    overhead) overhead ;;
    native|es|ms128|async|async_es) sweep "$part" ;;
    *) echo "unknown part $part" ;;
  esac
done

echo "=== table at $(el) s"
$PY "$HERE/table.py" "$OUT/sweep" --json "$OUT/gpu-sweep.json" --md "$OUT/gpu-sweep.md" \
  > "$OUT/table.log" 2>&1
echo "    rc=$? ; summary:"
grep -E '^(Points|- )' "$OUT/gpu-sweep.md" 2>/dev/null | cut -c1-600
nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>&1 | tail -3
tar czf "$OUT/gpu-sweep.tar.gz" -C "$OUT" sweep $(cd "$OUT" && ls gpu-sweep.json gpu-sweep.md \
  gpu-overhead.json gpu-overhead.md ./*.log 2>/dev/null) 2>&1 | tail -2
echo "=== all done in $(el) s; files in $OUT"
