package collector

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Lines as /proc/net/tcp and tcp6 print them (trimmed after the inode).
const procNetTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 27211 1
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 18005 1
   2: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 31337 1
   3: 0100007F:D431 0100007F:0CEA 01 00000000:00000000 00:00000000 00000000     0        0 31338 1
`

const procNetTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:01BB 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 40001 1
`

func TestParseListeningPorts(t *testing.T) {
	ports := map[uint16]bool{}
	for _, text := range []string{procNetTCP, procNetTCP6} {
		if err := parseListeningPorts(strings.NewReader(text), ports); err != nil {
			t.Fatal(err)
		}
	}
	got := slices.Sorted(maps.Keys(ports))
	// 8080 and 22 listen on IPv4, 443 on IPv6; 54321 is an outbound
	// connection's ephemeral port and must not count.
	if want := []uint16{22, 443, 8080}; !slices.Equal(got, want) {
		t.Errorf("listening ports %v, want %v", got, want)
	}
}

func TestParseListeningPortsRejectsGarbage(t *testing.T) {
	bad := "header\n 0: 0100007F:ZZZZ 00000000:0000 0A\n"
	if err := parseListeningPorts(strings.NewReader(bad), map[uint16]bool{}); err == nil {
		t.Error("a malformed port was accepted")
	}
}

func FuzzParseListeningPorts(f *testing.F) {
	f.Add(procNetTCP)
	f.Add(procNetTCP6)
	f.Add("x\n 0: :FFFFF 0 0A\n")
	f.Fuzz(func(t *testing.T, text string) {
		ports := map[uint16]bool{}
		if err := parseListeningPorts(strings.NewReader(text), ports); err != nil {
			return
		}
		// Every port found stands, in hex, on a LISTEN line of the input.
		for port := range ports {
			if !strings.Contains(strings.ToUpper(text), tcpListen) {
				t.Fatalf("port %d found in input with no LISTEN line", port)
			}
		}
	})
}

// The attached line counts threads in the singular for one: a sleep has
// one thread, this test process several.
func TestAttachedLineCountsThreads(t *testing.T) {
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sleep.Process.Kill()
		sleep.Wait()
	}()
	line := attachedLine([]*process{{Target: Target{PID: sleep.Process.Pid}, comm: "sleep"}})
	if want := fmt.Sprintf("reqprof: attached to %d (sleep), 1 thread", sleep.Process.Pid); line != want {
		t.Errorf("attached line %q, want %q", line, want)
	}
	line = attachedLine([]*process{{Target: Target{PID: os.Getpid()}, comm: "collector.test"}})
	if !strings.HasSuffix(line, " threads") {
		t.Errorf("attached line %q for a process of several threads, want it to end in threads", line)
	}
}

func TestParseListeningUnix(t *testing.T) {
	table := `Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 1001 /run/app.sock
0000000000000000: 00000002 00000000 00010000 0001 01 1002 @abstract-name
0000000000000000: 00000003 00000000 00000000 0001 03 1003 /run/app.sock
0000000000000000: 00000002 00000000 00010000 0002 01 1004 /run/dgram.sock
0000000000000000: 00000002 00000000 00010000 0001 01 1005 /run/someone-elses.sock
0000000000000000: 00000002 00000000 00010000 0001 01 1006
`
	paths, err := parseListeningUnix(strings.NewReader(table), map[uint64]bool{1001: true, 1002: true, 1003: true, 1004: true, 1006: true})
	if err != nil {
		t.Fatal(err)
	}
	// Listening stream sockets of the process only: not a connected one,
	// a datagram one, another process's, or an unbound one.
	if strings.Join(paths, ",") != "/run/app.sock,@abstract-name" {
		t.Errorf("paths %q", paths)
	}
	if _, err := parseListeningUnix(strings.NewReader("h\n0: 2 0 00010000 0001 01 x /p\n"), nil); err == nil {
		t.Error("a malformed inode was accepted")
	}
}

func TestUnixPathKey(t *testing.T) {
	key := unixPathKey("@abs")
	if key.Path[0] != 0 || key.Path[1] != 'a' || key.Path[3] != 's' || key.Path[4] != 0 {
		t.Errorf("abstract key %v", key.Path[:6])
	}
	key = unixPathKey("/run/x")
	if key.Path[0] != '/' || key.Path[5] != 'x' || key.Path[6] != 0 {
		t.Errorf("path key %v", key.Path[:8])
	}
	long := unixPathKey("/" + strings.Repeat("a", 200))
	if long.Path[len(long.Path)-1] != 'a' {
		t.Error("a path past 108 bytes was not cut at 108")
	}
}
