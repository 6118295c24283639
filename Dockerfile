# syntax=docker/dockerfile:1
# khai: one prebuilt operator daemon. Operators are configs + scripts mounted at /config.

FROM rust:1-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src
COPY src ./src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin khai

# TLS is rustls, so the runtime needs only glibc: distroless/cc, as the non-root user.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/khai /usr/local/bin/khai
USER 65532:65532
EXPOSE 8080 9443
ENTRYPOINT ["/usr/local/bin/khai"]
CMD ["run", "--config", "/config", "--log-format", "json"]
