#!/usr/bin/env bash
# Checkpoint → `ckpt inspect` → `ckpt export --names hf-gpt2` → independent parse.
set -euo pipefail
writer="$1" ckpt="$2" fixture="$3" checker="$4"
root="${TEST_TMPDIR:-/tmp}/ckpt_export"
rm -rf "$root"
"$writer" "$fixture" "$root"
"$ckpt" inspect "$root" | tee /dev/stderr | grep -q "iteration 7"
"$ckpt" export --format safetensors --names hf-gpt2 --vocab 500 "$root" "$root/model.safetensors"
python3 "$checker" "$root/model.safetensors" "$fixture"
# Errors are one line and non-zero.
if "$ckpt" inspect "$root/nope" 2>err.txt; then echo "expected failure"; exit 1; fi
grep -q "no checkpoint" err.txt
# An existing directory as the safetensors output is refused before anything
# is read or written (the final rename used to fail, leaving OUT.tmp).
mkdir -p "$root/a_dir"
if "$ckpt" export --format safetensors "$root" "$root/a_dir" 2>err.txt; then echo "expected failure"; exit 1; fi
grep -q "a_dir is a directory: --format safetensors writes one file (e.g. .*a_dir/model.safetensors)" err.txt
[ ! -e "$root/a_dir.tmp" ] || { echo "left $root/a_dir.tmp"; exit 1; }
[ -z "$(ls -A "$root/a_dir")" ] || { echo "wrote into $root/a_dir"; exit 1; }
