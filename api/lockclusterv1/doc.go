// Package lockclusterv1 is the Go code generated from lockcluster.proto,
// the lockcluster.v1 gRPC service: its messages and its client and server
// stubs. Do not edit the .pb.go files; regenerate them with
// `go generate ./api`.
//
// It is the wire contract and, with the client (package lockcluster), the
// stable API: within lockcluster.v1 a change is backward compatible
// (messages, fields, enum values and methods are added; none is
// renumbered, retyped or removed). Every other package of the module is
// implementation with no compatibility promise.
package lockclusterv1
