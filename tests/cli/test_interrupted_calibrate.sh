#!/usr/bin/env bash
# oscar-calibrate killed with SIGKILL in the middle of a run: no bundle at the output path, no stray
# temporary files, statistics that --resume-stats continues from, and a resumed bundle identical to
# the one of an uninterrupted run.
# Usage: test_interrupted_calibrate.sh BUILD_DIR [SHARED_DATA] (exit 77 = skipped: no shared data).
set -uo pipefail
build=$1
data=${OSCAR_TEST_DATA:-${2:-}}
calibrate=$build/apps/oscar-calibrate
bundle=$build/apps/oscar-bundle
source "$(dirname "$0")/common.sh"

if [ -z "$data" ] || [ ! -d "$data/models/stories260K" ]; then
  echo "shared data not found: skipping (needs models/stories260K)"
  exit 77
fi
model=$data/models/stories260K
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
# 1024 short sequences, one per batch, statistics saved after every batch: a long run of small
# steps, so the kill lands somewhere in the middle (possibly inside a save).
common=(--model "$model" --seq-len 32 --tokens 32768 --batch 1)

$calibrate "${common[@]}" -q --save-stats "$tmp/s.st" --save-interval 0 \
  --out "$tmp/b.safetensors" &
pid=$!
killed=$pid
for _ in $(seq 1 1200); do  # up to 60 s for the first save (slow sanitizer builds)
  [ -e "$tmp/s.st" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
kill -KILL "$pid" 2>/dev/null
wait "$pid"
rc=$?
pid=
[ $rc -eq 137 ]
check "killed mid-run (exit $rc; 137 = SIGKILL)" $?
[ ! -e "$tmp/b.safetensors" ]
check no-partial-bundle $?
# Statistics are written to an unnamed file (O_TMPFILE), named, then renamed over s.st: a kill in
# the instant between naming and renaming leaves that one temporary file, which the next save to
# s.st removes (checked after the resume). Nothing else may be left.
stray=$(ls -A "$tmp" | grep -v -x -e 's.st' -e "s\.st\.tmp\.$killed\.[0-9a-f]\{8\}")
[ -z "$stray" ] || echo "stray files: $stray"
[ -z "$stray" ]
check no-stray-temporary-files $?

# Resume: the saved statistics are loaded, the remaining sequences streamed, a bundle written.
$calibrate "${common[@]}" --resume-stats "$tmp/s.st" --save-stats "$tmp/s.st" \
  --out "$tmp/b.safetensors" >/dev/null 2>"$tmp/resume.log"
check resume $?
done_before=$(sed -n 's/.*resuming from .*: \([0-9]*\) + 0 sequences done.*/\1/p' "$tmp/resume.log")
[ -n "$done_before" ] && [ "$done_before" -gt 0 ] && [ "$done_before" -lt 1024 ]
check "resumed mid-way (${done_before:-no} of 1024 sequences done)" $?
$bundle verify "$tmp/b.safetensors" --model "$model" >/dev/null
check resumed-bundle-verifies $?

# The same run without interruption gives the same tensors (sums in the same order).
$calibrate "${common[@]}" -q --out "$tmp/ref.safetensors" >/dev/null
python3 - "$tmp/b.safetensors" "$tmp/ref.safetensors" <<'PY'
import json, struct, sys
def manifest(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(json.loads(f.read(n))["__metadata__"]["oscar"])
a, b = manifest(sys.argv[1]), manifest(sys.argv[2])
assert a["tensor_sha256"] == b["tensor_sha256"], "resumed and uninterrupted runs differ"
assert a["calibration"]["tokens"] == b["calibration"]["tokens"] == 32768, a["calibration"]
PY
check resumed-equals-uninterrupted $?
stray=$(ls -A "$tmp" | grep -v -x -e 's.st' -e 'b.safetensors' -e 'ref.safetensors' -e 'resume.log')
[ -z "$stray" ]
check no-stray-files-after-resume $?

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
