#!/usr/bin/env bash
# Makes the web app's PNG icons from web/icon.svg with headless Chromium (CHROMIUM, default
# /usr/bin/chromium): icon-192.png and icon-512.png as the SVG is, and icon-maskable.png, the
# glyph on a full square inside the safe zone, for launchers that cut their own shape.
set -euo pipefail
cd "$(dirname "$0")/.."
chromium="${CHROMIUM:-/usr/bin/chromium}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
svg="$(cat web/icon.svg)"
maskable="${svg/rx=\"7\" /}"
maskable="${maskable/<path /<path transform=\"translate(3.2 3.2) scale(0.8)\" }"
shot() { # page size out
  printf '<html><body style="margin:0"><img src="data:image/svg+xml;base64,%s" style="width:100vw;height:100vh;display:block"></body></html>' \
    "$(printf '%s' "$1" | base64 -w0)" >"$tmp/page.html"
  "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --default-background-color=00000000 \
    --window-size="$2,$2" --screenshot="$3" "file://$tmp/page.html" 2>/dev/null
}
shot "$svg" 192 web/icon-192.png
shot "$svg" 512 web/icon-512.png
shot "$maskable" 512 web/icon-maskable.png
