package proccluster

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// A child process (this test binary, run again) claims a block and prints
// its first port; the parent's ports never fall in it.
func TestPortsAreNotSharedBetweenProcesses(t *testing.T) {
	if os.Getenv("PROCCLUSTER_PORT_CHILD") == "1" {
		p, err := FreePorts("127.0.0.1", 1)
		if err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString(strconv.Itoa(p) + "\n")
		os.Stdin.Read(make([]byte, 1)) // hold the claim until the parent is done
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPortsAreNotSharedBetweenProcesses$")
	cmd.Env = append(os.Environ(), "PROCCLUSTER_PORT_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the child printed no port: %v", err)
	}
	child, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	lo := child - (child-portLo)%blockSize
	seen := map[int]bool{}
	for range blockSize + 10 { // more than a block: this process claims a second one
		addr, err := FreeAddr("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		_, ps, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(ps)
		if p >= lo && p < lo+blockSize {
			t.Fatalf("port %d is in the block %d.. the child process holds", p, lo)
		}
		if seen[p] || p < portLo || p >= portHi {
			t.Fatalf("port %d handed out twice or out of range", p)
		}
		seen[p] = true
	}
}

func TestFreePortsIsARun(t *testing.T) {
	base, err := FreePorts("127.0.0.1", 23)
	if err != nil {
		t.Fatal(err)
	}
	for p := base; p < base+23; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d of the run is not free: %v", p, err)
		}
		l.Close()
	}
	if next, err := FreePorts("127.0.0.1", 1); err != nil || (next >= base && next < base+23) {
		t.Fatalf("next port %d (%v) inside the run %d..%d", next, err, base, base+22)
	}
}
