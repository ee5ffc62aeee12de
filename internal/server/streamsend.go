package server

import (
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
	"github.com/lockcluster/lockcluster/internal/rpcerr"
)

// A session stream's Send blocks while its client does not read: gRPC's
// flow control holds the message until the client's window opens, and
// nothing but the end of the stream (the handler's return, or the
// client's going away) wakes it. A handler that sent from its own
// goroutine would see that the hub cut its stream only once its client
// disconnected, and meanwhile hold its backlog and the message in flight
// (issue 24: a client with 200 streams it never read pinned 316 MiB on
// its node). So the handler hands each batch to a goroutine of the batch's
// own and waits for it, or for whatever ends the stream first: the hub's
// cut, a newer attach replacing it, the send timeout, the node stopping.
// Returning ends the stream, which fails the blocked Send, and the
// goroutine exits.
//
// One goroutine per batch, not one per stream: an idle stream (a
// heartbeat ack every TTL/3) costs no parked goroutine, and a busy one
// sends everything that queued meanwhile in one batch.

// DefaultStreamSendTimeout is how long a session stream may have messages
// waiting for its client while the client takes none of them, before the
// stream is cut, unless Config.StreamSendTimeout says otherwise. A client
// that takes nothing for that long has stalled: it has not read its
// heartbeats' acknowledgements either, and has counted its session lost
// long before. A slow client that keeps taking messages is not cut by it.
const DefaultStreamSendTimeout = 30 * time.Second

// sendStream is the sending side of a server stream of messages M: a
// session stream's (pb.SessionDown) or a watch's (pb.WatchResponse).
type sendStream[M any] interface{ Send(*M) error }

type sender[M any] struct {
	stream sendStream[M] // counts what it sends
	wait   time.Duration
	done   chan error // the batch in flight's outcome
	timer  *time.Timer
	busy   bool // a batch is in flight
	// sent counts the messages sent; at is its value when the timer was
	// last armed: the timer cuts the stream only if none went meanwhile.
	sent *atomic.Uint64
	at   uint64
}

func newSender[M any](stream sendStream[M], wait time.Duration) *sender[M] {
	if wait <= 0 {
		wait = DefaultStreamSendTimeout
	}
	t := time.NewTimer(wait)
	t.Stop()
	sent := &atomic.Uint64{}
	return &sender[M]{stream: countingStream[M]{stream, sent}, wait: wait, done: make(chan error, 1), timer: t, sent: sent}
}

// send starts sending msgs, in order, unless they are none; the outcome
// arrives on done. One batch at a time: the caller waits for done first.
func (w *sender[M]) send(msgs []*M) {
	if len(msgs) == 0 {
		return
	}
	w.start(func(stream sendStream[M]) error {
		for _, m := range msgs {
			if err := stream.Send(m); err != nil {
				return err
			}
		}
		return nil
	})
}

// start runs batch, which sends on the stream it is given, as the batch in
// flight.
func (w *sender[M]) start(batch func(sendStream[M]) error) {
	w.busy = true
	w.at = w.sent.Load()
	w.timer.Reset(w.wait)
	go func() { w.done <- batch(w.stream) }() // never blocks: one batch at a time
}

// finished records that the batch in flight is done (its outcome was read).
func (w *sender[M]) finished() {
	w.busy = false
	w.timer.Stop()
}

// timeout fires once the batch in flight has run for w.wait since it
// started or since expired last found it sending (never while none is in
// flight).
func (w *sender[M]) timeout() <-chan time.Time {
	if !w.busy {
		return nil
	}
	return w.timer.C
}

// expired is what timeout's firing means: nil if the batch sent a message
// since the timer was armed (the timer is armed again), else the error the
// stream ends with: the client has taken nothing for w.wait.
func (w *sender[M]) expired() error {
	if n := w.sent.Load(); n != w.at {
		w.at = n
		w.timer.Reset(w.wait)
		return nil
	}
	return rpcerr.StreamBehind(fmt.Sprintf("the client has taken nothing of its stream for %s: cut (reconnect to resynchronise)", w.wait))
}

func (w *sender[M]) stop() { w.timer.Stop() }

// countingStream counts the messages sent on a stream.
type countingStream[M any] struct {
	stream sendStream[M]
	sent   *atomic.Uint64
}

func (s countingStream[M]) Send(m *M) error {
	err := s.stream.Send(m)
	if err == nil {
		s.sent.Add(1)
	}
	return err
}

// streamReplaced is the error a session's oldest stream ends with when an
// attach takes it past the streams a session may have on a node
// (Config.MaxStreamsPerSession). Retryable, as for a stream cut: a client
// still reading the replaced stream attaches again.
func streamReplaced(session uint64, max int, node string) error {
	return rpcerr.New(codes.ResourceExhausted, pb.ErrorReason_LIMIT, "QuotaExceededError",
		fmt.Sprintf("session %d has more than %d streams attached to node %s: this one, its oldest, was replaced by a newer attach (attach again to resynchronise if it is still wanted)", session, max, node), nil)
}
