#!/usr/bin/env bash
# openapi-lint.sh — lint api/openapi.yaml with the rules of api/spectral.yaml
# (Spectral's recommended OpenAPI rules and one of vacuum's), every warning a failure.
# Spectral and each of its dependencies come at the versions of
# scripts/openapi-lint/package-lock.json, installed by `npm ci` the first time into
# ~/.cache/warmpool-lint/spectral-<hash of the lock> (WARMPOOL_LINT_CACHE moves it) and
# reused from there; a new lock installs anew.
set -euo pipefail
cd "$(dirname "$0")/.."
src=scripts/openapi-lint
cache="${WARMPOOL_LINT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmpool-lint}"
dir="$cache/spectral-$(sha256sum "$src/package-lock.json" | cut -c1-16)"
if [ ! -x "$dir/node_modules/.bin/spectral" ]; then
  command -v npm >/dev/null || { echo "openapi-lint: npm is missing (Debian: apt-get install npm)" >&2; exit 1; }
  mkdir -p "$cache"
  # Installed aside, then moved into place: an interrupted install is never taken
  # for a finished one.
  tmp=$(mktemp -d "$dir.tmp-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  cp "$src/package.json" "$src/package-lock.json" "$tmp/"
  echo "openapi-lint: installing Spectral into $dir" >&2
  npm ci --prefix "$tmp" --ignore-scripts --no-audit --no-fund --loglevel=error >&2
  mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp" # another run put it there first
fi
"$dir/node_modules/.bin/spectral" lint --ruleset api/spectral.yaml --fail-severity warn --quiet api/openapi.yaml
