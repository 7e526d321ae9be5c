package php

import "fmt"

// MaxFrames bounds a walk of the frames.
const MaxFrames = 1024

// Frame is one zend_execute_data as read at one moment.
type Frame struct {
	Addr   uint64
	Func   uint64 // its zend_function; 0 for a frame of no function
	Opline uint64 // the instruction it is at
	// Top says it is the first frame an invocation of the executor runs
	// (ZEND_CALL_TOP): the frames from the previous Top one (or the
	// innermost) to it run in one execute_ex call of the C stack.
	Top bool
}

// Frames reads the frames the process runs now, innermost first (at
// most MaxFrames); none between requests.
func (p *Process) Frames() ([]Frame, error) {
	l := p.Layout
	addr, err := p.mem.u64(p.CurrentExecuteData)
	if err != nil {
		return nil, fmt.Errorf("current_execute_data: %w", err)
	}
	size := max(l.ExecOpline, l.ExecFunc, l.ExecThisTypeInfo, l.ExecPrev) + 8
	var frames []Frame
	for n := 0; addr != 0; n++ {
		if n == MaxFrames {
			return nil, fmt.Errorf("more than %d frames (or a loop)", MaxFrames)
		}
		b := make(block, size)
		if err := p.mem.read(b, addr); err != nil {
			return nil, fmt.Errorf("frame %#x: %w", addr, err)
		}
		frames = append(frames, Frame{
			Addr: addr, Func: b.u64(l.ExecFunc), Opline: b.u64(l.ExecOpline),
			Top: b.u32(l.ExecThisTypeInfo)&l.CallTop != 0,
		})
		addr = b.u64(l.ExecPrev)
	}
	return frames, nil
}
