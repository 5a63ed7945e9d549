# remedy's container image: one static binary on an empty base, run as
# 65532 (distroless "nonroot"), nothing written to the root filesystem.
#
# Default (CI, registries reachable): builds in the Rust image, for
# linux/amd64 and linux/arm64 (cross-compiled from the build platform):
#   docker buildx build --platform linux/amd64,linux/arm64 -t remedy:0.1.0 .
# Offline (no base image to pull; what scripts/image does): a binary built on
# the host, copied into scratch from a context holding root-$TARGETARCH/ (scripts/image):
#   podman build --target prebuilt --build-arg TARGETARCH=amd64 -f Dockerfile CONTEXT
#
# The binary is glibc linked with +crt-static (no musl target needed). glibc
# 2.34+ has its files/dns NSS built in, so name resolution works without
# /etc/nsswitch.conf or libnss_*.so. TLS roots are compiled in (webpki-roots;
# the in-cluster CA comes from the ServiceAccount), so no /etc/ssl either.

ARG RUST_VERSION=1.95

# --- runtime settings shared by both final stages -----------------------------
FROM scratch AS runtime
# Numeric, since scratch has no /etc/passwd: Kubernetes' runAsNonRoot can
# verify a numeric user only.
USER 65532:65532
# kubectl-remedy (the same binary, hard-linked) is found by `kubectl exec POD
# -- kubectl-remedy status`; scratch has no PATH of its own.
ENV PATH=/usr/local/bin
EXPOSE 8080
ENTRYPOINT ["/remedy"]
CMD ["serve", "--config", "/etc/remedy/config.yaml"]

# --- offline: the host-built binary (scripts/image) ---------------------------
# First, so `--target prebuilt` never reaches (or pulls) the Rust image.
# root-$TARGETARCH/ holds /remedy and its hard link
# /usr/local/bin/kubectl-remedy: one COPY keeps the link, so the binary is
# stored once.
FROM runtime AS prebuilt
ARG TARGETARCH
COPY --chmod=0555 root-${TARGETARCH}/ /

# --- build: Rust on the build platform, cross-compiling to TARGETARCH ----------
FROM --platform=$BUILDPLATFORM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
ARG TARGETARCH
WORKDIR /src
# The Rust target and, for arm64, Debian's cross gcc and static glibc
# (ring compiles C; crt-static links libc.a).
RUN set -eu; \
    case "$TARGETARCH" in \
      amd64) echo x86_64-unknown-linux-gnu >/rust-target ;; \
      arm64) echo aarch64-unknown-linux-gnu >/rust-target; \
             apt-get update -qq; \
             apt-get install -y -qq --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross; \
             rm -rf /var/lib/apt/lists/* ;; \
      *) echo "unsupported TARGETARCH=$TARGETARCH" >&2; exit 1 ;; \
    esac; \
    rustup target add "$(cat /rust-target)"
ENV CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
    RUSTFLAGS="-C target-feature=+crt-static"
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY benches benches
COPY examples examples
# --profile image: release without debug info, stripped (Cargo.toml).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    set -eu; t="$(cat /rust-target)"; \
    cargo build --locked --profile image --target "$t" --bin remedy; \
    mkdir -p /out/usr/local/bin; \
    cp "target/$t/image/remedy" /out/remedy; \
    ln /out/remedy /out/usr/local/bin/kubectl-remedy

# --- default: the image built above -------------------------------------------
FROM runtime
COPY --from=build /out/ /
