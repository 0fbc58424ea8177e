#!/usr/bin/env bash
# Builds the fuzz targets with clang + libFuzzer + ASan + UBSan and runs each
# for a bounded time (docs/RELIABILITY.md). CI runs it with the defaults.
#
#   tools/fuzz/run.sh [--time S] [--jobs J] [--seed N] [--out DIR] [target ...]
#
# --time: seconds per target (default 30); --jobs: targets fuzzed at once
# (default 2); --seed: libFuzzer's -seed (default 1, so CI mutates the same
# way each time; 0 picks one at random); --out: where corpora, logs and
# crash inputs go (default /tmp/gtp_fuzz; an existing corpus there is reused). Targets default to all of tools/fuzz. The build uses its
# own Bazel output base ($GTP_FUZZ_OUTPUT_BASE, default
# ~/.cache/bazel/gtp_fuzz), a separate server that exits 5 minutes after
# its last build. Exits 1 when any target crashed or a sanitizer reported,
# printing the report and the input's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
time_s=30 jobs=2 seed=1 out=/tmp/gtp_fuzz targets=()
while (( $# )); do
  case "$1" in
    --time) time_s="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
(( ${#targets[@]} )) || targets=(config_fuzzer checkpoint_metadata_fuzzer checkpoint_data_fuzzer
                                 safetensors_fuzzer indexed_dataset_fuzzer tokenizer_json_fuzzer
                                 tokenizer_model_fuzzer)
# clang, lld and the sanitizer/libFuzzer runtimes (Debian 12: clang 14), as tools/setup.sh installs.
missing=()
for p in clang lld libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  sudo=""; (( $(id -u) == 0 )) || sudo=sudo
  echo "fuzz: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
base="${GTP_FUZZ_OUTPUT_BASE:-$HOME/.cache/bazel/gtp_fuzz}"
bzl=(bazel --output_base="$base" --max_idle_secs=300)
labels=(); for t in "${targets[@]}"; do labels+=("//tools/fuzz:$t"); done
start=$(date +%s)
"${bzl[@]}" build --config=fuzz "${labels[@]}"
bin="$("${bzl[@]}" info --config=fuzz bazel-bin 2>/dev/null)/tools/fuzz"
echo "fuzz: built ${#targets[@]} targets in $(( $(date +%s) - start )) s"

# A dictionary of the recipe's field names helps the config fuzzer reach them.
mkdir -p "$out"
grep -oE '^\s*(repeated\s+)?[A-Za-z0-9_.]+\s+[a-z_0-9]+\s*=\s*[0-9]+' recipes/trainer/config.proto |
  awk '{ print "\"" $(NF-2) "\"" }' | sort -u > "$out/config.dict"
printf '"%s"\n' '\x0a%%\x0a' '=' '.' ' { ' ' }' ': ' '2147483647' '-2147483648' '65536' '-1' '1e39' \
  >> "$out/config.dict"

fuzz_one() {
  local t="$1" name="${1%_fuzzer}"
  local corpus="$out/$name/corpus" art="$out/$name/crashes/"
  # Crash inputs of earlier runs are not this run's findings (a reused --out
  # keeps its corpus; past crashes live on in tools/fuzz/corpus as regression inputs).
  rm -rf "$art"
  mkdir -p "$corpus" "$art"
  cp -n "tools/fuzz/corpus/$name/"* "$corpus/"
  [ "$name" = config ] && cp -n recipes/*/*.pbtxt "$corpus/" 2>/dev/null
  local extra=(); [ "$name" = config ] && extra=(-dict="$out/config.dict" -use_value_profile=1)
  ASAN_SYMBOLIZER_PATH="$(command -v llvm-symbolizer || true)" ASAN_OPTIONS=detect_leaks=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin/$t" -max_total_time="$time_s" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -max_len=4096 -seed="$seed" -print_final_stats=1 -artifact_prefix="$art" "${extra[@]}" "$corpus" \
      > "$out/$name/log" 2>&1
}
export -f fuzz_one; export bin out time_s seed
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'fuzz_one {}' || status=1
for t in "${targets[@]}"; do
  name="${t%_fuzzer}"; log="$out/$name/log"
  execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | awk '{ print $2 }' || true)
  cov=$(grep -oE '#[0-9]+\s+DONE\s+cov: [0-9]+ ft: [0-9]+' "$log" | grep -oE 'cov: [0-9]+' || true)
  crashes=$(ls "$out/$name/crashes" | wc -l)
  echo "fuzz: $t: ${time_s} s, ${execs:-?} execs, ${cov:-cov: ?}, corpus $(ls "$out/$name/corpus" | wc -l), crashes $crashes"
  if (( crashes )) || grep -qE 'ERROR: (AddressSanitizer|libFuzzer)|runtime error:' "$log"; then
    status=1
    { grep -E -A25 'ERROR: |runtime error:' "$log" || true; } | head -40
    { ls "$out/$name/crashes/"* 2>/dev/null || true; } | sed 's/^/  input: /'
  fi
done
echo "fuzz: done in $(( $(date +%s) - start )) s"
exit $status
