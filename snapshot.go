package lockcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"time"

	pb "github.com/lockcluster/lockcluster/api/lockclusterv1"
)

// A snapshot file (what Admin.SaveSnapshot writes, what 'lockcluster
// snapshot restore' reads) is self-describing:
//
//	magic "LCBACKUP" | version u32 (2) | index u64 | term u64 | size u64 |
//	SHA-256 of the state [32] | CRC-32C of the header before it u32 |
//	the state (size bytes)
//
// big endian. The state is the leader's state machine snapshot (fsm's
// LCKSNAP format, with its own CRC), at index. Every byte is under a
// checksum: the magic and the version are compared, the header under its
// CRC-32C, the state under its SHA-256.
//
// Version 1 (written before issue 24, still read) has no CRC-32C: a bit
// flipped in its index or term was read as another index or term ('snapshot
// restore' compares the index with the state's; the term is only shown).
var snapshotMagic = []byte("LCBACKUP")

const (
	snapshotFileVersion   = 2
	snapshotHeaderSizeV1  = 8 + 4 + 8 + 8 + 8 + sha256.Size
	snapshotHeaderSize    = snapshotHeaderSizeV1 + 4
	snapshotHeaderVersion = 8 // offset of the version
)

var snapshotHeaderTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptSnapshot: a snapshot file or transfer whose magic, version,
// size or checksum is wrong.
var ErrCorruptSnapshot = errors.New("lockcluster: corrupt snapshot")

// SnapshotInfo describes a saved snapshot.
type SnapshotInfo struct {
	// Index is the Raft index of the last entry in the state: a fencing
	// token in it is at most Index.
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	// Size is the state's size in bytes (the file has a header more).
	Size   uint64 `json:"size"`
	SHA256 string `json:"sha256"` // hex, of the state
	// Leader and Members: who took it, and the members then (not in the
	// file).
	Leader  string   `json:"leader,omitempty"`
	Members []Member `json:"members,omitempty"`
}

// SaveSnapshot writes a consistent snapshot of the cluster's state, as the
// leader has it after a read barrier, to w in the snapshot file format,
// and checks its SHA-256. Any endpoint will do (a follower relays the
// leader's stream); it tries the next one until one starts the transfer.
// Write w to a temporary file and rename it only after a nil error.
func (a *Admin) SaveSnapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	var st pb.Cluster_SaveSnapshotClient
	var h *pb.SnapshotHeader
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The call's retries cover the start: up to the header. The transfer
	// that follows has ctx's time.
	err := a.c.call(ctx, func(actx context.Context, _ pb.LocksClient) error {
		cc, _ := a.c.conn()
		attempt, stop := context.WithCancel(sctx)
		timeout := context.AfterFunc(actx, stop)
		s, err := pb.NewClusterClient(cc).SaveSnapshot(attempt, &pb.SaveSnapshotRequest{})
		var m *pb.SnapshotChunk
		if err == nil {
			m, err = s.Recv()
		}
		if !timeout() { // actx ended first: the call counts it timed out
			stop()
			return actx.Err()
		}
		if err == nil && m.Header == nil {
			err = fmt.Errorf("%w: the transfer did not start with a header", ErrCorruptSnapshot)
		}
		if err != nil {
			stop()
			return err
		}
		st, h = s, m.Header
		return nil
	})
	if err != nil {
		return SnapshotInfo{}, err
	}
	info := SnapshotInfo{Index: h.Index, Term: h.Term, Size: h.Size, SHA256: hex.EncodeToString(h.Sha256), Leader: h.LeaderId}
	now := time.Now()
	for _, m := range h.Members {
		mm := Member{ID: m.Id, RaftAddr: m.RaftAddr, GRPCAddr: m.GrpcAddr, HTTPAddr: m.HttpAddr, Suffrage: m.Suffrage, Role: roleOf(m.Suffrage), Leader: m.Leader,
			Probed: m.Probed, Reachable: m.Reachable, Lag: m.Lag, AppliedIndex: m.AppliedIndex, Version: m.Version}
		if m.SinceContact != nil {
			mm.LastContact = now.Add(-m.SinceContact.AsDuration())
		}
		info.Members = append(info.Members, mm)
	}
	if len(h.Sha256) != sha256.Size {
		return info, fmt.Errorf("%w: the header's checksum has %d bytes", ErrCorruptSnapshot, len(h.Sha256))
	}
	if _, err := w.Write(snapshotHeader(h.Index, h.Term, h.Size, h.Sha256)); err != nil {
		return info, err
	}
	sum, n := sha256.New(), uint64(0)
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return info, fromStatus(err)
		}
		if n += uint64(len(m.Data)); n > h.Size {
			return info, fmt.Errorf("%w: more than the %d bytes announced", ErrCorruptSnapshot, h.Size)
		}
		sum.Write(m.Data)
		if _, err := w.Write(m.Data); err != nil {
			return info, err
		}
	}
	return info, checkSum(sum, n, h.Size, h.Sha256)
}

// WriteSnapshot writes state, a state machine snapshot (fsm's LCKSNAP
// format, as the leader sends it) at index and term, to w in the snapshot
// file format, and returns what the file says. 'lockcluster snapshot save
// --data-dir' writes an offline backup with it.
func WriteSnapshot(w io.Writer, index, term uint64, state []byte) (SnapshotInfo, error) {
	sum := sha256.Sum256(state)
	info := SnapshotInfo{Index: index, Term: term, Size: uint64(len(state)), SHA256: hex.EncodeToString(sum[:])}
	if _, err := w.Write(snapshotHeader(index, term, info.Size, sum[:])); err != nil {
		return info, err
	}
	_, err := w.Write(state)
	return info, err
}

func snapshotHeader(index, term, size uint64, sum []byte) []byte {
	b := make([]byte, 0, snapshotHeaderSize)
	b = append(b, snapshotMagic...)
	b = binary.BigEndian.AppendUint32(b, snapshotFileVersion)
	b = binary.BigEndian.AppendUint64(b, index)
	b = binary.BigEndian.AppendUint64(b, term)
	b = binary.BigEndian.AppendUint64(b, size)
	b = append(b, sum...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, snapshotHeaderTable))
}

func checkSum(sum hash.Hash, n, size uint64, want []byte) error {
	if n != size {
		return fmt.Errorf("%w: %d bytes of the %d announced", ErrCorruptSnapshot, n, size)
	}
	if got := sum.Sum(nil); !bytes.Equal(got, want) {
		return fmt.Errorf("%w: its SHA-256 is %x, the header says %x", ErrCorruptSnapshot, got, want)
	}
	return nil
}

// ReadSnapshot reads a snapshot file whole and checks it: its magic,
// version, header checksum, size and SHA-256. It returns the state's
// bytes.
func ReadSnapshot(r io.Reader) (SnapshotInfo, []byte, error) {
	short := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: not a lockcluster snapshot file (too short)", ErrCorruptSnapshot)
		}
		return err
	}
	var buf [snapshotHeaderSize]byte
	hdr := buf[:snapshotHeaderVersion+4]
	if _, err := io.ReadFull(r, hdr); err != nil {
		return SnapshotInfo{}, nil, short(err)
	}
	if !bytes.Equal(hdr[:8], snapshotMagic) {
		return SnapshotInfo{}, nil, fmt.Errorf("%w: not a lockcluster snapshot file (no %s header)", ErrCorruptSnapshot, snapshotMagic)
	}
	switch v := binary.BigEndian.Uint32(hdr[snapshotHeaderVersion:]); v {
	case 1:
		hdr = buf[:snapshotHeaderSizeV1]
	case snapshotFileVersion:
		hdr = buf[:snapshotHeaderSize]
	default:
		return SnapshotInfo{}, nil, fmt.Errorf("%w: snapshot file version %d is not supported (this build knows 1 and %d)", ErrCorruptSnapshot, v, snapshotFileVersion)
	}
	if _, err := io.ReadFull(r, hdr[snapshotHeaderVersion+4:]); err != nil {
		return SnapshotInfo{}, nil, short(err)
	}
	if len(hdr) == snapshotHeaderSize {
		body, stored := hdr[:snapshotHeaderSizeV1], binary.BigEndian.Uint32(hdr[snapshotHeaderSizeV1:])
		if sum := crc32.Checksum(body, snapshotHeaderTable); sum != stored {
			return SnapshotInfo{}, nil, fmt.Errorf("%w: its header fails its CRC-32C (stored %08x, computed %08x)", ErrCorruptSnapshot, stored, sum)
		}
	}
	want := hdr[36:snapshotHeaderSizeV1]
	info := SnapshotInfo{Index: binary.BigEndian.Uint64(hdr[12:]), Term: binary.BigEndian.Uint64(hdr[20:]),
		Size: binary.BigEndian.Uint64(hdr[28:]), SHA256: hex.EncodeToString(want)}
	// Read one byte past the size: a longer file is as wrong as a shorter.
	data, err := io.ReadAll(io.LimitReader(r, int64(min(info.Size, 1<<62))+1))
	if err != nil {
		return info, nil, err
	}
	sum := sha256.New()
	sum.Write(data)
	if err := checkSum(sum, uint64(len(data)), info.Size, want); err != nil {
		return info, nil, err
	}
	return info, data, nil
}
