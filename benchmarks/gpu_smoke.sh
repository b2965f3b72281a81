#!/usr/bin/env bash
# GPU smoke test: 2 ingredients on the GPU with each engine (serial, process, ray), souped, in a few minutes.
# Prints the device, each engine's wall time and its scores; exits early (status 0) where no GPU is present.
#   bash benchmarks/gpu_smoke.sh [DATASET]      (default csbm-arxiv)
# LADLE_SMOKE_DEVICE=cpu runs the same steps on the CPU (how the test suite keeps this script working).
# The last line is key=value pairs: device, then per engine its wall seconds and GIS test accuracy, then whether
# the engines' weights were identical (reported, not asserted: CUDA kernels may be nondeterministic).
set -euo pipefail
dataset="${1:-csbm-arxiv}"
device="${LADLE_SMOKE_DEVICE:-cuda}"
if [ "$device" = cuda ] && ! python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "no CUDA GPU visible to torch: nothing to smoke-test here"
  exit 0
fi
if [ "$device" = cuda ]; then
  name=$(python -c 'import torch; print(torch.cuda.get_device_name(0).replace(" ", "_"))')
  python -c 'import torch; print("device:", torch.cuda.get_device_name(0), "x", torch.cuda.device_count(), "| torch", torch.__version__)'
  gpus=(--gpus-per-ingredient 0.5)
else
  name=cpu
  echo "device: cpu (LADLE_SMOKE_DEVICE=cpu)"
  gpus=()
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
common=(--dataset "$dataset" --model sage --sampler neighbor --fanouts 10,5 --batch-size 1024 --epochs 3
        --ingredients 2 --device "$device" --soups uniform,gis,ensemble --quiet)
engines=("--engine serial" "--engine process --workers 2")
if python -c 'import ray' 2>/dev/null; then
  engines+=("--engine ray --cpus-per-ingredient 1 ${gpus[*]}")
else
  echo "ray not installed: skipping the ray engine (pip install -e '.[ray]')"
fi
figures="device=$name"
for engine in "${engines[@]}"; do
  label="$(echo "$engine" | awk '{print $2}')"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  ladle run "${common[@]}" $engine --out "$out/$label" > /dev/null
  end=$(date +%s.%N)
  figures+=" $(python - "$out/$label" "$label" "$start" "$end" <<'PY'
import json, sys
run, label, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
r = json.load(open(f"{run}/results.json"))
soups = " ".join(f"{k}={v['test']:.4f}" for k, v in r["soups"].items())
best = r["best_ingredient"]["test"]
print(f"{label:8s} wall {end - start:6.1f}s  best ingredient test {best:.4f}  {soups}", file=sys.stderr)
print(f"{label}_s={end - start:.1f} {label}_gis={r['soups']['gis']['test']:.4f}")
PY
)"
done
identical=$(python - "$out" <<'PY'
import pathlib, sys
runs = [d for d in sorted(pathlib.Path(sys.argv[1]).iterdir()) if d.is_dir()]
blobs = [{p.name: p.read_bytes() for p in (d / "ingredients").glob("*.safetensors")} for d in runs]
print(str(all(b == blobs[0] for b in blobs)).lower())
PY
)
echo "$figures identical_across_engines=$identical"
