#!/usr/bin/env bash
# One device call, several phases, in order:  bash evaluation/gpu/device_run.sh PHASE...
#   alloc   evaluation/gpu/alloc_conf_check.py            -> $OUT/gpu-alloc-conf-check.json
#   proof   evaluation/gpu/run_proof.py (ONLY=a,b to limit; PROOF_DEADLINE_S) -> $OUT/gpu-proof.tar.gz
#   calib   evaluation/gpu/calibrate_varlen.py            -> $OUT/gpu-calib-varlen.json
#   agent   bench/gpu/agent_vs_nvitop.py             -> $OUT/gpu-agent-vs-nvitop.{json,md}
#   pytest  pytest -m gpu tests/gpu                  -> $OUT/gpu-pytest.log
#   seeds   frag_varlen.py --seed N for N in $SEEDS   -> $OUT/gpu-varlen-seeds.log
#   loop    evaluation/gpu/loop_proof.py (issue 28)  -> $OUT/loop-proof/{loop-proof.json,logs/}
# Wheels under .whl/ (nvitop, nvitop-exporter; grpcio/protobuf if newer ones are needed) are installed to /tmp/site first when present.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
python3 -c 'import grpc, google.protobuf as pb, pynvml; print("image: grpcio", grpc.__version__, "protobuf", pb.__version__, "nvidia-ml-py", getattr(pynvml, "__version__", "?"))' 2>&1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
for phase in "$@"; do
  echo "=== phase $phase at $(el)s"
  case $phase in
    alloc) timeout 180 python3 evaluation/gpu/alloc_conf_check.py --out "$OUT/gpu-alloc-conf-check.json" ;;
    proof)
      # the GPU must be idle: stop compute processes an earlier phase of this command left behind
      for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do
        echo "killing leftover GPU process $pid"; kill -9 "$pid"; done; sleep 1
      if [ "${PROOF_DEADLINE_S:-}" = auto ]; then PROOF_DEADLINE_S=$(( 510 - $(el) )); fi
      rm -rf /tmp/proof
      timeout $(( ${PROOF_DEADLINE_S:-400} + 150 )) python3 evaluation/gpu/run_proof.py --out /tmp/proof \
        --deadline-s "${PROOF_DEADLINE_S:-400}" ${ONLY:+--only "$ONLY"} ${TAR:+--tar "$TAR"} \
        ${RESUME:+--resume "$RESUME"}
      cp /tmp/proof/*.tar.gz "$OUT/" ;;
    calib) timeout ${CALIB_LIMIT_S:-200} python3 evaluation/gpu/calibrate_varlen.py \
             --out "$OUT/gpu-calib-varlen.json" ${CALIB_EXTRA:+--extra "$CALIB_EXTRA"} ;;
    agent) timeout -k 5 150 python3 bench/gpu/agent_vs_nvitop.py --out-json "$OUT/gpu-agent-vs-nvitop.json" \
             --out-md "$OUT/gpu-agent-vs-nvitop.md" ;;
    pytest) PYTHONPATH=operator:.${PYTHONPATH:+:$PYTHONPATH} timeout -k 5 200 python3 -m pytest -m gpu tests/gpu \
              -q -rA -p no:cacheprovider 2>&1 | tee "$OUT/gpu-pytest.log" ;;
    seeds)  # frag_varlen baseline with other length sequences; expandable_segments re-run on OOM
      for sd in ${SEEDS:-2 3 4}; do
        PYTORCH_CUDA_ALLOC_CONF= python3 evaluation/gpu/scenarios/frag_varlen.py --seed "$sd" > /tmp/s.log 2>&1
        rc=$?; echo "seed $sd native rc=$rc: $(tail -1 /tmp/s.log | cut -c1-400)" | tee -a "$OUT/gpu-varlen-seeds.log"
        if [ $rc -ne 0 ]; then
          PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 evaluation/gpu/scenarios/frag_varlen.py --seed "$sd" > /tmp/s.log 2>&1
          echo "seed $sd expandable_segments:True rc=$?: $(tail -1 /tmp/s.log | cut -c1-200)" | tee -a "$OUT/gpu-varlen-seeds.log"
        fi
      done ;;
    probecheck)  # the OOM probe on small real OOMs; PROBE_OK=1 when it wrote records that read back
      timeout 300 python3 evaluation/gpu/probe_check.py --out "$OUT/probe-check.json" > /tmp/probe-check.log 2>&1
      echo "probe_check rc=$?"; tail -25 /tmp/probe-check.log
      if python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); c=r.get("cases") or r.get("results") or []; sys.exit(0 if any((x.get("record") or {}).get("status")=="ok" or x.get("status")=="ok" for x in c) else 1)' "$OUT/probe-check.json" 2>/dev/null; then
        PROBE_OK=1; else PROBE_OK=; echo "probe records not usable: later phases run without the probe"; fi ;;
    heldout)  # the held-out set: baseline, expandable_segments, max_split_size_mb:128, each code fix
      rm -rf /tmp/heldout
      timeout ${HELDOUT_LIMIT_S:-420} python3 evaluation/gpu/heldout/run_heldout.py --out /tmp/heldout \
        --deadline-s $(( ${HELDOUT_LIMIT_S:-420} - 60 )) ${PROBE_OK:+--probe} ${ONLY:+--only "$ONLY"}
      tar -czf "$OUT/gpu-heldout.tar.gz" -C /tmp heldout ;;
    sweep)  # the calibration sweep and the non-PyTorch overhead (evaluation/gpu/sweep/run_all.sh)
      rm -rf /tmp/sweepout
      # the probe on when the check passed (an empty NO_PROBE loads it); off otherwise.
      # (The 2026-12-01 sweep ran with the probe off: this line read NO_PROBE=${PROBE_OK:-1}.)
      if [ -n "${PROBE_OK:-}" ]; then NO_PROBE=; else NO_PROBE=1; fi
      NO_PROBE=$NO_PROBE bash evaluation/gpu/sweep/run_all.sh /tmp/sweepout
      tar -czf "$OUT/gpu-sweep.tar.gz" -C /tmp sweepout ;;
    proofprobe)  # the proof suite's baselines again, each with the probe loaded
      rm -rf /tmp/proofprobe
      timeout 200 python3 evaluation/gpu/run_proof.py --out /tmp/proofprobe --no-variants --probe \
        --deadline-s 150 --tar gpu-proof-probe.tar.gz
      cp /tmp/proofprobe/*.tar.gz "$OUT/" ;;
    probeoverhead) timeout 240 python3 bench/gpu/probe_overhead.py --out "$OUT/probe-overhead.json" ;;
    procroot)  # can the agent name host pids without hostPID? (chart's agent.hostPID)
      cp tests/integration/test_chart_procroot_gpu.py tests/gpu/test_procroot_tmp.py
      PYTHONPATH=operator:.${PYTHONPATH:+:$PYTHONPATH} timeout -k 5 120 python3 -m pytest -m gpu \
        tests/gpu/test_procroot_tmp.py -v -s -rA -p no:cacheprovider 2>&1 | tee "$OUT/gpu-procroot.log"
      rm -f tests/gpu/test_procroot_tmp.py ;;
    loop)  # issue 28: a fragmentation job's OOM, diagnosis, the webhook's setting on its retry
      for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do
        echo "killing leftover GPU process $pid"; kill -9 "$pid"; done; sleep 1
      PYTHONPATH=operator${PYTHONPATH:+:$PYTHONPATH} timeout -k 5 170 python3 \
        evaluation/gpu/loop_proof.py --out "$OUT/loop-proof"; echo "loop_proof rc=$?" ;;
    hostpid) timeout -k 5 120 python3 bench/gpu/hostpid_check.py --out "$OUT/hostpid-check.json" 2>&1 | tail -20 ;;
    *) echo "unknown phase $phase" ;;
  esac
  echo "=== phase $phase done at $(el)s"
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
