package main

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves lines back on loopback.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends a line through addr and waits up to d for it to come back.
func roundTrip(addr string, d time.Duration) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	c.SetDeadline(start.Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	_, err = bufio.NewReader(c).ReadString('\n')
	return time.Since(start), err
}

func TestProxyCutDelayHeal(t *testing.T) {
	ls, err := NewLinks([]string{echo(t), echo(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	via := ls.Proxy(0, 1) // node 0 reaching node 1
	if _, err := roundTrip(via, 2*time.Second); err != nil {
		t.Fatalf("healthy link: %v", err)
	}
	// One way: 0's bytes reach 1, 1's answers do not come back.
	cut := square(2)
	cut[1][0] = true
	ls.Cut(cut)
	if _, err := roundTrip(via, 300*time.Millisecond); err == nil {
		t.Fatal("one-way cut 1→0: the answer came back")
	}
	// Both ways: the connection is refused at once.
	cut[0][1] = true
	ls.Cut(cut)
	if _, err := roundTrip(via, 300*time.Millisecond); err == nil {
		t.Fatal("partition: the round trip worked")
	}
	ls.Heal()
	if _, err := roundTrip(via, 2*time.Second); err != nil {
		t.Fatalf("healed link: %v", err)
	}
	ls.Delay(100 * time.Millisecond)
	d, err := roundTrip(via, 2*time.Second)
	if err != nil || d < 200*time.Millisecond {
		t.Fatalf("delayed link: round trip %s, %v; want ≥ 200ms (100ms each way)", d, err)
	}
	ls.Heal()
}
