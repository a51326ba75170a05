#!/usr/bin/env bash
# Runs every benchmark scenario against the bare baseline and agentmux (release build), writes
# the JSON reports to docs/bench/ and redraws the latency plot. About 25 minutes on 2 cores.
#
#   scripts/bench-all.sh            # everything
#   SECS=5 scripts/bench-all.sh     # shorter measurements
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${SECS:-10}"
OUT=docs/bench
mkdir -p "$OUT"
cargo build --release --locked -p agentmux -p agentmux-bench -p agentmux-fakes
bench() { ./target/release/agentmux bench "$@"; }
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
  bench() { "$CARGO_TARGET_DIR/release/agentmux" bench "$@"; }
fi
bench many-sessions --secs "$SECS" --json "$OUT/many-sessions.json"
bench many-sessions --secs "$SECS" --max-batch 1 --json "$OUT/many-sessions-max-batch-1.json"
bench fanout --secs "$SECS" --json "$OUT/fanout.json"
bench churn --secs "$SECS" --json "$OUT/churn.json"
bench replay --json "$OUT/replay.json"
bench replay-load --secs "$SECS" --json "$OUT/replay-load.json"
bench cli --secs "$SECS" --sessions 1 --json "$OUT/cli-1.json"
bench cli --secs "$SECS" --sessions 4 --json "$OUT/cli-4.json"
bench idle --secs "$SECS" --json "$OUT/idle.json"
bench sweep --secs 5 --json "$OUT/sweep.json"
bench kill9 --cycles 50 --json "$OUT/kill9.json"
# `cluster` runs on the test script's throwaway PostgreSQL server and on nats-server.
# shellcheck source=scripts/deps.sh
. scripts/deps.sh
ensure_nats_server
eval "$(scripts/pg.sh start)"
trap 'scripts/pg.sh stop' EXIT
bench cluster --secs "$SECS" --json "$OUT/cluster.json"
# `history` (agentmux only) on SQLite, then on the same PostgreSQL server.
bench history --json "$OUT/history.json"
python3 scripts/plot_bench.py "$OUT/sweep.json" "$OUT/latency-vs-load.png"
