#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), formatting, lints and the
# crate layering (fast when already built), every test in the workspace,
# then a short bounded fuzz run of every decoder (FUZZ_SECONDS per target,
# default 10; 0 skips it). This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
scripts/check-layers.sh
cargo test --workspace --locked "$@"
fuzz_seconds="${FUZZ_SECONDS:-10}"
if [ "$fuzz_seconds" -gt 0 ]; then
  scripts/fuzz.sh "$fuzz_seconds"
fi
