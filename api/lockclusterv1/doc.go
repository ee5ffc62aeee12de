// Package lockclusterv1 is the Go code generated from lockcluster.proto,
// the lockcluster.v1 gRPC service: its messages and its client and server
// stubs. Do not edit the .pb.go files; regenerate them with
// `go generate ./api/...` (needs Debian's protobuf-compiler and
// libprotobuf-dev; the Go plugins are pinned in go.mod as tools).
//
// It is the wire contract and, with the client (package lockcluster), the
// stable API: within lockcluster.v1 a change is backward compatible
// (messages, fields, enum values and methods are added; none is
// renumbered, retyped or removed). Every other package of the module is
// implementation with no compatibility promise.
package lockclusterv1

//go:generate protoc -I . -I /usr/include --plugin=protoc-gen-go=../../scripts/protoc-gen-go --plugin=protoc-gen-go-grpc=../../scripts/protoc-gen-go-grpc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative lockcluster.proto
