#!/usr/bin/env bash
# oscar-calibrate and oscar-bundle end to end on stories260K: a verified, reproducible bundle from
# the project's own calibration text, and clear errors (no partial output) for bad input.
# Usage: test_calibrate.sh BUILD_DIR [SHARED_DATA] (exit 77 = skipped: no shared data).
set -uo pipefail
build=$1
data=${OSCAR_TEST_DATA:-${2:-}}
calibrate=$build/apps/oscar-calibrate
bundle=$build/apps/oscar-bundle
source "$(dirname "$0")/common.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect_fail missing-model "does not exist" $calibrate --model "$tmp/nope" --out "$tmp/b.st" -q
expect_fail no-output "nothing to write" $calibrate --model "$tmp" -q
expect_fail bad-bundle "does not exist" $bundle verify "$tmp/none.safetensors"

if [ -z "$data" ] || [ ! -d "$data/models/stories260K" ]; then
  echo "shared data not found: skipping the model runs ($pass passed, $fails failed)"
  [ $fails -eq 0 ] && exit 77 || exit 1
fi
model=$data/models/stories260K
common=(--model "$model" --seq-len 256 --tokens 8192 -q)

# The default run: the project's own calibration text, a bundle that verifies against its model.
$calibrate "${common[@]}" --out "$tmp/a.safetensors" --json >"$tmp/a.json"
check calibrate $?
$bundle verify "$tmp/a.safetensors" --model "$model" >/dev/null
check verify $?
# Reproducible: a second run writes identical tensors.
$calibrate "${common[@]}" --out "$tmp/b.safetensors" >/dev/null
python3 - "$tmp/a.safetensors" "$tmp/b.safetensors" "$tmp/a.json" <<'PY'
import json, struct, sys
def manifest(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(json.loads(f.read(n))["__metadata__"]["oscar"])
a, b = manifest(sys.argv[1]), manifest(sys.argv[2])
assert a["tensor_sha256"] == b["tensor_sha256"], "two runs differ"
# The default (centred, smoothed keys) is a version-2 bundle.
assert a["format"] == "oscar-rotation-bundle" and a["format_version"] == 2
assert a["calibration"]["center_keys"] and a["calibration"]["smooth_keys"] == 0.5
assert a["calibration"]["dataset_name"] == "oscar-stories-v1.txt", a["calibration"]
report = json.load(open(sys.argv[3]))
assert report["orthogonality_error"]["k"] < 1e-6 and report["orthogonality_error"]["v"] < 1e-6
assert len(report["heads"]) == 5 * 4
PY
check reproducible $?
# The paper's plain method (no centring, no smoothing) stays a version-1 bundle.
$calibrate "${common[@]}" --no-center-keys --smooth-keys 0 --out "$tmp/plain.safetensors" >/dev/null &&
  $bundle inspect "$tmp/plain.safetensors" | grep -q "format v1" &&
  $bundle inspect "$tmp/a.safetensors" | grep -q "key smoothing alpha 0.50"
check "plain method writes v1" $?

# Clip search: per-head ratios from the grid, recorded as such in the manifest.
$calibrate "${common[@]}" --clip-search --sink 4 --recent 32 --out "$tmp/search.safetensors" \
  >/dev/null && $bundle inspect --json "$tmp/search.safetensors" | grep -q '"clip_method": "search"'
check clip-search $?

# Shards: two halves of the data (every 2nd sequence each) merged give the one-run bundle up to
# float64 summation order; the key-weighted proxy the same way, its second pass run per shard with
# C_Q from the merged main pass.
half=(--model "$model" --seq-len 256 --tokens 4096 -q)
for i in 0 1; do
  $calibrate "${half[@]}" --shard $i/2 --save-stats "$tmp/main$i.st" >/dev/null || fails_shard=1
done
$calibrate --model "$model" --merge-stats "$tmp/main0.st,$tmp/main1.st" --save-stats "$tmp/main.st" \
  --out "$tmp/merged.safetensors" -q >/dev/null &&
  $bundle diff "$tmp/a.safetensors" "$tmp/merged.safetensors" >"$tmp/diff.txt" && [ -z "${fails_shard:-}" ]
check "sharded = one run" $?
for i in 0 1; do
  $calibrate "${half[@]}" --shard $i/2 --value-objective keyweight --keyweight-from "$tmp/main.st" \
    --save-stats "$tmp/kw$i.st" >/dev/null || fails_kw=1
done
$calibrate --model "$model" --merge-stats "$tmp/kw0.st,$tmp/kw1.st" --value-objective keyweight \
  --out "$tmp/kw-merged.safetensors" -q >/dev/null &&
  $calibrate "${common[@]}" --value-objective keyweight --out "$tmp/kw-one.safetensors" >/dev/null &&
  $bundle diff "$tmp/kw-one.safetensors" "$tmp/kw-merged.safetensors" >"$tmp/diff-kw.txt" &&
  [ -z "${fails_kw:-}" ]
check "sharded keyweight = one run" $?
expect_fail keyweight-merge-of-main-passes "needs key-weighted statistics" $calibrate \
  --model "$model" --merge-stats "$tmp/main0.st,$tmp/main1.st" --value-objective keyweight \
  --out "$tmp/x.safetensors" -q
expect_fail merge-main-with-keyweight "cannot merge main-pass statistics" $calibrate \
  --model "$model" --merge-stats "$tmp/kw0.st,$tmp/main1.st" --out "$tmp/x.safetensors" -q
expect_fail keyweight-from-needs-objective "give --value-objective keyweight" $calibrate \
  "${half[@]}" --keyweight-from "$tmp/main.st" --out "$tmp/x.safetensors"
# A part whose C_Q came from one shard's own main pass does not merge with the others.
$calibrate "${half[@]}" --shard 0/2 --value-objective keyweight --keyweight-from "$tmp/main0.st" \
  --save-stats "$tmp/kw-own.st" >/dev/null
check keyweight-from-one-shard $?
expect_fail keyweight-parts-of-other-main-passes "another main pass" $calibrate --model "$model" \
  --merge-stats "$tmp/kw-own.st,$tmp/kw1.st" --value-objective keyweight \
  --out "$tmp/x.safetensors" -q

# Bad input: clear errors and no output file.
expect_fail unwritable "not exist" $calibrate "${common[@]}" --out "$tmp/no/dir/b.safetensors"
expect_fail too-few-tokens "full-rank" $calibrate --model "$model" --seq-len 4 --tokens 4 \
  --out "$tmp/few.safetensors" -q
[ ! -e "$tmp/few.safetensors" ]
check no-partial-file $?
expect_fail too-much-data "use --tokens" $calibrate --model "$model" --tokens 100000000 \
  --out "$tmp/c.safetensors" -q
mkdir -p "$tmp/nofiles" && cp "$model/config.json" "$tmp/nofiles/"
expect_fail missing-weights "safetensors" $calibrate --model "$tmp/nofiles" --out "$tmp/d.st" -q

# NaN weights: the forward (or the statistics) must refuse, naming the problem.
cp -r "$model" "$tmp/nan"
python3 - "$tmp/nan/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    name = next(k for k in header if k.endswith("layers.1.self_attn.k_proj.weight"))
    begin = header[name]["data_offsets"][0]
    f.seek(8 + n + begin)
    f.write(struct.pack("<f", float("nan")) * 16)
PY
expect_fail nan-weights "NaN" $calibrate --model "$tmp/nan" --seq-len 256 --tokens 512 \
  --out "$tmp/nan.safetensors" -q
[ ! -e "$tmp/nan.safetensors" ]
check no-partial-file-nan $?

# A bundle checked against another model (changed RoPE theta: config hash and theta differ).
cp -r "$model" "$tmp/other"
sed -i 's/"rope_theta": *[0-9.e+]*/"rope_theta": 500000.0/' "$tmp/other/config.json"
if grep -q 500000 "$tmp/other/config.json"; then
  out=$($bundle verify "$tmp/a.safetensors" --model "$tmp/other" 2>&1)
  [ $? -eq 2 ] && grep -q "does not fit" <<<"$out"
  check foreign-model $?
fi
# Corrupt bundle: one flipped byte in the tensor data.
cp "$tmp/a.safetensors" "$tmp/corrupt.safetensors"
printf '\x55' | dd of="$tmp/corrupt.safetensors" bs=1 seek=$(($(stat -c %s "$tmp/a.safetensors") - 9)) \
  conv=notrunc status=none
expect_fail corrupt-bundle "checksum" $bundle verify "$tmp/corrupt.safetensors"
head -c 1000 "$tmp/a.safetensors" >"$tmp/trunc.safetensors"
expect_fail truncated-bundle "trunc.safetensors" $bundle inspect "$tmp/trunc.safetensors"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
