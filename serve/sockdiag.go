package serve

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Listening sockets are asked of the kernel through sock_diag, which sends
// only those in LISTEN state: /proc/net/tcp lists every socket of the
// namespace, tens of thousands on a busy server (each TIME_WAIT one), and
// reading it took 7 ms here, every second.

// tcpListenState is TCP_LISTEN, the state a listening socket is in.
const tcpListenState = 10

// inetDiagReqLen is struct inet_diag_req_v2: family, protocol, ext, pad
// (a byte each), states (4), and struct inet_diag_sockid (48).
const inetDiagReqLen = 56

// The offsets in struct inet_diag_msg of the socket's local port (in
// network order, in its inet_diag_sockid) and of its inode.
const (
	diagMsgSportOffset = 4
	diagMsgInodeOffset = 68
)

// diagListeningInodes adds the inodes of the TCP sockets listening on
// port, IPv4 and IPv6, in reqprof's network namespace.
func diagListeningInodes(port int, into map[string]bool) error {
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		if err := diagFamily(family, port, into); err != nil {
			return err
		}
	}
	return nil
}

func diagFamily(family uint8, port int, into map[string]bool) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	req := make([]byte, unix.NLMSG_HDRLEN+inetDiagReqLen)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	body := req[unix.NLMSG_HDRLEN:]
	body[0], body[1] = family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(body[4:], 1<<tcpListenState)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		if done, err := readDiagReply(buf[:n], port, into); done || err != nil {
			return err
		}
	}
}

// readDiagReply adds the inodes of the sockets on port that one read of
// sock_diag's reply lists, and says whether the reply ended there.
func readDiagReply(reply []byte, port int, into map[string]bool) (done bool, err error) {
	msgs, err := syscall.ParseNetlinkMessage(reply)
	if err != nil {
		return false, fmt.Errorf("sock_diag: %w", err)
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return true, fmt.Errorf("sock_diag: %w", syscall.Errno(errno))
				}
			}
			return true, nil
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(m.Data) < diagMsgInodeOffset+4 {
				continue
			}
			if int(binary.BigEndian.Uint16(m.Data[diagMsgSportOffset:])) == port {
				into[strconv.FormatUint(uint64(binary.NativeEndian.Uint32(m.Data[diagMsgInodeOffset:])), 10)] = true
			}
		}
	}
	return false, nil
}
