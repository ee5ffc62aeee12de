#!/usr/bin/env bash
# Builds lockcluster's container image, lockcluster:dev (or $IMAGE):
#   1. the static binary, on the host, into dist/lockcluster;
#   2. the FROM scratch image around it (Dockerfile).
# Nothing is pulled from a registry. Usage: scripts/docker-build.sh [IMAGE]
set -euo pipefail
cd "$(dirname "$0")/.."

image="${1:-${IMAGE:-lockcluster:dev}}"

echo "building dist/lockcluster (static, linux/$(go env GOARCH))" >&2
CGO_ENABLED=0 GOOS=linux go build -tags hashicorpmetrics -trimpath -o dist/lockcluster ./cmd/lockcluster
mkdir -p dist/docker-data

echo "building image $image" >&2
# The classic builder when BuildKit (buildx) is missing, without its
# deprecation notice; BuildKit is used when it is installed.
if ! docker buildx version >/dev/null 2>&1; then
	export DOCKER_BUILDKIT=0
fi
docker build --pull=false --tag "$image" .
echo "built $image" >&2
