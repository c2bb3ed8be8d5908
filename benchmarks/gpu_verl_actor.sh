#!/usr/bin/env bash
# verl 0.9.1's real actor update on one NVIDIA GPU in bf16 (verl's default FSDP mixed precision): the
# test tests/backends/verl/test_verl_actor.py and benchmarks/bench_verl_update.py, for a GPU machine that
# has torch but no verl and no network (this workplace's device machine: python3 3.12, torch 2.11 cu130).
#
#   bash benchmarks/gpu_verl_actor.sh wheels  # here, with PyPI, once the code is final: fills .whl/
#                                             # (~46 MiB) with what that machine lacks
#   bash benchmarks/gpu_verl_actor.sh         # there, in the repo root: installs .whl/ into /tmp/site,
#                                             # logs to ${OUT:-/tmp}/ (5 files); expected 3-4 min
#                                             # on an H100, capped at 330 s (DEADLINE)
#
# The wheels are what the test and the benchmark import (measured: the files of sys.modules of every
# process, under the verl extra) less the machine's own packages, at the versions the verl extra
# resolves to (CI's venv) — not what verl or Ray only declare (wandb, pylatexenc, Ray's metrics
# exporters) — plus transformers 5.10.4 / tokenizers 0.22.2 (verl 0.9.1 wants transformers<5.11; the
# machine has 5.17), peft 0.21.2 (the venv's, tested with that transformers) and cancelctl itself (its
# `verl.plugins` entry points register the losses). Ray is imported but never started: its wheel (79 MB)
# travels without the Java jar, the GCS and raylet server binaries and the dashboard's web build (21 MB).
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=(
    verl==0.9.1 TransferQueue==0.1.11 tensordict==0.10.0 pyvers==0.1.0 torchdata==0.11.0
    transformers==5.10.4 tokenizers==0.22.2 peft==0.21.2
    hydra-core==1.3.8 omegaconf==2.3.1 codetiming==1.4.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
    cachetools==7.3.3 msgspec==0.22.0 pyzmq==27.3.0 orjson==3.13.0 pytz==2026.6
    pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 sniffio==1.3.1 colorful==0.5.8 wcwidth==0.9.4
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
    opentelemetry-api==1.45.2
)
RAY=ray==2.60.0
ANTLR=antlr4-python3-runtime==4.9.3  # omegaconf's pin; an sdist only: built here (pure Python)
RAY_UNUSED="ray/jars/ ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet ray/dashboard/client/build/"

# prints the files where .whl/cancelctl-*.whl and this checkout's cancelctl/ and losses/ differ
STALE_PY='
import glob, pathlib, sys, zipfile
wheel = glob.glob(".whl/cancelctl-*.whl")
if not wheel:
    sys.exit("no .whl/cancelctl-*.whl")
with zipfile.ZipFile(wheel[0]) as z:
    names = {n for n in z.namelist() if n.startswith(("cancelctl/", "losses/"))}
    stale = {n for n in names if not pathlib.Path(n).is_file() or pathlib.Path(n).read_bytes() != z.read(n)}
stale |= {p.as_posix() for top in ("cancelctl", "losses") for p in pathlib.Path(top).rglob("*.py")} - names
print(" ".join(sorted(stale)))
'

if [[ "${1:-}" == wheels ]]; then
    set -e
    rm -rf .whl && mkdir .whl
    grep -qxF /.whl/ .git/info/exclude 2>/dev/null || echo /.whl/ >>.git/info/exclude
    platforms=()
    for tag in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do
        platforms+=(--platform "${tag}_x86_64")
    done
    fetch() {
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            "${platforms[@]}" "$@"
    }
    fetch -d .whl "${WHEELS[@]}"
    python3 -m pip wheel -q --no-deps -w .whl "$ANTLR"
    tmp=$(mktemp -d)
    fetch -d "$tmp" "$RAY"
    python3 -c '
import pathlib, sys, zipfile
src, unused = pathlib.Path(sys.argv[1]), tuple(sys.argv[3].split())
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(pathlib.Path(sys.argv[2]) / src.name, "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        if not item.filename.startswith(unused):
            data = zin.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(True) if not line.decode().startswith(unused))
            zout.writestr(item, data)
' "$tmp"/ray-*.whl .whl "$RAY_UNUSED"
    rm -rf "$tmp"
    tmp=$(mktemp -d)  # cancelctl, built from a copy: setuptools leaves build/ where it builds
    cp -r pyproject.toml README.md cancelctl losses "$tmp"
    python3 -m pip wheel -q --no-deps -w .whl "$tmp"
    rm -rf "$tmp"
    echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1)"
    [[ -z "$(python3 -c "$STALE_PY")" ]] || { echo "the cancelctl wheel differs from the checkout"; exit 1; }
    exit 0
fi

OUT=${OUT:-/tmp}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
DEADLINE=330  # the whole script's seconds (give the device call ~60 s more)
SECONDS=0
declare -A STATUS

# step NAME MAX_SECONDS LOG COMMAND...: COMMAND under `timeout` (MAX_SECONDS or what is left), tee'd to $OUT/LOG
step() {
    local name=$1 limit=$2 log=$3 left=$((DEADLINE - SECONDS)) rc command
    shift 3
    command=${*//$'\n'/ }
    ((left < limit)) && limit=$left
    if ((limit < 20)); then
        echo "== $name: skipped (${left}s left)" | tee -a "$OUT/$log"
        STATUS[$name]=skipped
        return 1
    fi
    echo "== [${SECONDS}s] $name (timeout ${limit}s): ${command:0:150}" | tee -a "$OUT/$log"
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$OUT/$log"
    rc=${PIPESTATUS[0]}
    echo "== [${SECONDS}s] $name: exit $rc" | tee -a "$OUT/$log"
    STATUS[$name]=$rc
    return "$rc"
}

VERSIONS_PY='
import importlib.metadata as md, os, subprocess, sys
import torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "cuda", torch.version.cuda)
print("GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none visible to torch")
for name in ("verl", "transformers", "tokenizers", "huggingface_hub", "accelerate", "peft", "tensordict", "ray",
             "TransferQueue", "numpy", "pandas", "pyarrow", "safetensors", "pytest", "pytest-xdist", "cancelctl"):
    try:
        where = md.distribution(name).locate_file("")
        print(f"{name:16} {md.version(name):14} {where}")
    except md.PackageNotFoundError:
        print(f"{name:16} MISSING")
def key(name):
    return name.lower().replace("_", "-")
carried = {key(wheel.split("-")[0]) for wheel in os.listdir(".whl")}
check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True).stdout.splitlines()
print("pip check, carried wheels only (verl also lists wandb and others its actor path never imports):")
for line in check:
    if line and key(line.split()[0]) in carried:
        print("  " + line)
'

stale=$(python3 -c "$STALE_PY" 2>&1)
[[ -z "$stale" ]] || echo "!! STALE cancelctl wheel (rerun 'bash benchmarks/gpu_verl_actor.sh wheels'): $stale" |
    tee -a "$OUT/setup.log"
step install 150 setup.log python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
step versions 60 setup.log python3 -c "$VERSIONS_PY"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$OUT/setup.log"

rm -rf /tmp/verl-actor-test
step test-cuda 240 test_cuda.log env CANCELCTL_TEST_VERL_DEVICE=cuda python3 -m pytest -q -n 0 -p no:cacheprovider \
    -rA --durations=5 --basetemp=/tmp/verl-actor-test tests/backends/verl/test_verl_actor.py
cp /tmp/verl-actor-test/verl_actor*/results.json "$OUT/results_cuda.json" 2>/dev/null

step bench-cuda 150 bench_cuda.log python3 benchmarks/bench_verl_update.py --device cuda --steps 12
# the tiny model's step is kernel-launch bound on a GPU: the loss's share at a size where compute counts
# (an H100 ran out of a 150 s limit here before printing; on an H200 it took 112 s of the 300 it now has)
step bench-cuda-model 300 bench_cuda_model.log python3 benchmarks/bench_verl_update.py --device cuda --steps 12 \
    --model 1024x8x512x32000
# the same on the CPU (fp32, one thread) for comparison: ~20 s on a 2-core machine; last, if time is left
step bench-cpu 90 bench_cpu.log python3 benchmarks/bench_verl_update.py --device cpu --steps 12

echo "== [${SECONDS}s] done: test-cuda ${STATUS[test-cuda]:-?}, bench-cuda ${STATUS[bench-cuda]:-?}," \
    "bench-cpu ${STATUS[bench-cpu]:-?}"
[[ -z "$stale" ]] || echo "!! the cancelctl wheel was STALE: $stale"
[[ "${STATUS[test-cuda]:-}" == 0 && "${STATUS[bench-cuda]:-}" == 0 ]]
