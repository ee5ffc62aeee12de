package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// dockerCluster drives the docker compose cluster of docker-compose.yml:
// kill with `docker kill`, pause with `docker pause`, network faults with
// `docker network disconnect` (a node cut off from every other, and from
// the host: only isolations can be expressed, so bridge, one-way and
// delay are skipped). Clients use the published ports on 127.0.0.1. The
// cluster is left running at the end, every node up and connected.
type dockerCluster struct {
	compose []string // the compose command and its -f flag
	nodes   []dockerNode

	mu           sync.Mutex
	expectDown   map[int]bool
	disconnected map[int]bool
}

type dockerNode struct {
	name, network, ip, alias string
	grpc, http               string
}

func newDockerCluster(file string) (*dockerCluster, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	cmd := []string{"docker", "compose"}
	if exec.Command("docker", "compose", "version").Run() != nil {
		cmd = []string{"docker-compose"}
	}
	return &dockerCluster{compose: append(cmd, "-f", abs), expectDown: map[int]bool{}, disconnected: map[int]bool{}}, nil
}

func docker(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func (dc *dockerCluster) Start(ctx context.Context) error {
	if _, err := docker(append(dc.compose, "up", "-d")...); err != nil {
		return fmt.Errorf("%w (is the image built? scripts/docker-build.sh)", err)
	}
	ids, err := docker(append(dc.compose, "ps", "-q")...)
	if err != nil {
		return err
	}
	for _, id := range strings.Fields(ids) {
		raw, err := docker("docker", "inspect", id)
		if err != nil {
			return err
		}
		var info []struct {
			Name            string
			NetworkSettings struct {
				Ports    map[string][]struct{ HostIP, HostPort string }
				Networks map[string]struct {
					IPAddress  string
					Aliases    []string
					IPAMConfig *struct{ IPv4Address string }
				}
			}
			Config struct{ Hostname string }
		}
		if err := json.Unmarshal([]byte(raw), &info); err != nil || len(info) != 1 {
			return fmt.Errorf("docker inspect %s: %v", id, err)
		}
		in := info[0]
		n := dockerNode{name: strings.TrimPrefix(in.Name, "/"), alias: in.Config.Hostname}
		for net, s := range in.NetworkSettings.Networks {
			n.network, n.ip = net, s.IPAddress
			if s.IPAMConfig != nil && s.IPAMConfig.IPv4Address != "" {
				n.ip = s.IPAMConfig.IPv4Address
			}
		}
		port := func(p string) string {
			if b := in.NetworkSettings.Ports[p]; len(b) > 0 {
				return "127.0.0.1:" + b[0].HostPort
			}
			return ""
		}
		n.grpc, n.http = port("7700/tcp"), port("7702/tcp")
		if n.grpc == "" || n.http == "" {
			return fmt.Errorf("%s publishes no gRPC (7700) or HTTP (7702) port on the host", n.name)
		}
		dc.nodes = append(dc.nodes, n)
	}
	if len(dc.nodes) == 0 {
		return errors.New("docker compose started no containers")
	}
	// compose lists containers in no particular order: sort by name.
	for i := range dc.nodes {
		for j := i + 1; j < len(dc.nodes); j++ {
			if dc.nodes[j].name < dc.nodes[i].name {
				dc.nodes[i], dc.nodes[j] = dc.nodes[j], dc.nodes[i]
			}
		}
	}
	_, err = waitLeader(ctx, dc, 60*time.Second)
	return err
}

func (dc *dockerCluster) Size() int { return len(dc.nodes) }

func (dc *dockerCluster) Endpoints() []string {
	out := make([]string, len(dc.nodes))
	for i, n := range dc.nodes {
		out[i] = n.grpc
	}
	return out
}

func (dc *dockerCluster) HTTPAddr(i int) string { return dc.nodes[i].http }

func (dc *dockerCluster) Kill(i int) error {
	dc.mu.Lock()
	dc.expectDown[i] = true
	dc.mu.Unlock()
	_, err := docker("docker", "kill", dc.nodes[i].name)
	return err
}

func (dc *dockerCluster) Restart(i int) error {
	_, err := docker("docker", "start", dc.nodes[i].name)
	dc.mu.Lock()
	dc.expectDown[i] = false
	dc.mu.Unlock()
	return err
}

func (dc *dockerCluster) Pause(i int) error {
	_, err := docker("docker", "pause", dc.nodes[i].name)
	return err
}

func (dc *dockerCluster) Resume(i int) error {
	_, err := docker("docker", "unpause", dc.nodes[i].name)
	return err
}

func (dc *dockerCluster) Net() Network { return dockerNet{dc} }

type dockerNet struct{ dc *dockerCluster }

// Cut disconnects the nodes the cut isolates completely; anything else
// cannot be done with docker network disconnect.
func (dn dockerNet) Cut(cut [][]bool) error {
	dc := dn.dc
	iso := map[int]bool{}
	for i := range cut {
		all := true
		for j := range cut {
			all = all && (i == j || (cut[i][j] && cut[j][i]))
		}
		iso[i] = all
	}
	for i := range cut {
		for j := range cut {
			if i != j && (cut[i][j] || cut[j][i]) && !iso[i] && !iso[j] {
				return errUnsupported
			}
		}
	}
	for i := range dc.nodes {
		var err error
		if iso[i] && !dc.disconnected[i] {
			_, err = docker("docker", "network", "disconnect", dc.nodes[i].network, dc.nodes[i].name)
			dc.disconnected[i] = err == nil
		} else if !iso[i] && dc.disconnected[i] {
			err = dc.connect(i)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (dc *dockerCluster) connect(i int) error {
	n := dc.nodes[i]
	_, err := docker("docker", "network", "connect", "--ip", n.ip, "--alias", n.alias, n.network, n.name)
	if err == nil {
		dc.disconnected[i] = false
	}
	return err
}

func (dn dockerNet) Delay(d time.Duration) error {
	if d == 0 {
		return nil
	}
	return errUnsupported
}

func (dn dockerNet) Heal() error { return dn.Cut(square(len(dn.dc.nodes))) }

func (dc *dockerCluster) state(i int) string {
	s, _ := docker("docker", "inspect", "-f", "{{.State.Status}}", dc.nodes[i].name)
	return s
}

func (dc *dockerCluster) HealAll() error {
	var errs []error
	for i := range dc.nodes {
		switch dc.state(i) {
		case "paused":
			errs = append(errs, dc.Resume(i))
		case "exited", "created", "dead":
			errs = append(errs, dc.Restart(i))
		}
		if dc.disconnected[i] {
			errs = append(errs, dc.connect(i))
		}
	}
	return errors.Join(errs...)
}

func (dc *dockerCluster) Crashes() []string {
	var out []string
	for i, n := range dc.nodes {
		dc.mu.Lock()
		expected := dc.expectDown[i]
		dc.mu.Unlock()
		if st := dc.state(i); st != "running" && st != "paused" && !expected {
			out = append(out, fmt.Sprintf("%s is %s (docker logs %s)", n.name, st, n.name))
		}
	}
	return out
}

// Close leaves the cluster running, healed.
func (dc *dockerCluster) Close() error { return dc.HealAll() }
