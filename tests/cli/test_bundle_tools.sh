#!/usr/bin/env bash
# oscar-bundle export / import / diff on real bundles of stories260K: SGLang files checked by an
# independent reader (Python's standard library), round trips, GGUF refusal and consent, diff exit
# codes, an imported bundle evaluated by oscar-eval. Usage: test_bundle_tools.sh BUILD_DIR
# [SHARED_DATA] (exit 77 = skipped: no shared data).
set -uo pipefail
build=$1
data=${OSCAR_TEST_DATA:-${2:-}}
bundle_tool=$build/apps/oscar-bundle
calibrate=$build/apps/oscar-calibrate
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Bad input: one-line errors.
expect_fail export-missing "does not exist" $bundle_tool export "$tmp/none.safetensors" --format sglang --out "$tmp/o"
expect_fail diff-missing "does not exist" $bundle_tool diff "$tmp/a.safetensors" "$tmp/b.safetensors"
echo "not a checkpoint" >"$tmp/k_rotation_x.pt"
cp "$tmp/k_rotation_x.pt" "$tmp/v_rotation_x.pt"
expect_fail import-no-model "does not exist" $bundle_tool import --format sglang --from "$tmp" --model "$tmp/nomodel" --out "$tmp/i.safetensors"

if [ -z "$data" ] || [ ! -d "$data/models/stories260K" ]; then
  echo "shared data not found: skipping the model runs ($pass passed, $fails failed)"
  [ $fails -eq 0 ] && exit 77 || exit 1
fi
model=$data/models/stories260K
expect_fail import-not-pt "PyTorch checkpoint" $bundle_tool import --format sglang --from "$tmp" --model "$model" --out "$tmp/i.safetensors"
rm "$tmp"/*.pt

# A bundle SGLang can represent exactly (one rotation per layer, no centring or smoothing) and the
# default one (per head, centred and smoothed keys).
$calibrate --model "$model" --tokens 4096 --grouping layer --no-center-keys --smooth-keys 0 \
  --out "$tmp/layer.safetensors" -q >/dev/null
check calibrate-layer $?
$calibrate --model "$model" --tokens 4096 --out "$tmp/default.safetensors" -q >/dev/null
check calibrate-default $?

# SGLang export: format 1 for the per-layer bundle, format 2 for the default; no warning for the
# faithful one, warnings for the other.
err=$($bundle_tool export "$tmp/layer.safetensors" --format sglang --out "$tmp/sg1" 2>&1 >/dev/null)
check export-layer $?
[ -z "$err" ]
check export-layer-no-warning $?
python3 "$here/pt_check.py" "$tmp/layer.safetensors" "$tmp"/sg1/k_rotation_*.pt "$tmp"/sg1/v_rotation_*.pt --version 1
check pt-check-v1 $?
err=$($bundle_tool export "$tmp/default.safetensors" --format sglang --out "$tmp/sg2" 2>&1 >/dev/null)
check export-default $?
grep -q "warning: keys were smoothed" <<<"$err" && grep -q "warning: keys were centred" <<<"$err"
check export-default-warns $?
python3 "$here/pt_check.py" "$tmp/default.safetensors" "$tmp"/sg2/k_rotation_*.pt "$tmp"/sg2/v_rotation_*.pt --version 2
check pt-check-v2 $?
expect_fail export-v1-per-head "--grouping layer" $bundle_tool export "$tmp/default.safetensors" --format sglang --sglang-version 1 --out "$tmp/sg3"

# Import and compare: the faithful export round-trips bit for bit.
$bundle_tool import --format sglang --from "$tmp/sg1" --model "$model" --out "$tmp/back1.safetensors" >/dev/null
check import-layer $?
out=$($bundle_tool diff "$tmp/layer.safetensors" "$tmp/back1.safetensors")
check diff-round-trip $?
grep -q "result: identical tensors" <<<"$out"
check diff-round-trip-identical $?
$bundle_tool verify "$tmp/back1.safetensors" --model "$model" >/dev/null
check verify-imported $?
# The default bundle loses its means and scales: a manifest difference (exit 2) unless ignored.
$bundle_tool import --format sglang --from "$tmp/sg2" --model "$model" --out "$tmp/back2.safetensors" >/dev/null 2>&1
check import-default $?
$bundle_tool diff "$tmp/default.safetensors" "$tmp/back2.safetensors" >/dev/null
[ $? -eq 2 ]
check diff-lost-smoothing-exit-2 $?
$bundle_tool diff "$tmp/default.safetensors" "$tmp/back2.safetensors" --ignore-field calibration.center_keys \
  --ignore-field calibration.smooth_keys --ignore-field format_version --ignore-field rotation_convention >/dev/null
check diff-ignored-fields $?
# Two different calibrations: over tolerance, and a JSON report that says so.
$bundle_tool diff "$tmp/layer.safetensors" "$tmp/default.safetensors" --json >"$tmp/diff.json"
[ $? -eq 2 ]
check diff-different-exit-2 $?
python3 - "$tmp/diff.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["ok"] is False and j["tensors_identical"] is False, j["ok"]
assert j["worst"]["rotation_max_abs"] > 0 and len(j["heads"]) == 40, len(j["heads"])
assert any(f["field"] == "calibration.grouping" for f in j["manifest_differences"])
PY
check diff-json $?
# Loose tolerances on the rotations alone (manifest differences ignored) let it pass.
$bundle_tool diff "$tmp/layer.safetensors" "$tmp/default.safetensors" --rot-tol -1 --angle-tol 90 \
  --eig-tol -1 --aux-tol -1 --ignore-field calibration.grouping --ignore-field calibration.center_keys \
  --ignore-field calibration.smooth_keys --ignore-field format_version --ignore-field rotation_convention >/dev/null
check diff-loose $?

# GGUF: per-layer bundle exports; per-head needs --allow-per-head; a GGUF header and tensor count.
$bundle_tool export "$tmp/layer.safetensors" --format gguf --out "$tmp/r.gguf" >/dev/null
check gguf-layer $?
python3 - "$tmp/r.gguf" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
magic, version, tensors, kvs = struct.unpack("<4sIQQ", b[:24])
assert magic == b"GGUF" and version == 3 and tensors == 10, (magic, version, tensors)
PY
check gguf-header $?
expect_fail gguf-per-head "--allow-per-head" $bundle_tool export "$tmp/default.safetensors" --format gguf --out "$tmp/h.gguf"
$bundle_tool export "$tmp/default.safetensors" --format gguf --out "$tmp/h.gguf" --allow-per-head >/dev/null 2>&1
check gguf-per-head-allowed $?

# An imported bundle is evaluated by oscar-eval like any other.
if [ -x "$build/apps/oscar-eval" ] && [ -f "$data/datasets/tinystories-valid-head.txt" ]; then
  $build/apps/oscar-eval --model "$model" --data "$data/datasets/tinystories-valid-head.txt" \
    --bundle "$tmp/back1.safetensors" --methods bf16,oscar --seq-len 256 --sink 4 --recent 32 \
    --windows 1 --passkey-trials 0 --json "$tmp/eval.json" -q >/dev/null
  check eval-imported $?
fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
