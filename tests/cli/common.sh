# Shared helpers of the command-line tests (sourced). Counters: pass, fails.
pass=0
fails=0

# check NAME STATUS: counts STATUS 0 as a pass.
check() {
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# expect_fail NAME PATTERN CMD...: the command must exit non-zero with PATTERN in a short message
# (at most 3 lines: one error line, possibly CLI11's usage hint).
expect_fail() {
  local name=$1 pattern=$2
  shift 2
  local err
  err=$("$@" 2>&1 >/dev/null)
  local rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$pattern" <<<"$err" && [ "$(wc -l <<<"$err")" -le 3 ]; then
    pass=$((pass + 1))
  else
    echo "FAIL $name: rc=$rc output: $err"
    fails=$((fails + 1))
  fi
}
