//go:build !linux

package node

import (
	"net"
	"time"
)

// setUserTimeout does nothing here: gRPC sets TCP_USER_TIMEOUT only on
// Linux too.
func setUserTimeout(net.Conn, time.Duration) {}
