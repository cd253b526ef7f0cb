#!/usr/bin/env bash
# Creates .venv with everything the project needs (idempotent: reinstalls only when
# pyproject.toml changes). Sourced by run.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.installed-$(sha1sum "$ROOT/pyproject.toml" | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --upgrade pip 2>&1 | grep -v "is ignored" || true
  "$VENV/bin/pip" install --quiet -e "$ROOT[test]" 2>&1 | grep -v "is ignored" || true
  "$VENV/bin/python" -c "import byoc_int8, tvm, torch, torchvision" # fail loudly if the install did not work
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi
