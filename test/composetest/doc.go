// Package composetest holds the main module's tests of the Docker support:
//
//   - TestComposeModule runs the tests of test/compose, a module of its own
//     (so that this module never depends on compose-go) that validates
//     docker-compose.yml and the Dockerfile. `go test ./...` does not descend
//     into nested modules; this test does it for the README's test command.
//   - TestDockerCompose, on Linux where a Docker engine and a compose tool
//     run, builds the image (scripts/docker-build.sh), brings the compose
//     cluster up, uses it from the host (the Go client, and dist/lockcluster
//     query), kills the leader's container, restarts it, and tears everything
//     down (`down -v`), in about 35-45 s. It runs its own copy of
//     docker-compose.yml: compose project lockcluster-e2e, containers
//     lockcluster-e2e-node0..2, network lockcluster-e2e on 172.31.79.0/24,
//     host ports picked free in 17000-17999, so it never touches a cluster
//     started with `docker compose up` nor needs 7700 free. It skips with
//     -short, when LOCKCLUSTER_SKIP_DOCKER is set, or when containers of
//     another compose project have its names. A flock on
//     $TMPDIR/lockcluster-e2e-docker.lock keeps two runs from overlapping.
package composetest
