// Package api holds the lockcluster.v1 protobuf service definition; the
// generated Go code is in lockclusterv1 and is committed. Regenerate it with
// `go generate ./api` (needs protoc and libprotobuf-dev, which .ci/run and
// scripts/install-protoc.sh install; the Go plugins are pinned in go.mod as
// tools).
package api

//go:generate protoc -I lockclusterv1 -I /usr/include --plugin=protoc-gen-go=../scripts/protoc-gen-go --plugin=protoc-gen-go-grpc=../scripts/protoc-gen-go-grpc --go_out=lockclusterv1 --go_opt=paths=source_relative --go-grpc_out=lockclusterv1 --go-grpc_opt=paths=source_relative lockcluster.proto
