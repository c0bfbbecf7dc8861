#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), then every test in the
# workspace. This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace --locked "$@"
