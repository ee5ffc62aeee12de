//go:build !jepsenbroken

package server

import pb "github.com/lockcluster/lockcluster/api/lockclusterv1"

// brokenGrant is the hook of the deliberately broken node that the chaos
// harness (test/jepsen-lite) must catch; it exists only in a build with the
// tag jepsenbroken (broken_on.go). Here it never answers.
func (s *Server) brokenGrant(*pb.LockRequest) (*pb.LockResponse, bool) { return nil, false }
