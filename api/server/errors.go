package server

import "github.com/lockcluster/lockcluster/api/rpcerr"

// Every error this package answers with goes through api/rpcerr's table.
var (
	toStatus     = rpcerr.Status
	withInfo     = rpcerr.New
	invalid      = rpcerr.Invalid
	invalidField = rpcerr.InvalidField
)
