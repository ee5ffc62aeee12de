package rpcerr

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// IsSlotRefusal reports whether err is a group's refusal of a namespace
// whose slot it does not serve now (slotRefusal: "moving" or "moved" in
// the metadata): nothing was applied, and the call may be routed again
// once the node's replicas show where the slot went (internal/node's
// router parks it until then).
func IsSlotRefusal(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == Domain {
			md := ei.GetMetadata()
			return md["moving"] == "true" || md["moved"] == "true"
		}
	}
	return false
}
