# lockcluster's container image: the static binary and nothing else.
#
# Build it with scripts/docker-build.sh, which first builds the binary on the
# host (CGO_ENABLED=0 go build -tags hashicorpmetrics -trimpath -o
# dist/lockcluster ./cmd/lockcluster) and then this image, tagged
# lockcluster:dev. Nothing is pulled: the image starts FROM scratch, so it
# builds where no registry is reachable, with the classic builder or BuildKit
# (there is deliberately no "# syntax=" line: BuildKit would pull its
# frontend).
#
# There is no shell in the image: healthchecks exec the binary itself
# ("/lockcluster health --addr 127.0.0.1:7700").
FROM scratch

# Everything but the binary comes first, so that a rebuild after a code
# change only redoes the last COPY.

# Defaults for `serve` inside a container: data in /data, listen on every
# interface. A node still needs --id, --advertise-raft (and usually
# --advertise-grpc) and --bootstrap or --join; see docker-compose.yml.
ENV LOCKCLUSTER_DATA_DIR=/data \
    LOCKCLUSTER_GRPC_ADDR=0.0.0.0:7700 \
    LOCKCLUSTER_RAFT_ADDR=0.0.0.0:7701 \
    LOCKCLUSTER_HTTP_ADDR=0.0.0.0:7702 \
    NO_COLOR=1
# 7700 gRPC (clients and forwarding between nodes), 7701 raft, 7702 HTTP.
EXPOSE 7700 7701 7702
# SIGTERM (Docker's default stop signal) stops a node gracefully: a leader
# hands leadership over first.
ENTRYPOINT ["/lockcluster"]
CMD ["serve", "--help"]
USER 65532:65532

# An empty /data owned by that unprivileged user, so that a named volume
# mounted there starts out writable by it.
COPY --chown=65532:65532 dist/docker-data/ /data/
COPY dist/lockcluster /lockcluster
