#!/usr/bin/env bash
# Usage: bash web/single.sh DIST OUT. Writes the playground built in DIST (web/build.sh)
# as one HTML file, OUT, that opens from disk (file://) with no server. Chromium refuses
# fetch() and module scripts by URL from file://, so nothing is fetched: the style goes
# into a <style>; the core's JavaScript glue into a module imported from a data: URL;
# the WebAssembly, in base64, is instantiated synchronously with the glue's initSync
# and left in window.idemCore, where app.js (inline, after it) looks first.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: bash web/single.sh DIST OUT" >&2
  exit 2
fi
dist=$1
out=$2
for f in index.html app.js style.css pkg/idem_web.js pkg/idem_web_bg.wasm; do
  if [ ! -f "$dist/$f" ]; then
    echo "web/single.sh: $dist/$f is missing; build the page with bash web/build.sh" >&2
    exit 1
  fi
done
style='<link rel="stylesheet" href="style.css">'
script='<script type="module" src="app.js"></script>'
at_style=$(grep -nxF "$style" "$dist/index.html" | cut -d: -f1)
at_script=$(grep -nxF "$script" "$dist/index.html" | cut -d: -f1)
if ! [[ "$at_style" =~ ^[0-9]+$ && "$at_script" =~ ^[0-9]+$ ]] || [ "$at_style" -ge "$at_script" ]; then
  echo "web/single.sh: $dist/index.html must have the line $style once, and after it the line $script once" >&2
  exit 1
fi
# Text that closes a <script> or <style> early (or, in a script, opens a comment or a
# script of its own) cannot be inlined as it is.
if grep -qiE '</script|<script|<!--' "$dist/app.js" || grep -qi '</style' "$dist/style.css"; then
  echo "web/single.sh: app.js or style.css holds a closing tag of its own element" >&2
  exit 1
fi
{
  head -n $((at_style - 1)) "$dist/index.html"
  echo '<style>'
  cat "$dist/style.css"
  echo '</style>'
  sed -n "$((at_style + 1)),$((at_script - 1))p" "$dist/index.html"
  printf '<script type="module">\nimport * as core from "data:text/javascript;base64,'
  base64 -w0 "$dist/pkg/idem_web.js"
  printf '";\nconst wasm = "'
  base64 -w0 "$dist/pkg/idem_web_bg.wasm"
  printf '";\ncore.initSync({ module: Uint8Array.from(atob(wasm), (c) => c.charCodeAt(0)) });\nwindow.idemCore = core;\n</script>\n'
  echo '<script type="module">'
  cat "$dist/app.js"
  echo '</script>'
  tail -n +$((at_script + 1)) "$dist/index.html"
} > "$out.tmp"
mv "$out.tmp" "$out"
