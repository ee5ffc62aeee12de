package raftnode

import (
	"context"
	"testing"
)

// doneFuture is a raft.Future that has already resolved.
type doneFuture chan error

func (f doneFuture) Error() error { return <-f }

// BenchmarkAwait is what await adds per proposal (a goroutine and a
// channel) over waiting on the future directly, both on futures that have
// resolved:
//
//	go test -run '^$' -bench Await -benchmem -count 3 ./raftnode/
func BenchmarkAwait(b *testing.B) {
	n := &Node{stopped: make(chan struct{})}
	ctx := context.Background()
	b.Run("await", func(b *testing.B) {
		for b.Loop() {
			f := make(doneFuture, 1)
			f <- nil
			if _, err := n.await(ctx, f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			f := make(doneFuture, 1)
			f <- nil
			if err := f.Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
