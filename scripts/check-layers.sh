#!/usr/bin/env bash
# Checks the layering of the code and fails when it is broken:
#
# 1. Crates (from `cargo tree`, normal dependencies): storage, protocol and
#    transactions never depend on dataplane, control or an async runtime or
#    TLS stack (glommio, tokio, rustls); dataplane never depends on control.
# 2. Folders inside a crate: no import cycle between the top-level modules
#    of a crate (`crate::a` used in b/ and `crate::b` in a/, or longer
#    circles), read from the `crate::` and `super::` paths of non-test
#    code. The cycles that exist today are listed in KNOWN_CYCLES and
#    printed, so the check passes while they stand; a new cycle, or a
#    known one that grew, fails it. Remove a line when its cycle is gone.
set -euo pipefail
cd "$(dirname "$0")/.."

failed=0

# Prints the packages `package` depends on (normal edges, any depth).
normal_dependencies() {
  cargo tree --quiet --locked -p "$1" -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u
}

# Fails if `package` depends on any of the named packages.
forbid_dependencies() {
  local package="$1"
  shift
  local deps
  deps="$(normal_dependencies "$package")"
  for forbidden in "$@"; do
    if grep -qx "$forbidden" <<<"$deps"; then
      echo "layers: $package depends on $forbidden" >&2
      failed=1
    fi
  done
}

forbid_dependencies ringmirror-storage ringmirror-protocol ringmirror-dataplane ringmirror-control glommio tokio rustls
forbid_dependencies ringmirror-protocol ringmirror-dataplane ringmirror-control glommio tokio rustls
forbid_dependencies ringmirror-transactions ringmirror-dataplane ringmirror-control glommio tokio rustls
forbid_dependencies ringmirror-dataplane ringmirror-control

# Import cycles between a crate's top-level modules, as "<src dir>: <modules
# of the cycle, sorted>" lines; none stand today, keep it so.
KNOWN_CYCLES=""

python3 - "$KNOWN_CYCLES" <<'EOF' || failed=1
import os, re, sys

known = {line.strip() for line in sys.argv[1].splitlines() if line.strip()}
SRC_DIRS = ["storage/src", "protocol/src", "transactions/src", "dataplane/src", "control/src", "src", "perf/src", "kafka-harness/src"]
PATH = re.compile(r"\b(crate|super)::(\{[^}]*\}|\w+)")

def top_module(src, path):
    rel = os.path.relpath(path, src).split(os.sep)
    if rel[0] in ("lib.rs", "main.rs") or rel[0] == "bin":
        return None
    return rel[0][:-3] if rel[0].endswith(".rs") else rel[0]

def code_lines(path):
    """Lines of non-test code, comments cut: stops at `#[cfg(test)] mod tests`."""
    lines = open(path, encoding="utf-8").read().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and re.match(r"\s*mod tests\b", lines[i + 1]):
            lines = lines[:i]
            break
    return [line.split("//", 1)[0] for line in lines]

def edges(src):
    graph = {}
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in ("tests", "bin")]
        for name in files:
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            path = os.path.join(root, name)
            module = top_module(src, path)
            if module is None:
                continue
            # `super::x` leaves the top-level module only from its own root file.
            depth = len(os.path.relpath(path, src).split(os.sep))
            super_is_root = depth == 1 or (depth == 2 and name == "mod.rs")
            for kind, target in PATH.findall("\n".join(code_lines(path))):
                if kind == "super" and not super_is_root:
                    continue
                names = re.findall(r"\w+", target)
                # `crate::{a, b::c}`: each item's first segment.
                if target.startswith("{"):
                    names = [item.strip().split("::")[0] for item in target[1:-1].split(",") if item.strip()]
                for other in names:
                    if other not in ("self", "super", module) and (
                        os.path.isdir(os.path.join(src, other)) or os.path.isfile(os.path.join(src, other + ".rs"))
                    ):
                        graph.setdefault(module, set()).add(other)
    return graph

def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v); on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop(); on_stack.discard(w); component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found

failed = False
for src in SRC_DIRS:
    for component in cycles(edges(src)):
        line = f"{src}: {' '.join(component)}"
        if line in known:
            print(f"layers: known import cycle (to break): {line}")
        else:
            print(f"layers: import cycle: {line}", file=sys.stderr)
            failed = True
sys.exit(1 if failed else 0)
EOF

if [ "$failed" -ne 0 ]; then
  echo "layers: FAILED" >&2
  exit 1
fi
echo "layers: ok"
