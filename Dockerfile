# syntax=docker/dockerfile:1
# Multi-stage build: a static faxgate binary on a distroless, non-root runtime
# with no shell and no package manager. Pin both images by digest in your
# registry mirror for reproducible builds.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so source edits do not invalidate the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/faxgate ./cmd/faxgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/faxgate /usr/local/bin/faxgate
# 65532 is distroless' "nonroot"; the gateway needs no privilege (listen on
# 8080/9090, not below 1024).
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/faxgate"]
CMD ["serve", "--config", "/etc/faxgate/config.yaml"]
