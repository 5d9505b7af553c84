#!/usr/bin/env bash
# oscar-eval end to end on stories260K: the JSON report's fields, method ordering, clear errors.
# Usage: test_eval.sh BUILD_DIR [SHARED_DATA] (exit 77 = skipped: no shared data).
set -uo pipefail
build=$1
data=${OSCAR_TEST_DATA:-${2:-}}
eval_app=$build/apps/oscar-eval
source "$(dirname "$0")/common.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect_fail missing-model "does not exist" $eval_app --model "$tmp/nope" --data "$tmp/x.txt" -q
if [ -z "$data" ] || [ ! -d "$data/models/stories260K" ]; then
  echo "shared data not found: skipping the model runs ($pass passed, $fails failed)"
  [ $fails -eq 0 ] && exit 77 || exit 1
fi
model=$data/models/stories260K
text=$data/datasets/tinystories-valid-head.txt
common=(--model "$model" --data "$text" --seq-len 256 --sink 4 --recent 32 --windows 2 -q)
expect_fail missing-data "does not exist" $eval_app --model "$model" --data "$tmp/none.txt" -q
expect_fail bf16-first "must start with bf16" $eval_app "${common[@]}" --methods naive,bf16
expect_fail unknown-method "unknown method" $eval_app "${common[@]}" --methods bf16,int3
expect_fail unknown-variant "unknown oscar variant" $eval_app "${common[@]}" --methods bf16,oscar+foo
expect_fail unwritable-json "does not exist" $eval_app "${common[@]}" --json "$tmp/no/dir/r.json"

$eval_app "${common[@]}" --methods bf16,naive,kivi,oscar+center --calib-tokens 4096 \
  --passkey-trials 2 --json "$tmp/r.json" --plot "$tmp/r.svg" >/dev/null
check run $?
python3 - "$tmp/r.json" "$tmp/r.svg" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
names = [m["name"] for m in j["methods"]]
assert names == ["bf16", "naive", "kivi", "oscar+center"], names
for m in j["methods"]:
    for key in ("ppl_quantized", "ppl_all", "kl", "attn_rel_error", "bits_per_element",
                "passkey_accuracy"):
        assert key in m, key
bf16 = j["methods"][0]
assert bf16["kl"] == 0 and bf16["attn_rel_error"] == 0 and bf16["bits_per_element"] == 16
assert all(m["kl"] > 0 for m in j["methods"][1:])
assert open(sys.argv[2]).read().startswith("<svg")
PY
check report $?
echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
