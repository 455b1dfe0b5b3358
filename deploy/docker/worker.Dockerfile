# dapple-worker for NVIDIA GPU nodes: runs one pipeline stage on its GPU (or on the CPU).
#   docker build -f deploy/docker/worker.Dockerfile -t dapple/worker:0.1.0 .
# Built on Debian 12 with scripts/setup plus the CUDA 13 compiler, cuBLAS and NCCL from NVIDIA's
# Debian 12 repository (kernels for sm_90: H100/H200; set CUDA_ARCHS for others). The runtime image
# is NVIDIA's CUDA runtime image: its cudart, cuBLAS(Lt) and NCCL are used, never bundled; the
# Debian libraries dapple loads travel in /opt/dapple/lib (deploy/docker/bundle.sh).
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu24.04

FROM debian:12 AS build
ARG CUDA_ARCHS=90
ARG CUDA_PACKAGE_VERSION=13-0
WORKDIR /src
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ca-certificates wget \
 && wget -q https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
 && dpkg -i cuda-keyring_1.1-1_all.deb && rm cuda-keyring_1.1-1_all.deb \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      cuda-nvcc-${CUDA_PACKAGE_VERSION} cuda-cudart-dev-${CUDA_PACKAGE_VERSION} \
      libcublas-dev-${CUDA_PACKAGE_VERSION} libnccl-dev \
 && ln -sfn "/usr/local/cuda-$(echo ${CUDA_PACKAGE_VERSION} | tr - .)" /usr/local/cuda
COPY . .
RUN scripts/setup --no-build \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS} -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
 && cmake --build /build -j "$(nproc)" --target dapple-worker \
 && BUNDLE_SKIP_EXTRA='^(libstdc\+\+|libgcc_s)\.' \
      deploy/docker/bundle.sh /opt/dapple /build/worker/dapple-worker \
 && mkdir -p /opt/datasets && cp -r /usr/share/datasets/fashion-mnist /opt/datasets/

FROM ${CUDA_RUNTIME_IMAGE}
COPY --from=build /opt/dapple /opt/dapple
COPY --from=build /opt/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
# The CUDA image's LD_LIBRARY_PATH (the driver's libraries) stays after dapple's own.
ENV PATH=/opt/dapple/bin:$PATH \
    LD_LIBRARY_PATH=/opt/dapple/lib:${LD_LIBRARY_PATH}
RUN (groupadd -g 10001 dapple && useradd -u 10001 -g dapple -d /var/lib/dapple -s /usr/sbin/nologin dapple) \
 && mkdir -p /var/lib/dapple/datasets /var/lib/dapple/checkpoints && chown -R dapple:dapple /var/lib/dapple \
 && dapple-worker --help >/dev/null
USER 10001:10001
WORKDIR /var/lib/dapple
# 9401: Prometheus /metrics (the chart gives worker i of a pod 9401 + i).
EXPOSE 9401
ENTRYPOINT ["/opt/dapple/bin/dapple-worker"]
# Plain text to a coordinator off loopback must be asked for; with TLS pass --ca instead.
CMD ["--coordinator", "dapple:7600", "--plaintext", "--metrics-port", "9401"]
