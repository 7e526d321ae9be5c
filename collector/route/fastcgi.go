package route

import "strconv"

// FastCGI (the FastCGI 1.0 specification): a client sends records, each an
// 8-byte header (version 1, type, request id, content length, padding
// length, a reserved byte) then its content and padding. A request is a
// BEGIN_REQUEST record, its params (name-value pairs, carried by PARAMS
// records and ended by an empty one) and its STDIN (and, for a filter,
// DATA), all with its request id. Records with request id 0 are management
// records (GET_VALUES).

// Record types (FastCGI 1.0, section 8).
const (
	FastCGITypeBeginRequest    = 1
	FastCGITypeAbortRequest    = 2
	FastCGITypeEndRequest      = 3
	FastCGITypeParams          = 4
	FastCGITypeStdin           = 5
	FastCGITypeStdout          = 6
	FastCGITypeStderr          = 7
	FastCGITypeData            = 8
	FastCGITypeGetValues       = 9
	FastCGITypeGetValuesResult = 10
	FastCGITypeUnknownType     = 11
)

// FastCGIHeaderLen is the size of a record's header, and of a
// BEGIN_REQUEST record's content.
const FastCGIHeaderLen = 8

// FastCGIHeader is a record's header.
type FastCGIHeader struct {
	Version, Type uint8
	RequestID     uint16
	ContentLength uint16
	PaddingLength uint8
	Reserved      uint8
}

// ParseFastCGIHeader reads the header at the start of b, which holds at
// least FastCGIHeaderLen bytes.
func ParseFastCGIHeader(b []byte) FastCGIHeader {
	return FastCGIHeader{
		Version:       b[0],
		Type:          b[1],
		RequestID:     uint16(b[2])<<8 | uint16(b[3]),
		ContentLength: uint16(b[4])<<8 | uint16(b[5]),
		PaddingLength: b[6],
		Reserved:      b[7],
	}
}

// FromClient says whether a client may send this record: version 1, a
// type a client sends, on a request id the type allows (0 for a
// management record, another for a request's), a BEGIN_REQUEST with its
// 8 bytes of content. known is false for a type the specification does
// not define (a server answers an unknown management record with
// UNKNOWN_TYPE), which a reader passes over.
func (h FastCGIHeader) FromClient() (known, ok bool) {
	if h.Version != 1 {
		return true, false
	}
	switch h.Type {
	case FastCGITypeBeginRequest:
		return true, h.RequestID != 0 && h.ContentLength == FastCGIHeaderLen
	case FastCGITypeAbortRequest, FastCGITypeParams, FastCGITypeStdin, FastCGITypeData:
		return true, h.RequestID != 0
	case FastCGITypeGetValues:
		return true, h.RequestID == 0
	case FastCGITypeEndRequest, FastCGITypeStdout, FastCGITypeStderr, FastCGITypeGetValuesResult, FastCGITypeUnknownType:
		return true, false // a server's
	}
	return false, true
}

// StartsFastCGI reports whether b, which holds at least FastCGIHeaderLen
// bytes, starts with a record a FastCGI client opens a connection with: a
// BEGIN_REQUEST or a GET_VALUES query; or, when joined (bytes taken from
// after the connection's first), any record a client sends of a type the
// specification defines. The reserved byte must be 0, as clients send it.
func StartsFastCGI(b []byte, joined bool) bool {
	h := ParseFastCGIHeader(b)
	if known, ok := h.FromClient(); !known || !ok || h.Reserved != 0 {
		return false
	}
	return joined || h.Type == FastCGITypeBeginRequest || h.Type == FastCGITypeGetValues
}

// The params that name a request, by index in FastCGIParams.values.
const (
	paramMethod = iota
	paramURI
	paramScript
	namingParams
)

var namingParamNames = [namingParams]string{"REQUEST_METHOD", "REQUEST_URI", "SCRIPT_NAME"}

const (
	// maxNamingParam is the longest of namingParamNames.
	maxNamingParam = 14 // len("REQUEST_METHOD")
	// MaxFastCGIValue bounds what is kept of each value that names a
	// request: nginx's longest request line by default (8 KiB). A longer
	// value is named as a request line cut there.
	MaxFastCGIValue = 8 << 10
)

// Where a FastCGIParams decoder is in the pair it reads.
const (
	atNameLength uint8 = iota
	atValueLength
	atName
	atValue
)

// FastCGIParams decodes a request's params stream (the contents of its
// PARAMS records, one after another), fed in pieces cut anywhere: pairs of
// a name length and a value length (each one byte below 128, else four
// bytes with the top bit set), then the name and the value. Of the pairs
// it keeps the values that name the request (REQUEST_METHOD, REQUEST_URI,
// SCRIPT_NAME), each the last one sent, as PHP keeps them, and at most
// MaxFastCGIValue bytes of each; the rest are passed over unread. The zero
// value is ready to use; it allocates only to keep those values.
type FastCGIParams struct {
	at       uint8
	lenBytes uint8  // bytes read of a four-byte length
	length   uint32 // the length being read
	nameLen  uint32
	valueLen uint32
	got      uint32 // bytes read of the name or value
	name     [maxNamingParam]byte
	field    int8 // the naming param whose value is read, or -1

	values [namingParams][]byte
	// cut: which values were longer than MaxFastCGIValue.
	cut uint8
}

// Reset makes p as new, keeping what it allocated.
func (p *FastCGIParams) Reset() {
	values := p.values
	*p = FastCGIParams{}
	for i := range values {
		p.values[i] = values[i][:0]
	}
}

// Kept is how many bytes of values p holds: at most 3 × MaxFastCGIValue.
func (p *FastCGIParams) Kept() int {
	n := 0
	for _, v := range p.values {
		n += len(v)
	}
	return n
}

// Between reports whether p is between two pairs, where a params stream
// may end.
func (p *FastCGIParams) Between() bool { return p.at == atNameLength && p.lenBytes == 0 }

// Write decodes the next bytes of the params stream.
func (p *FastCGIParams) Write(b []byte) {
	for len(b) > 0 {
		// A pair with one-byte lengths whole in b (nginx's are, but
		// for long values) is read where it lies.
		if p.at == atNameLength && p.lenBytes == 0 && len(b) >= 2 && b[0] < 0x80 && b[1] < 0x80 {
			if n := 2 + int(b[0]) + int(b[1]); n <= len(b) {
				if i := namingParam(b[2 : 2+b[0]]); i >= 0 {
					p.values[i] = append(p.values[i][:0], b[2+b[0]:n]...)
					p.cut &^= 1 << i // a value below 128 bytes is kept whole
				}
				b = b[n:]
				continue
			}
		}
		switch p.at {
		case atNameLength, atValueLength:
			c := b[0]
			b = b[1:]
			switch {
			case p.lenBytes == 0 && c < 0x80:
				p.length = uint32(c)
			case p.lenBytes == 0:
				p.length, p.lenBytes = uint32(c&0x7f), 1
				continue
			default:
				p.length = p.length<<8 | uint32(c)
				if p.lenBytes++; p.lenBytes < 4 {
					continue
				}
				p.lenBytes = 0
			}
			if p.at == atNameLength {
				p.nameLen, p.at = p.length, atValueLength
				continue
			}
			p.valueLen, p.at, p.got = p.length, atName, 0
			p.settle()
		case atName:
			n := min(uint32(len(b)), p.nameLen-p.got)
			if p.nameLen <= maxNamingParam {
				copy(p.name[p.got:], b[:n])
			}
			p.got += n
			b = b[n:]
			p.settle()
		case atValue:
			n := min(uint32(len(b)), p.valueLen-p.got)
			if p.field >= 0 {
				v := p.values[p.field]
				room := uint32(MaxFastCGIValue - len(v))
				p.values[p.field] = append(v, b[:min(n, room)]...)
			}
			p.got += n
			b = b[n:]
			p.settle()
		}
	}
}

// settle moves on from a name or value read whole.
func (p *FastCGIParams) settle() {
	if p.at == atName && p.got == p.nameLen {
		p.field = -1
		if p.nameLen <= maxNamingParam {
			if i := namingParam(p.name[:p.nameLen]); i >= 0 {
				p.field = int8(i)
				p.values[i] = p.values[i][:0]
				p.cut &^= 1 << i
				if p.valueLen > MaxFastCGIValue {
					p.cut |= 1 << i
				}
			}
		}
		p.at, p.got = atValue, 0
	}
	if p.at == atValue && p.got == p.valueLen {
		p.at, p.field = atNameLength, -1
	}
}

// namingParam is the index of the naming param called name, or -1.
func namingParam(name []byte) int {
	switch len(name) {
	case len("REQUEST_METHOD"):
		if string(name) == "REQUEST_METHOD" {
			return paramMethod
		}
	case len("REQUEST_URI"): // and SCRIPT_NAME
		switch string(name) {
		case "REQUEST_URI":
			return paramURI
		case "SCRIPT_NAME":
			return paramScript
		}
	}
	return -1
}

// AppendName appends the name of the request whose whole params p decoded
// ("GET /items/{id}"), as AppendRequestName names REQUEST_METHOD and
// REQUEST_URI, or SCRIPT_NAME when REQUEST_URI is empty or missing. A
// request with no method or neither of them is "fastcgi :PORT".
func (p *FastCGIParams) AppendName(dst []byte, localPort uint16) []byte {
	return p.appendName(dst, localPort, true)
}

// appendName is AppendName for params that may have been cut (complete
// false): a request is then named by its REQUEST_URI only, since one may
// have followed the cut, and a value the cut fell in names it as a request
// line cut there.
func (p *FastCGIParams) appendName(dst []byte, localPort uint16, complete bool) []byte {
	reading := int8(-1) // the value the cut fell in
	if !complete && p.at == atValue {
		reading = p.field
	}
	method := p.values[paramMethod]
	if reading == paramMethod {
		method = nil
	}
	target, cut := p.values[paramURI], p.cut&(1<<paramURI) != 0 || reading == paramURI
	if len(target) == 0 && complete {
		target, cut = p.values[paramScript], p.cut&(1<<paramScript) != 0
	}
	if len(method) > 0 && len(target) > 0 {
		if name, ok, _ := appendRequest(dst, method, target, cut); ok {
			return name
		}
	}
	return strconv.AppendUint(append(dst, "fastcgi :"...), uint64(localPort), 10)
}

// fastCGIName names the request whose BEGIN_REQUEST is among the records
// at the start of payload, which may be cut anywhere, from its params
// there; ok is false when payload does not start with a record a client
// sends.
func fastCGIName(payload []byte, localPort uint16) (string, bool) {
	if len(payload) < FastCGIHeaderLen || !StartsFastCGI(payload, true) {
		return "", false
	}
	var p FastCGIParams
	var id uint16
	begun, ended, complete := false, false, false
	for b := payload; len(b) >= FastCGIHeaderLen; {
		h := ParseFastCGIHeader(b)
		if known, ok := h.FromClient(); known && !ok {
			break
		}
		content := b[FastCGIHeaderLen:]
		content = content[:min(len(content), int(h.ContentLength))]
		switch {
		case h.Type == FastCGITypeBeginRequest:
			p.Reset()
			id, begun = h.RequestID, true
		case h.Type == FastCGITypeAbortRequest && begun && h.RequestID == id:
			begun = false
		case h.Type == FastCGITypeParams && begun && h.RequestID == id:
			p.Write(content)
			// An end inside a pair is malformed: named as if cut there.
			ended = h.ContentLength == 0
			complete = ended && p.Between()
		}
		if ended || len(content) < int(h.ContentLength) {
			break
		}
		b = b[min(len(b), FastCGIHeaderLen+int(h.ContentLength)+int(h.PaddingLength)):]
	}
	if !begun {
		return "fastcgi :" + strconv.Itoa(int(localPort)), true
	}
	return string(p.appendName(make([]byte, 0, maxName), localPort, complete)), true
}
