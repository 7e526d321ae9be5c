package collector

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/reqprof/reqprof/profile"
)

// A target's role says what its outbound connections are. A server's are
// the backends of the requests it serves (backends.go); a client's carry
// its calls, each a request of its own: it starts at the call's first
// write after the previous answer on its connection was read, its CPU is
// what the client spends from there (building the call, handling its
// answer) until its next call on the connection, and it is named from the
// bytes written, as a server's request is from the bytes read, with its
// peer. The programs decide once per connection, when they first see it
// (conns.h: conn_of), from the target's entry in target_roles.

// Roles are the values of Config.Role besides "" (detected).
var Roles = []string{profile.RoleClient, profile.RoleServer, profile.RoleBoth}

// RoleGiven and RoleDetected say how a target's role was chosen.
const (
	RoleGiven    = "--role"
	RoleDetected = "detected"
)

// ValidRole says whether role is a value of Config.Role.
func ValidRole(role string) bool {
	if role == "" {
		return true
	}
	for _, r := range Roles {
		if r == role {
			return true
		}
	}
	return false
}

// setRole chooses the target's role, given or detected, and tells the
// programs. Detected: a client when none of its processes listens on a
// port or a Unix socket or has a stdio channel of requests (stdin a pipe
// or socket), a server otherwise, both when it also spawned a server it
// speaks to over stdio (followed as one target); a proxy, which serves
// and calls on sockets, is one only when given. The client's ends of
// stdio channels are found here: they carry calls whatever the role.
func (p *process) setRole(objs *bpfObjects, index int, given string, stdio StdioMode) error {
	p.clientPipes = p.findClientPipes(stdio)
	p.role, p.roleFrom = given, RoleGiven
	if given == "" {
		p.role, p.roleFrom = profile.RoleClient, RoleDetected
		if p.serves(stdio) {
			p.role = profile.RoleServer
			if len(p.clientPipes) > 0 {
				p.role = profile.RoleBoth
			}
		}
	}
	role := reqprofTargetRoleTARGET_SERVES
	if p.role != profile.RoleServer {
		role = reqprofTargetRoleTARGET_CALLS
	}
	if err := objs.TargetRoles.Update(uint32(index), uint32(role), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("setting the role of target %d: %w", p.PID, err)
	}
	return nil
}

// serves says whether any of the target's processes listens, or reads
// requests on its stdin.
func (p *process) serves(stdio StdioMode) bool {
	for _, pid := range append([]int{p.PID}, p.members...) {
		if listens, err := listensTCP(pid); err != nil || listens {
			return true // unreadable: taken for a server, as before roles
		}
		if paths, err := listeningUnixPaths(pid); err != nil || len(paths) > 0 {
			return true
		}
		if stdio != StdioOff && carriesRequests(pid, 0) && !isTerminal(pid, 0) {
			return true
		}
	}
	return false
}

// listensTCP says whether pid holds a listening TCP socket of its own:
// /proc/PID/net/tcp lists every socket of its network namespace, its own
// are those of its descriptors' inodes.
func listensTCP(pid int) (bool, error) {
	inodes, err := socketInodes(pid)
	if err != nil || len(inodes) == 0 {
		return false, err
	}
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "net", name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		found := listeningInode(f, inodes)
		f.Close()
		if found {
			return true, nil
		}
	}
	return false, nil
}

// listeningInode says whether a /proc/net/tcp table lists a listening
// socket of one of inodes (its tenth field).
func listeningInode(f *os.File, inodes map[uint64]bool) bool {
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != tcpListen {
			continue
		}
		if inode, err := strconv.ParseUint(fields[9], 10, 64); err == nil && inodes[inode] {
			return true
		}
	}
	return false
}

// clientPipe is a descriptor by which a target's process speaks to the
// stdio of a server it spawned: the write end of the server's stdin, or
// the read end of its stdout.
type clientPipe struct {
	pid, fd int
	server  int // the server's pid
}

// findClientPipes lists the descriptors of the target's processes that
// are the other ends of a member's stdin and stdout pipes: a client and
// the server it spawned over stdio, both followed (--follow-children).
func (p *process) findClientPipes(stdio StdioMode) []clientPipe {
	if stdio == StdioOff || len(p.members) == 0 {
		return nil
	}
	pids := append([]int{p.PID}, p.members...)
	var pipes []clientPipe
	for _, server := range pids {
		in, out := pipeInode(server, 0), pipeInode(server, 1)
		if in == "" || out == "" || in == out {
			continue
		}
		for _, client := range pids {
			if client == server {
				continue
			}
			for fd, link := range descriptors(client) {
				if link == in || link == out {
					pipes = append(pipes, clientPipe{pid: client, fd: fd, server: server})
				}
			}
		}
	}
	return pipes
}

// pipeInode is "pipe:[N]" when pid's descriptor fd is a pipe, else "".
func pipeInode(pid, fd int) string {
	link, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", strconv.Itoa(fd)))
	if err != nil || !strings.HasPrefix(link, "pipe:[") {
		return ""
	}
	return link
}

// descriptors are pid's open descriptors and what they link to.
func descriptors(pid int) map[int]string {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	links := map[int]string{}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			links[fd] = link
		}
	}
	return links
}

// clientPipeCookie is the id of the client's end of server's stdio: its
// stdio channel's, with the client bit.
func clientPipeCookie(server int) uint64 {
	return stdioCookie(server) | 1<<reqprofLimitsSTDIO_CLIENT_BIT
}

// registerClientPipes tells the programs which descriptors are clients'
// ends of stdio channels; it returns how many.
func registerClientPipes(objs *bpfObjects, pipes []clientPipe) (int, error) {
	for _, c := range pipes {
		if err := objs.StdioFds.Put(reqprofStdioKey{Tgid: uint32(c.pid), Fd: uint32(c.fd)}, clientPipeCookie(c.server)); err != nil {
			return 0, fmt.Errorf("registering the pipes of %d to %d: %w", c.pid, c.server, err)
		}
	}
	return len(pipes), nil
}
