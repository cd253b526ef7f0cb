#!/usr/bin/env bash
# Every test: the C kernel library and its unit tests (CMake + ctest), then the Python suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The tests' tmp_path folders and torch's compile cache (which importing torch creates, in the
# set-up's check too) go in one folder, removed at the end, so that a run leaves nothing under /tmp.
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
export TORCHINDUCTOR_CACHE_DIR="$SCRATCH/torchinductor"
# and byoc-int8's compiled kernels (kept in ~/.cache/byoc-int8 otherwise).
export BYOC_INT8_CACHE_DIR="$SCRATCH/byoc_int8_cache"
# Temporary files too (ONNX Runtime writes a session file, .ses, into the temporary directory).
export TMPDIR="$SCRATCH"
source "$ROOT/scripts/bootstrap.sh"
# The standalone C export is checked with clang, and on aarch64 / riscv64 under qemu.
MISSING=""
for tool in clang aarch64-linux-gnu-gcc riscv64-linux-gnu-gcc qemu-aarch64 qemu-riscv64; do
  command -v "$tool" > /dev/null || MISSING=1
done
if [ -n "$MISSING" ]; then
  echo "installing clang, cross compilers and qemu-user (apt-get)..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update > /dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends clang gcc-aarch64-linux-gnu \
    libc6-dev-arm64-cross gcc-riscv64-linux-gnu libc6-dev-riscv64-cross qemu-user > /dev/null
fi
cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$ROOT/build" -j 2 > /dev/null
(cd "$ROOT/build" && ctest --output-on-failure)
# Two threads in TVM's pool, so that the generated code's work splitting runs in every test.
export TVM_NUM_THREADS="${TVM_NUM_THREADS:-2}"
cd "$ROOT" && "$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider --basetemp "$SCRATCH/pytest" "$@"
