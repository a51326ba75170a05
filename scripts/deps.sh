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
}
