# sloprober's container image: a static binary on an empty root.
#
#   make image                      # docker, podman or buildah, whichever works
#   docker run --rm -p 127.0.0.1:9477:9477 sloprober:$(cat VERSION)
#
# With no arguments the image runs `sloprober run` on its embedded default:
# a built-in simulator on the container's loopback, probed by two canary
# loads at 1 req/s each, with /metrics on :9477. Mount a configuration and
# pass it to use your own:
#
#   docker run -v $PWD/sloprober.yml:/etc/sloprober/sloprober.yml:ro ... \
#     sloprober:TAG run --config.file=/etc/sloprober/sloprober.yml --storage.path=/data
#
# deploy/go.mod's tests check this file (stages, user, entrypoint, health
# check, volume) and run the binary it builds on an empty environment, so
# the image is checked even where no container builder runs.
#
# It needs BuildKit (Docker 23 or later) or podman/buildah for the cache
# mounts, and no `# syntax=` line: the builder's own frontend reads it, and
# building pulls no frontend image.

# The build stage is pinned by tag, not digest: digests cannot be looked up
# where this file is written and tested (no registry). go.mod needs Go
# 1.26.8 or later and the official image sets GOTOOLCHAIN=local, so an older
# 1.26 image fails loudly rather than building with another Go. To pin a
# digest: make image GO_IMAGE=golang:1.26-bookworm@sha256:...
ARG GO_IMAGE=golang:1.26-bookworm

# The build stage runs on the builder's own platform and cross-compiles for
# the target's (docker buildx build --platform linux/arm64 needs no emulator).
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
# A static binary: no libc, so it runs on scratch. time/tzdata is compiled
# in (config/validate.go), and DNS uses Go's own resolver.
ENV CGO_ENABLED=0
# Modules first, so a change to the source does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The Makefile's version information (`sloprober --version`,
# sloprober_build_info); `make image` passes the same values as `make build`.
# Without them, the version comes from the VERSION file.
ARG VERSION=""
ARG REVISION=unknown
ARG BRANCH=unknown
ARG BUILDUSER=docker
ARG BUILDDATE=""
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -eu; \
    pkg=github.com/prometheus/common/version; \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-X $pkg.Version=${VERSION:-$(cat VERSION)} -X $pkg.Revision=${REVISION} -X $pkg.Branch=${BRANCH} -X $pkg.BuildUser=${BUILDUSER} -X $pkg.BuildDate=${BUILDDATE:-$(date -u +%Y%m%d-%H:%M:%S)}" \
      -o /out/bin/sloprober ./cmd/sloprober; \
    mkdir -p /out/data /out/tmp; \
    chmod 1777 /out/tmp

# scratch, not distroless: the image is exactly what deploy/'s test runs
# (the binary, CA certificates, an empty /data and /tmp), and building it
# pulls no second base image. There is no /etc/passwd, so the user is
# numeric: 65532, distroless' "nonroot".
FROM scratch
# CA certificates for HTTPS targets, OTLP collectors and server_metrics.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# /tmp for `sloprober bench`, which keeps its runs in a temporary directory.
COPY --from=build /out/tmp /tmp
# The volume's directory, owned by the user: Docker copies an image
# directory's owner into a new volume, so the non-root user can write it.
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build /out/bin/sloprober /bin/sloprober
ARG VERSION=""
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sloprober" \
      org.opencontainers.image.description="A Prometheus-native continuous SLO prober for LLM serving endpoints" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
USER 65532:65532
# Test runs' results (--storage.path). The working directory is the volume
# too, so a command line that omits --storage.path (its default is data/)
# still writes into it, as /data/data.
VOLUME ["/data"]
WORKDIR /data
# /metrics, the landing page, /-/healthy, /-/ready and /-/reload.
EXPOSE 9477
# No curl on scratch: the binary asks its own /-/healthy on 127.0.0.1:9477.
# Its timeout is below Docker's, so a slow answer is reported with a reason
# instead of being killed. A daemon on another port, or with TLS or basic
# auth (--web.config.file), needs its own check:
#   --health-cmd '/bin/sloprober healthcheck --url https://user:pass@127.0.0.1:9443/-/healthy --tls.insecure-skip-verify'
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/bin/sloprober", "healthcheck", "--timeout=4s"]
ENTRYPOINT ["/bin/sloprober"]
CMD ["run", "--storage.path=/data"]
