# syntax=docker/dockerfile:1
# bucketd: build a static binary, ship it alone in a small non-root image.
#
#   docker build --build-arg VERSION=1.0.0 -t bucketd:1.0.0 .
#   BUCKETD_REQUIREPASS=$(openssl rand -hex 24) docker run -p 6380:6380 -p 9380:9380 -e BUCKETD_REQUIREPASS bucketd:1.0.0
#
# docs/deploying.md ("The binary and the image") says how to push it and
# name it in the Kubernetes manifests.
#
# Inside the container bucketd listens on 0.0.0.0 so that published ports
# work, but protected mode (on by default) refuses every client that is not
# on loopback until a password is set (BUCKETD_REQUIREPASS) or protected mode
# is turned off explicitly (BUCKETD_PROTECTED_MODE=false).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN VERSION=${VERSION} scripts/build-static.sh /out/bucketd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bucketd /usr/local/bin/bucketd
USER nonroot:nonroot
ENV BUCKETD_ADDR=0.0.0.0:6380 \
    BUCKETD_METRICS_ADDR=0.0.0.0:9380
EXPOSE 6380 9380
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/bucketd", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/bucketd"]
