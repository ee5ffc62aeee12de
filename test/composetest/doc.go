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
//     down (`down -v`), in about 35-45 s. It skips with -short, when
//     LOCKCLUSTER_SKIP_DOCKER is set, when the host ports are taken, or when
//     containers of another compose project have the cluster's names. A flock
//     on $TMPDIR/lockcluster-docker.lock keeps two such tests from running at
//     once.
package composetest
