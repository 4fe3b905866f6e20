#!/usr/bin/env bash
# clients/typescript: installs the dependencies, builds, and runs every test
# of the package against real servers (a nats-server process built from
# this repository's Go module, the Go peer).
# Needs node (20+), npm and go. clients/clients_test.go runs it (go test ./...).
set -euo pipefail
cd "$(dirname "$0")"

for tool in node npm go; do
	command -v "$tool" >/dev/null || { echo "clients/typescript/test.sh: $tool not found" >&2; exit 1; }
done
echo "node $(node --version), npm $(npm --version)"

npm ci --no-audit --no-fund --loglevel=error
rm -rf dist build/src build/test build/bench   # no stale output (build/bin keeps the Go binaries)
npm run --silent build
npm run --silent build:test

node --test --test-concurrency=1 build/test/*.test.js

# The bench (async enqueue beside raw publishes) is measured, not asserted:
# node build/bench/bench.js --n 20000 --rounds 3
