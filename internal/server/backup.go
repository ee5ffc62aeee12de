package server

import (
	"context"
	"time"
)

// BackupObserver, when Config.Observer implements it too, is told each
// time this node served a SaveSnapshot (an online backup) to its end, as
// the node the client called: the leader that encoded the snapshot, or a
// follower that relayed the leader's whole stream (the leader does not
// count the forwarded copy; the relaying node does once it has passed it
// all on). Whether the client then wrote its file, the node cannot know.
// internal/metrics implements it (lockcluster_last_backup_timestamp_seconds).
type BackupObserver interface {
	BackupSaved(at time.Time)
}

// backupSaved tells the observer, if it listens, that this node served
// the backup call ctx is; nothing for a call another node forwarded.
func (s *Server) backupSaved(ctx context.Context) {
	if isForwarded(ctx) {
		return
	}
	if o, ok := s.cfg.Observer.(BackupObserver); ok {
		o.BackupSaved(s.cfg.Now())
	}
}
