#!/usr/bin/env bash
# Tests of the Python client (clients/python): makes a virtual environment,
# installs the package with its test dependencies from PyPI, type-checks it
# (mypy --strict) and runs every test: the shared wire-format vectors, the
# integration tests against nats-server and the Go peer, the permission and
# lost-acknowledgement tests, and the packaging tests (wheel and sdist
# installed into fresh virtual environments). Needs Go and Python 3.11+.
#
#   clients/python/test.sh                 # everything
#   clients/python/test.sh -k vectors      # pytest arguments pass through
#
# Environment: PYTHON (the interpreter), JETFLOW_PY_VENV (the virtual
# environment, default clients/python/.venv), JETFLOW_TEST_BIN (where Go
# binaries are built), JETFLOW_VECTORS, JETFLOW_PEER_REPO (tests/conftest.py).
set -euo pipefail

cd "$(dirname "$0")"

python=${PYTHON:-}
if [ -z "$python" ]; then
	for p in python3 python3.13 python3.12 python3.11; do
		if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
			python=$p
			break
		fi
	done
fi
if [ -z "$python" ]; then
	echo "clients/python/test.sh: Python 3.11 or later is needed" >&2
	exit 1
fi

venv=${JETFLOW_PY_VENV:-.venv}
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q -U pip setuptools wheel
"$venv/bin/python" -m pip install -q -e ".[test]"

"$venv/bin/python" -m mypy --strict src/jetflow
"$venv/bin/python" -m ruff check -q src tests bench ../../examples/python-producer

export JETFLOW_REQUIRE_VECTORS=${JETFLOW_REQUIRE_VECTORS:-1}
exec "$venv/bin/python" -m pytest -q -rs "$@"
