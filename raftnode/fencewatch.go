package raftnode

// watchFences starts what raises and lowers the storage and behind
// fences: the disk guard's hooks (diskguard.go) and watchBehind
// (behind.go). New calls it once the node is open.
func (n *Node) watchFences() {
	if g := n.stores.wal; g != nil {
		g.attach(func(err error) { n.fences.set(fenceStorage, err) },
			func() { n.fences.clear(fenceStorage) }, n.closing)
	}
	n.wg.Add(1)
	go n.watchBehind()
}
