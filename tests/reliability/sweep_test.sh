#!/usr/bin/env bash
# Black-box reliability sweep (docs/RELIABILITY.md): bad inputs and faults a
# careless or hostile user gives the trainer and the tools, each with the
# outcome the project promises, run from the outside with `timeout`.
#
#   sweep_test.sh TRAIN GTPRUN CKPT GENERATE EVAL MAKE_INDEXED TRAIN_BPE \
#                 INSPECT_INDEXED PLOT_PY [--plot_metrics BIN] [--only REGEX] [--verbose] [--list]
#
# PLOT_PY is tools/plot_metrics/plot.py. --plot_metrics names the C++ renderer
# (bazel-bin/tools/plot_metrics/plot_metrics); without it its cases are skipped
# (under Bazel the binary is visible to //tools/docs only). --only runs the cases
# whose id matches REGEX; --list prints the cases without running them.
#
# The rule under test: a setting the program accepts gives the right result;
# anything else is refused before the first step, with a short error that
# names it. Every case states what it expects:
#
#   ok        exit 0 (and, where the case gives one, the output contains its text)
#   refused   exit status non-zero (not a signal), at most 8 lines on stderr, and
#             stderr contains the case's text (the setting, flag or file at fault)
#   refused@N the same with exit status N exactly (gtprun passes on a rank's 128+signal)
#   known:X   a known defect: the case currently gives X (below); it is counted
#             apart and does not fail the test, but any other outcome does (a
#             fixed defect: update its line to the outcome it now has)
#
# Outcomes a case can get:
#   ok, refused   as above
#   crash    killed by a signal, or "Check failed" / abort / sanitizer text on stderr
#   hang     still running at the case's limit (default 30 s; the FIFO cases 4 s)
#   silent   exit 0 where the case expects a refusal
#   unnamed  refused, but the error does not contain the case's text
#   verbose  refused with the text, but more than 8 lines on stderr
#   residue  refused, but the run directory it created is left behind (a failure
#            after start-up must remove the run directory the run made), or a
#            partial output the case names (-r PATH)
#   wrong    exit 0 where valid, but the output lacks the case's text
#
# One line per case (id, expected, got), then counts by area and by outcome and
# the known defects with their commands. Exit 1 if any case differs from its
# expectation. The commands, exit codes and stderr of every case go to
# sweep.log in $TEST_UNDECLARED_OUTPUTS_DIR (or the scratch directory).
set -uo pipefail

usage() {
  echo "usage: $0 TRAIN GTPRUN CKPT GENERATE EVAL MAKE_INDEXED TRAIN_BPE INSPECT_INDEXED PLOT_PY [--plot_metrics BIN] [--only REGEX] [--verbose] [--list]" >&2
  exit 2
}
[ $# -ge 9 ] || usage
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
TRAIN=$(abspath "$1") GTPRUN=$(abspath "$2") CKPT=$(abspath "$3") GENERATE=$(abspath "$4") EVAL=$(abspath "$5")
MAKE_INDEXED=$(abspath "$6") TRAIN_BPE=$(abspath "$7") INSPECT=$(abspath "$8") PLOT_PY=$(abspath "$9")
shift 9
ONLY="" VERBOSE=0 LIST=0 PLOT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --plot_metrics) PLOT=$(abspath "$2"); shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --verbose) VERBOSE=1; shift ;;
    --list) LIST=1; shift ;;
    *) usage ;;
  esac
done
for b in "$TRAIN" "$GTPRUN" "$CKPT" "$GENERATE" "$EVAL" "$MAKE_INDEXED" "$TRAIN_BPE" "$INSPECT" ${PLOT:+"$PLOT"}; do
  [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }
done
[ -f "$PLOT_PY" ] || { echo "no such file: $PLOT_PY" >&2; exit 2; }
# The trainer finds its default recipe in its runfiles; the cases run in a
# scratch directory, so name them.
if [ -z "${RUNFILES_DIR:-}" ] && [ -d "$PWD/../gtp" ]; then export RUNFILES_DIR=$(cd .. && pwd); fi

mkdir -p "${TEST_TMPDIR:-/tmp}"
ROOT=$(mktemp -d "${TEST_TMPDIR:-/tmp}/sweep.XXXXXX") && [ -n "$ROOT" ] && [ -d "$ROOT" ] ||
  { echo "sweep: cannot make a scratch directory under ${TEST_TMPDIR:-/tmp}" >&2; exit 2; }
FX=$ROOT/fixtures      # built once, read by many cases (copied before damage)
RUNS=$ROOT/runs        # one run directory (or output) per case
WORK=$ROOT/cwd         # every case runs here
mkdir -p "$FX" "$RUNS" "$WORK"
LOG=${TEST_UNDECLARED_OUTPUTS_DIR:-$ROOT}/sweep.log
: > "$LOG"
START=$SECONDS

# Tiny training (about 0.3 s on 2 cores): 2 layers, T=32, 2 steps, no evaluation.
TINY="model.n_layer=2,model.seq_len=32,train.micro_batch=2,train.global_batch=8,train.steps=2,train.eval_every=0"
ONE="parallel.world_size=1,parallel.tp=1,parallel.tp_num_weight_shards=1"
TWO="parallel.world_size=2,parallel.tp=1,parallel.tp_num_weight_shards=2"
HAVE_GPU=0
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then HAVE_GPU=1; fi

die() { echo "sweep: $*" >&2; exit 1; }
# fixture CMD...: must succeed (else the sweep means nothing).
fixture() {
  if ! (cd "$WORK" && timeout -k 5 120 "$@") > "$ROOT/fixture.out" 2>&1; then
    cat "$ROOT/fixture.out" >&2
    die "fixture failed: $*"
  fi
}
# put BYTES (printf format) at OFFSET of FILE.
poke() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

# ---------------------------------------------------------------- the harness
AREA=""
declare -a IDS=() AREAS=() EXPECTS=() GOTS=() VERDICTS=()
declare -A SEEN=()
FAILS=0 N=0
area() { AREA="$1"; }

CRASH_RE='Check failed|terminate called|Segmentation fault|Aborted \(core dumped\)|core dumped|AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:|\*\*\* SIG|^F[0-9]{4} |double free|stack smashing|Assertion .* failed'

# The command as one would type it: binaries by name, the scratch directory as $SWEEP.
show_cmd() {
  local a out=""
  for a in "$@"; do
    case "$a" in
      "$TRAIN") a=train ;; "$GTPRUN") a=gtprun ;; "$CKPT") a=ckpt ;; "$GENERATE") a=generate ;;
      "$EVAL") a=eval ;; "$MAKE_INDEXED") a=make_indexed ;; "$TRAIN_BPE") a=train_bpe ;;
      "$INSPECT") a=inspect_indexed ;; "$PLOT_PY") a=plot.py ;;
    esac
    [ -n "$PLOT" ] && [ "$a" = "$PLOT" ] && a=plot_metrics
    if [[ "$a" =~ ^[A-Za-z0-9_./=,:@%+-]+$ ]]; then out+="$a "; else out+="'${a//\'/\'\\\'\'}' "; fi
  done
  out=${out//$ROOT/\$SWEEP}
  echo "${out% }"
}

# c ID EXPECT TEXT [-t SECS] [-r PATH] -- CMD...
#   -t: the time limit; -r: a path that must not exist after a refusal (default: the
#   command's --run_dir when it did not exist before)
c() {
  local id="$1" expect="$2" text="$3"; shift 3
  local limit=30 leftover=""
  while :; do
    case "$1" in
      -t) limit="$2"; shift 2 ;;
      -r) leftover="$2"; shift 2 ;;
      *) break ;;
    esac
  done
  [ "$1" = "--" ] && shift
  [ -z "${SEEN[$id]:-}" ] || die "duplicate case id $id"
  SEEN[$id]=1
  if [ -n "$ONLY" ] && ! [[ "$id" =~ $ONLY ]]; then return 0; fi
  if [ "$LIST" = 1 ]; then printf '%-36s %-10s %s\n' "$id" "$AREA" "$expect"; return 0; fi
  # A run directory the command names, and whether it is new.
  local rundir="" fresh=0 prev="" a
  for a in "$@"; do
    if [ "$prev" = "--run_dir" ]; then rundir="$a"; fi
    prev="$a"
  done
  if [ -n "$leftover" ]; then rundir="$leftover"; fi  # -r PATH: what must not be left behind
  if [ -n "$rundir" ] && [ ! -e "$rundir" ]; then fresh=1; fi
  local out="$ROOT/case.out" err="$ROOT/case.err" rc t0 t1 elapsed
  t0=$(date +%s.%N)
  (cd "$WORK" && exec timeout -k 3 "$limit" "$@") > "$out" 2> "$err" < /dev/null
  rc=$?
  t1=$(date +%s.%N)
  elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  local want_rc=""
  case "$expect" in refused@*) want_rc="${expect#refused@}" ;; esac
  # gtprun's banner repeats the command line: not part of an error.
  local errf="$ROOT/case.err.f" lines got
  grep -v "^gtprun: -\{0,1\}[0-9]* rank(s) of '" "$err" > "$errf"
  lines=$(grep -c . "$errf" || true)
  if [ -n "$want_rc" ] && [ "$rc" = "$want_rc" ] && grep -qF -- "$text" "$errf"; then
    got=refused
  elif { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && awk -v e="$elapsed" -v l="$limit" 'BEGIN { exit !(e >= l - 0.5) }'; then
    got=hang
  elif [ "$rc" -gt 128 ] || grep -qE -- "$CRASH_RE" "$err"; then
    got=crash
  elif [ "$rc" = 0 ]; then
    case "$expect" in
      ok|known:wrong) if [ -z "$text" ] || grep -qF -- "$text" "$out" "$err"; then got=ok; else got=wrong; fi ;;
      *) got=silent ;;
    esac
  elif ! grep -qF -- "$text" "$errf"; then
    got=unnamed
  elif [ "$lines" -gt 8 ]; then
    got=verbose
  elif [ "$fresh" = 1 ] && [ -e "$rundir" ]; then
    got=residue
  else
    got=refused
  fi
  local want="${expect#known:}" verdict
  want="${want%@*}"
  if [ "$got" = "$want" ]; then
    case "$expect" in known:*) verdict="known defect" ;; *) verdict="pass" ;; esac
  else
    case "$expect" in
      known:*) verdict="FAIL (known defect changed: update this case)" ;;
      *) verdict="FAIL" ;;
    esac
    FAILS=$((FAILS + 1))
  fi
  N=$((N + 1))
  IDS+=("$id") AREAS+=("$AREA") EXPECTS+=("$expect") GOTS+=("$got") VERDICTS+=("$verdict")
  printf '%-36s expected %-15s got %-8s %5ss  %s\n' "$id" "$expect" "$got" "$elapsed" "$verdict"
  local cmd
  cmd=$(show_cmd "$@")
  {
    echo "=== $id [$AREA] expected $expect, got $got (rc $rc, ${elapsed}s): $verdict"
    echo "cmd: $cmd"
    echo "text: $text"
    echo "--- stderr (first 20 lines)"
    head -n 20 "$err" | cut -c1-600
    echo "--- stdout (last 5 lines)"
    tail -n 5 "$out" | cut -c1-300
  } >> "$LOG"
  if [ "$verdict" != pass ] && { [ "$VERBOSE" = 1 ] || [[ "$verdict" == FAIL* ]]; }; then
    echo "    cmd: $cmd"
    echo "    rc $rc; stderr:"
    head -n 6 "$err" | cut -c1-400 | sed 's/^/      /'
  fi
  [ "$verdict" = "known defect" ] && KNOWN_CMDS+=("$id: $cmd")
  return 0
}
declare -a KNOWN_CMDS=()

# t ID EXPECT TEXT SETTINGS [ARGS...]: the trainer, tiny, in its own run directory.
t() {
  local id="$1" expect="$2" text="$3" set="$4"; shift 4
  c "$id" "$expect" "$text" -- "$TRAIN" --run_dir "$RUNS/$id" --set "$TINY${set:+,$set}" "$@"
}
# ck ID: a copy of the base run (checkpoints at steps 2 and 4, latest 4) as run dir $RUNS/ID.
ck() { rm -rf "$RUNS/$1"; cp -r "$FX/base" "$RUNS/$1"; rm -f "$RUNS/$1/run.lock"; }
# rs ID EXPECT TEXT [SETTINGS]: resume $RUNS/ID to step 6 on the saved schedule.
rs() {
  local id="$1" expect="$2" text="$3" set="${4:-}"
  c "$id" "$expect" "$text" -- "$TRAIN" --run_dir "$RUNS/$id" \
    --set "$TINY,train.steps=6,checkpoint.every=2,optim.decay_steps=4${set:+,$set}"
}
# ds NAME: a copy of the base dataset as $RUNS/NAME.{idx,bin}.
ds() { cp "$FX/v.idx" "$RUNS/$1.idx"; cp "$FX/v.bin" "$RUNS/$1.bin"; }
# td ID EXPECT TEXT PREFIX [SETTINGS]: train on an indexed dataset.
td() {
  local id="$1" expect="$2" text="$3" prefix="$4" set="${5:-}"
  t "$id" "$expect" "$text" "data.source=indexed,data.path=$prefix${set:+,$set}"
}

# ---------------------------------------------------------------- fixtures
if [ "$LIST" = 1 ]; then exec 2> /dev/null; fi  # the damage below has nothing to damage
if [ "$LIST" = 0 ]; then
  echo "== fixtures in \$SWEEP = $ROOT"
  echo "   binaries: train=$TRAIN gtprun=$GTPRUN ckpt=$CKPT generate=$GENERATE eval=$EVAL make_indexed=$MAKE_INDEXED train_bpe=$TRAIN_BPE inspect_indexed=$INSPECT plot.py=$PLOT_PY${PLOT:+ plot_metrics=$PLOT}"
  # A small byte-level dataset: the embedded corpus's validation split (58 documents, 52 KB).
  fixture "$MAKE_INDEXED" --output="$FX/v" --corpus=validation
  # A GPT-2 BPE of 300 tokens and a dataset in it (ids up to 299, uint16).
  fixture "$TRAIN_BPE" --corpus=validation --vocab_size=300 --out_dir="$FX/bpe300"
  for i in $(seq 1 80); do echo "line $i of a small file, with some words in it and more words after them"; done > "$FX/lines.txt"
  fixture "$MAKE_INDEXED" --output="$FX/bpe" --vocab="$FX/bpe300/vocab.json" --merges="$FX/bpe300/merges.txt" --documents=line "$FX/lines.txt"
  fixture "$MAKE_INDEXED" --output="$FX/bpe64" --dtype=i64 --vocab="$FX/bpe300/vocab.json" --merges="$FX/bpe300/merges.txt" --documents=line "$FX/lines.txt"
  fixture "$MAKE_INDEXED" --output="$FX/i8" --dtype=i8 --documents=line "$FX/lines.txt"
  printf 'hello world\n' > "$FX/tiny.txt"
  fixture "$MAKE_INDEXED" --output="$FX/tiny" "$FX/tiny.txt"
  : > "$FX/empty.txt"
  fixture "$MAKE_INDEXED" --output="$FX/zero" "$FX/empty.txt"
  # The base run: gpt_tiny (4 ranks, TP2 x GTP2), checkpoints at steps 2 and 4.
  fixture "$TRAIN" --run_dir "$FX/base" --set "$TINY,train.steps=4,checkpoint.every=2"
  [ "$(cat "$FX/base/checkpoints/latest")" = 4 ] || die "base run: latest is not 4"
  # A BPE run that records its tokenizer, and one whose recorded tokenizer is gone.
  mkdir -p "$FX/tok" "$FX/tok_gone"
  cp "$FX/bpe300/vocab.json" "$FX/bpe300/merges.txt" "$FX/tok/"
  cp "$FX/bpe300/vocab.json" "$FX/bpe300/merges.txt" "$FX/tok_gone/"
  for r in tok tok_gone; do
    fixture "$TRAIN" --run_dir "$FX/bperun_$r" --set "$TINY,data.source=indexed,data.path=$FX/bpe,model.vocab_size=300,data.tokenizer_vocab=$FX/$r/vocab.json,data.tokenizer_merges=$FX/$r/merges.txt"
  done
  rm -r "$FX/tok_gone"
  # An MoE checkpoint (generate and the HF export refuse MoE).
  fixture "$TRAIN" --run_dir "$FX/moe" --set "$TINY,train.steps=1,model.moe.num_experts=2"
  # A run whose losses are NaN from the start (init_std=nan is accepted: see cfg.init_std_nan).
  # A run whose every step was NaN, as the trainer writes it (model.init_std=nan made one
  # before such settings were refused).
  mkdir -p "$FX/nanrun"
  printf '{"step": %d, "loss": nan, "lr": 0.0003, "grad_norm": nan, "skipped": true, "ms": 5.0, "tokens_per_s": 100.0, "comm_exposed_ms": 0.0, "mem_bytes": 1, "peak_mem_bytes": 1}\n' 1 2 > "$FX/nanrun/metrics.jsonl"
  # The base run as a Hugging Face directory, and that imported back.
  fixture "$CKPT" export --format hf "$FX/base/checkpoints" "$FX/hf"
  fixture "$CKPT" import --format hf "$FX/hf" "$FX/from_hf"
  cp "$FX/base/checkpoints/iter_0000004/metadata.pb" "$FX/meta.pb"
  cp /dev/null "$FX/empty.jsonl"
  echo "   built in $((SECONDS - START)) s"
fi
C="$FX/base/checkpoints"

# ================================================================ config
area config
t cfg.baseline ok "done: 2 steps" ""
t cfg.steps_zero refused "train.steps" "train.steps=0"
t cfg.steps_negative refused "train.steps" "train.steps=-1"
t cfg.steps_text refused "train.steps=abc" "train.steps=abc"
t cfg.steps_float refused "train.steps=1e3" "train.steps=1e3"
t cfg.steps_overflow refused "99999999999999999999" "train.steps=99999999999999999999"
t cfg.micro_batch_zero refused "train.micro_batch" "train.micro_batch=0"
t cfg.micro_batch_negative refused "train.micro_batch" "train.micro_batch=-2"
t cfg.global_batch_indivisible refused "train.global_batch" "train.global_batch=7"
# -8 trains with a global batch of 4 (micro_batch x lanes), as if it were 0.
t cfg.global_batch_negative refused "train.global_batch must be a finite number >= 0" "train.global_batch=-8"
t cfg.n_layer_zero refused "model.n_layer" "model.n_layer=0"
t cfg.n_layer_negative refused "model.n_layer" "model.n_layer=-1"
t cfg.seq_len_zero refused "model.seq_len" "model.seq_len=0"
t cfg.n_embd_indivisible refused "model.n_embd" "model.n_embd=63"
t cfg.n_head_zero refused "model.n_head" "model.n_head=0"
t cfg.n_head_too_many refused "model.n_head" "model.n_head=128"
t cfg.n_kv_head_indivisible refused "n_kv_head" "model.n_kv_head=3"
t cfg.n_kv_head_negative refused "model.n_kv_head must be a finite number >= 0" "model.n_kv_head=-1"
t cfg.vocab_zero refused "model.vocab_size" "model.vocab_size=0"
t cfg.vocab_below_bytes refused "model.vocab_size" "model.vocab_size=100"
t cfg.vocab_huge refused "the model cannot fit" "model.vocab_size=1099511627776"
t cfg.n_layer_huge refused "the model cannot fit" "model.n_layer=100000"
t cfg.n_embd_huge refused "model.n_embd=4000000000" "model.n_embd=4000000000"
t cfg.norm_unknown refused "model.norm" "model.norm=batchnorm"
t cfg.activation_unknown refused "model.activation" "model.activation=relu"
t cfg.rope_not_bool refused "model.rope=maybe" "model.rope=maybe"
# init_std -1 trains (first loss 23 instead of 5.5); nan trains NaN losses, every step skipped, exit 0.
t cfg.init_std_negative refused "model.init_std must be a finite number >= 0" "model.init_std=-1"
t cfg.init_std_nan refused "model.init_std must be a finite number >= 0" "model.init_std=nan"
t cfg.ffn_hidden_negative refused "model.ffn_hidden must be a finite number >= 0" "model.ffn_hidden=-4"
t cfg.ffn_hidden_indivisible refused "not divisible by the tensor-parallel size" "model.ffn_hidden=3"
t cfg.vocab_pad_negative refused "model.vocab_pad_multiple must be a finite number >= 0" "model.vocab_pad_multiple=-1"
# A negative or NaN rope_theta trains as the default 10000 (the same losses).
t cfg.rope_theta_negative refused "model.rope_theta must be a finite number >= 0" "model.rope=true,model.rope_theta=-1"
t cfg.rope_theta_nan refused "model.rope_theta must be a finite number >= 0" "model.rope=true,model.rope_theta=nan"
t cfg.moe_negative refused "model.moe.num_experts" "model.moe.num_experts=-2"
t cfg.moe_top_k refused "top_k" "model.moe.num_experts=2,model.moe.top_k=3"
t cfg.moe_capacity_negative refused "model.moe.capacity_factor" "model.moe.num_experts=2,model.moe.capacity_factor=-1"
t cfg.moe_score refused "model.moe.score" "model.moe.num_experts=2,model.moe.score=relu"
t cfg.layer_pattern_bad refused "model.layer_pattern" "model.layer_pattern=MX"
t cfg.mamba_d_state_negative refused "d_state" "model.layer_pattern=M*,model.mamba.d_state=-1"
t cfg.lr_negative refused "optim.lr" "optim.lr=-1"
t cfg.lr_nan refused "optim.lr" "optim.lr=nan"
t cfg.lr_zero refused "optim.lr" "optim.lr=0"
t cfg.lr_inf refused "optim.lr" "optim.lr=inf"
t cfg.beta1_one refused "optim.beta1" "optim.beta1=1"
t cfg.beta2_nan refused "optim.beta2" "optim.beta2=nan"
t cfg.weight_decay_negative refused "optim.weight_decay" "optim.weight_decay=-0.1"
t cfg.min_lr_nan refused "optim.min_lr" "optim.min_lr=nan"
t cfg.min_lr_above_lr refused "optim.min_lr" "optim.min_lr=1"
t cfg.clip_nan refused "optim.clip_grad" "optim.clip_grad=nan"
t cfg.decay_unknown refused "optim.decay" "optim.decay=exp"
t cfg.matrices_unknown refused "optim.matrices" "optim.matrices=sgd"
t cfg.warmup_negative refused "optim.warmup_steps" "optim.warmup_steps=-3"
t cfg.decay_steps_negative refused "optim.decay_steps" "optim.decay_steps=-5"
t cfg.data_source_unknown refused "data.source" "data.source=web"
t cfg.valid_fraction_corpus refused "data.valid_fraction" "data.valid_fraction=0.1"
t cfg.valid_fraction_big refused "data.valid_fraction" "data.source=mock,data.valid_fraction=0.9"
t cfg.valid_fraction_nan refused "data.valid_fraction" "data.source=mock,data.valid_fraction=nan"
t cfg.data_seed_negative refused "data.seed=-1" "data.seed=-1"
# data.path without data.source=indexed trained on the embedded corpus, the path unread.
t cfg.data_path_without_source refused "data.path is read only with data.source=indexed" "data.path=$FX/v"
t cfg.tokenizer_vocab_without_merges refused "data.tokenizer_merges" "data.tokenizer_vocab=$FX/bpe300/vocab.json"
# Recorded in the checkpoints unread; generate and ckpt export failed on them later.
td cfg.tokenizer_files_missing refused "data.tokenizer_vocab" "$FX/bpe" "model.vocab_size=300,data.tokenizer_vocab=$FX/nope.json,data.tokenizer_merges=$FX/nope.txt"
t cfg.log_every_negative refused "train.log_every must be a finite number >= 0" "train.log_every=-1"
t cfg.eval_every_negative refused "train.eval_every must be a finite number >= 0" "train.eval_every=-1"
t cfg.eval_batches_negative refused "train.eval_batches must be a finite number >= 0" "train.eval_every=1,train.eval_batches=-1"
t cfg.max_skipped_negative refused "train.max_skipped_steps must be a finite number >= 0" "train.max_skipped_steps=-1"
t cfg.device_unknown refused "train.device" "train.device=tpu"
if [ "$HAVE_GPU" = 0 ]; then
  t cfg.device_cuda_without_gpu refused "train.device is cuda" "train.device=cuda"
fi
t cfg.precision_unknown refused "train.precision" "train.precision=fp16"
t cfg.peak_tflops_negative refused "train.peak_tflops must be a finite number >= 0" "train.peak_tflops=-5"
t cfg.trace_steps_negative refused "train.trace_steps must be a finite number >= 0" "train.trace_steps=-1"
t cfg.cuda_graphs_unknown refused "train.cuda_graphs" "train.cuda_graphs=maybe"
t cfg.attention_unknown refused "train.attention" "train.attention=sdpa"
t cfg.sample_every_negative refused "train.sample_every must be a finite number >= 0" "train.sample_every=-1"
t cfg.sample_tokens_negative refused "train.sample_tokens must be a finite number >= 0" "train.sample_every=1,train.sample_tokens=-5"
# A 100-byte prompt on a 32-token model was cut to 32 tokens, printed whole as if continued.
t cfg.sample_prompt_too_long refused "train.sample_prompt is 100 bytes" "train.sample_every=1,train.sample_prompt=$(printf 'x%.0s' $(seq 1 100))"
# Refused in the first step, it left metrics.jsonl and recipe.pbtxt behind.
t cfg.sample_moe refused "train.sample_every" "train.sample_every=1,model.moe.num_experts=2"
t cfg.checkpoint_every_negative refused "checkpoint.every must be a finite number >= 0" "checkpoint.every=-1"
t cfg.keep_last_negative refused "checkpoint.keep_last" "checkpoint.keep_last=-1"
t cfg.ckpt_dir_escape refused "checkpoint.dir" "checkpoint.dir=../escape"
t cfg.ckpt_dir_absolute refused "checkpoint.dir" "checkpoint.dir=$RUNS/elsewhere"
t cfg.world_size_indivisible refused "parallel.world_size" "parallel.world_size=3"
t cfg.world_size_negative refused "parallel.world_size" "parallel.world_size=-4"
t cfg.tp_negative refused "parallel.tp must be a finite number >= 0" "parallel.tp=-2"
t cfg.gtp_indivisible refused "tp_num_weight_shards" "parallel.tp_num_weight_shards=3"
t cfg.backend_unknown refused "parallel.backend" "parallel.backend=mpi"
t cfg.comm_timeout_negative refused "parallel.comm_timeout_s" "parallel.comm_timeout_s=-1"
t cfg.pp_indivisible refused "parallel.pp" "parallel.pp=3"
t cfg.vpp_negative refused "parallel.vpp" "parallel.vpp=-1"
t cfg.vpp_without_pp refused "parallel.vpp" "parallel.vpp=2"
t cfg.pp_boundaries_bad refused "parallel.pp_boundaries" "parallel.pp_boundaries=0:5"
t cfg.cp_indivisible refused "parallel.cp" "parallel.cp=3"
t cfg.ep_dense refused "parallel.ep" "parallel.ep=2"
t cfg.order_partial refused "parallel.order" "parallel.order=tp-gtp"
t cfg.order_repeated refused "parallel.order" "parallel.order=tp-tp-dp"
t cfg.expert_order_bogus refused "parallel.expert_order" "parallel.expert_order=bogus"
t cfg.gather_dtype refused "parallel.gtp_gather_dtype" "parallel.gtp_gather_dtype=int4"
t cfg.reduce_dtype refused "gtp_reduce_scatter_dtype" "parallel.gtp_reduce_scatter_dtype=fp8"
t cfg.override_not_key_value refused "is not key=value" "model.n_layer"
t cfg.override_empty_key refused "no such setting" "=3"
t cfg.override_message refused "model=3" "model=3"
t cfg.override_unknown refused "no such setting" "train.stepz=3"
t cfg.override_spaces refused "train.steps" " train.steps = 2"
t cfg.override_double_equals refused "train.steps=2=3" "train.steps=2=3"
t cfg.setting_without_set refused "settings go after --set" "" train.steps=3
t cfg.unknown_flag refused "badflag" "" --badflag
c cfg.flag_without_value refused "run_dir" -- "$TRAIN" --set "$TINY" --run_dir
t cfg.two_sets ok "lr 1.00e-03" "" --set "optim.lr=1e-3"
c cfg.list_settings ok "train.steps=7" -- "$TRAIN" --list_settings --set train.steps=7
printf 'name: "x"\nmodel { vocab_size: 256 colour: 3 }\n' > "$FX/unknown.pbtxt"
printf 'name: "x"\nmodel { vocab_size: 256 \n' > "$FX/truncated.pbtxt"
printf 'garbage ]]]\n' > "$FX/garbage.pbtxt"
printf '\x00\x01\x02\xff\xfe' > "$FX/binary.pbtxt"
printf 'name: "x"\nmodel { n_layer: "two" }\n' > "$FX/type.pbtxt"
printf 'name: "x"\nmodel { n_layer: 2 }\nmodel { n_layer: 3 }\n' > "$FX/dup.pbtxt"
: > "$FX/empty.pbtxt"
mkdir -p "$FX/config_dir"
{ printf '\xef\xbb\xbf'; cat "$FX/base/recipe.pbtxt"; } > "$FX/bom.pbtxt"
t cfg.config_missing refused "nope.pbtxt" "" --config "$FX/nope.pbtxt"
t cfg.config_directory refused "is a directory" "" --config "$FX/config_dir"
t cfg.config_truncated refused "truncated.pbtxt" "" --config "$FX/truncated.pbtxt"
t cfg.config_garbage refused "garbage" "" --config "$FX/garbage.pbtxt"
t cfg.config_binary refused "binary.pbtxt" "" --config "$FX/binary.pbtxt"
t cfg.config_wrong_type refused "type.pbtxt" "" --config "$FX/type.pbtxt"
t cfg.config_repeated_message refused "dup.pbtxt" "" --config "$FX/dup.pbtxt"
t cfg.config_unknown_field refused "colour" "" --config "$FX/unknown.pbtxt"
t cfg.config_empty refused "model.vocab_size" "" --config "$FX/empty.pbtxt"
t cfg.config_dev_null refused "model.vocab_size" "" --config /dev/null
t cfg.config_bom ok "done: 2 steps" "" --config "$FX/bom.pbtxt"
t cfg.config_recipe_of_a_run ok "done: 2 steps" "" --config "$FX/base/recipe.pbtxt"
echo hi > "$FX/a_file"
c cfg.run_dir_is_file refused "a_file" -- "$TRAIN" --run_dir "$FX/a_file" --set "$TINY"
c cfg.run_dir_under_file refused "Not a directory" -- "$TRAIN" --run_dir "$FX/a_file/sub" --set "$TINY"
c cfg.run_dir_dev_null refused "/dev/null" -- "$TRAIN" --run_dir /dev/null --set "$TINY"
# Refused only in the first step (the dump file is opened there), they left the run dir.
t cfg.dump_tokens_directory refused "train.dump_tokens" "train.dump_tokens=$FX"
t cfg.dump_tokens_missing_dir refused "train.dump_tokens" "train.dump_tokens=$FX/no/such/dir/t.bin"
t cfg.tensorboard_dir_is_file refused "train.tensorboard_dir" "train.tensorboard_dir=$FX/a_file"
# A second run on a run directory in use.
if [ "$LIST" = 0 ] && { [ -z "$ONLY" ] || [[ cfg.locked_run_dir =~ $ONLY ]]; }; then
  (cd "$WORK" && exec timeout -k 3 60 "$TRAIN" --run_dir "$RUNS/cfg.locked_run_dir" --set "$TINY,train.steps=1000000,checkpoint.every=0") > /dev/null 2>&1 &
  LOCK_PID=$!
  for _ in $(seq 1 100); do [ -s "$RUNS/cfg.locked_run_dir/metrics.jsonl" ] && break; sleep 0.1; done
fi
c cfg.locked_run_dir refused "is in use by another run" -- "$TRAIN" --run_dir "$RUNS/cfg.locked_run_dir" --set "$TINY"
if [ -n "${LOCK_PID:-}" ]; then kill -TERM "$LOCK_PID" 2> /dev/null; wait "$LOCK_PID" 2> /dev/null; fi

# ================================================================ launch environment
area env
E="LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 20000))"
c env.world_size_text refused "WORLD_SIZE" -- env WORLD_SIZE=abc RANK=0 "$TRAIN" --run_dir "$RUNS/env.world_size_text" --set "$TINY,$TWO"
c env.rank_without_world refused "WORLD_SIZE" -- env RANK=0 "$TRAIN" --run_dir "$RUNS/env.rank_without_world" --set "$TINY,$TWO"
c env.local_rank_missing refused "LOCAL_RANK" -- env WORLD_SIZE=2 RANK=0 "$TRAIN" --run_dir "$RUNS/env.local_rank_missing" --set "$TINY,$TWO"
c env.rank_out_of_range refused "RANK=5" -- env $E WORLD_SIZE=2 RANK=5 "$TRAIN" --run_dir "$RUNS/env.rank_out_of_range" --set "$TINY,$TWO"
c env.rank_negative refused "RANK=-1" -- env $E WORLD_SIZE=2 RANK=-1 "$TRAIN" --run_dir "$RUNS/env.rank_negative" --set "$TINY,$TWO"
c env.world_size_zero refused "WORLD_SIZE=0" -- env $E WORLD_SIZE=0 RANK=0 "$TRAIN" --run_dir "$RUNS/env.world_size_zero" --set "$TINY,$TWO"
c env.local_rank_big refused "local rank 7" -- env $E LOCAL_RANK=7 WORLD_SIZE=2 RANK=0 "$TRAIN" --run_dir "$RUNS/env.local_rank_big" --set "$TINY,$TWO"
c env.master_port_text refused "MASTER_PORT" -- env $E MASTER_PORT=abc WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 "$TRAIN" --run_dir "$RUNS/env.master_port_text" --set "$TINY,$TWO"
c env.master_port_too_big refused "MASTER_PORT=70000" -- env $E MASTER_PORT=70000 WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 "$TRAIN" --run_dir "$RUNS/env.master_port_too_big" --set "$TINY,$TWO"
c env.world_mismatch refused "parallel.world_size is 2" -- env $E LOCAL_WORLD_SIZE=1 WORLD_SIZE=1 RANK=0 "$TRAIN" --run_dir "$RUNS/env.world_mismatch" --set "$TINY,$TWO"
c env.one_rank ok "done: 2 steps" -- env $E LOCAL_WORLD_SIZE=1 WORLD_SIZE=1 RANK=0 "$TRAIN" --run_dir "$RUNS/env.one_rank" --set "$TINY,$ONE"

# ================================================================ data (indexed datasets)
area data
V="$FX/v"
td data.indexed ok "done: 2 steps" "$V"
td data.bpe_ok ok "done: 2 steps" "$FX/bpe" "model.vocab_size=300"
td data.int64_ok ok "done: 2 steps" "$FX/bpe64" "model.vocab_size=300"
td data.int8_ok ok "done: 2 steps" "$FX/i8"
t data.no_path refused "data.path" "data.source=indexed"
td data.path_is_dir refused "is a directory" "$FX"
td data.path_with_extension refused "without the extension" "$V.bin"
td data.missing_prefix refused "nope.idx" "$RUNS/nope"
ds noidx; rm "$RUNS/noidx.idx"
td data.missing_idx refused "noidx.idx" "$RUNS/noidx"
ds nobin; rm "$RUNS/nobin.bin"
td data.missing_bin refused "nobin.bin" "$RUNS/nobin"
ds eidx; : > "$RUNS/eidx.idx"
td data.empty_idx refused "eidx.idx" "$RUNS/eidx"
ds ebin; : > "$RUNS/ebin.bin"
td data.empty_bin refused "ebin.bin" "$RUNS/ebin"
ds magic; poke "$RUNS/magic.idx" 0 'XXIDIDX'
td data.bad_magic refused "magic" "$RUNS/magic"
ds version; poke "$RUNS/version.idx" 9 '\x02'
td data.bad_version refused "version 2" "$RUNS/version"
ds dtype32; poke "$RUNS/dtype32.idx" 17 '\x04'   # int32 over a uint8 .bin
td data.wrong_dtype_int32 refused "int32" "$RUNS/dtype32"
ds dtype16; poke "$RUNS/dtype16.idx" 17 '\x08'   # uint16 over a uint8 .bin
td data.wrong_dtype_uint16 refused "uint16" "$RUNS/dtype16"
ds dtypef; poke "$RUNS/dtypef.idx" 17 '\x07'     # float32
td data.float_dtype refused "float32" "$RUNS/dtypef"
ds dtype99; poke "$RUNS/dtype99.idx" 17 '\x63'
td data.unknown_dtype refused "dtype code 99" "$RUNS/dtype99"
ds tidx; truncate -s 600 "$RUNS/tidx.idx"
td data.idx_truncated refused "truncated" "$RUNS/tidx"
ds hdr; truncate -s 20 "$RUNS/hdr.idx"
td data.idx_header_short refused "header" "$RUNS/hdr"
ds tbin; truncate -s 30000 "$RUNS/tbin.bin"
td data.bin_truncated refused "tbin.bin" "$RUNS/tbin"
ds xbin; head -c 1000 "$V.bin" >> "$RUNS/xbin.bin"
td data.bin_extra_bytes refused "xbin.bin" "$RUNS/xbin"
ds huges; poke "$RUNS/huges.idx" 18 '\xff\xff\xff\xff\xff\xff\xff\x7f'
td data.sequence_count_huge refused "truncated" "$RUNS/huges"
ds negl; poke "$RUNS/negl.idx" 34 '\xff\xff\xff\xff'
td data.negative_length refused "negative length" "$RUNS/negl"
ds docx; poke "$RUNS/docx.idx" $((34 + 12 * 58 + 8)) '\x00\x10\x00\x00\x00\x00\x00\x00'
td data.document_index_bad refused "document index" "$RUNS/docx"
cp "$V.idx" "$RUNS/swap.idx"; cp "$FX/i8.bin" "$RUNS/swap.bin"   # another dataset's .bin
td data.bin_of_another_dataset refused "swap.bin" "$RUNS/swap"
ds isdir; rm "$RUNS/isdir.idx"; mkdir "$RUNS/isdir.idx"
td data.idx_is_dir refused "is a directory" "$RUNS/isdir"
ds loop; rm "$RUNS/loop.bin"; ln -s loop.bin "$RUNS/loop.bin"
td data.bin_symlink_loop refused "loop.bin" "$RUNS/loop"
ds devnull; rm "$RUNS/devnull.bin"; ln -s /dev/null "$RUNS/devnull.bin"
td data.bin_dev_null refused "devnull.bin" "$RUNS/devnull"
# A FIFO as .bin: open() blocks for a writer that never comes.
ds fifo; rm "$RUNS/fifo.bin"; mkfifo "$RUNS/fifo.bin"
c data.bin_fifo refused "fifo.bin" -t 4 -- "$TRAIN" --run_dir "$RUNS/data.bin_fifo" --set "$TINY,data.source=indexed,data.path=$RUNS/fifo"
td data.zero_documents refused "hold 0 tokens" "$FX/zero"
td data.too_small refused "needs 33" "$FX/tiny"
td data.too_small_for_valid_fraction refused "data.valid_fraction" "$FX/bpe" "model.vocab_size=300,model.seq_len=512"
# Token ids beyond model.vocab_size: refused naming the id in the first step, which left the run
# dir; a run that fails before its first step now removes what its start-up wrote.
td data.ids_beyond_vocab refused "outside model.vocab_size" "$FX/bpe"

# ================================================================ checkpoints (resume, init_from)
area checkpoint
I=checkpoints/iter_0000004
ck cp.resume; rs cp.resume ok "resumed from"
ck cp.resume_other_layout; rs cp.resume_other_layout ok "resumed from" "$ONE"
ck cp.latest_empty; : > "$RUNS/cp.latest_empty/checkpoints/latest"; rs cp.latest_empty refused "checkpoints/latest"
ck cp.latest_text; printf 'abc' > "$RUNS/cp.latest_text/checkpoints/latest"; rs cp.latest_text refused "checkpoints/latest"
ck cp.latest_negative; printf -- '-1' > "$RUNS/cp.latest_negative/checkpoints/latest"; rs cp.latest_negative refused "checkpoints/latest"
ck cp.latest_overflow; printf '99999999999999999999' > "$RUNS/cp.latest_overflow/checkpoints/latest"; rs cp.latest_overflow refused "checkpoints/latest"
ck cp.latest_is_dir; rm "$RUNS/cp.latest_is_dir/checkpoints/latest"; mkdir "$RUNS/cp.latest_is_dir/checkpoints/latest"; rs cp.latest_is_dir refused "checkpoints/latest"
ck cp.latest_names_missing; printf '99' > "$RUNS/cp.latest_names_missing/checkpoints/latest"; rs cp.latest_names_missing refused "iter_0000099"
ck cp.latest_fifo; rm "$RUNS/cp.latest_fifo/checkpoints/latest"; mkfifo "$RUNS/cp.latest_fifo/checkpoints/latest"
c cp.latest_fifo refused "checkpoints/latest" -t 4 -- "$TRAIN" --run_dir "$RUNS/cp.latest_fifo" --set "$TINY,train.steps=6,checkpoint.every=2,optim.decay_steps=4"
ck cp.latest_whitespace; printf ' 2 \n' > "$RUNS/cp.latest_whitespace/checkpoints/latest"; rs cp.latest_whitespace ok "resumed from"
# "2abc" (it resumed from step 2) and "0x2" (read as 0) are named as an unreadable latest.
ck cp.latest_trailing_garbage; printf '2abc' > "$RUNS/cp.latest_trailing_garbage/checkpoints/latest"; rs cp.latest_trailing_garbage refused "checkpoints/latest is unreadable"
ck cp.latest_hex; printf '0x2' > "$RUNS/cp.latest_hex/checkpoints/latest"; rs cp.latest_hex refused "checkpoints/latest is unreadable"
ck cp.latest_removed; rm "$RUNS/cp.latest_removed/checkpoints/latest"; rs cp.latest_removed refused "no 'latest'"
ck cp.iter_dir_removed; rm -r "$RUNS/cp.iter_dir_removed/$I"; rs cp.iter_dir_removed refused "iter_0000004"
ck cp.metadata_missing; rm "$RUNS/cp.metadata_missing/$I/metadata.pb"; rs cp.metadata_missing refused "metadata.pb"
ck cp.metadata_empty; : > "$RUNS/cp.metadata_empty/$I/metadata.pb"; rs cp.metadata_empty refused "metadata.pb"
ck cp.metadata_bit_flip; poke "$RUNS/cp.metadata_bit_flip/$I/metadata.pb" 100 '\xff'; rs cp.metadata_bit_flip refused "metadata.pb is corrupted"
ck cp.metadata_truncated; truncate -s 1000 "$RUNS/cp.metadata_truncated/$I/metadata.pb"; rs cp.metadata_truncated refused "metadata.pb"
ck cp.metadata_of_other_step; cp "$RUNS/cp.metadata_of_other_step/checkpoints/iter_0000002/metadata.pb" "$RUNS/cp.metadata_of_other_step/$I/"; rs cp.metadata_of_other_step refused "checksum mismatch"
# "INTERNAL: exception: basic_filebuf::underflow error reading the file: Is a directory" (no file named).
ck cp.metadata_is_dir; rm "$RUNS/cp.metadata_is_dir/$I/metadata.pb"; mkdir "$RUNS/cp.metadata_is_dir/$I/metadata.pb"; rs cp.metadata_is_dir refused "metadata.pb"
ck cp.metadata_fifo; rm "$RUNS/cp.metadata_fifo/$I/metadata.pb"; mkfifo "$RUNS/cp.metadata_fifo/$I/metadata.pb"
c cp.metadata_fifo refused "metadata.pb" -t 4 -- "$TRAIN" --run_dir "$RUNS/cp.metadata_fifo" --set "$TINY,train.steps=6,checkpoint.every=2,optim.decay_steps=4"
ck cp.rank_missing; rm "$RUNS/cp.rank_missing/$I/rank_00001.bin"; rs cp.rank_missing refused "rank_00001.bin"
ck cp.rank_fifo; rm "$RUNS/cp.rank_fifo/$I/rank_00001.bin"; mkfifo "$RUNS/cp.rank_fifo/$I/rank_00001.bin"
c cp.rank_fifo refused "rank_00001.bin" -t 4 -- "$TRAIN" --run_dir "$RUNS/cp.rank_fifo" --set "$TINY,train.steps=6,checkpoint.every=2,optim.decay_steps=4"
ck cp.rank_truncated; truncate -s 1000 "$RUNS/cp.rank_truncated/$I/rank_00000.bin"; rs cp.rank_truncated refused "truncated"
ck cp.rank_empty; : > "$RUNS/cp.rank_empty/$I/rank_00000.bin"; rs cp.rank_empty refused "rank_00000.bin"
ck cp.rank_bit_flip; poke "$RUNS/cp.rank_bit_flip/$I/rank_00002.bin" 5000 '\x55'; rs cp.rank_bit_flip refused "checksum mismatch in"
ck cp.rank_swapped; cp "$RUNS/cp.rank_swapped/$I/rank_00000.bin" "$RUNS/cp.rank_swapped/$I/rank_00001.bin"; rs cp.rank_swapped refused "rank_00001.bin"
ck cp.rank_of_other_step; cp "$RUNS/cp.rank_of_other_step/checkpoints/iter_0000002/rank_00003.bin" "$RUNS/cp.rank_of_other_step/$I/"; rs cp.rank_of_other_step refused "rank_00003.bin"
ck cp.rank_is_dir; rm "$RUNS/cp.rank_is_dir/$I/rank_00003.bin"; mkdir "$RUNS/cp.rank_is_dir/$I/rank_00003.bin"; rs cp.rank_is_dir refused "rank_00003.bin"
# Bytes after the last piece are outside every checksummed range: the weights are intact.
ck cp.rank_trailing_bytes; head -c 100 /dev/zero >> "$RUNS/cp.rank_trailing_bytes/$I/rank_00000.bin"; rs cp.rank_trailing_bytes ok "resumed from"
ck cp.tmp_leftover; cp -r "$RUNS/cp.tmp_leftover/$I" "$RUNS/cp.tmp_leftover/checkpoints/iter_0000006.tmp"; rs cp.tmp_leftover ok "resumed from"
ck cp.stray_file; echo junk > "$RUNS/cp.stray_file/$I/notes.txt"; rs cp.stray_file ok "resumed from"
ck cp.schedule_changed; c cp.schedule_changed refused "optim.decay_steps" -- "$TRAIN" --run_dir "$RUNS/cp.schedule_changed" --set "$TINY,train.steps=6"
ck cp.no_resume; rs cp.no_resume ok "checkpoints.replaced" "checkpoint.no_resume=true"
ck cp.other_n_layer; rs cp.other_n_layer refused "model.n_layer is 2" "model.n_layer=3"
ck cp.other_n_embd; rs cp.other_n_embd refused "model.n_embd is 64" "model.n_embd=32"
ck cp.other_n_head; rs cp.other_n_head refused "model.n_head is 4" "model.n_head=2"
ck cp.other_n_kv_head; rs cp.other_n_kv_head refused "model.n_kv_head" "model.n_kv_head=2"
ck cp.other_ffn_hidden; rs cp.other_ffn_hidden refused "model.ffn_hidden" "model.ffn_hidden=128"
ck cp.other_norm; rs cp.other_norm refused "model.norm" "model.norm=rmsnorm"
ck cp.other_activation; rs cp.other_activation refused "model.activation" "model.activation=swiglu"
ck cp.other_rope; rs cp.other_rope refused "model.rope" "model.rope=true"
ck cp.other_bias; rs cp.other_bias refused "model.no_bias" "model.no_bias=true"
ck cp.other_untied; rs cp.other_untied refused "model.untied_embeddings" "model.untied_embeddings=true"
ck cp.other_vocab; rs cp.other_vocab refused "wte.weight is f32[256, 64]" "model.vocab_size=512"
ck cp.other_seq_len; rs cp.other_seq_len refused "wpe.weight is f32[32, 64]" "model.seq_len=64"
ck cp.other_precision; rs cp.other_precision refused "bf16" "train.precision=bf16"
# AdamW state resumed as Muon: "tensor …/momentum is not in …" read as a damaged checkpoint.
ck cp.other_optimizer; rs cp.other_optimizer refused "optim.matrices is adamw" "optim.matrices=muon"
# A checkpoint of another model put in this run's checkpoints directory.
rm -rf "$RUNS/cp.other_model_dropped_in"; mkdir -p "$RUNS/cp.other_model_dropped_in"; cp -r "$FX/moe/checkpoints" "$RUNS/cp.other_model_dropped_in/"
c cp.other_model_dropped_in refused "model.moe" -- "$TRAIN" --run_dir "$RUNS/cp.other_model_dropped_in" --set "$TINY,train.steps=3"
rm -rf "$RUNS/cp.imported_as_own"; mkdir -p "$RUNS/cp.imported_as_own"; cp -r "$FX/from_hf" "$RUNS/cp.imported_as_own/checkpoints"
c cp.imported_as_own refused "checkpoint.init_from" -- "$TRAIN" --run_dir "$RUNS/cp.imported_as_own" --set "$TINY"
t cp.init_from ok "initialised the model" "checkpoint.init_from=$C"
t cp.init_from_imported ok "initialised the model" "checkpoint.init_from=$FX/from_hf"
t cp.init_from_missing refused "checkpoint.init_from" "checkpoint.init_from=$FX/nope"
t cp.init_from_file refused "checkpoint.init_from" "checkpoint.init_from=$FX/a_file"
t cp.init_from_run_dir refused "checkpoint.init_from" "checkpoint.init_from=$FX/base"
# init_from was opened before the run directory was made, but read after: a refusal there left
# recipe.pbtxt and an empty metrics.jsonl behind.
t cp.init_from_other_layers refused "model.n_layer is 2" "checkpoint.init_from=$C,model.n_layer=3"
t cp.init_from_other_heads refused "model.n_head" "checkpoint.init_from=$C,model.n_head=2"
t cp.init_from_moe refused "checkpoint.init_from: model.moe.num_experts" "checkpoint.init_from=$FX/moe/checkpoints"
t cp.init_model ok "initialised the model" "checkpoint.init_model=true,checkpoint.init_from=$FX/from_hf"
t cp.init_model_without_init_from refused "checkpoint.init_from" "checkpoint.init_model=true"
ck cp.corrupt_for_init; poke "$RUNS/cp.corrupt_for_init/$I/metadata.pb" 100 '\xff'
t cp.init_from_corrupt refused "metadata.pb is corrupted" "checkpoint.init_from=$RUNS/cp.corrupt_for_init/checkpoints"

# ================================================================ tools/ckpt
area ckpt
O="$RUNS/ckpt"; mkdir -p "$O"
c ck.inspect ok "iteration 4" -- "$CKPT" inspect "$C"
c ck.inspect_iter_dir ok "iteration 2" -- "$CKPT" inspect "$C/iter_0000002"
c ck.inspect_no_arg refused "usage" -- "$CKPT" inspect
c ck.inspect_missing refused "nope" -- "$CKPT" inspect "$FX/nope"
c ck.inspect_run_dir refused "no checkpoint in" -- "$CKPT" inspect "$FX/base"
c ck.inspect_metadata_file refused "metadata.pb" -- "$CKPT" inspect "$C/iter_0000002/metadata.pb"
# A second checkpoint argument is ignored (exit 0, one checkpoint shown).
c ck.inspect_extra_arg refused "extra" -- "$CKPT" inspect "$C" extra
c ck.no_command refused "usage" -- "$CKPT"
c ck.unknown_command refused "usage" -- "$CKPT" frobnicate "$C"
c ck.inspect_latest_garbage refused "checkpoints/latest is" -- "$CKPT" inspect "$RUNS/cp.latest_text/checkpoints"
c ck.inspect_metadata_flip refused "metadata.pb is corrupted" -- "$CKPT" inspect "$RUNS/cp.metadata_bit_flip/checkpoints"
c ck.inspect_metadata_empty refused "metadata.pb" -- "$CKPT" inspect "$RUNS/cp.metadata_empty/checkpoints"
c ck.export ok "wrote 36 tensors" -- "$CKPT" export --format safetensors "$C" "$O/gtp.safetensors"
c ck.export_hf_gpt2 ok "wrote 28 tensors" -- "$CKPT" export --format safetensors --names hf-gpt2 "$C" "$O/hf_gpt2.safetensors"
c ck.export_llama_of_gpt2 refused "lm_head.weight" -- "$CKPT" export --format safetensors --names hf-llama "$C" "$O/llama.safetensors"
c ck.export_names_bogus refused "--names" -- "$CKPT" export --format safetensors --names bogus "$C" "$O/bogus.safetensors"
c ck.export_format_bogus refused "--format" -- "$CKPT" export --format onnx "$C" "$O/x.onnx"
c ck.export_no_output refused "usage" -- "$CKPT" export --format safetensors "$C"
c ck.export_vocab_zero refused "--vocab" -- "$CKPT" export --format safetensors --names hf-gpt2 --vocab 0 "$C" "$O/v0"
c ck.export_vocab_text refused "--vocab" -- "$CKPT" export --format safetensors --names hf-gpt2 --vocab abc "$C" "$O/vabc"
c ck.export_vocab_cuts_rows refused "--vocab 100" -- "$CKPT" export --format safetensors --names hf-gpt2 --vocab 100 "$C" "$O/v100"
c ck.export_vocab_with_gtp_names refused "--names gtp" -- "$CKPT" export --format safetensors --vocab 256 "$C" "$O/v256"
c ck.export_into_missing_dir refused "x.safetensors" -- "$CKPT" export --format safetensors "$C" "$O/no/such/dir/x.safetensors"
mkdir -p "$O/a_dir"
# Refused only by the final rename, it left a_dir.tmp (the whole export) beside it.
c ck.export_onto_dir refused "a_dir is a directory" -r "$O/a_dir.tmp" -- "$CKPT" export --format safetensors "$C" "$O/a_dir"
c ck.export_rank_flip refused "checksum mismatch" -- "$CKPT" export --format safetensors "$RUNS/cp.rank_bit_flip/checkpoints" "$O/flip.safetensors"
c ck.export_rank_truncated refused "truncated" -- "$CKPT" export --format safetensors "$RUNS/cp.rank_truncated/checkpoints" "$O/trunc.safetensors"
c ck.export_rank_missing refused "rank_00001.bin" -- "$CKPT" export --format safetensors "$RUNS/cp.rank_missing/checkpoints" "$O/missing.safetensors"
c ck.export_metadata_truncated refused "metadata.pb" -- "$CKPT" export --format safetensors "$RUNS/cp.metadata_truncated/checkpoints" "$O/mtrunc.safetensors"
c ck.export_hf ok "GPT2LMHeadModel" -- "$CKPT" export --format hf "$C" "$O/hf"
c ck.export_hf_not_empty refused "is not empty" -- "$CKPT" export --format hf "$C" "$O/hf"
c ck.export_hf_onto_file refused "not a directory" -- "$CKPT" export --format hf "$C" "$O/gtp.safetensors"
c ck.export_hf_vocab_without_merges refused "--merges" -- "$CKPT" export --format hf --vocab_json "$FX/bpe300/vocab.json" "$C" "$O/hf_tok"
c ck.export_hf_tokenizer_too_big refused "model.vocab_size is 256" -- "$CKPT" export --format hf --vocab_json "$FX/bpe300/vocab.json" --merges "$FX/bpe300/merges.txt" "$C" "$O/hf_tok2"
c ck.export_hf_tokenizer_missing refused "nope.json" -- "$CKPT" export --format hf --vocab_json "$FX/nope.json" --merges "$FX/bpe300/merges.txt" "$C" "$O/hf_tok3"
c ck.export_hf_recorded_tokenizer ok "tokenizer: vocab.json" -- "$CKPT" export --format hf "$FX/bperun_tok/checkpoints" "$O/hf_bpe"
c ck.export_hf_recorded_tokenizer_gone refused "data.tokenizer_vocab" -- "$CKPT" export --format hf "$FX/bperun_tok_gone/checkpoints" "$O/hf_bpe_gone"
c ck.export_hf_moe refused "MoE" -- "$CKPT" export --format hf "$FX/moe/checkpoints" "$O/hf_moe"
c ck.import ok "GPT2LMHeadModel" -- "$CKPT" import --format hf "$FX/hf" "$O/imported"
c ck.import_existing refused "already holds a checkpoint" -- "$CKPT" import --format hf "$FX/hf" "$FX/from_hf"
c ck.import_missing refused "config.json" -- "$CKPT" import --format hf "$FX/nope" "$O/imp_missing"
c ck.import_from_file refused "config.json" -- "$CKPT" import --format hf "$O/gtp.safetensors" "$O/imp_file"
c ck.import_format_bogus refused "--format" -- "$CKPT" import --format gguf "$FX/hf" "$O/imp_gguf"
c ck.import_into_file refused "Not a directory" -- "$CKPT" import --format hf "$FX/hf" "$FX/a_file"
hf() {  # hf NAME: a copy of the HF directory to damage
  rm -rf "$RUNS/hf_$1"; cp -r "$FX/hf" "$RUNS/hf_$1"
}
hf nost; rm "$RUNS/hf_nost/model.safetensors"
c ck.import_no_safetensors refused "model.safetensors" -- "$CKPT" import --format hf "$RUNS/hf_nost" "$O/imp_nost"
hf badjson; echo '{"architectures": [' > "$RUNS/hf_badjson/config.json"
c ck.import_bad_json refused "not valid JSON" -- "$CKPT" import --format hf "$RUNS/hf_badjson" "$O/imp_badjson"
hf arch; sed -i 's/GPT2LMHeadModel/BertModel/' "$RUNS/hf_arch/config.json"
c ck.import_architecture refused "BertModel" -- "$CKPT" import --format hf "$RUNS/hf_arch" "$O/imp_arch"
hf shape; sed -i 's/"n_embd": 64/"n_embd": 128/' "$RUNS/hf_shape/config.json"
c ck.import_shape_mismatch refused "transformer.wte.weight" -- "$CKPT" import --format hf "$RUNS/hf_shape" "$O/imp_shape"
hf more; sed -i 's/"n_layer": 2/"n_layer": 3/' "$RUNS/hf_more/config.json"
c ck.import_missing_layer refused "lacks tensor" -- "$CKPT" import --format hf "$RUNS/hf_more" "$O/imp_more"
hf fewer; sed -i 's/"n_layer": 2/"n_layer": 1/' "$RUNS/hf_fewer/config.json"
c ck.import_extra_layer refused "n_layer is 1" -- "$CKPT" import --format hf "$RUNS/hf_fewer" "$O/imp_fewer"
hf neg; sed -i 's/"n_layer": 2/"n_layer": -2/' "$RUNS/hf_neg/config.json"
c ck.import_negative_layers refused "n_layer" -- "$CKPT" import --format hf "$RUNS/hf_neg" "$O/imp_neg"
hf vz; sed -i 's/"vocab_size": 256/"vocab_size": 0/' "$RUNS/hf_vz/config.json"
c ck.import_vocab_zero refused "vocab_size" -- "$CKPT" import --format hf "$RUNS/hf_vz" "$O/imp_vz"
hf heads; sed -i 's/"n_head": 4/"n_head": 3/' "$RUNS/hf_heads/config.json"
c ck.import_heads_indivisible refused "n_head" -- "$CKPT" import --format hf "$RUNS/hf_heads" "$O/imp_heads"
hf trunc; truncate -s 100000 "$RUNS/hf_trunc/model.safetensors"
c ck.import_truncated_safetensors refused "model.safetensors" -- "$CKPT" import --format hf "$RUNS/hf_trunc" "$O/imp_trunc"
hf fifo; rm "$RUNS/hf_fifo/config.json"; mkfifo "$RUNS/hf_fifo/config.json"
c ck.import_config_fifo refused "config.json" -t 4 -- "$CKPT" import --format hf "$RUNS/hf_fifo" "$O/imp_fifo"
hf hdr; printf '\xff\xff\xff\xff\xff\xff\xff\x7f{' > "$RUNS/hf_hdr/model.safetensors"
c ck.import_header_length refused "header length" -- "$CKPT" import --format hf "$RUNS/hf_hdr" "$O/imp_hdr"

# ================================================================ tools/generate
area generate
c gen.ok ok "generated 5 tokens" -- "$GENERATE" --checkpoint "$C" --prompt "The " --max_tokens 5 --temperature 0
c gen.context_limit ok "stopped after 32 tokens" -- "$GENERATE" --checkpoint "$C" --max_tokens 100 --temperature 0
c gen.iter_dir ok "generated 3 tokens" -- "$GENERATE" --checkpoint "$C/iter_0000002" --max_tokens 3
c gen.imported ok "generated 3 tokens" -- "$GENERATE" --checkpoint "$FX/from_hf" --max_tokens 3
c gen.recorded_tokenizer ok "generated 5 tokens" -- "$GENERATE" --checkpoint "$FX/bperun_tok/checkpoints" --prompt "line" --max_tokens 5
c gen.recorded_tokenizer_gone refused "tok_gone/vocab.json" -- "$GENERATE" --checkpoint "$FX/bperun_tok_gone/checkpoints" --max_tokens 5
c gen.stop_text ok "generated" -- "$GENERATE" --checkpoint "$C" --max_tokens 20 --stop "e"
c gen.no_checkpoint refused "--checkpoint" -- "$GENERATE" --prompt "The "
c gen.missing refused "no checkpoint in" -- "$GENERATE" --checkpoint "$FX/nope"
c gen.max_tokens_negative refused "--max_tokens" -- "$GENERATE" --checkpoint "$C" --max_tokens -1
c gen.max_tokens_text refused "max_tokens" -- "$GENERATE" --checkpoint "$C" --max_tokens abc
c gen.max_tokens_overflow refused "max_tokens" -- "$GENERATE" --checkpoint "$C" --max_tokens 99999999999
c gen.temperature_negative refused "--temperature" -- "$GENERATE" --checkpoint "$C" --temperature -1
c gen.temperature_nan refused "--temperature" -- "$GENERATE" --checkpoint "$C" --temperature nan
c gen.temperature_inf refused "--temperature" -- "$GENERATE" --checkpoint "$C" --temperature inf
c gen.top_k_negative refused "--top_k" -- "$GENERATE" --checkpoint "$C" --top_k -3
c gen.top_p_zero refused "--top_p" -- "$GENERATE" --checkpoint "$C" --top_p 0
c gen.top_p_above_one refused "--top_p" -- "$GENERATE" --checkpoint "$C" --top_p 1.5
c gen.top_p_nan refused "--top_p" -- "$GENERATE" --checkpoint "$C" --top_p nan
c gen.seed_negative refused "seed" -- "$GENERATE" --checkpoint "$C" --seed -1
c gen.device_unknown refused "--device" -- "$GENERATE" --checkpoint "$C" --device tpu
if [ "$HAVE_GPU" = 0 ]; then
  c gen.device_cuda_without_gpu refused "--device=cuda" -- "$GENERATE" --checkpoint "$C" --device cuda
fi
c gen.vocab_without_merges refused "--merges" -- "$GENERATE" --checkpoint "$C" --vocab "$FX/bpe300/vocab.json"
c gen.tokenizer_too_big refused "outside the model's vocabulary" -- "$GENERATE" --checkpoint "$C" --vocab "$FX/bpe300/vocab.json" --merges "$FX/bpe300/merges.txt"
c gen.vocab_missing refused "nope.json" -- "$GENERATE" --checkpoint "$C" --vocab "$FX/nope.json" --merges "$FX/bpe300/merges.txt"
c gen.prompt_too_long refused "the model's context is 32" -- "$GENERATE" --checkpoint "$C" --prompt "$(head -c 100 "$FX/lines.txt")"
c gen.unknown_flag refused "bogus" -- "$GENERATE" --checkpoint "$C" --bogus
c gen.moe refused "mixture-of-experts" -- "$GENERATE" --checkpoint "$FX/moe/checkpoints"
c gen.metadata_flip refused "metadata.pb is corrupted" -- "$GENERATE" --checkpoint "$RUNS/cp.metadata_bit_flip/checkpoints"
c gen.rank_flip refused "checksum mismatch" -- "$GENERATE" --checkpoint "$RUNS/cp.rank_bit_flip/checkpoints"
c gen.rank_missing refused "rank_00001.bin" -- "$GENERATE" --checkpoint "$RUNS/cp.rank_missing/checkpoints"
c gen.latest_garbage refused "checkpoints/latest is" -- "$GENERATE" --checkpoint "$RUNS/cp.latest_text/checkpoints"

# ================================================================ tools/eval
area eval
c ev.ok ok "perplexity" -- "$EVAL" --checkpoint "$C"
c ev.other_layout ok "perplexity" -- "$EVAL" --checkpoint "$C" --samples 4 --set "$ONE"
c ev.indexed_data ok "perplexity" -- "$EVAL" --checkpoint "$C" --samples 4 --set "data.source=indexed,data.path=$FX/v"
c ev.no_checkpoint refused "--checkpoint" -- "$EVAL"
c ev.missing refused "no checkpoint in" -- "$EVAL" --checkpoint "$FX/nope"
c ev.samples_negative refused "--samples" -- "$EVAL" --checkpoint "$C" --samples -1
c ev.samples_text refused "samples" -- "$EVAL" --checkpoint "$C" --samples abc
# The validation split holds about 1 600 samples of 33 tokens; 5000 scored them three times over
# and reported "tokens 160000".
c ev.samples_beyond_split refused "--samples" -- "$EVAL" --checkpoint "$C" --samples 5000
c ev.other_layers refused "h.2.attn.q.weight" -- "$EVAL" --checkpoint "$C" --samples 4 --set model.n_layer=3
c ev.other_width refused "wte.weight" -- "$EVAL" --checkpoint "$C" --samples 4 --set model.n_embd=32
c ev.set_unknown refused "bogus.key" -- "$EVAL" --checkpoint "$C" --set bogus.key=1
c ev.set_bad_value refused "optim.lr" -- "$EVAL" --checkpoint "$C" --set optim.lr=-1
c ev.world_indivisible refused "parallel.world_size" -- "$EVAL" --checkpoint "$C" --set parallel.world_size=3
c ev.data_missing refused "nope.idx" -- "$EVAL" --checkpoint "$C" --set "data.source=indexed,data.path=$FX/nope"
# (One rank: the split of 3 samples holds no micro-batch of 2 over 2 lanes, ev.split_below_a_batch.)
c ev.data_beyond_vocab refused "outside model.vocab_size" -- "$EVAL" --checkpoint "$C" --samples 2 --set "$ONE,data.source=indexed,data.path=$FX/bpe"
c ev.split_below_a_batch refused "fewer than one micro-batch" -- "$EVAL" --checkpoint "$C" --samples 4 --set "data.source=indexed,data.path=$FX/bpe"
if [ "$HAVE_GPU" = 0 ]; then
  c ev.cuda_without_gpu refused "train.device is cuda" -- "$EVAL" --checkpoint "$C" --set train.device=cuda
fi
c ev.metadata_flip refused "metadata.pb is corrupted" -- "$EVAL" --checkpoint "$RUNS/cp.metadata_bit_flip/checkpoints"
c ev.rank_flip refused "checksum mismatch" -- "$EVAL" --checkpoint "$RUNS/cp.rank_bit_flip/checkpoints" --samples 4
c ev.moe ok "perplexity" -- "$EVAL" --checkpoint "$FX/moe/checkpoints" --samples 4
c ev.imported ok "perplexity" -- "$EVAL" --checkpoint "$FX/from_hf" --samples 8
c ev.samples_not_whole_batches refused "give a multiple of 8" -- "$EVAL" --checkpoint "$FX/from_hf" --samples 4

# ================================================================ tools/data: make_indexed, train_bpe, inspect_indexed
area make_indexed
D="$RUNS/mi"; mkdir -p "$D"
c mi.ok ok "1 documents" -- "$MAKE_INDEXED" --output="$D/ok" "$FX/lines.txt"
c mi.lines ok "80 documents" -- "$MAKE_INDEXED" --output="$D/lines" --documents=line "$FX/lines.txt"
c mi.corpus ok "documents" -- "$MAKE_INDEXED" --output="$D/corpus" --corpus=validation
c mi.empty_input ok "0 documents" -- "$MAKE_INDEXED" --output="$D/empty" "$FX/empty.txt"
c mi.new_parent_dirs ok "wrote" -- "$MAKE_INDEXED" --output="$D/new/sub/x" "$FX/lines.txt"
c mi.no_output refused "--output" -- "$MAKE_INDEXED" "$FX/lines.txt"
c mi.no_input refused "input files" -- "$MAKE_INDEXED" --output="$D/x"
c mi.input_and_corpus refused "--corpus" -- "$MAKE_INDEXED" --output="$D/x" --corpus=all "$FX/lines.txt"
c mi.documents_unknown refused "--documents" -- "$MAKE_INDEXED" --output="$D/x" --documents=sentence "$FX/lines.txt"
c mi.dtype_float refused "f32" -- "$MAKE_INDEXED" --output="$D/x" --dtype=f32 "$FX/lines.txt"
c mi.dtype_unknown refused "bogus" -- "$MAKE_INDEXED" --output="$D/x" --dtype=bogus "$FX/lines.txt"
printf 'caf\xc3\xa9 na\xc3\xafve\n' > "$FX/utf8.txt"
c mi.dtype_too_narrow refused "does not fit int8" -r "$D/i8.bin" -- "$MAKE_INDEXED" --output="$D/i8" --dtype=i8 "$FX/utf8.txt"
c mi.bpe_into_uint8 refused "does not fit uint8" -r "$D/u8.bin" -- "$MAKE_INDEXED" --output="$D/u8" --dtype=u8 --vocab="$FX/bpe300/vocab.json" --merges="$FX/bpe300/merges.txt" "$FX/lines.txt"
c mi.corpus_unknown refused "bogus" -- "$MAKE_INDEXED" --output="$D/x" --corpus=bogus
c mi.input_missing refused "nope.txt" -- "$MAKE_INDEXED" --output="$D/x" "$FX/nope.txt"
c mi.input_directory refused "is a directory" -- "$MAKE_INDEXED" --output="$D/x" "$FX"
c mi.output_under_file refused "a_file" -- "$MAKE_INDEXED" --output="$FX/a_file/x" "$FX/lines.txt"
# --output=DIR/ wrote DIR/.bin and DIR/.idx (hidden files with an empty name).
c mi.output_trailing_slash refused "--output is a prefix" -r "$D/.bin" -- "$MAKE_INDEXED" --output="$D/" "$FX/lines.txt"
c mi.append_eod_without_bpe refused "--append_eod" -- "$MAKE_INDEXED" --output="$D/x" --append_eod "$FX/lines.txt"
c mi.vocab_without_merges refused "--merges" -- "$MAKE_INDEXED" --output="$D/x" --vocab="$FX/bpe300/vocab.json" "$FX/lines.txt"
c mi.vocab_missing refused "nope.json" -- "$MAKE_INDEXED" --output="$D/x" --vocab="$FX/nope.json" --merges="$FX/bpe300/merges.txt" "$FX/lines.txt"
c mi.vocab_and_merges_swapped refused "merges.txt" -- "$MAKE_INDEXED" --output="$D/x" --vocab="$FX/bpe300/merges.txt" --merges="$FX/bpe300/vocab.json" "$FX/lines.txt"
printf '{"text": "a"}\n{"txt": "b"}\n' > "$FX/missing_key.jsonl"
printf '{"text": 5}\n' > "$FX/number.jsonl"
printf '{"text": "unterminated\n' > "$FX/unterminated.jsonl"
c mi.json_not_json refused "lines.txt line 1" -- "$MAKE_INDEXED" --output="$D/x" --json_key=text "$FX/lines.txt"
c mi.json_missing_key refused "line 2: no string field" -r "$D/x.bin" -- "$MAKE_INDEXED" --output="$D/x" --json_key=text "$FX/missing_key.jsonl"
c mi.json_not_string refused "not a string" -- "$MAKE_INDEXED" --output="$D/x" --json_key=text "$FX/number.jsonl"
c mi.json_unterminated refused "unterminated" -- "$MAKE_INDEXED" --output="$D/x" --json_key=text "$FX/unterminated.jsonl"
c mi.json_with_corpus refused "--json_key" -- "$MAKE_INDEXED" --output="$D/x" --json_key=text --corpus=all
c mi.unknown_flag refused "frob" -- "$MAKE_INDEXED" --output="$D/x" --frob "$FX/lines.txt"

area train_bpe
B="$RUNS/tb"; mkdir -p "$B"
c tb.ok ok "wrote" -- "$TRAIN_BPE" --input="$FX/lines.txt,$FX/tiny.txt" --vocab_size=300 --out_dir="$B/ok"
c tb.corpus ok "wrote" -- "$TRAIN_BPE" --corpus=validation --vocab_size=260 --out_dir="$B/corpus"
c tb.empty_input ok "257 tokens" -- "$TRAIN_BPE" --input="$FX/empty.txt" --vocab_size=300 --out_dir="$B/empty"
c tb.vocab_beyond_pairs ok "no pair left" -- "$TRAIN_BPE" --input="$FX/tiny.txt" --vocab_size=2147483647 --out_dir="$B/huge"
c tb.vocab_too_small refused "--vocab_size >= 257" -- "$TRAIN_BPE" --corpus=validation --vocab_size=256 --out_dir="$B/x"
c tb.vocab_negative refused "--vocab_size" -- "$TRAIN_BPE" --corpus=validation --vocab_size=-5 --out_dir="$B/x"
c tb.vocab_text refused "vocab_size" -- "$TRAIN_BPE" --corpus=validation --vocab_size=abc --out_dir="$B/x"
c tb.no_out_dir refused "--out_dir" -- "$TRAIN_BPE" --corpus=validation --vocab_size=300
c tb.no_input refused "--input" -- "$TRAIN_BPE" --vocab_size=300 --out_dir="$B/x"
c tb.corpus_unknown refused "bogus" -- "$TRAIN_BPE" --corpus=bogus --vocab_size=300 --out_dir="$B/x"
c tb.input_missing refused "nope.txt" -- "$TRAIN_BPE" --input="$FX/nope.txt" --vocab_size=300 --out_dir="$B/x"
c tb.input_directory refused "is a directory" -- "$TRAIN_BPE" --input="$FX" --vocab_size=300 --out_dir="$B/x"
c tb.input_empty_name refused "cannot open" -- "$TRAIN_BPE" --input=, --vocab_size=300 --out_dir="$B/x"
c tb.out_dir_is_file refused "a_file" -- "$TRAIN_BPE" --input="$FX/lines.txt" --vocab_size=300 --out_dir="$FX/a_file"
c tb.json_not_json refused "line 1" -- "$TRAIN_BPE" --input="$FX/lines.txt" --json_key=text --vocab_size=300 --out_dir="$B/x"
c tb.json_with_corpus refused "--json_key" -- "$TRAIN_BPE" --corpus=validation --json_key=text --vocab_size=300 --out_dir="$B/x"
# A stray argument got "need --out_dir, --vocab_size >= 257 and either --input or --corpus", all given.
c tb.stray_argument refused "unexpected argument 'extra'" -- "$TRAIN_BPE" --input="$FX/lines.txt" --vocab_size=300 --out_dir="$B/x" extra

area inspect_indexed
c ii.ok ok "documents  58" -- "$INSPECT" "$V" --show=1
c ii.text ok "doc 0" -- "$INSPECT" "$V" --show=1 --text
c ii.zero_documents ok "documents  0" -- "$INSPECT" "$FX/zero"
c ii.show_more_than_there_are ok "doc 57" -- "$INSPECT" "$V" --show=1000000
c ii.no_prefix refused "PREFIX" -- "$INSPECT"
c ii.two_prefixes refused "PREFIX" -- "$INSPECT" "$V" "$V"
c ii.missing refused "nope.idx" -- "$INSPECT" "$FX/nope"
c ii.bad_magic refused "magic" -- "$INSPECT" "$RUNS/magic"
c ii.float_dtype refused "float32" -- "$INSPECT" "$RUNS/dtypef"
c ii.wrong_dtype refused "int32" -- "$INSPECT" "$RUNS/dtype32"
c ii.bin_truncated refused "truncated" -- "$INSPECT" "$RUNS/tbin"
c ii.idx_is_dir refused "is a directory" -- "$INSPECT" "$RUNS/isdir"
c ii.show_text refused "show" -- "$INSPECT" "$V" --show=abc
c ii.bin_fifo refused "fifo.bin" -t 4 -- "$INSPECT" "$RUNS/fifo"
# Negative counts are taken as 0 (exit 0).
c ii.show_negative refused "--show" -- "$INSPECT" "$V" --show=-5
c ii.max_tokens_negative refused "--max_tokens" -- "$INSPECT" "$V" --show=1 --max_tokens=-1

# ================================================================ tools/plot_metrics
area plot_metrics
P="$RUNS/pm"; mkdir -p "$P"
printf 'garbage\n{"step": "x", "loss": "y"}\n' > "$FX/garbage.jsonl"
# plot.py (matplotlib): its flags always; its data paths where matplotlib is installed.
c py.no_args refused "usage" -- python3 "$PLOT_PY"
c py.smooth_out_of_range refused "--smooth" -- python3 "$PLOT_PY" "$FX/base/metrics.jsonl" "$P/py.png" --smooth 1.5
c py.smooth_nan refused "--smooth" -- python3 "$PLOT_PY" "$FX/base/metrics.jsonl" "$P/py.png" --smooth nan
c py.smooth_text refused "--smooth" -- python3 "$PLOT_PY" "$FX/base/metrics.jsonl" "$P/py.png" --smooth abc
if python3 -c "import matplotlib" > /dev/null 2>&1; then
  c py.ok ok "wrote" -- python3 "$PLOT_PY" "$FX/base/metrics.jsonl" "$P/py.png"
  c py.missing refused "nope.jsonl" -- python3 "$PLOT_PY" "$FX/nope.jsonl" "$P/py.png"
  c py.empty refused "no loss records" -- python3 "$PLOT_PY" "$FX/empty.jsonl" "$P/py.png"
  c py.not_json refused "not JSON" -- python3 "$PLOT_PY" "$FX/garbage.jsonl" "$P/py.png"
  c py.all_nan_losses refused "no loss records" -- python3 "$PLOT_PY" "$FX/nanrun/metrics.jsonl" "$P/py.png"
else
  c py.without_matplotlib refused@2 "matplotlib is not installed" -- python3 "$PLOT_PY" "$FX/base/metrics.jsonl" "$P/py.png"
fi
if [ -z "$PLOT" ]; then
  echo "(the plot_metrics binary was not given (--plot_metrics): its 12 cases are skipped)"
else
c pm.ok ok "wrote" -- "$PLOT" "$FX/base/metrics.jsonl" "$P/ok.png"
c pm.no_args refused "usage" -- "$PLOT"
c pm.one_arg refused "usage" -- "$PLOT" "$FX/base/metrics.jsonl"
c pm.three_args refused "usage" -- "$PLOT" "$FX/base/metrics.jsonl" "$P/x.png" extra
c pm.missing refused "nope.jsonl" -- "$PLOT" "$FX/nope.jsonl" "$P/x.png"
c pm.empty refused "no loss records" -- "$PLOT" "$FX/empty.jsonl" "$P/x.png"
c pm.binary_file refused "no loss records" -- "$PLOT" "$C/iter_0000002/rank_00000.bin" "$P/x.png"
c pm.out_missing_dir refused "x.png" -- "$PLOT" "$FX/base/metrics.jsonl" "$P/no/such/x.png"
c pm.out_is_dir refused "cannot write" -- "$PLOT" "$FX/base/metrics.jsonl" "$P"
# A directory as input read as empty: "no loss records in DIR".
c pm.input_directory refused "is a directory" -- "$PLOT" "$FX" "$P/x.png"
# Non-numbers read as 0: a plot of step 0, loss 0.
c pm.non_numeric_values refused "line 1 is not a metrics record ({\"step\"" -- "$PLOT" "$FX/garbage.jsonl" "$P/g.png"
# The trainer's own metrics of a NaN run plotted axes 1e+300..-1e+300, a meaningless PNG, exit 0.
c pm.all_nan_losses refused "losses are NaN or Inf" -- "$PLOT" "$FX/nanrun/metrics.jsonl" "$P/nan.png"
fi

# ================================================================ launcher (tools/gtprun)
area gtprun
c gr.ok ok "" -- "$GTPRUN" --nproc 2 -- /bin/true
c gr.nproc_zero refused "--nproc" -- "$GTPRUN" --nproc 0 -- /bin/true
c gr.nproc_negative refused "--nproc" -- "$GTPRUN" --nproc -3 -- /bin/true
c gr.nproc_text refused "nproc" -- "$GTPRUN" --nproc abc -- /bin/true
c gr.no_program refused "no program" -- "$GTPRUN" --nproc 2
c gr.program_missing refused "nope/prog" -- "$GTPRUN" --nproc 2 -- "$FX/nope/prog"
c gr.program_not_in_path refused "not found in PATH" -- "$GTPRUN" --nproc 2 -- no_such_program_xyz
c gr.program_is_dir refused "cannot execute" -- "$GTPRUN" --nproc 2 -- "$FX"
c gr.program_not_executable refused "Permission denied" -- "$GTPRUN" --nproc 2 -- "$FX/lines.txt"
cp "$FX/lines.txt" "$FX/not_a_program"; chmod +x "$FX/not_a_program"
c gr.program_bad_format refused "Exec format error" -- "$GTPRUN" --nproc 2 -- "$FX/not_a_program"
c gr.all_ranks_exit_3 refused "FAILED: rank" -- "$GTPRUN" --nproc 2 -- bash -c 'exit 3'
c gr.one_rank_fails refused "rank 1 exited with exit status 7" -- "$GTPRUN" --nproc 3 -- bash -c '[ "$RANK" = 1 ] && exit 7; sleep 30'
c gr.rank_killed_by_signal refused@139 "signal 11" -- "$GTPRUN" --nproc 2 -- bash -c '[ "$RANK" = 1 ] && kill -SEGV $$; sleep 30'
# Rank 0 ignores SIGTERM (rank 1 fails once rank 0's trap is set): killed after the grace period.
c gr.rank_ignores_sigterm refused "SIGKILL" -- "$GTPRUN" --nproc 2 --grace_period=1s -- bash -c \
  'trap "" TERM; f=$0/trap_set; if [ "$RANK" = 1 ]; then while [ ! -e "$f" ]; do sleep 0.05; done; exit 5; fi; touch "$f"; sleep 30' "$RUNS"
c gr.no_stop_on_failure refused "rank 1 exited with exit status 4" -- "$GTPRUN" --nproc 2 --stop_on_failure=false -- bash -c '[ "$RANK" = 1 ] && exit 4; sleep 1'
c gr.nnodes_zero refused "--nnodes" -- "$GTPRUN" --nproc 2 --nnodes 0 -- /bin/true
c gr.node_rank_too_big refused "--node_rank" -- "$GTPRUN" --nproc 2 --nnodes 2 --node_rank 2 --master_port 29555 -- /bin/true
c gr.nnodes_without_port refused "--master_port" -- "$GTPRUN" --nproc 2 --nnodes 2 -- /bin/true
c gr.gpus_negative refused "--gpus" -- "$GTPRUN" --nproc 2 --gpus -5 -- /bin/true
c gr.grace_text refused "grace_period" -- "$GTPRUN" --nproc 2 --grace_period=abc -- /bin/true
c gr.unknown_flag refused "bogus" -- "$GTPRUN" --bogus -- /bin/true
# Ports outside [0, 65535] and a negative grace period were passed on unchecked (exit 0).
c gr.master_port_too_big refused "--master_port must be a TCP port in [1, 65535]" -- "$GTPRUN" --nproc 2 --master_port 70000 -- /bin/true
c gr.master_port_negative refused "--master_port must be a TCP port in [1, 65535]" -- "$GTPRUN" --nproc 2 --master_port -1 -- /bin/true
c gr.grace_negative refused "--grace_period must be a duration >= 0" -- "$GTPRUN" --nproc 2 --grace_period=-5s -- /bin/true
c gr.train ok "done: 2 steps" -- "$GTPRUN" --nproc 2 -- "$TRAIN" --run_dir "$RUNS/gr.train" --set "$TINY,$TWO"
c gr.train_world_mismatch refused "parallel.world_size is 4" -- "$GTPRUN" --nproc 2 -- "$TRAIN" --run_dir "$RUNS/gr.train_world_mismatch" --set "$TINY"
c gr.train_nproc_3 refused "WORLD_SIZE=3" -- "$GTPRUN" --nproc 3 -- "$TRAIN" --run_dir "$RUNS/gr.train_nproc_3" --set "$TINY,$TWO"
c gr.train_bad_setting refused "optim.lr" -- "$GTPRUN" --nproc 2 -- "$TRAIN" --run_dir "$RUNS/gr.train_bad_setting" --set "$TINY,$TWO,optim.lr=-1"
# Refused by gtprun before a rank starts (the trainer's own check: env.master_port_too_big).
c gr.train_master_port_too_big refused "--master_port" -- "$GTPRUN" --nproc 2 --master_port 70000 -- "$TRAIN" --run_dir "$RUNS/gr.train_master_port_too_big" --set "$TINY,$TWO"

# ---------------------------------------------------------------- summary
[ "$LIST" = 1 ] && exit 0
echo
echo "== summary: $N cases in $((SECONDS - START)) s"
declare -A BY_GOT=() BY_AREA=() KNOWN_BY=()
for i in "${!IDS[@]}"; do
  BY_GOT[${GOTS[$i]}]=$(( ${BY_GOT[${GOTS[$i]}]:-0} + 1 ))
  BY_AREA[${AREAS[$i]}]=$(( ${BY_AREA[${AREAS[$i]}]:-0} + 1 ))
  [ "${VERDICTS[$i]}" = "known defect" ] && KNOWN_BY[${GOTS[$i]}]=$(( ${KNOWN_BY[${GOTS[$i]}]:-0} + 1 ))
done
printf 'by area:   '; for k in config env data checkpoint ckpt generate eval make_indexed train_bpe inspect_indexed plot_metrics gtprun; do [ -n "${BY_AREA[$k]:-}" ] && printf '%s %s  ' "$k" "${BY_AREA[$k]}"; done; echo
printf 'outcomes:  '; for k in ok refused crash hang silent unnamed verbose residue wrong; do [ -n "${BY_GOT[$k]:-}" ] && printf '%s %s  ' "$k" "${BY_GOT[$k]}"; done; echo
KN=0; for k in "${!KNOWN_BY[@]}"; do KN=$((KN + KNOWN_BY[$k])); done
printf 'known defects (expected, not failing): %d  ' "$KN"; for k in crash hang silent unnamed verbose residue wrong; do [ -n "${KNOWN_BY[$k]:-}" ] && printf '%s %s  ' "$k" "${KNOWN_BY[$k]}"; done; echo
if [ "${#KNOWN_CMDS[@]}" -gt 0 ]; then
  echo "known defects (\$SWEEP = $ROOT; binaries as listed at the top):"
  for k in "${KNOWN_CMDS[@]}"; do echo "  $k" | cut -c1-400; done
fi
echo "log: $LOG"
if [ "$FAILS" -gt 0 ]; then
  echo "FAILED: $FAILS of $N cases differ from their expectation:"
  for i in "${!IDS[@]}"; do
    [[ "${VERDICTS[$i]}" == FAIL* ]] && echo "  ${IDS[$i]}: expected ${EXPECTS[$i]}, got ${GOTS[$i]}"
  done
  exit 1
fi
echo "all $N cases as expected"
