package cpython

import (
	"os"
	"syscall"
)

type devIno struct{ dev, ino uint64 }

func statIDs(st os.FileInfo) (devIno, bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return devIno{}, false
	}
	return devIno{uint64(s.Dev), s.Ino}, true
}
