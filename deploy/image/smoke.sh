#!/usr/bin/env bash
# Builds weir's runtime image with podman from a release binary and runs `weir operator --help`
# in it, as the image's non-root user: the check that the shipped binary runs in a container.
#
#   bash deploy/image/smoke.sh [path/to/weir]      (default: target/release/weir, built if absent)
#
# The Dockerfile's runtime stage is gcr.io/distroless/cc-debian12:nonroot. Where that registry
# cannot be reached (CI machines reach only package registries), the same stage is assembled
# from scratch: the binary, the shared libraries `ldd` lists for it (glibc, libgcc_s: what
# distroless/cc carries) and the `nonroot` user (uid 65532). Needs Debian's podman and runc.
set -euo pipefail
cd "$(dirname "$0")/../.."

binary="${1:-target/release/weir}"
if [ ! -x "$binary" ]; then
  cargo build --release --locked -p weir --bin weir
fi
command -v podman >/dev/null || { echo "podman is missing: apt-get install -y podman runc" >&2; exit 1; }

# crun in Debian 12 refuses hybrid cgroup hierarchies; runc runs there. Where CAP_SYS_RESOURCE is
# missing (sandboxes) a container may not set podman's default limits (above the caller's), so
# ask for modest ones, which `weir operator --help` needs far less than.
runtime=()
command -v runc >/dev/null && runtime=(--runtime runc)
limits=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/weir"
echo "binary: $binary ($(du -h "$binary" | cut -f1); debug sections: $(readelf -S "$binary" | grep -c '\.debug_' || true))"

if podman pull -q gcr.io/distroless/cc-debian12:nonroot >/dev/null 2>&1; then
  base="gcr.io/distroless/cc-debian12:nonroot"
  echo "runtime base: $base"
else
  base="scratch"
  echo "runtime base: gcr.io/distroless/cc-debian12 cannot be pulled here; assembling its contents from scratch"
  mkdir -p "$context/root/etc" "$context/root/tmp"
  # The loader and every library the binary links, at the paths it was linked against.
  for library in $(ldd "$binary" | grep -o '/[^ ]*'); do
    mkdir -p "$context/root$(dirname "$library")"
    cp -L "$library" "$context/root$library"
  done
  echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$context/root/etc/passwd"
  echo 'nonroot:x:65532:' >"$context/root/etc/group"
fi

{
  echo "FROM $base"
  [ "$base" = scratch ] && echo "COPY root/ /"
  echo "COPY weir /weir"
  # The Dockerfile's runtime stage from here on.
  sed -n '/^FROM gcr.io\/distroless/,$p' Dockerfile | grep -v '^FROM\|^COPY'
} >"$context/Containerfile"

podman build -q -t localhost/weir:smoke "$context" >/dev/null
echo "image: localhost/weir:smoke ($(podman image inspect localhost/weir:smoke --format '{{.Size}}') bytes)"
output="$(podman "${runtime[@]}" run --rm --network=none "${limits[@]}" localhost/weir:smoke operator --help)"
user="$(podman "${runtime[@]}" run --rm --network=none "${limits[@]}" --entrypoint /weir localhost/weir:smoke --version)"
echo "$output" | head -3
echo "weir --version in the image: $user"
echo "$output" | grep -q -- '--namespace' || { echo "weir operator --help did not list its flags" >&2; exit 1; }
echo "ok: weir operator --help ran in the image as user nonroot"
