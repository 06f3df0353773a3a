#!/usr/bin/env bash
# The pipeline image's two base images, made from Debian's own packages and PyPI, for machines
# that reach those but not Docker Hub or ghcr.io (and have no Docker engine):
#   localhost/lockstep-python:bookworm  a minimal Debian bookworm with Debian's Python 3.11
#                                       (debootstrap), standing in for python:3.11-slim-bookworm
#   localhost/lockstep-uv:<version>     that image plus /uv from the uv wheel on PyPI, standing in
#                                       for ghcr.io/astral-sh/uv
# It also sets podman up for this kind of host, idempotently: runc with cgroupfs (crun refuses
# hybrid cgroups here) and default ulimits a container may set (the default ones fail with
# "setrlimit: Operation not permitted"). Needs root, podman, runc and debootstrap (apt).
# usage: infra/local-base.sh   (prints the two --build-arg flags for infra/Dockerfile)
set -euo pipefail

UV_VERSION="${UV_VERSION:-0.13.9}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON_IMAGE="localhost/lockstep-python:bookworm"
UV_IMAGE="localhost/lockstep-uv:${UV_VERSION}"

for tool in podman runc debootstrap python3; do
  command -v "$tool" >/dev/null || { echo "local-base.sh: $tool is missing (apt-get install podman runc debootstrap)" >&2; exit 2; }
done

conf=/etc/containers/containers.conf
mkdir -p /etc/containers
if ! grep -q "lockstep: podman settings" "$conf" 2>/dev/null; then
  cat >>"$conf" <<'CONF'
# lockstep: podman settings for hosts with hybrid cgroups and a capped ulimit (infra/local-base.sh)
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! podman image exists "$PYTHON_IMAGE"; then
  debootstrap --variant=minbase --include=python3.11,ca-certificates \
    bookworm "$work/root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -5 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
  # This machine's CA bundle, so that builds trust what the host trusts (a TLS-inspecting proxy
  # in front of PyPI included); uv reads it through SSL_CERT_FILE.
  cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$work/root/etc/ssl/certs/ca-certificates.crt"
  tar -C "$work/root" -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3.11"]' - "$PYTHON_IMAGE" >/dev/null
fi

if ! podman image exists "$UV_IMAGE"; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/wheel" \
    --platform manylinux_2_17_x86_64 "uv==${UV_VERSION}"
  (cd "$work" && python3 -m zipfile -e wheel/uv-*.whl uvwheel)
  install -m 0755 "$work"/uvwheel/uv-*.data/scripts/uv "$work/uv"
  printf 'FROM %s\nCOPY uv /uv\n' "$PYTHON_IMAGE" >"$work/Containerfile"
  podman build --quiet -t "$UV_IMAGE" -f "$work/Containerfile" "$work" >/dev/null
fi

echo "--build-arg PYTHON_IMAGE=$PYTHON_IMAGE --build-arg UV_IMAGE=$UV_IMAGE"
