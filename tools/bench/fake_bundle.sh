# shellcheck shell=bash
# tools/bench/fake_bundle.sh — for the bench scripts' CPU tests (sourced):
#
#   fake_bundle <folder> <the real recipes_gpt_124m_train> <python code>
#
# writes <folder>/bundle.tar.xz, a bundle whose recipes_gpt_124m_train
# hands its --config/--set to the real binary's --list_settings (which
# validates them as a cuda run would be, without a GPU), prints
# "settings: <its --set>" and then runs the python code with sys.argv[1] the
# run's metrics.jsonl path and s its settings as a dict (the last setting of
# a name wins); and a tools_gtprun_gtprun that does nothing.
fake_bundle() {
  local fake="$1" train="$2" body="$3"
  rm -rf "$fake" && mkdir -p "$fake/bin"
  {
    cat <<FAKE
#!/usr/bin/env bash
set -euo pipefail
while ((\$#)); do
  case "\$1" in
    --config) cfg="\$2"; shift 2 ;;
    --run_dir) dir="\$2"; shift 2 ;;
    --set) set="\$2"; shift 2 ;;
    *) shift ;;
  esac
done
"$train" --config "\$cfg" --list_settings --set "\$set" > /dev/null
echo "settings: \$set"
python3 - "\$dir/metrics.jsonl" "\$set" <<'PY'
import json, sys
s = dict(kv.split("=", 1) for kv in sys.argv[2].split(","))
FAKE
    printf '%s\n' "$body"
    echo PY
  } > "$fake/bin/recipes_gpt_124m_train"
  printf '#!/bin/sh\nexit 0\n' > "$fake/bin/tools_gtprun_gtprun"
  chmod +x "$fake/bin/"*
  tar -C "$fake" -cJf "$fake/bundle.tar.xz" bin
}
