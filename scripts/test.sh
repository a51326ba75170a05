#!/usr/bin/env bash
# Installs whatever the tests need and is missing, checks formatting and lints (`cargo fmt
# --check`, `cargo clippy -D warnings`: either failing fails the run), then runs every test.
#
#   scripts/test.sh            # everything
#   FUZZ_SECS=60 scripts/test.sh   # a longer fuzz smoke period (default 20 s per target)
#
# Dependencies go to .deps/ (git-ignored) or the system package manager. With CI=true a
# dependency that can't be installed fails the run instead of skipping the tests that need it.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/deps.sh
. scripts/deps.sh

ensure_rust_tools
ensure_claude_cli || true
ensure_acp_adapter || true
ensure_tmux || true
# One PostgreSQL server for the whole run (each test makes its own database in it), stopped at
# exit.
trap stop_test_postgres EXIT
start_test_postgres || true
ensure_nats_server || true
ensure_openapi_validator || true
ensure_systemd_analyze || true
ensure_nginx || true

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy"
cargo clippy --all-targets --locked -- -D warnings

echo "== cargo test"
# The workspace's default members: the server, bench/ (agentmux-bench) and client/
# (agentmux-chat). Their integration tests also build the executables that `agentmux bench` and
# `agentmux chat` run, which the server's integration tests use.
cargo test --all-targets --locked

if [ -n "${AGENTMUX_TEST_PG_URL:-}" ]; then
  echo "== cargo test: the integration tests again, every server on PostgreSQL"
  # Tests about the SQLite file itself (kill -9 on it, a full disk, WAL) show as ignored.
  AGENTMUX_TEST_STORE=postgres cargo test --locked --test it
fi

echo "== fuzz smoke"
FUZZ_SECS="${FUZZ_SECS:-20}" scripts/fuzz.sh

if ensure_web_tools; then
  echo "== web: type check"
  (cd web && npx --no-install tsc -p . && npx --no-install tsc -p tsconfig.sw.json)
  echo "== web: unit and browser tests"
  cargo build --locked
  (cd web && node --test tests/*.test.mjs)
fi
