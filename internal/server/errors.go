package server

import "github.com/lockcluster/lockcluster/internal/rpcerr"

// Every error this package answers with goes through internal/rpcerr's table.
var (
	toStatus     = rpcerr.Status
	withInfo     = rpcerr.New
	invalid      = rpcerr.Invalid
	invalidField = rpcerr.InvalidField
)
