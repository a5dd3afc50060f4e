#!/usr/bin/env bash
# Builds the playground into web/dist/: the static files (index.html, app.js, style.css
# and pkg/ with the core in WebAssembly), to serve with `idem serve` or from any static
# web server, and idem-playground.html, the same page as one file (its style, its
# script, the core's JavaScript glue and its WebAssembly inline, the lessons inside the
# WebAssembly), which a teacher hands out: it opens from disk (file://) with no server.
# Needs the wasm32-unknown-unknown target and wasm-bindgen-cli at the wasm-bindgen
# crate's exact version (the error says how to install it); IDEM_WASM_BINDGEN names the
# binary if it is not on PATH. The WebAssembly is looked for where cargo puts it
# (CARGO_TARGET_DIR or the build.target-dir of cargo's configuration, as cargo metadata
# reports it).
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

target=$(cargo metadata --format-version 1 --no-deps --locked | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
if [ -z "$target" ]; then
  echo "web/build.sh: cargo metadata named no target directory" >&2
  exit 1
fi
cargo rustc -p idem-web --target wasm32-unknown-unknown --profile web --locked --crate-type cdylib
rm -rf web/dist
mkdir -p web/dist
"$bindgen" --target web --no-typescript --out-dir web/dist/pkg \
  "$target/wasm32-unknown-unknown/web/idem_web.wasm"
cp web/page/index.html web/page/app.js web/page/style.css web/dist/
bash web/single.sh web/dist web/dist/idem-playground.html
echo "web/dist: $(du -sb --exclude idem-playground.html web/dist | cut -f1) bytes; the WebAssembly $(stat -c %s web/dist/pkg/idem_web_bg.wasm) bytes; idem-playground.html $(stat -c %s web/dist/idem-playground.html) bytes"
