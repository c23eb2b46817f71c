#!/usr/bin/env bash
# Builds TypeAgent's real agent-server client library (@typeagent/agent-server-client) and
# the nine workspace packages it needs from the sources vendored in vendor/ (see
# vendor/README.md), with npm + tsc, into a work dir outside the source tree:
#
#   bash tests/typeagent/setup.sh          # -> tests/typeagent/.build/ts/packages/...
#
# npm dependencies come from the npm registry, pinned by the committed package-lock.json
# (`npm ci`: fails if it no longer matches the manifests). Nothing is fetched from GitHub.
# The vendored files are not touched: vendor/ts is copied into the work dir and the copies
# of the package.json files are adapted there (below).
#
# Idempotent: the work dir is rebuilt from scratch unless its stamp (a hash of everything
# the build reads: vendor/, package-lock.json, this script, node's version) matches.
#
#   TA_BUILD=DIR      work dir                           (default tests/typeagent/.build)
#   TA_FORCE=1        rebuild even when the stamp matches
#   TA_FRESH_LOCK=1   re-resolve dependencies from the registry (npm install) and write the
#                     result to package-lock.json (to commit) instead of `npm ci`
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENDOR="$HERE/vendor"
LOCK="$HERE/package-lock.json"
BUILD=${TA_BUILD:-$HERE/.build}

# Workspace packages, in build (dependency) order. The client needs agent-rpc, agent-sdk,
# agent-server-protocol and dispatcher-rpc; those need common-utils, telemetry (-> config),
# dispatcher-types and copilot-macros.
PKGS=(
  packages/utils/commonUtils      # @typeagent/common-utils
  packages/config                 # @typeagent/config          (telemetry)
  packages/telemetry              # @typeagent/telemetry       (agent-rpc)
  packages/agentSdk               # @typeagent/agent-sdk
  packages/agentRpc               # @typeagent/agent-rpc
  packages/dispatcher/types       # @typeagent/dispatcher-types
  packages/dispatcher/rpc         # @typeagent/dispatcher-rpc
  packages/copilot-macros         # @typeagent/copilot-macros  (protocol)
  packages/agentServer/protocol   # @typeagent/agent-server-protocol
  packages/agentServer/client     # @typeagent/agent-server-client
)

die() { echo "setup.sh: $*" >&2; exit 1; }
command -v node >/dev/null || die "node not found (Node.js 20+ and npm are needed)"
command -v npm >/dev/null || die "npm not found (Node.js 20+ and npm are needed)"
node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' \
  || die "Node.js 20+ is needed (found $(node --version))"
[ -f "$VENDOR/ts/tsconfig.base.json" ] || die "no vendored TypeAgent sources at $VENDOR/ts"
for p in "${PKGS[@]}"; do
  [ -f "$VENDOR/ts/$p/package.json" ] && [ -d "$VENDOR/ts/$p/src" ] || die "vendor/ts/$p is incomplete"
done
case "$BUILD" in "$VENDOR"|"$VENDOR"/*) die "TA_BUILD must be outside $VENDOR" ;; esac

stamp=$(
  cd "$HERE"
  {
    find vendor -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    [ -f package-lock.json ] && sha256sum package-lock.json
    sha256sum setup.sh
    node --version
    npm --version
  } | sha256sum | cut -d' ' -f1
)
if [ "${TA_FORCE:-0}" != 1 ] && [ "${TA_FRESH_LOCK:-0}" != 1 ] \
  && [ -f "$BUILD/.stamp" ] && [ "$(cat "$BUILD/.stamp")" = "$stamp" ]; then
  echo "setup.sh: $BUILD is up to date (stamp $stamp); TA_FORCE=1 rebuilds"
  exit 0
fi

echo "setup.sh: building TypeAgent's client library in $BUILD"
rm -rf "$BUILD"
mkdir -p "$BUILD"
cp -R "$VENDOR/ts" "$BUILD/ts"

# The copies' package.json files, adapted for a standalone npm build:
#  - `workspace:*` (pnpm's protocol; npm does not know it) -> `file:<relative path>` for
#    the packages built here; a workspace devDependency on a package not vendored (they are
#    test-only) is dropped;
#  - devDependencies on tooling this build does not run (jest, prettier, rimraf) dropped;
#  - the `bin` entry of @typeagent/config dropped (its bin/ script is not vendored: only the
#    library is used).
# A root package.json declares the packages as npm workspaces, so one `npm ci` installs and
# hoists everything, plus the compiler (TypeScript 5.4, the version TypeAgent's ts/ uses).
node - "$BUILD/ts" "${PKGS[@]}" <<'EOF'
const fs = require("fs");
const path = require("path");
const [root, ...pkgs] = process.argv.slice(2);
const byName = new Map();
for (const p of pkgs) {
  const pj = JSON.parse(fs.readFileSync(path.join(root, p, "package.json"), "utf8"));
  byName.set(pj.name, p);
}
const DROP_DEV = /^(jest|@jest\/|@types\/jest$|prettier$|rimraf$|ts-jest$)/;
for (const p of pkgs) {
  const file = path.join(root, p, "package.json");
  const pj = JSON.parse(fs.readFileSync(file, "utf8"));
  for (const field of ["dependencies", "devDependencies", "peerDependencies", "optionalDependencies"]) {
    const deps = pj[field];
    if (!deps) continue;
    for (const [name, spec] of Object.entries(deps)) {
      if (field === "devDependencies" && DROP_DEV.test(name)) { delete deps[name]; continue; }
      if (typeof spec !== "string" || !spec.startsWith("workspace:")) continue;
      const target = byName.get(name);
      if (target === undefined) {
        if (field === "devDependencies") { delete deps[name]; continue; }
        throw new Error(`${pj.name}: ${field} needs workspace package ${name}, which is not vendored`);
      }
      deps[name] = "file:" + path.relative(path.join(root, p), path.join(root, target));
    }
  }
  delete pj.bin;
  delete pj.scripts?.postinstall;
  delete pj.scripts?.prepare;
  fs.writeFileSync(file, JSON.stringify(pj, null, 2) + "\n");
}
const rootPkg = {
  name: "roundtable-typeagent-check",
  private: true,
  workspaces: pkgs,
  devDependencies: { "@types/node": "^22.0.0", typescript: "~5.4.5" },
};
fs.writeFileSync(path.join(root, "package.json"), JSON.stringify(rootPkg, null, 2) + "\n");
EOF
if grep -rn '"workspace:' --include=package.json "$BUILD/ts"; then
  die "workspace: specs left after the rewrite"
fi

cd "$BUILD/ts"
if [ "${TA_FRESH_LOCK:-0}" = 1 ]; then
  npm install --no-audit --no-fund --loglevel=error
  cp package-lock.json "$LOCK"
  echo "setup.sh: wrote $LOCK (commit it)"
else
  [ -f "$LOCK" ] || die "no $LOCK (TA_FRESH_LOCK=1 creates it)"
  cp "$LOCK" package-lock.json
  npm ci --no-audit --no-fund --loglevel=error \
    || die "npm ci failed (if the manifests changed on purpose, TA_FRESH_LOCK=1 re-resolves the lock)"
fi

TSC="$BUILD/ts/node_modules/.bin/tsc"
[ -x "$TSC" ] || die "typescript was not installed"
echo "setup.sh: $("$TSC" --version)"
for p in "${PKGS[@]}"; do
  echo "setup.sh: tsc -b $p/src"
  (cd "$BUILD/ts/$p" && "$TSC" -b src) || die "tsc failed in $p"
done

# Smoke: the public entry points load under Node.
(
  cd "$BUILD/ts/packages/agentServer/client"
  node --input-type=module -e '
    const c = await import("@typeagent/agent-server-client");
    const v = await import("@typeagent/agent-server-client/conversation");
    if (typeof c.connectAgentServer !== "function") throw new Error("missing connectAgentServer");
    for (const f of ["findOrCreateNamedConversation", "createEphemeralConversation"])
      if (typeof v[f] !== "function") throw new Error("missing " + f);
    console.log("setup.sh: @typeagent/agent-server-client loads:", Object.keys(c).length, "exports");
  '
) || die "the built library does not load"
echo "$stamp" > "$BUILD/.stamp"
echo "setup.sh: OK"
