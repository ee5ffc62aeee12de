package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runMember runs one etcd member in this process until SIGTERM: the
// parent re-executes itself with 'member' once per member, so each member
// is its own process, like each lockcluster node.
func runMember(args []string) error {
	if len(args) != 5 {
		return fmt.Errorf("usage: compare-etcd member NAME DIR CLIENT-URL PEER-URL INITIAL-CLUSTER")
	}
	name, dir, client, peer, initial := args[0], args[1], args[2], args[3], args[4]
	cu, err := url.Parse(client)
	if err != nil {
		return err
	}
	pu, err := url.Parse(peer)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.InitialClusterToken, cfg.ClusterState = initial, "compare-etcd", embed.ClusterStateFlagNew
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = false // fsync on, as lockcluster
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return fmt.Errorf("member %s not ready after 60s", name)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	select {
	case <-sig:
	case err := <-e.Err():
		return err
	}
	return nil
}
