#!/usr/bin/env bash
# Browser tests of the built-in web client, in real Chromium (/usr/bin/chromium, Debian's
# `chromium` package; CHROMIUM_PATH overrides it).
#
#   bash tests/web/run.sh target/debug/roundtable
#
# Builds nothing: $1 is the roundtable binary to test. Installs the test's npm dependencies
# (playwright-core only, no browser download) when node_modules is missing. The exit code is
# the test result.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 <path to the roundtable binary>" >&2
  exit 2
fi
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
if [ ! -x "$bin" ]; then
  echo "run.sh: $1 is not an executable roundtable binary (cargo build --bin roundtable first)" >&2
  exit 2
fi
cd "$(dirname "${BASH_SOURCE[0]}")"
if [ ! -d node_modules ]; then
  npm ci --no-audit --no-fund
fi
export ROUNDTABLE_BIN="$bin"
exec node --test --test-concurrency=1 web.test.mjs
