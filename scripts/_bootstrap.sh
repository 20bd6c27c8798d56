# Sourced by scripts/*: make .venv with everything installed (idempotent; re-installs when pyproject changes).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EXTRAS="${MINIHERMES_EXTRAS:-dev}"

pick_python() {
  for candidate in python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

if ! PY="$(pick_python)"; then
  echo "Python >= 3.11 not found; installing it with apt-get" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
  PY="$(pick_python)"
fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "installing python3-venv with apt-get" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi

STAMP=".venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)-${EXTRAS//,/_}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -f "$STAMP" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # setuptools' note that an editable install maps the package from this folder is informational (printed on
  # every install); other warnings and every error still show, and a failed install stops here.
  PYTHONWARNINGS="ignore:Editable installation" \
    .venv/bin/python -m pip install -q -e ".[${EXTRAS}]" 2>&1 | { grep -v "^WARNING: Location" || true; }
  .venv/bin/python -c "import minihermes.runtime" 
  rm -f .venv/.installed-*
  touch "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
