# syntax=docker/dockerfile:1
# khai: one prebuilt operator daemon. `docker build .` from a clean checkout builds it.
#
# Base images are build arguments, e.g. for a mirror:
#   docker build --build-arg RUST_IMAGE=mirror/rust:1-bookworm \
#                --build-arg RUNTIME_IMAGE=mirror/distroless/cc-debian12:nonroot .
# Where no registry is reachable, scripts/image builds the same runtime image with buildah from
# Debian packages and a binary built on the host (tests/e2e/image.rs checks the two agree).
ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# Everything Cargo needs to load the workspace: the manifest and lockfile, the workspace members
# and benchmark targets it names (benches/), and the sources.
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
COPY src ./src
RUN cargo build --release --locked --bin khai

# TLS is rustls, so the runtime needs only glibc and libgcc_s: distroless/cc, as its non-root
# user. khai writes nothing to disk, so a read-only root filesystem works.
FROM ${RUNTIME_IMAGE}
COPY --from=build /src/target/release/khai /usr/local/bin/khai
USER 65532:65532
EXPOSE 8080 9443
ENTRYPOINT ["/usr/local/bin/khai"]
CMD ["run", "--config", "/config", "--log-format", "json"]
