# syntax=docker/dockerfile:1
#
# The mongolock command in a small image: `mongolock migrate up` for the
# deploy step, `mongolock demo-instance` for docker-compose's demo apps.
#
#   docker build -t mongolock .
#   docker run --rm -e MONGODB_URI=mongodb://host:27017/ mongolock migrate status

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Pure Go (FerretDB's SQLite is modernc.org/sqlite): a static binary.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/mongolock ./cmd/mongolock

# No shell, no package manager: the binary and CA certificates (for TLS
# connections to hosted MongoDB), running as an unprivileged user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/mongolock /usr/local/bin/mongolock
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/mongolock"]
CMD ["-h"]
