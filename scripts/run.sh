#!/usr/bin/env bash
# The main job: compile ResNet-18 through the int8 BYOC flow, run it, report agreement with float.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
exec "$ROOT/.venv/bin/byoc-int8" run --model resnet18 "$@"
