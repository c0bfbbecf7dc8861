#!/usr/bin/env bash
# Profiles the mirroring agent (`ringmirror run`, 1 shard) under load from the
# perf harness and renders a flame graph.
#
#   perf/flamegraph.sh                 # 4 GiB through the agent, DWARF call graphs
#   SIZE_MB=2048 CALL_GRAPH=fp perf/flamegraph.sh
#
# perf starts the agent (`perf record ... -- ringmirror run`) with events
# disabled and the harness enables them through perf's control FIFO for the
# measured window only (first Fetch to last byte committed): the software
# clock event (`-e cpu-clock`: this VM has no hardware counters) at 999 Hz.
# Outputs, in perf/out/ (gitignored): perf.data, flamegraph.svg, folded.txt,
# top-self.txt (self time by symbol), top-children.txt (inclusive time) and
# summary.txt (samples grouped by what the agent was doing).
set -euo pipefail
cd "$(dirname "$0")/.."

SIZE_MB=${SIZE_MB:-4096}
CALL_GRAPH=${CALL_GRAPH:-dwarf}
OUT=perf/out
mkdir -p "$OUT"

command -v perf >/dev/null || { echo "perf not found: apt-get install linux-perf" >&2; exit 1; }
if ! command -v inferno-flamegraph >/dev/null || ! command -v inferno-collapse-perf >/dev/null; then
    cargo install inferno --locked
fi

cargo build --release -p ringmirror-perf -p ringmirror

target/release/perf-mirror --scenarios mirror-1-copy --repeats 1 --size-mb "$SIZE_MB" \
    --perf-record "$OUT/perf.data" --perf-call-graph "$CALL_GRAPH"

perf script -i "$OUT/perf.data" 2>/dev/null > "$OUT/perf.script"
inferno-collapse-perf "$OUT/perf.script" > "$OUT/folded.txt"
inferno-flamegraph --title "ringmirror run (default ingest), 1 shard, mirroring ${SIZE_MB} MiB (perf cpu-clock, ${CALL_GRAPH})" \
    "$OUT/folded.txt" > "$OUT/flamegraph.svg"
# (Whole reports first: cutting the pipe short would fail the script under pipefail.)
perf report -i "$OUT/perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null > "$OUT/top-self.txt"
perf report -i "$OUT/perf.data" --children --sort symbol --stdio -g none 2>/dev/null > "$OUT/top-children.txt"
rm -f "$OUT/perf.script" "$OUT/perf.data.old"
perf/profile-summary.py "$OUT/folded.txt" | tee "$OUT/summary.txt"
echo "flame graph: $OUT/flamegraph.svg ($(du -h "$OUT/flamegraph.svg" | cut -f1)); top frames: $OUT/top-self.txt"
