#!/usr/bin/env bash
# Every shell block of README.md, run as written (tools/docs/run_docs.py).
set -euo pipefail
exec python3 tools/docs/run_docs.py "$@"
