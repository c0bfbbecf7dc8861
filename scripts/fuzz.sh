#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (default 15 s each; pass
# seconds as $1, e.g. `scripts/fuzz.sh 3600` for a long soak). The targets
# cover every decoder that reads bytes from the network or disk: record
# batches, Fetch responses, segment recovery, the requests clients send
# the listener, DescribeClusterMirrors answers from peers, and the
# transaction coordinator's `__transaction_state` records (`cargo fuzz
# list` finds them all). cargo-fuzz needs nightly
# features; RUSTC_BOOTSTRAP lets the stable toolchain provide them.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-15}"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install --quiet --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O
for target in $(cargo fuzz list); do
  echo "fuzz: $target for ${seconds}s"
  cargo fuzz run -O "$target" -- -max_total_time="$seconds" -max_len=4096 -print_final_stats=0 2>&1 \
    | grep -E "^Done|ERROR|panicked|SUMMARY" || true
  # libFuzzer leaves a crash-, oom-, leak- or timeout- file for any
  # failure; fail loudly with it.
  for kind in crash oom leak timeout; do
    if compgen -G "artifacts/$target/$kind-*" >/dev/null; then
      echo "fuzz: $target failed ($kind); reproduce with: RUSTC_BOOTSTRAP=1 cargo fuzz run $target artifacts/$target/$kind-*" >&2
      exit 1
    fi
  done
done
echo "fuzz: 0 crashes"
