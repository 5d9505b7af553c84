#!/usr/bin/env bash
# Compiler launcher for the CUDA kernels: runs the compile given after the report directory and
# keeps ptxas's resource lines (with -Xptxas=-v: registers, stack, spills per kernel) in
# <report directory>/<object name>.resources, for tests/check_kernel_resources.py; every other
# line of the compiler's output passes through. Usage: cuda-resources.sh DIR [LAUNCHER...] COMPILER
# ARGS... (the compiler: the first argument naming nvcc).
set -uo pipefail
report_dir=$1
shift
# An empty launcher (CMAKE_CUDA_COMPILER_LAUNCHER unset: no ccache) arrives as an empty argument.
while [ $# -gt 0 ] && [ -z "$1" ]; do shift; done
object=""
previous=""
compiler=""
for arg in "$@"; do
  [ "$previous" = "-o" ] && object=$arg
  [ -z "$compiler" ] && [[ $arg == *nvcc ]] && compiler=$arg
  previous=$arg
done
log=$(mktemp)
"$@" >"$log" 2>&1
status=$?
# ptxas's lines: "ptxas info : ..." and the indented "N bytes stack frame, ..." under them.
grep -vE '^ptxas info|^ +[0-9]+ bytes stack frame' "$log" >&2
if [ $status -eq 0 ] && [ -n "$object" ]; then
  mkdir -p "$report_dir"
  report="$report_dir/$(basename "$object").resources"
  {
    # The ptxas that made the report (beside the compiler): its register allocation is what the
    # report describes.
    echo "# ptxas: $("$(dirname "${compiler:-$1}")/ptxas" --version 2>/dev/null | grep -m 1 release)"
    grep -E '^ptxas info|^ +[0-9]+ bytes stack frame' "$log"
  } >"$report.tmp"
  mv "$report.tmp" "$report"
fi
rm -f "$log"
exit $status
