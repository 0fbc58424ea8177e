#!/usr/bin/env bash
# tokenize --tokenizer_model against the ids and decodes of the sentencepiece
# library (testdata/spm/expected.json, written by tools/hf/spm_fixture.py):
# every fixture model, every test string without a line break (tokenize reads
# lines). Then --decode, and the exit status of refused files and flags.
set -uo pipefail
bin="$1" dir="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

[ -f "$dir/expected.json" ] || { echo "no $dir/expected.json: nothing to compare (tools/hf/spm_fixture.py)"; echo PASS; exit 0; }
python3 - "$dir/expected.json" "$tmp" <<'PY' || fail "cannot read the fixture"
import json, sys
e = json.load(open(sys.argv[1], encoding="utf-8"))
for name, m in e["models"].items():
    cases = [c for c in m["cases"] if "\n" not in c["text"] and "\r" not in c["text"]]
    with open(f"{sys.argv[2]}/{name}.txt", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(c["text"] + "\n" for c in cases)
    with open(f"{sys.argv[2]}/{name}.ids", "w") as f:
        f.writelines(" ".join(map(str, c["ids"])) + "\n" for c in cases)
    with open(f"{sys.argv[2]}/{name}.decoded", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(c["decoded"] + "\n" for c in cases)
    print(name, m["file"], file=open(f"{sys.argv[2]}/models", "a"))
PY
while read -r name file; do
  "$bin" --tokenizer_model="$dir/$file" < "$tmp/$name.txt" > "$tmp/$name.got" || fail "$name: tokenize"
  if ! cmp -s "$tmp/$name.got" "$tmp/$name.ids"; then
    diff "$tmp/$name.got" "$tmp/$name.ids" | head -6
    fail "$name: ids differ from sentencepiece's"
  fi
  "$bin" --tokenizer_model="$dir/$file" --decode < "$tmp/$name.ids" > "$tmp/$name.back" || fail "$name: --decode"
  cmp -s "$tmp/$name.back" "$tmp/$name.decoded" || fail "$name: decodes differ from sentencepiece's"
  echo "$name: $(wc -l < "$tmp/$name.ids") lines, $(wc -w < "$tmp/$name.ids") ids: identical, decodes too"
done < "$tmp/models"

model="$dir/bpe.model"
printf '1 2\n800\n' | "$bin" --tokenizer_model="$model" --decode > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "line 2: token id 800 is not in the vocabulary (size 800)" "$tmp/err" \
  || fail "bad id: exit $rc, $(cat "$tmp/err")"
head -c 301 "$model" > "$tmp/cut.model"
"$bin" --tokenizer_model="$tmp/cut.model" < /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "cut.model: truncated file: ModelProto" "$tmp/err" || fail "truncated: exit $rc, $(cat "$tmp/err")"
head -c 300 "$model" > "$tmp/cut.model"  # between two pieces
"$bin" --tokenizer_model="$tmp/cut.model" < /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "cut.model: ModelProto has 18 pieces but no trainer_spec (field 2), which every trained model has: the file was cut short" "$tmp/err" \
  || fail "cut between pieces: exit $rc, $(cat "$tmp/err")"
"$bin" --tokenizer_model="$model" --tokenizer_json=x.json < /dev/null 2> /dev/null
rc=$?; [ "$rc" = 2 ] || fail "--tokenizer_model with --tokenizer_json: exit $rc, want 2"
echo PASS
