#!/usr/bin/env bash
# One prepared GPU run: ladle where its users train, step by step, each step within its own time budget.
#   bash benchmarks/gpu.sh                         on a machine with a CUDA GPU (at most 9.5 minutes: the budgets)
#   LADLE_SMOKE_DEVICE=cpu bash benchmarks/gpu.sh  the same steps, tiny, on the CPU (how the tests run it)
# Steps (benchmarks/gpu.py says what each measures): env, throughput, fullbatch, gis, smoke.
# Each step's key=value line is appended to $OUT/gpu.txt (default: a temporary folder) as soon as it ends, so
# a run stopped by its time limit still returns the finished steps; a step that fails or runs out of its budget
# says so on its line and the next one starts. The full log goes to $OUT/gpu.log. The last line sums up.
# LADLE_GPU_STEPS="throughput gis" runs only the steps named.
# On a machine with no network, wheels in .whl/ (benchmarks/gpu_wheels.sh makes them) are installed first.
set -uo pipefail
cd "$(dirname "$0")/.."
device="${LADLE_SMOKE_DEVICE:-cuda}"
out="${OUT:-$(mktemp -d)}"
results="$out/gpu.txt"
log="$out/gpu.log"
: > "$results"
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0

if [ -d .whl ] && ! python3 -c 'import ray, pymetis' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ladle-site \
    .whl/*.whl && export PYTHONPATH="/tmp/ladle-site${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! python3 -c 'import ladle' 2>/dev/null; then
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
    || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ "$device" = cuda ] && ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "no CUDA GPU visible to torch: nothing to measure here (LADLE_SMOKE_DEVICE=cpu runs the steps tiny)"
  echo "step=env status=no_gpu" >> "$results"
  exit 0
fi
tiny=()
[ "$device" = cuda ] || tiny=(--tiny)

steps="${LADLE_GPU_STEPS:-env throughput fullbatch gis smoke}"  # a subset reruns only those
failed=0
ran=0
# The budgets plan the device's time; the tiny CPU run only keeps the steps from rotting, on a machine that may be
# busy, so it allows three times as long.
scale=1
[ "$device" = cuda ] || scale=3
step() {  # step NAME BUDGET_SECONDS
  local name=$1 budget=$(( $2 * scale )) start rc line
  [[ " $steps " == *" $name "* ]] || return 0
  ran=$((ran + 1))
  start=$(date +%s)
  echo "=== $name (budget ${budget}s)" | tee -a "$log"
  timeout --kill-after=10 "$budget" python3 benchmarks/gpu.py "$name" --device "$device" "${tiny[@]}" \
    > >(tee -a "$log" > "$out/.$name") 2>&1
  rc=$?
  sleep 0.2  # the tee above ends with the step
  line=$(tail -n 1 "$out/.$name" 2>/dev/null)
  rm -f "$out/.$name"
  if [ "$rc" -eq 0 ]; then
    echo "step=$name seconds=$(( $(date +%s) - start )) $line" >> "$results"
  else
    failed=$((failed + 1))
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && rc="timeout_${budget}s"
    echo "step=$name status=failed rc=$rc seconds=$(( $(date +%s) - start ))" >> "$results"
  fi
  tail -n 1 "$results"
}

# The steps the targets hang on first; the smoke (three engines, Ray the slowest to start) last.
step env 45
step throughput 120
step fullbatch 150
step gis 120
step smoke 120
echo "steps=$ran failed=$failed device=$device results=$results"
