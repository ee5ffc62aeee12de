package lockcluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/lockcluster/lockcluster"
)

// Every single-bit flip anywhere in a snapshot file (what SaveSnapshot
// writes), header included, makes ReadSnapshot refuse it (issue 24,
// finding 7). Version 1 files had no checksum over the header: a flip in
// the index or the term was read as another index or term.
func TestSnapshotFileEveryBitFlipRefused(t *testing.T) {
	state := []byte("LCKSNAP\x00 pretend state machine bytes")
	a, err := lockcluster.DialAdmin([]string{serveSnap(t, &snapServer{data: state})})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var file bytes.Buffer
	if _, err := a.SaveSnapshot(ctx, &file); err != nil {
		t.Fatal(err)
	}
	whole := file.Bytes()
	if _, _, err := lockcluster.ReadSnapshot(bytes.NewReader(whole)); err != nil {
		t.Fatal(err)
	}
	header := len(whole) - len(state)
	accepted := 0
	for i := range whole {
		for bit := range 8 {
			b := bytes.Clone(whole)
			b[i] ^= 1 << bit
			info, _, err := lockcluster.ReadSnapshot(bytes.NewReader(b))
			if !errors.Is(err, lockcluster.ErrCorruptSnapshot) {
				accepted++
				if accepted <= 8 {
					t.Errorf("byte %d (of a %d-byte header) bit %d: read as index %d, term %d (%v)", i, header, bit, info.Index, info.Term, err)
				}
			}
		}
	}
	if accepted > 0 {
		t.Errorf("%d of %d single-bit flips accepted", accepted, 8*len(whole))
	}
}

// A version 1 file (before the header's CRC-32C) is still read: its state
// is under its SHA-256; its index is compared with the state's by
// 'snapshot restore'.
func TestSnapshotFileVersion1Read(t *testing.T) {
	state := []byte("LCKSNAP\x00 pretend state machine bytes")
	sum := sha256.Sum256(state)
	b := append([]byte("LCBACKUP"), 0, 0, 0, 1)
	b = binary.BigEndian.AppendUint64(b, 42)
	b = binary.BigEndian.AppendUint64(b, 3)
	b = binary.BigEndian.AppendUint64(b, uint64(len(state)))
	b = append(append(b, sum[:]...), state...)
	info, data, err := lockcluster.ReadSnapshot(bytes.NewReader(b))
	if err != nil || info.Index != 42 || info.Term != 3 || !bytes.Equal(data, state) {
		t.Fatalf("%+v %q %v", info, data, err)
	}
	b[len(b)-1] ^= 1
	if _, _, err := lockcluster.ReadSnapshot(bytes.NewReader(b)); !errors.Is(err, lockcluster.ErrCorruptSnapshot) {
		t.Fatalf("a flipped state: %v", err)
	}
}
