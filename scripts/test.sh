#!/usr/bin/env bash
# Every test: the C kernel library and its unit tests (CMake + ctest), then the Python suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$ROOT/build" -j 2 > /dev/null
(cd "$ROOT/build" && ctest --output-on-failure)
# Two threads in TVM's pool, so that the generated code's work splitting runs in every test.
export TVM_NUM_THREADS="${TVM_NUM_THREADS:-2}"
cd "$ROOT" && exec "$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
