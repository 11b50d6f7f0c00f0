#!/usr/bin/env bash
# image-test.sh [IMAGE] — check the image `make image` built (default
# localhost/warmpool:dev): user 65532, entrypoint and command, size, nothing in it but
# the binary and the CA bundle (no shell), its runtime stage the same as the
# Dockerfile's; then take the binary out of the image and run `serve --dev` from it
# (as user 65532 when root) until /healthz answers 200. Containers cannot run in this
# sandbox (cgroups), so the binary runs on the host.
set -euo pipefail
image=${1:-localhost/warmpool:dev}
max_bytes=${WARMPOOL_IMAGE_MAX_BYTES:-$((120 * 1000 * 1000))}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
pm() { podman --storage-driver vfs "$@"; }
fail() { echo "image-test: FAIL: $*" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/warmpool-image.XXXXXX")
cid='' pid=''
cleanup() {
  [ -z "$pid" ] || { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  [ -z "$cid" ] || pm rm "$cid" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

# 1. The image's configuration.
user=$(pm image inspect "$image" --format '{{.Config.User}}')
[ "$user" = "65532:65532" ] || fail "user is '$user', want 65532:65532"
entrypoint=$(pm image inspect "$image" --format '{{json .Config.Entrypoint}}')
[ "$entrypoint" = '["/warmpool"]' ] || fail "entrypoint is $entrypoint, want [\"/warmpool\"]"
cmd=$(pm image inspect "$image" --format '{{json .Config.Cmd}}')
[ "$cmd" = '["serve"]' ] || fail "command is $cmd, want [\"serve\"]"
size=$(pm image inspect "$image" --format '{{.Size}}')
[ "$size" -le "$max_bytes" ] || fail "image is $size bytes, over $max_bytes"

# 2. Its files: the binary and the CA bundle, nothing else (no shell, no libc).
cid=$(pm create "$image")
files=$(pm export "$cid" | tar -t | sort | tr '\n' ' ')
want="etc/ etc/ssl/ etc/ssl/certs/ etc/ssl/certs/ca-certificates.crt warmpool "
[ "$files" = "$want" ] || fail "image files: $files; want: $want"
pm cp "$cid:/warmpool" "$dir/warmpool"

# 3. deploy/image/Containerfile is the Dockerfile's runtime stage: the same
# instructions after the last FROM, up to where the two files come from.
stage() { # the instructions of the last stage, without comments and blank lines
  awk '/^FROM /{buf=""} !/^[[:space:]]*(#|$)/{buf=buf $0 "\n"} END{printf "%s", buf}' "$1"
}
docker_stage=$(stage "$root/Dockerfile" | sed -e 's#COPY --from=build /etc/ssl/certs/ca-certificates.crt #COPY ca-certificates.crt #' -e 's#COPY --from=build /out/warmpool #COPY warmpool #')
[ "$docker_stage" = "$(stage "$root/deploy/image/Containerfile")" ] ||
  fail "deploy/image/Containerfile differs from the Dockerfile's runtime stage:
$(diff <(echo "$docker_stage") <(stage "$root/deploy/image/Containerfile") || true)"

# 4. The binary in it is static (no cgo: nothing to load from a libc the image lacks).
go version -m "$dir/warmpool" | grep -q 'CGO_ENABLED=0' || fail "the binary was not built with CGO_ENABLED=0"

# 5. It serves: `serve --dev` until /healthz answers 200, as the image's user when root.
chmod 755 "$dir"
run=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  chown 65532:65532 "$dir"
  run=(setpriv --reuid 65532 --regid 65532 --clear-groups)
fi
port=
for _ in $(seq 20); do
  p=$(( 20000 + RANDOM % 20000 ))
  (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && continue
  port=$p; break
done
[ -n "$port" ] || fail "no free port"
start=$(date +%s%N)
(cd "$dir" && exec "${run[@]}" ./warmpool serve --dev --listen "127.0.0.1:$port" --store "$dir/warmpool.db") \
  >"$dir/serve.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz" || true)
  [ "$code" = 200 ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/serve.log" >&2; fail "serve exited before /healthz answered"; }
  sleep 0.1
done
[ "$code" = 200 ] || { cat "$dir/serve.log" >&2; fail "/healthz did not answer 200 within 60s"; }
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "image-test: ok: $image: user $user, entrypoint $entrypoint $cmd, $size bytes ($((size / 1000000)) MB), static binary; /healthz 200 ${ms}ms after start"
