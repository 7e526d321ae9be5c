package stream

import "github.com/reqprof/reqprof/collector/route"

// maxFastCGIOpen bounds the requests begun on one connection whose params
// have not ended. FastCGI lets a client multiplex requests by id; nginx
// and php-fpm never do (one at a time, id 1).
const maxFastCGIOpen = 1024

type fcgiState struct {
	// The record being read.
	id      uint16
	content int // bytes of a PARAMS record's content still to decode
	padding int
	cur     int // index in open of the request whose params are decoded

	// Requests begun whose params have not ended.
	open []fcgiRequest
	kept int // bytes of values their decoders keep
}

type fcgiRequest struct {
	id     uint16
	params route.FastCGIParams
}

// find is the index in open of request id, or -1.
func (f *fcgiState) find(id uint16) int {
	for i := range f.open {
		if f.open[i].id == id {
			return i
		}
	}
	return -1
}

// close lets request i go, keeping its decoder's buffers for reuse.
func (f *fcgiState) close(i int) {
	f.kept -= f.open[i].params.Kept()
	last := len(f.open) - 1
	f.open[i], f.open[last] = f.open[last], f.open[i]
	f.open = f.open[:last]
}

// detectFastCGI tells a FastCGI connection by its first record, which
// must come in whole: a BEGIN_REQUEST or a GET_VALUES query, or, on a
// connection joined after it opened, any record a client sends.
func (c *Conn) detectFastCGI(data []byte) (int, bool) {
	if len(data) < route.FastCGIHeaderLen {
		return 0, false
	}
	if !route.StartsFastCGI(data, c.joined) {
		c.fail(ErrUnknown, "first bytes %#x", data[:route.FastCGIHeaderLen])
		return 0, false
	}
	c.proto, c.st = FastCGI, sFCGIRecord
	return 0, true
}

// fcgiRecord reads a record's header.
func (c *Conn) fcgiRecord(data []byte) (int, bool) {
	if len(data) < route.FastCGIHeaderLen {
		c.need = route.FastCGIHeaderLen
		return 0, false
	}
	h := route.ParseFastCGIHeader(data)
	if known, ok := h.FromClient(); known && !ok {
		c.fail(ErrMalformed, "record version %d, type %d, request %d, length %d", h.Version, h.Type, h.RequestID, h.ContentLength)
		return 0, false
	}
	f := &c.fcgi
	f.id, f.padding = h.RequestID, int(h.PaddingLength)
	c.left = uint64(h.ContentLength) + uint64(h.PaddingLength)
	switch h.Type {
	case route.FastCGITypeBeginRequest:
		// Its content (role, flags) says nothing that names it: it is
		// passed over, padding with it.
		c.fcgiBegin(h.RequestID)
	case route.FastCGITypeAbortRequest:
		// A request aborted before its params ended was never served.
		if i := f.find(h.RequestID); i >= 0 {
			f.close(i)
		}
	case route.FastCGITypeParams:
		i := f.find(h.RequestID)
		switch {
		case i < 0:
			// Of a request that counted already, or begun before the
			// bytes followed: passed over.
		case h.ContentLength == 0:
			c.fcgiRequest(i)
		default:
			f.cur, f.content = i, int(h.ContentLength)
			c.left = 0 // the content is needed: a gap there breaks the Conn
			c.st = sFCGIParams
			return route.FastCGIHeaderLen, true
		}
	}
	if c.left > 0 {
		c.st = sFCGISkip
	}
	return route.FastCGIHeaderLen, true
}

// fcgiBegin opens request id: one begun again before its params ended
// starts over.
func (c *Conn) fcgiBegin(id uint16) {
	f := &c.fcgi
	if i := f.find(id); i >= 0 {
		f.kept -= f.open[i].params.Kept()
		f.open[i].params.Reset()
		return
	}
	if len(f.open) == maxFastCGIOpen {
		c.fail(ErrBound, "more than %d FastCGI requests begun and not named", maxFastCGIOpen)
		return
	}
	if len(f.open) < cap(f.open) {
		f.open = f.open[:len(f.open)+1]
		f.open[len(f.open)-1].params.Reset()
	} else {
		f.open = append(f.open, fcgiRequest{})
	}
	f.open[len(f.open)-1].id = id
}

// fcgiParams decodes a PARAMS record's content as it comes.
func (c *Conn) fcgiParams(data []byte) (int, bool) {
	f := &c.fcgi
	n := min(len(data), f.content)
	p := &f.open[f.cur].params
	before := p.Kept()
	p.Write(data[:n])
	f.kept += p.Kept() - before
	if c.held() > maxBuffer-route.FastCGIHeaderLen {
		c.fail(ErrBound, "more than %d bytes of partial message", maxBuffer)
		return 0, false
	}
	f.content -= n
	if f.content == 0 {
		c.left = uint64(f.padding)
		c.st = sFCGISkip
	}
	return n, n > 0
}

func (c *Conn) fcgiSkip(data []byte) (int, bool) {
	n := c.pass(data)
	if c.left == 0 {
		c.st = sFCGIRecord
		return n, true
	}
	return n, n > 0
}

// fcgiRequest counts request i, whose params ended, and names it. A
// request counts here, not at its BEGIN_REQUEST: a server answers it only
// once it has its params (php-fpm reads them all before it runs the
// script), so the burst that ends them is the one the response ends, and a
// request aborted or cut before then was never served.
func (c *Conn) fcgiRequest(i int) {
	f := &c.fcgi
	p := &f.open[i].params
	if !p.Between() {
		c.fail(ErrMalformed, "FastCGI params of request %d end inside a name-value pair", f.open[i].id)
		return
	}
	c.scratch = p.AppendName(c.scratch[:0], c.port)
	f.close(i)
	c.emit(c.scratch, FastCGI, false, false)
}
