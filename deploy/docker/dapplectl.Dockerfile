# dapplectl: the command-line client.
#   docker build -f deploy/docker/dapplectl.Dockerfile -t dapple/dapplectl:0.1.0 .
#   docker run --rm --network host dapple/dapplectl:0.1.0 --coordinator 127.0.0.1:7600 workers
FROM debian:12 AS build
WORKDIR /src
COPY . .
RUN scripts/setup --no-build \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDAPPLE_WITH_CUDA=OFF \
 && cmake --build /build -j "$(nproc)" --target dapplectl \
 && deploy/docker/bundle.sh /opt/dapple /build/dapplectl/dapplectl

FROM debian:12-slim
COPY --from=build /opt/dapple /opt/dapple
COPY examples /opt/dapple/examples
ENV PATH=/opt/dapple/bin:$PATH \
    LD_LIBRARY_PATH=/opt/dapple/lib
RUN useradd -u 10001 -m -s /usr/sbin/nologin dapple && dapplectl --help >/dev/null
USER 10001
WORKDIR /opt/dapple/examples
ENTRYPOINT ["/opt/dapple/bin/dapplectl"]
CMD ["--help"]
