package raftnode

// watchFences connects the fences that other parts of the node raise and
// lower: the disk guard's hooks (diskguard.go). New calls it once the node
// is open.
func (n *Node) watchFences() {
	if g := n.stores.wal; g != nil {
		g.attach(func(err error) { n.fences.set(fenceStorage, err) },
			func() { n.fences.clear(fenceStorage) }, n.closing)
	}
}
