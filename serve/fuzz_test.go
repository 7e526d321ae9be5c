package serve

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Fuzz targets for what serve reads of other processes and of the kernel
// while it looks for targets. `make fuzz` runs each.

// A stat line holds a command name its process chose.
func FuzzParseStat(f *testing.F) {
	f.Add("42 (a (weird) name) S 7 42 42 0 -1 4194560 1 0 0 0 5 3 0 0 20 0 4 0 123456 1000 100")
	f.Add("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 2 0 0")
	f.Add("42 x) S")
	f.Fuzz(func(t *testing.T, line string) {
		st, err := parseStat(line)
		if err != nil {
			return
		}
		if !strings.Contains(line, "("+st.comm+")") {
			t.Fatalf("comm %q read from %q", st.comm, line)
		}
		fields := strings.Fields(line[strings.LastIndexByte(line, ')')+1:])
		if want, err := strconv.ParseUint(fields[19], 10, 64); err != nil || st.start != want {
			t.Fatalf("start %d read from field %q", st.start, fields[19])
		}
	})
}

// /proc/net/tcp lists every socket of the namespace.
func FuzzListeningInodes(f *testing.F) {
	f.Add("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"+
		"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 27211 1\n"+
		"   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 31337 1\n", uint16(8080))
	f.Add("h\n 0: 0100007F 0 0A 0 0 0 0 0 0 1\n", uint16(0))
	f.Fuzz(func(t *testing.T, table string, port uint16) {
		into := map[string]bool{}
		if err := listeningInodes(strings.NewReader(table), int(port), into); err != nil {
			return
		}
		for inode := range into {
			if !strings.Contains(table, inode) || !strings.Contains(table, tcpListen) {
				t.Fatalf("inode %q listening on %d in %q", inode, port, table)
			}
		}
	})
}

// diagMessage is one netlink message of sock_diag's reply: a socket
// listening on port with inode, or, with port 0, the reply's end.
func diagMessage(port uint16, inode uint32) []byte {
	kind, body := uint16(unix.NLMSG_DONE), make([]byte, 4)
	if port != 0 {
		kind, body = unix.SOCK_DIAG_BY_FAMILY, make([]byte, diagMsgInodeOffset+4)
		binary.BigEndian.PutUint16(body[diagMsgSportOffset:], port)
		binary.NativeEndian.PutUint32(body[diagMsgInodeOffset:], inode)
	}
	m := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(m, uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(m[4:], kind)
	return append(m, body...)
}

// sock_diag's reply is the kernel's, read in pieces: any bytes give
// inodes, the reply's end or an error, never a panic.
func FuzzReadDiagReply(f *testing.F) {
	f.Add(append(diagMessage(8080, 27211), diagMessage(0, 0)...), uint16(8080))
	f.Add(diagMessage(443, 1), uint16(80))
	f.Fuzz(func(t *testing.T, reply []byte, port uint16) {
		into := map[string]bool{}
		done, err := readDiagReply(reply, int(port), into)
		if err != nil && !done && len(into) > 0 {
			t.Fatalf("a malformed reply gave inodes %v", into)
		}
		for inode := range into {
			if _, err := strconv.ParseUint(inode, 10, 32); err != nil {
				t.Fatalf("inode %q", inode)
			}
		}
	})
}

func TestReadDiagReply(t *testing.T) {
	into := map[string]bool{}
	reply := append(append(diagMessage(8080, 27211), diagMessage(9090, 5)...), diagMessage(0, 0)...)
	done, err := readDiagReply(reply, 8080, into)
	if !done || err != nil || len(into) != 1 || !into["27211"] {
		t.Errorf("done %v, error %v, inodes %v; want the end, and 27211 alone", done, err, into)
	}
	if done, err := readDiagReply(diagMessage(8080, 1), 8080, into); done || err != nil {
		t.Errorf("a reply with no end: done %v, error %v", done, err)
	}
}
