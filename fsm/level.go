package fsm

// Protocol levels (DESIGN.md, "Protocol levels"): one integer per release
// that says which entry types and snapshot formats a node can apply and
// read. A node supports every level up to its own ProtocolLevel. During a
// rolling upgrade the cluster runs at the lowest level among the members
// of its raft configuration, and nothing newer than that level is
// proposed (internal/server/level.go): a node of the release before would
// stop at an entry it cannot decode, or fail to restore a snapshot it
// cannot read. Levels only grow; a level, once released, keeps its
// meaning.

const (
	// LevelBase is the protocol of lockcluster as of commit d704a4c, the
	// last release without levels: entry types 1 to 8 in envelope
	// versions 1 and 2, snapshot formats 1 and 2, and raftnode's own
	// checkpoint and anchor entries. A node that reports no level runs it.
	LevelBase = 1
	// LevelClusterSecret adds SetClusterSecret (type 9) and snapshot
	// format 3, which carries the cluster secret.
	LevelClusterSecret = 2

	// LevelRecords (the same release as LevelClusterSecret: a release may
	// bring several levels, which only grow) adds records (SetRecord, type 10), semaphores
	// (Request.MaxHolders) and the record limits (SetLimits), and the
	// snapshot format that carries them (record.go).
	LevelRecords = 3

	// LevelGroups (issue 27, groups.md; DESIGN.md, "Groups groundwork"
	// and "Moves (phase 2)") adds the group entries (SetGroup, Freeze,
	// ImportChunk, Import, Reject, Unfreeze, Drop: types 11 to 17,
	// move_cmd.go) and snapshot format 5, which carries a group's id,
	// token offset, slot table and moves in progress. This build decodes
	// and applies them, but it is not yet this build's ProtocolLevel: the
	// server's side of a move (I3's renewal check, streams, the router:
	// phases 3 and 4) does not exist, so no gate may admit a Freeze. The
	// release that brings it raises ProtocolLevel to LevelGroups.
	LevelGroups = 4

	// ProtocolLevel is the level this build supports.
	ProtocolLevel = LevelRecords
	// PreviousLevel is the level of the release before this one: what a
	// member that reports no level, or has not been heard from, counts as.
	// A cluster holds no member older than that (upgrades go one release
	// at a time).
	PreviousLevel = LevelBase
)

// entryLevels is the table: the level that introduced each entry type, and
// the feature it is, for the gate's refusals. TestEveryEntryTypeHasALevel
// keeps it complete.
var entryLevels = map[EntryType]struct {
	level   int
	feature string
}{
	typeOpenSession:   {LevelBase, "sessions"},
	typeCloseSession:  {LevelBase, "sessions"},
	typeExpireSession: {LevelBase, "session expiry"},
	typeRequest:       {LevelBase, "lock requests"},
	typeRelease:       {LevelBase, "releases"},
	typeAbort:         {LevelBase, "aborts"},
	typeSetLimits:     {LevelBase, "replicated limits"},
	typeSetMember:     {LevelBase, "the member directory"},
	typeClusterSecret: {LevelClusterSecret, "the cluster secret"},
	typeSetRecord:     {LevelRecords, "records"},
	typeStartChanges:  {LevelRecords, "watches"},
	typeSetGroup:      {LevelGroups, "groups"},
	typeFreeze:        {LevelGroups, "slot moves"},
	typeImportChunk:   {LevelGroups, "slot moves"},
	typeImport:        {LevelGroups, "slot moves"},
	typeReject:        {LevelGroups, "slot moves"},
	typeUnfreeze:      {LevelGroups, "slot moves"},
	typeDrop:          {LevelGroups, "slot moves"},
}

// snapLevels: the level that introduced each snapshot format version.
var snapLevels = map[uint64]int{
	1: LevelBase,
	2: LevelBase,
	3: LevelClusterSecret,
	4: LevelRecords,
	5: LevelGroups, // read and written, not yet this build's level (LevelGroups)
}

// envelopeLevels: the level that introduced each entry envelope version
// (entrycodec.go). EncodeEntry writes envelopeVersion whatever the
// command: TestEnvelopeIsReadByThePreviousLevel keeps that version one the
// release before reads.
var envelopeLevels = map[int]int{
	1: LevelBase,
	2: LevelBase,
}

// EntryLevel is the protocol level that introduced entry type t; a type
// this build does not know is above ProtocolLevel, so no gate admits it.
func EntryLevel(t EntryType) int {
	if l, ok := entryLevels[t]; ok {
		return l.level
	}
	return ProtocolLevel + 1
}

// EntryFeature names what entry type t is for ("the cluster secret"), for
// a refusal that says what waits for a level.
func EntryFeature(t EntryType) string {
	if l, ok := entryLevels[t]; ok {
		return l.feature
	}
	return t.String()
}

// SnapshotLevel is the protocol level that introduced snapshot format
// version v (ProtocolLevel+1 for a version this build does not write).
func SnapshotLevel(v uint32) int {
	if l, ok := snapLevels[uint64(v)]; ok {
		return l
	}
	return ProtocolLevel + 1
}

// snapFormat is the snapshot format Encode writes for a state that holds
// a cluster secret or not, and anything of LevelRecords or not (records,
// a semaphore request, record limits other than the defaults): the oldest
// format that carries the state, so that a state that uses nothing of a
// newer level is written in a format the release before reads. The gates
// are what keep the newer formats from being written while a member of an
// older release is in the configuration: only a state that holds the
// secret needs format 3, and the secret is drawn only once every member
// runs LevelClusterSecret (TestSnapshotFormatFollowsTheLevel, and
// internal/server's TestGateHoldsTheSecretAndSnapshotFormat); only a state
// that holds what a LevelRecords command made needs format 4, and
// CommandLevel keeps those commands back until every member runs it.
//
// A state whose group state is not the default (group 0, every slot owned
// at epoch 0, offset 0: groups.go) needs format 5, whatever else it holds.
func snapFormat(hasSecret, hasRecords, hasGroups bool) uint64 {
	switch {
	case hasGroups:
		return 5
	case hasRecords:
		return 4
	case hasSecret:
		return 3
	}
	return 2
}

// usesRecords reports whether st holds anything of LevelRecords.
func (st *state) usesRecords() bool {
	return st.nRecords > 0 || st.nSemaphores > 0 || !st.limits.defaultRecordLimits() || st.changesFrom != 0
}

// UsedLevel is the highest protocol level the applied state holds
// anything of: LevelGroups for a state of a group other than the default
// (groups.go), LevelRecords once it holds a record, a semaphore request or
// record limits of its own, LevelClusterSecret once it holds the cluster
// secret, LevelBase before. A member below it is a downgrade, which is not
// supported: it cannot read this state's snapshots.
func (m *Machine) UsedLevel() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return snapLevels[snapFormat(m.st.clusterSecret != "", m.st.usesRecords(), !m.st.defaultGroups())]
}

// CommandLevel is the protocol level a command needs: its type's
// (EntryLevel), or more when it uses a field a later level added
// (Request.MaxHolders, SetLimits' record limits: LevelRecords). The
// server's gate asks it before every proposal.
func CommandLevel(cmd Command) int {
	l, _ := commandLevel(cmd)
	return l
}

// CommandFeature names what makes cmd need CommandLevel(cmd) ("semaphores",
// "record limits", or its type's EntryFeature), for a refusal that says
// what waits for a level.
func CommandFeature(cmd Command) string {
	_, f := commandLevel(cmd)
	return f
}

func commandLevel(cmd Command) (int, string) {
	switch c := cmd.(type) {
	case *Request:
		if c != nil && c.MaxHolders > 0 {
			return LevelRecords, "semaphores"
		}
	case *SetLimits:
		if c != nil && !c.Limits.defaultRecordLimits() {
			return LevelRecords, "record limits"
		}
	case nil:
		return ProtocolLevel + 1, "no command"
	}
	return EntryLevel(cmd.Type()), EntryFeature(cmd.Type())
}
