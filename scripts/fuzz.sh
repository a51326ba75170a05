#!/usr/bin/env bash
# Runs the fuzz targets in fuzz/ for a bounded time each, installing cargo-fuzz if needed.
#
#   scripts/fuzz.sh                      # every target, 60 s each
#   FUZZ_SECS=600 scripts/fuzz.sh        # longer
#   scripts/fuzz.sh decode_frame         # one target
#
# Targets: decode_frame (client frame decoding) and agent_line (the agent's stream-json line
# parser). Runs on the stable toolchain without a sanitizer (`-s none`); libFuzzer still
# catches panics, which is what the targets assert on. The working corpus goes to
# fuzz/corpus/<target> (git-ignored), seeded from fuzz/seeds/<target>. A crash leaves its input
# in fuzz/artifacts/<target>/ and fails the run: turn it into a regression test in the main
# test suite, then fix it.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/deps.sh
. scripts/deps.sh

ensure_rust_tools
ensure_cargo_fuzz || exit 0

secs="${FUZZ_SECS:-60}"
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=(decode_frame agent_line)
fi

for target in "${targets[@]}"; do
  echo "== fuzz $target for ${secs}s"
  mkdir -p "fuzz/corpus/$target"
  cargo fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
done
