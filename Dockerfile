# syntax=docker/dockerfile:1
# Multi-stage build: a static faxgate binary on distroless static, non-root,
# with no shell and no package manager. The Helm chart (deploy/helm/faxgate)
# runs it as this user with a read-only root filesystem and every capability
# dropped; /readyz and /healthz on the admin port replace a HEALTHCHECK (the
# image has no shell or client to run one, and Kubernetes ignores it).
# Pin both base images by digest in your registry mirror for reproducible builds.

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
ARG VERSION=dev
ARG COMMIT=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="faxgate" \
      org.opencontainers.image.description="Authenticating gateway for the fax, numbers, contacts and e-signature API" \
      org.opencontainers.image.source="https://github.com/faxgate/faxgate" \
      org.opencontainers.image.url="https://github.com/faxgate/faxgate" \
      org.opencontainers.image.documentation="https://github.com/faxgate/faxgate/blob/main/README.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=build /out/faxgate /usr/local/bin/faxgate
# 65532 is distroless' "nonroot", numeric so that runAsNonRoot can verify it;
# the gateway needs no privilege (it listens on 8080 and 9090).
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/faxgate"]
CMD ["serve", "--config", "/etc/faxgate/config.yaml"]
