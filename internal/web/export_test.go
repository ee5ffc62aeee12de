package web

// State is the JSON of /api/state, for the tests of package web_test: they
// start a real node with nodetest, which imports web (through internal/node), so
// they cannot be in package web.
type State = state
