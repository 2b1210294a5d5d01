#!/usr/bin/env bash
# Fuzzes one target ($1) for $2 seconds from its seeds and regressions
# (`make fuzz` runs the targets side by side through this). A crash exits
# non-zero and leaves the input in tests/fuzz/artifacts/<target>/.
set -u
t=$1
seconds=$2
mkdir -p "tests/fuzz/corpus/$t" "tests/fuzz/artifacts/$t"
inputs=("tests/fuzz/seeds/$t")
[ -d "tests/fuzz/regressions/$t" ] && inputs+=("tests/fuzz/regressions/$t")
log="tests/fuzz/artifacts/$t/last-run.log"
echo "fuzz $t for $seconds s"
if RUSTC_BOOTSTRAP=1 "${CARGO:-cargo}" fuzz run --fuzz-dir tests/fuzz -O "$t" "tests/fuzz/corpus/$t" "${inputs[@]}" \
     -- -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1; then
  grep -E "DONE|stat::number_of_executed_units" "$log" | sed "s/^/$t: /"
else
  tail -40 "$log"
  echo "fuzz $t failed; the input is in tests/fuzz/artifacts/$t"
  exit 1
fi
