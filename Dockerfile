# weir's container image: the `weir` binary on distroless, running as a non-root user.
# Build from the repository root: docker build -t ghcr.io/weir-dev/weir:0.1.0 .

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p weir --bin weir \
    && cp target/release/weir /weir

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /weir /weir
USER nonroot
# weir's API (`weir operator --listen 0.0.0.0:7979`, as deploy/operator.yaml passes).
EXPOSE 7979
ENTRYPOINT ["/weir"]
