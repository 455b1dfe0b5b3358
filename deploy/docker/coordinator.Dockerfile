# dapple-coordinator: job queue, planner, worker registry, SQLite job store, /metrics.
#   docker build -f deploy/docker/coordinator.Dockerfile -t dapple/coordinator:0.1.0 .
# Built on Debian 12 with the repository's own scripts/setup (CPU only: the coordinator runs no
# kernels), then the binary and the Debian libraries it loads are copied into a slim image.
FROM debian:12 AS build
WORKDIR /src
COPY . .
RUN scripts/setup --no-build \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDAPPLE_WITH_CUDA=OFF \
 && cmake --build /build -j "$(nproc)" --target dapple-coordinator \
 && deploy/docker/bundle.sh /opt/dapple /build/coordinator/dapple-coordinator

FROM debian:12-slim
COPY --from=build /opt/dapple /opt/dapple
ENV PATH=/opt/dapple/bin:$PATH \
    LD_LIBRARY_PATH=/opt/dapple/lib
RUN groupadd -g 10001 dapple && useradd -u 10001 -g dapple -d /var/lib/dapple -s /usr/sbin/nologin dapple \
 && mkdir -p /var/lib/dapple/checkpoints && chown -R dapple:dapple /var/lib/dapple \
 && dapple-coordinator --help >/dev/null
USER 10001:10001
WORKDIR /var/lib/dapple
VOLUME /var/lib/dapple
# 7600: gRPC (dapplectl, workers); 9400: Prometheus /metrics.
EXPOSE 7600 9400
ENTRYPOINT ["/opt/dapple/bin/dapple-coordinator"]
# Plain text off loopback must be asked for; mount certificates and pass --tls-cert / --tls-key
# instead (docs/coordinator.md, "TLS").
CMD ["--listen", "0.0.0.0:7600", "--plaintext", "--db", "/var/lib/dapple/dapple.db", "--metrics-port", "9400"]
