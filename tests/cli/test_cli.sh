#!/usr/bin/env bash
# Command-line behaviour of the apps: the main job's output on real data and a one-line error with
# a non-zero exit for bad input. Usage: test_cli.sh BUILD_DIR (exit 77 = skipped: no shared data).
set -uo pipefail
build=$1
data=${OSCAR_TEST_DATA:-$2}
run=$build/apps/oscar-run
source "$(dirname "$0")/common.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "some text" >"$tmp/text.txt"
expect_fail missing-model "does not exist" $run --model "$tmp/nope" --data "$tmp/text.txt" -q
mkdir -p "$tmp/bad"
echo '{"model_type": "gpt2"}' >"$tmp/bad/config.json"
echo '{}' >"$tmp/bad/tokenizer.json"
expect_fail bad-tokenizer "tokenizer" $run --model "$tmp/bad" --data "$tmp/text.txt" -q
expect_fail bad-dtype "dtype" $run --model "$tmp/bad" --data "$tmp/text.txt" --dtype f8

if [ -z "$data" ] || [ ! -d "$data/models/stories260K" ]; then
  echo "shared data not found: skipping the model runs ($pass passed, $fails failed)"
  [ $fails -eq 0 ] && exit 77 || exit 1
fi
model=$data/models/stories260K
expect_fail missing-data "cannot open" $run --model "$model" --data "$tmp/none.txt" -q
: >"$tmp/empty.txt"
expect_fail empty-data "empty" $run --model "$model" --data "$tmp/empty.txt" -q
cp -r "$model" "$tmp/trunc"
truncate -s 100000 "$tmp/trunc/model.safetensors"
expect_fail truncated-weights "model.safetensors" $run --model "$tmp/trunc" --data "$tmp/text.txt" -q

out=$($run --model "$model" --data "$data/datasets/tinystories-valid-head.txt" --paragraphs \
  --max-paragraphs 20 --json -q)
if python3 - "$out" <<'PY'; then pass=$((pass + 1)); else echo "FAIL json: $out"; fails=$((fails + 1)); fi
import json, sys
j = json.loads(sys.argv[1])
assert j["tokens"] > 1000 and 2.0 < j["perplexity"] < 10.0, j
PY
echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
