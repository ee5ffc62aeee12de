// Package lockclusterv1 is the Go code generated from lockcluster.proto,
// the lockcluster.v1 gRPC service: its messages and its client and server
// stubs. Do not edit the .pb.go files; regenerate them with
// `go generate ./api`.
package lockclusterv1
