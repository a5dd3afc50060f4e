# The stages' shared helpers, sourced by .ci/run and by each stage run alone: the step
# timer, the time table and the test runners' summary. Sourcing it twice changes nothing.
if [ -z "${IDEM_CI_LIB:-}" ]; then
  IDEM_CI_LIB=1
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  export CARGO_TERM_COLOR=never
  # Disk: a CI machine may have little of it (a run stopped once at "No space left on
  # device"). Incremental caches serve only a rebuild after an edit, and full debug info
  # only a debugger; line tables keep a panic's backtrace readable. The builds of the
  # size tool and the adopter's example are removed once their steps pass (no test reads
  # them), and so is the publish dry-run's verification build.
  export CARGO_INCREMENTAL=0
  export CARGO_PROFILE_DEV_DEBUG=line-tables-only CARGO_PROFILE_TEST_DEBUG=line-tables-only
  # Where the installs of the setup stage live (the tests find them there too).
  cache="${HOME:-/root}/.cache/idem"

  # Each step prints its name, and when it ends the time it took; the table of every
  # step's time, with its stage, is printed at the end, and also when a step fails
  # (BENCHMARKS.md, "CI time").
  timings=()
  stage_name=""
  step_name=""
  step_started=$SECONDS
  ci_started=$SECONDS
  stage() {
    step "" # the last step of the stage before is timed under that stage
    stage_name="$1"
    echo "==== stage: $1"
  }
  step() {
    if [ -n "$step_name" ]; then
      timings+=("$(printf '%5d s  %-6s %s' $((SECONDS - step_started)) "$stage_name" "$step_name")")
      echo "   ($((SECONDS - step_started)) s)"
    fi
    step_name="$1"
    step_started=$SECONDS
    if [ -n "$1" ]; then echo "== $1"; fi
  }
  time_table() {
    echo
    echo "time per step:"
    if [ "${#timings[@]}" -gt 0 ]; then printf '%s\n' "${timings[@]}"; fi
    if [ -n "$step_name" ]; then
      printf '%5d s  %-6s %s (did not finish)\n' $((SECONDS - step_started)) "$stage_name" "$step_name"
    fi
    printf '%5d s  in all\n' $((SECONDS - ci_started))
    echo "disk: $(df -h --output=avail . | tail -n 1 | tr -d ' ') free here, $(du -sh . 2>/dev/null | cut -f1) in this checkout"
  }
  # The test runners' summary: every "test result:" line of cargo and node's counts.
  summary() {
    local logs=()
    for f in target/ci-quick.log target/ci-e2e.log target/ci-web.log; do [ -f "$f" ] && logs+=("$f"); done
    [ "${#logs[@]}" -gt 0 ] || return 0
    awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
         /^# pass / { p += $3 } /^# fail / { f += $3 }
         END { printf "\nsummary: %d passed, %d failed\n", p, f }' "${logs[@]}"
  }
  # The tools the checks run but do not measure (the brokers tansu and rumqttd,
  # wasm-bindgen-cli, cbindgen, mdBook and its link checker), each `cargo install`ed under
  # a directory of ~/.cache/idem named by its version, only when it is missing. They are
  # built with the dev profile and no debug info (--debug): their speed does not count in
  # any test, and a fresh machine builds them in less than half the time (tansu 0.6.0 on
  # 2 cores: 345 s against 800 s; docs/contributing.md, "Where CI's time goes"). They
  # share one build directory (a crate they have in common, at the same version and
  # features, is built once), removed by each stage when its installs are done.
  install_tool() {
    local name="$1" version="$2" root="$3"
    shift 3
    CARGO_PROFILE_DEV_DEBUG=false cargo install "$name" --version "$version" --root "$root" \
      --debug --target-dir "$cache/build" "$@"
  }
  # The end of a run: the step that was running, the time table and the summary.
  finish() {
    step ""
    time_table
    summary
  }
  trap 'status=$?; if [ "$status" -ne 0 ]; then time_table; summary; fi' EXIT
  # The pinned toolchain, its components and the targets the builds name: the one thing
  # the quick stage needs (rustup), done once a run.
  toolchain_ready=""
  ensure_toolchain() {
    [ -z "$toolchain_ready" ] || return 0
    local toolchain
    toolchain=$(sed -n 's/^channel = "\(.*\)"$/\1/p' rust-toolchain.toml)
    step "toolchain $toolchain, rustfmt, clippy, the Cortex-M and WebAssembly targets"
    if ! rustup toolchain list | grep -q "^$toolchain"; then
      rustup toolchain install "$toolchain" --profile minimal
    fi
    rustup component add --toolchain "$toolchain" rustfmt clippy
    rustup target add --toolchain "$toolchain" thumbv6m-none-eabi thumbv7em-none-eabihf wasm32-unknown-unknown
    toolchain_ready=1
  }
  # A rerun counts only its own tests.
  mkdir -p target
  rm -f target/ci-quick.log target/ci-e2e.log target/ci-web.log
  echo "disk: $(df -h --output=avail . | tail -n 1 | tr -d ' ') free at the start"
fi
