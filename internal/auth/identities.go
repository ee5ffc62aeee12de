package auth

import "crypto/tls"

// Identities are the names a verified peer certificate proves: its subject
// common name and its DNS, URI and e-mail subject alternative names.
func Identities(state *tls.ConnectionState) []string {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return nil
	}
	c := state.VerifiedChains[0][0]
	out := []string{}
	if c.Subject.CommonName != "" {
		out = append(out, c.Subject.CommonName)
	}
	out = append(out, c.DNSNames...)
	out = append(out, c.EmailAddresses...)
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}
