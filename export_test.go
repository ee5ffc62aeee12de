package lockcluster

import "time"

// SessionSecret returns the current session's secret, for tests that act
// on the session behind the client's back (as an expiry would). Only the
// tests see it.
func (c *Client) SessionSecret() []byte {
	s, _ := c.live()
	if s == nil {
		return nil
	}
	return s.secret
}

// OnStream reports whether the session's writes go on its stream now.
func (c *Client) OnStream() bool { return c.caller.Load() != nil }

// ReattachDelay is reattachDelay, for TestReattachDelaySpreads.
var ReattachDelay = reattachDelay

// ReattachAfter is a session's wait after its stream ended with err.
func ReattachAfter(ttl time.Duration, err error, backoff time.Duration) time.Duration {
	return (&clientSession{ttl: ttl}).reattachAfter(err, backoff)
}
