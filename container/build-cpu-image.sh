#!/usr/bin/env bash
# Build the small CPU image of the benchmark suite here, without a registry:
#   1. debootstrap a minimal Debian bookworm root filesystem with Python 3.11 and Open MPI (mpirun),
#   2. install a CPU build of torch and numpy into it with the build machine's pip (the same
#      wheels `pip install` would fetch; no CUDA libraries). torchvision and transformers are left
#      out: no CPU torchvision wheel that matches is available here (PyPI's is built against CUDA
#      torch), so this small image runs the micro-benchmarks; Containerfile.cpu builds the full one.
#   3. add the suite (benchmarks/sb_bench) and import the tree as an image,
#   4. save it as a docker-archive tarball: what `sb-fleet deploy` pushes to air-gapped hosts.
# The result loads into podman (podman load) and docker (docker load) alike.
# Usage (root, podman + debootstrap installed):
#   container/build-cpu-image.sh OUT.tar [IMAGE]        (IMAGE default: localhost/sb-bench:cpu)
# Environment: TORCH_SPEC (default: the newest local torch +cpu wheel, else torch from
# https://download.pytorch.org/whl/cpu), DEBIAN_MIRROR, SB_PODMAN_ARGS (podman global args).
# container/Containerfile.cpu is the same image as a Containerfile, for sites that build with a registry.
set -euo pipefail
out=${1:?usage: build-cpu-image.sh OUT.tar [IMAGE]}
image=${2:-localhost/sb-bench:cpu}
here=$(cd "$(dirname "$0")/.." && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
podman_args=(${SB_PODMAN_ARGS:---storage-driver=vfs --runtime=/usr/sbin/runc})
pip=${PIP:-$here/.venv/bin/pip}
[ -x "$pip" ] || pip="python3 -m pip"

work=$(mktemp -d /var/tmp/sb-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs

echo "build-cpu-image: debootstrap bookworm (minbase + python3 + Open MPI)"
# openmpi-bin: SuperBench's mpi mode runs mpirun inside the image (one node's ranks; launch_mpi.py).
debootstrap --variant=minbase --include=python3,libgomp1,openmpi-bin bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log"; exit 1; }
chroot "$rootfs" mpirun --version >/dev/null

spec=${TORCH_SPEC:-}
extra_index=()
if [ -z "$spec" ]; then
  # A +cpu wheel among pip's find-links (this machine kind keeps one), else the PyTorch CPU index.
  for d in $($pip config list 2>/dev/null | sed -n "s/.*find-links='\(.*\)'/\1/p") ${PIP_FIND_LINKS:-}; do
    w=$(ls "$d"/torch-*+cpu-cp311-*.whl 2>/dev/null | sort -V | tail -1 || true)
    [ -n "$w" ] && { spec="torch==$(basename "$w" | cut -d- -f2)"; break; }
  done
fi
if [ -z "$spec" ]; then
  spec=torch
  extra_index=(--index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple)
fi
site=$rootfs/usr/local/lib/python3.11/dist-packages
echo "build-cpu-image: pip install $spec numpy into the image"
$pip install -q --no-compile --target "$site" --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 --implementation cp "${extra_index[@]}" "$spec" numpy
# Headers and CMake files serve only C++ extension builds, never a benchmark run.
rm -rf "$site/torch/include" "$site/torch/share"
mkdir -p "$rootfs/opt/sb-bench"
cp -r "$here/benchmarks/sb_bench" "$rootfs/opt/sb-bench/"
find "$rootfs/opt/sb-bench" -name __pycache__ -prune -exec rm -rf {} +
echo /opt/sb-bench > "$site/sb_bench.pth"
rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* \
  "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
  "$rootfs"/var/log/*.log

echo "build-cpu-image: import as $image"
# Sorted names, fixed owners and times: the same inputs give the same layer.
tar --sort=name --numeric-owner --mtime=@0 -C "$rootfs" -cf "$work/rootfs.tar" .
podman "${podman_args[@]}" import \
  --change 'ENV=PYTHONDONTWRITEBYTECODE=1' --change 'ENV=PYTHONUNBUFFERED=1' \
  --change 'CMD=["python3","-m","sb_bench","list"]' --change 'LABEL=org.opencontainers.image.title=sb-bench-cpu' \
  "$work/rootfs.tar" "$image" >/dev/null
rm -f "$out"
podman "${podman_args[@]}" save --format docker-archive -o "$out" "$image"
echo "build-cpu-image: $out ($(du -h "$out" | cut -f1)), image $(podman "${podman_args[@]}" image inspect --format '{{.Id}}' "$image")"
