#!/usr/bin/env bash
# The wheels benchmarks/gpu.sh installs on a GPU machine with no network: what ladle needs beyond its image
# (Python 3.12 with torch, PyG, numpy, scipy, safetensors, rich, matplotlib, psutil, requests, pyyaml, protobuf, ...).
#   bash benchmarks/gpu_wheels.sh [DIR]        (default .whl; run where pip reaches PyPI)
# LADLE_WHEELS_PYTHON=3.11 fetches them for another Python (to rehearse the install on this machine).
# Ray's wheel is some 79 MB, more than a device run may carry: its Java jars and the dashboard's web client,
# which ladle never starts (include_dashboard=False), are taken out and its RECORD rewritten to match.
set -euo pipefail
dir="${1:-.whl}"
mkdir -p "$dir"
py=(--python-version "${LADLE_WHEELS_PYTHON:-3.12}" --implementation cp --only-binary=:all: --no-deps)
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
for pkg in ray==2.60.0 pymetis==2025.2.2 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
           referencing==0.37.0 rpds-py==2026.9.1; do
  python3 -m pip download -q "${py[@]}" "${plat[@]}" -d "$dir" "$pkg"
done
python3 - "$dir" <<'PY'
import pathlib, sys, zipfile

for wheel in pathlib.Path(sys.argv[1]).glob("ray-*.whl"):
    drop = ("ray/jars/", "ray/dashboard/client/build/")
    slim = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if item.filename.startswith(drop):
                continue
            data = src.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = ("\n".join(line for line in lines if not line.startswith(drop)) + "\n").encode()
            dst.writestr(item, data)
    slim.replace(wheel)
    print(f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB without {', '.join(drop)}")
PY
du -sh "$dir"
