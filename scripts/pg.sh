#!/usr/bin/env bash
# A throwaway PostgreSQL server for trying agentmux on PostgreSQL, or for running the tests
# that need one without scripts/test.sh (which starts its own):
#
#   eval "$(scripts/pg.sh start)"    # starts it; exports AGENTMUX_TEST_PG_URL and PG_TEST_DIR
#   cargo test --test it store       # the tests that need PostgreSQL now run
#   scripts/pg.sh stop               # stops it and removes its directory (and every database)
#
# It listens on a unix socket in its own temporary directory only, trusts local logins and
# does not fsync: for tests and trials, never for data you want to keep.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/deps.sh
. scripts/deps.sh

case "${1:-}" in
  start)
    start_test_postgres >&2
    echo "export AGENTMUX_TEST_PG_URL='$AGENTMUX_TEST_PG_URL' PG_TEST_DIR='$PG_TEST_DIR'"
    ;;
  stop)
    : "${PG_TEST_DIR:?PG_TEST_DIR is not set: run this in the shell that ran start}"
    ensure_postgres
    PG_TEST_AS=""
    [ "$(id -u)" = 0 ] && PG_TEST_AS="runuser -u postgres --"
    stop_test_postgres
    echo "stopped" >&2
    ;;
  *)
    echo "usage: scripts/pg.sh start|stop" >&2
    exit 2
    ;;
esac
