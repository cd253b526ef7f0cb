#!/usr/bin/env bash
# Creates .venv with everything the project needs (idempotent: reinstalls only when
# pyproject.toml changes). Sourced by run.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.installed-$(sha1sum "$ROOT/pyproject.toml" | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  echo "setting up $VENV (first run only)..." >&2
  python3 -m venv "$VENV"
  LOG="$VENV/install.log"
  if ! "$VENV/bin/pip" install -e "$ROOT[test]" > "$LOG" 2>&1; then
    grep -v "is ignored" "$LOG" >&2
    echo "dependency installation failed (log: $LOG)" >&2
    exit 1
  fi
  "$VENV/bin/python" -c "import byoc_int8, tvm, torch, torchvision" # fail loudly if the install did not work
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi
