#!/usr/bin/env bash
# Local stand-ins for NVIDIA's nvidia/cuda devel and runtime images, for
# building docker/Dockerfile.cuda where no registry is reachable: the
# debian:12 base (see test_docker.py) plus this machine's CUDA toolkit. The
# runtime one carries only the libraries qac loads (cudart, cuBLAS, cuBLASLt);
# the devel one adds nvcc, NVVM and the headers. Tagged with the names
# Dockerfile.cuda uses by default, so that it builds unchanged.
#   tests/docker/cuda_standin.sh [CUDA_HOME]      (default /usr/local/cuda)
# Needs podman with a working containers.conf (CONTAINERS_CONF).
set -euo pipefail
cd "$(dirname "$0")/../.."
cuda=$(readlink -f "${1:-${CUDA_HOME:-/usr/local/cuda}}")
[ -x "$cuda/bin/nvcc" ] || { echo "cuda_standin: no nvcc under $cuda" >&2; exit 1; }
ver=$(sed -n 's/^ARG CUDA_VERSION=//p' docker/Dockerfile.cuda)
distro=$(sed -n 's/^ARG CUDA_DISTRO=//p' docker/Dockerfile.cuda)
nvcc_ver=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
case "$ver" in "$nvcc_ver"*) ;; *) echo "cuda_standin: toolkit is $nvcc_ver, Dockerfile.cuda wants $ver" >&2; exit 1 ;; esac
base=docker.io/library/debian:12
podman image exists "$base" || { echo "cuda_standin: no $base image (tests/docker/test_docker.py makes it)" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
lib=$cuda/lib64; [ -d "$lib" ] || lib=$cuda/targets/x86_64-linux/lib
mkdir -p "$ctx/rt/lib64" "$ctx/dev"
cp -a "$lib"/libcudart.so* "$lib"/libcublas.so* "$lib"/libcublasLt.so* "$ctx/rt/lib64/"
cat > "$ctx/rt/Containerfile" <<EOT
FROM $base
COPY lib64/ /usr/local/cuda-$nvcc_ver/lib64/
RUN ln -s cuda-$nvcc_ver /usr/local/cuda && echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/cuda.conf && ldconfig
ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility CUDA_VERSION=$ver
EOT
rt="docker.io/nvidia/cuda:$ver-runtime-$distro"
podman build --pull=never --format docker -t "$rt" "$ctx/rt"

# devel: the compiler, NVVM, headers, the static runtime and the driver stub
mkdir -p "$ctx/dev/cuda/lib64"
cp -a "$cuda/bin" "$cuda/nvvm" "$cuda/include" "$ctx/dev/cuda/"
cp -a "$lib"/libcudart* "$lib"/libcudadevrt.a "$lib"/libculibos.a "$lib"/stubs "$ctx/dev/cuda/lib64/"
[ -d "$lib/cmake" ] && cp -a "$lib/cmake" "$ctx/dev/cuda/lib64/"
cat > "$ctx/dev/Containerfile" <<EOT
FROM $rt
COPY cuda/ /usr/local/cuda-$nvcc_ver/
EOT
dev="docker.io/nvidia/cuda:$ver-devel-$distro"
podman build --pull=never --format docker -t "$dev" "$ctx/dev"
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep nvidia/cuda
