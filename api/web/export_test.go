package web

// State is the JSON of /api/state, for the tests of package web_test,
// which start a real node and so cannot be in package web (nodetest
// imports web).
type State = state
