package fsm

import (
	"strings"
	"testing"
)

// EntryBytes counts exactly what EncodeEntry writes, for every command a
// client's call proposes (and, by encoding it, for the others).
func TestEntryBytesMatchesTheEncoding(t *testing.T) {
	long := strings.Repeat("x", 1000)
	names := make([]string, 64)
	for i := range names {
		names[i] = long + string(rune('a'+i%26)) + strings.Repeat("y", i)
	}
	cmds := []Command{
		&OpenSession{Namespace: "ns", Label: "host:123", TTL: 10e9, ClientID: "c", SecretHash: strings.Repeat("h", 32)},
		&OpenSession{Namespace: long[:256], TTL: -1},
		&CloseSession{Session: 1 << 40, Namespace: "ns"},
		&Request{Session: 3, Namespace: "ns", RequestID: 1 << 20, AckBelow: 300, Names: []string{"a"}, Mode: Shared, Signal: true},
		&Request{Session: 1<<64 - 1, Namespace: "big", RequestID: 7, Names: names},
		&Request{Session: 1, Namespace: "n", RequestID: 1, Names: []string{strings.Repeat("z", 200)}},
		&Release{Session: 9, Namespace: "ns", RequestID: 2, Token: 1 << 33, AckBelow: 1},
		&Abort{Session: 9, Namespace: "ns", RequestID: 2, Reason: long[:256], AckBelow: 2},
		&ExpireSession{Session: 12345},
		&SetLimits{Limits: DefaultLimits()},
		&SetMember{Member: Member{ID: "n1", RaftAddr: "r:1", GRPCAddr: "g:2", HTTPAddr: "h:3"}},
	}
	for _, cmd := range cmds {
		b, err := EncodeEntry(Entry{Cmd: cmd})
		if err != nil {
			t.Fatal(err)
		}
		if got := EntryBytes(cmd); got != len(b) {
			t.Errorf("%T: EntryBytes %d, encoded %d bytes", cmd, got, len(b))
		}
	}
}
