#!/usr/bin/env bash
# Builds the playground into web/dist/ (static files: index.html, app.js, style.css and
# pkg/ with the core in WebAssembly). Serve it with `idem serve`, or host the folder on
# any static web server. Needs the wasm32-unknown-unknown target and wasm-bindgen-cli
# at the wasm-bindgen crate's exact version (the error says how to install it);
# IDEM_WASM_BINDGEN names the binary if it is not on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

want=$(sed -n '/^name = "wasm-bindgen"$/{n;s/^version = "\(.*\)"$/\1/p}' Cargo.lock)
bindgen="${IDEM_WASM_BINDGEN:-wasm-bindgen}"
have=$("$bindgen" --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  echo "web/build.sh: wasm-bindgen-cli $want is needed (found: ${have:-none}); install it with" >&2
  echo "  cargo install wasm-bindgen-cli --version $want" >&2
  exit 1
fi

cargo rustc -p idem-web --target wasm32-unknown-unknown --profile web --locked --crate-type cdylib
rm -rf web/dist
mkdir -p web/dist
"$bindgen" --target web --no-typescript --out-dir web/dist/pkg \
  target/wasm32-unknown-unknown/web/idem_web.wasm
cp web/page/index.html web/page/app.js web/page/style.css web/dist/
echo "web/dist: $(du -sb web/dist | cut -f1) bytes; the WebAssembly $(stat -c %s web/dist/pkg/idem_web_bg.wasm) bytes"
