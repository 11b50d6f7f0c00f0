#!/usr/bin/env bash
# e2b-sdk.sh — run a node script with the E2B SDK (npm package e2b) at the version of
# e2e/e2b/package-lock.json: `scripts/e2b-sdk.sh SCRIPT.cjs [ARGS...]`, the script
# require()-ing 'e2b'. The SDK and each of its dependencies are installed by `npm ci`
# the first time into ~/.cache/warmpool-e2b/e2b-<hash of the lock>
# (WARMPOOL_E2B_CACHE moves it), preferring npm's own cache, so a machine that ran it
# once runs it offline; a new lock installs anew. `scripts/e2b-sdk.sh --install` only
# installs. Needs node >= 20.18.1, the SDK's engines.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/e2e/e2b"
cache="${WARMPOOL_E2B_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmpool-e2b}"
dir="$cache/e2b-$(sha256sum "$src/package-lock.json" | cut -c1-16)"
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "e2b-sdk: $tool is missing (Debian: apt-get install nodejs npm; the SDK needs node >= 20.18.1)" >&2; exit 1; }
done
if [ ! -f "$dir/node_modules/e2b/package.json" ]; then
  mkdir -p "$cache"
  # Installed aside, then moved into place: an interrupted install is never taken
  # for a finished one.
  tmp=$(mktemp -d "$dir.tmp-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  cp "$src/package.json" "$src/package-lock.json" "$tmp/"
  echo "e2b-sdk: installing the E2B SDK into $dir" >&2
  npm ci --prefix "$tmp" --prefer-offline --ignore-scripts --no-audit --no-fund --loglevel=error >&2
  mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp" # another run put it there first
fi
if [ "${1:-}" = "--install" ]; then
  exit 0
fi
NODE_PATH="$dir/node_modules" exec node "$@"
