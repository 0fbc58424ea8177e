#!/usr/bin/env bash
# Runs a fuzz target (built without libFuzzer: replay_main.cc) over its seed
# corpus: every seed must go through without a crash.
set -euo pipefail
"$1" "$2"
