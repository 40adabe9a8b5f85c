#!/usr/bin/env bash
# README command 1: set up and build if needed, then run kiln on the built-in example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python tools/demo.py "$@"
