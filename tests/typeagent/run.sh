#!/usr/bin/env bash
# TypeAgent's real client library against Roundtable: builds the vendored library
# (setup.sh), then runs stream-check.mjs's checks against a Roundtable binary:
#   1. stream     a streamed answer reaches the client as appendDisplay(…, "inline") pieces;
#   2. negative   the same with the model endpoint sending the answer as one chunk: the
#                 check must FAIL on the streaming assertions (proves it can fail);
#   3. late-join  a second client joining mid-answer gets the words so far, then the rest
#                 live, concatenating to the whole answer.
# Checks 1 and 3 are strict: any warning/error TypeAgent's library logs fails them.
#
#   bash tests/typeagent/run.sh
#
# Builds no Rust: the server is $ROUNDTABLE_BIN, default <repo>/target/release/roundtable.
# Needs Node.js 20+ and npm (the npm registry, for setup.sh's `npm ci`). Exit 0 = all passed.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
bin=${ROUNDTABLE_BIN:-$REPO/target/release/roundtable}
if [ ! -x "$bin" ]; then
  echo "run.sh: no roundtable binary at $bin" >&2
  echo "run.sh: build it with: cargo build --release --bin roundtable   (or point ROUNDTABLE_BIN at one)" >&2
  exit 2
fi
ROUNDTABLE_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export ROUNDTABLE_BIN
echo "run.sh: server $ROUNDTABLE_BIN ($(date -u -r "$ROUNDTABLE_BIN" '+built %Y-%m-%d %H:%M:%S UTC'))"

bash "$HERE/setup.sh"

failed=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== typeagent: stream (a streamed answer arrives as inline appends)"
node "$HERE/stream-check.mjs" --scenario stream || failed+=("stream")

echo "== typeagent: negative control (answer in one chunk: the stream check must fail)"
# Not strict here: only the streaming assertions may make it fail.
set +e
STRICT_LIB_LOG=0 node "$HERE/stream-check.mjs" --scenario stream --one-chunk >"$log" 2>&1
rc=$?
set -e
grep -E '^(PASS|FAIL|WARN)  |^RESULT' "$log" || true
if [ "$rc" -ne 1 ] || ! grep -q '^FAIL  A: >= 3 appendDisplay' "$log"; then
  cat "$log" >&2
  echo "run.sh: the one-chunk run exited $rc; expected 1, failing the '>= 3 inline appends' check" >&2
  failed+=("negative control")
else
  echo "run.sh: negative control failed as it must (exit 1)"
fi

echo "== typeagent: late-join (a second client joins while the answer is being written)"
node "$HERE/stream-check.mjs" --scenario late-join || failed+=("late-join")

if [ ${#failed[@]} -ne 0 ]; then
  echo "run.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "run.sh: all TypeAgent client checks passed"
