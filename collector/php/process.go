package php

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// Process is a process's PHP, open for reading: its layout, checked
// against its memory, and the addresses the collector's programs read
// from.
type Process struct {
	*Interpreter
	Layout *Layout
	// CurrentExecuteData is the address of executor_globals'
	// current_execute_data: the frame the process runs now, NULL between
	// requests.
	CurrentExecuteData uint64

	mem  reader
	file *os.File // /proc/PID/mem, nil for a Memory of the caller's

	mu    sync.Mutex
	funcs map[uint64]*Function
}

// Open finds pid's PHP and opens it for reading: ErrNotPHP (wrapped) when
// it runs none, an error naming what could not be read when its engine is
// not known or its layout does not fit.
func Open(pid int) (*Process, error) {
	interp, err := Find(pid)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	p, err := open(interp, f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s (%s): %w", interp.Build, interp.Path, err)
	}
	p.file = f
	return p, nil
}

// Close closes the process's memory.
func (p *Process) Close() error {
	if p.file == nil {
		return nil
	}
	return p.file.Close()
}

// open gives interp's layout, checked against mem.
func open(interp *Interpreter, mem Memory) (*Process, error) {
	if interp.ThreadSafe {
		return nil, errors.New("a thread-safe (ZTS) build: its executor globals are per thread, which is not known")
	}
	l, err := layoutOf(interp.API)
	if err != nil {
		return nil, err
	}
	p := &Process{Interpreter: interp, Layout: l, mem: reader{mem}, funcs: map[uint64]*Function{}}
	p.CurrentExecuteData = interp.ExecutorGlobals + l.EGCurrentExecuteData
	if err := p.check(); errors.Is(err, ErrNoRequestYet) {
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("its layout (API %d's table) does not fit: %w", interp.API, err)
	}
	return p, nil
}

// Entries the engine puts in its own tables at startup, before anything
// else can: the function zend_version and the class stdClass, among the
// first few of each. A process whose tables read so has its executor
// globals, hash tables, strings, functions and classes where the layout
// says.
const (
	engineFunction = "zend_version"
	engineClassKey = "stdclass"
	engineClass    = "stdClass"
	// checkedBuckets is how many of a table's first entries are looked at.
	checkedBuckets = 64
)

// ErrNoRequestYet says a process has started no request, and its engine
// has not set its executor globals up: a php-fpm master, or a worker
// before its first request. It runs no PHP code (yet).
var ErrNoRequestYet = errors.New("its engine has started no request (a php-fpm master, or a worker before its first)")

// check finds the engine's first function in its function table and its
// first class in its class table, and reads them.
func (p *Process) check() error {
	l := p.Layout
	eg := p.ExecutorGlobals
	if table, err := p.mem.u64(eg + l.EGFunctionTable); err == nil && table == 0 {
		return ErrNoRequestYet
	}
	fn, err := p.entry(eg+l.EGFunctionTable, "function table", engineFunction)
	if err != nil {
		return err
	}
	f, err := p.readFunction(fn)
	if err != nil {
		return fmt.Errorf("function %s: %w", engineFunction, err)
	}
	if f.Type != Internal || f.Name != engineFunction || f.Class != "" {
		return fmt.Errorf("function %s reads as %v %q", engineFunction, f.Type, f.QualifiedName())
	}
	class, err := p.entry(eg+l.EGClassTable, "class table", engineClassKey)
	if err != nil {
		return err
	}
	name, err := p.className(class)
	if err != nil {
		return fmt.Errorf("class %s: %w", engineClassKey, err)
	}
	if name != engineClass {
		return fmt.Errorf("class %s is named %q", engineClassKey, name)
	}
	return nil
}

// maxTableSize bounds the size of a hash table taken for one.
const maxTableSize = 1 << 24

// entry finds key among the first buckets of the HashTable the pointer at
// tableAddr points to, and gives its value's pointer.
func (p *Process) entry(tableAddr uint64, what, key string) (uint64, error) {
	l := p.Layout
	table, err := p.mem.u64(tableAddr)
	if err != nil {
		return 0, fmt.Errorf("the %s: %w", what, err)
	}
	head := make(block, l.HashTableSize+4)
	if err := p.mem.read(head, table); err != nil {
		return 0, fmt.Errorf("the %s: %w", what, err)
	}
	used, size := head.u32(l.HashNumUsed), head.u32(l.HashTableSize)
	if size < 8 || size > maxTableSize || size&(size-1) != 0 || used == 0 || used > size || head.u32(l.HashFlags)&l.HashPacked != 0 {
		return 0, fmt.Errorf("the %s (%#x) does not read as one: %d of %d buckets used, flags %#x", what, table, used, size, head.u32(l.HashFlags))
	}
	n := min(uint64(used), checkedBuckets)
	buckets := make(block, n*l.BucketSize)
	if err := p.mem.read(buckets, head.u64(l.HashArData)); err != nil {
		return 0, fmt.Errorf("the %s's buckets: %w", what, err)
	}
	var seen []string
	for i := range n {
		b := buckets[i*l.BucketSize:]
		k := b.u64(l.BucketKey)
		if k == 0 {
			continue // a deleted entry, or an integer key
		}
		name, err := p.str(k)
		if err != nil {
			return 0, fmt.Errorf("the %s's key %d: %w", what, i, err)
		}
		if name == key {
			return b.u64(l.BucketVal), nil
		}
		seen = append(seen, name)
	}
	return 0, fmt.Errorf("no %s among the %s's first keys (%q...)", key, what, seen[:min(len(seen), 4)])
}

// maxStringLen bounds the strings read: a name or a file name longer than
// this is taken for something that is no string.
const maxStringLen = 4096

// str reads the zend_string at addr, checked to be a string.
func (p *Process) str(addr uint64) (string, error) {
	l := p.Layout
	head := make(block, l.StringVal)
	if err := p.mem.read(head, addr); err != nil {
		return "", err
	}
	if t := head.u32(l.StringTypeInfo) & 0xf; t != l.StringType {
		return "", fmt.Errorf("the object at %#x is of type %d, not a string", addr, t)
	}
	n := head.u64(l.StringLen)
	if n > maxStringLen {
		return "", fmt.Errorf("the string at %#x claims %d bytes", addr, n)
	}
	b := make([]byte, n)
	if n > 0 {
		if err := p.mem.read(b, addr+l.StringVal); err != nil {
			return "", err
		}
	}
	return string(b), nil
}

// className is the name of the zend_class_entry at addr.
func (p *Process) className(addr uint64) (string, error) {
	name, err := p.mem.u64(addr + p.Layout.ClassName)
	if err != nil {
		return "", err
	}
	return p.str(name)
}
