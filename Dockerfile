# The warmpool image: a static binary on an empty base, run as a non-root user, with no
# shell and no package manager. Build with any OCI builder:
#   docker build -t warmpool:1.0 .
# `make image` builds the same runtime stage (deploy/image/Containerfile) on a machine
# without a registry, from a binary built by the local Go toolchain.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static: no cgo (SQLite is modernc.org/sqlite, pure Go), so it runs on an empty base.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" -o /out/warmpool ./cmd/warmpool

# Keep this stage identical to deploy/image/Containerfile (scripts/image-test.sh checks).
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/warmpool /warmpool
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/warmpool"]
CMD ["serve"]
