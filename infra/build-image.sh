#!/usr/bin/env bash
# `make image`: builds infra/Dockerfile as lockstep-pipeline:<version> with docker when there is
# one, else with podman on base images made from Debian's packages (infra/local-base.sh), and
# prints the image's size and the build's time. A change to our own code only reuses the
# dependency layer (pyproject.toml and uv.lock are copied and synced first, in the stage the final
# image starts from: infra/Dockerfile).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n 1)
image="${IMAGE:-lockstep-pipeline:$version}"
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  engine=docker
  base_args=()
else
  command -v podman >/dev/null || {
    echo "make image: no docker engine and no podman (apt-get install podman runc debootstrap)" >&2
    exit 2
  }
  engine=podman
  read -r -a base_args <<<"$(bash infra/local-base.sh)"
  # This machine's uv cache, where there is one, mounted into the build's RUN steps and named as
  # the Dockerfile's UV_CACHE_DIR: the environment's install copies the wheels `make setup`
  # fetched, unpacked and built (the sdists among them) instead of doing it all again (docker's
  # build mounts no host directory: it keeps its own cache mount).
  uv_cache=$( (uv cache dir || python3 -m uv cache dir) 2>/dev/null || true)
  if [ -n "$uv_cache" ] && [ -d "$uv_cache" ]; then
    base_args+=(--volume "$uv_cache:/uv-cache" --build-arg UV_CACHE_DIR=/uv-cache)
  fi
fi
start=$(date +%s)
# USER_CODE: a directory of the user's own hook code, staged in the build context (whose
# .dockerignore admits only what the image needs) and put on the image's PYTHONPATH.
rm -rf .image-user-code && mkdir .image-user-code
if [ -n "${USER_CODE:-}" ]; then
  [ -d "$USER_CODE" ] || { echo "make image: USER_CODE=$USER_CODE is not a directory" >&2; exit 2; }
  (cd "$USER_CODE" && tar --exclude=__pycache__ -cf - .) | tar -xf - -C .image-user-code
fi
"$engine" build --build-arg "VERSION=$version" "${base_args[@]}" -f infra/Dockerfile -t "$image" . >&2
seconds=$(($(date +%s) - start))
size=$("$engine" image inspect --format '{{.Size}}' "$image")
echo "make image: $image with $engine in ${seconds}s, $(python3 -c "print(f'{$size / 1e9:.2f} GB')")"
