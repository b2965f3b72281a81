#!/usr/bin/env bash
# Do two commits train the same weights? The same four small runs on the code of each (a neighbour-sampled run with
# every soup and the long baseline, ClusterGCN on 2 workers, METIS parts with halos, GraphSAINT random walks with
# GraphSAGE), every stored safetensors file compared by SHA-256. For a refactor that must change nothing.
#
#   bash benchmarks/same_weights.sh a528c96 HEAD          # (a few minutes on 2 cores)
#
# Each commit's src/ is exported with git archive and put first on PYTHONPATH (the installed ladle's dependencies
# serve both). Last line: files=N identical=M.
set -euo pipefail
A=${1:?usage: same_weights.sh REV_A REV_B}
B=${2:?usage: same_weights.sh REV_A REV_B}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOT=$(git rev-parse --show-toplevel)
PY=${PYTHON:-python}
D=csbm:nodes=2000,classes=4,features=16,seed=3

runs() {  # runs SRC OUT
    local src=$1 out=$2
    mkdir -p "$out"
    export PYTHONPATH=$src LADLE_CACHE=$out/cache
    "$PY" -m ladle.cli run --dataset $D --ingredients 3 --epochs 4 --sampler neighbor --fanouts 5,5 \
        --soups uniform,greedy,gis,learned,pls,ensemble --baseline long --out "$out/neighbor" --quiet >/dev/null
    "$PY" -m ladle.cli run --dataset $D --ingredients 3 --epochs 4 --sampler cluster --parts 8 --soups uniform,gis \
        --workers 2 --out "$out/cluster" --quiet >/dev/null
    "$PY" -m ladle.cli run --dataset $D --ingredients 3 --epochs 4 --partition metis --halo --soups uniform,gis \
        --out "$out/metis" --quiet >/dev/null
    "$PY" -m ladle.cli run --dataset $D --ingredients 2 --epochs 4 --model sage --sampler saint-rw \
        --soups gis,ensemble --out "$out/saint" --quiet >/dev/null
    (cd "$out" && find . -name '*.safetensors' -not -path './cache/*' | sort | xargs sha256sum) > "$out.sums"
}

for side in A B; do
    rev=${!side}
    mkdir -p "$WORK/$side/code"
    git -C "$ROOT" archive "$rev" src | tar -x -C "$WORK/$side/code"
    runs "$WORK/$side/code/src" "$WORK/$side/runs"
done
files=$(wc -l < "$WORK/A/runs.sums")
identical=$(comm -12 <(sort "$WORK/A/runs.sums") <(sort "$WORK/B/runs.sums") | wc -l)
diff "$WORK/A/runs.sums" "$WORK/B/runs.sums" || true
echo "files=$files identical=$identical"
