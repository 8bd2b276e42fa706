package faults

import (
	"bytes"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// unreadWindow is the flow-control window an unread stream grants lockd:
// room for a message or two, and never more, since nothing is read.
const unreadWindow = 1024

// unreadStream is a KeepAlive stream whose client does not read it, spoken
// in raw HTTP/2 so that its flow-control window can be far smaller than a
// gRPC client allows (64 KiB), and the window fills after a renewal or two.
// It still answers the connection's SETTINGS and PINGs, as a client whose
// application does not read does. The stream's end reaches it only once
// it reads: gRPC sends the trailers after the messages already queued.
type unreadStream struct {
	conn net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex // serialises writes to fr

	mu     sync.Mutex
	first  time.Time  // first message
	frames int        // DATA frames received
	ended  time.Time  // trailers or reset received
	code   codes.Code // the stream's status
	done   chan struct{}
}

// openUnreadKeepAlive opens KeepAlive for lease on the lockd at addr.
func openUnreadKeepAlive(t *testing.T, addr string, req *lockdv1.KeepAliveRequest) *unreadStream {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	s := &unreadStream{conn: conn, fr: fr, done: make(chan struct{}), code: codes.Unknown}
	t.Cleanup(func() { _ = conn.Close(); <-s.done })
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/lockd.v1.LockService/KeepAlive"}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)
	_, err = conn.Write([]byte(http2.ClientPreface))
	if err == nil {
		err = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: unreadWindow}, http2.Setting{ID: http2.SettingEnablePush})
	}
	if err == nil {
		err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndHeaders: true})
	}
	if err == nil {
		err = fr.WriteData(1, true, body)
	}
	if err != nil {
		t.Fatal(err)
	}
	go s.serve()
	return s
}

// read starts reading: it grants the stream (and the connection) a large
// window, so that lockd sends what it queued and the stream's end, and
// waits up to timeout for the end. It returns the stream's status, or
// Unknown if it did not end.
func (s *unreadStream) read(timeout time.Duration) codes.Code {
	s.wmu.Lock()
	_ = s.fr.WriteWindowUpdate(0, 1<<30)
	_ = s.fr.WriteWindowUpdate(1, 1<<30)
	s.wmu.Unlock()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, _, ended, code := s.state(); !ended.IsZero() {
			return code
		}
		time.Sleep(10 * time.Millisecond)
	}
	return codes.Unknown
}

// serve reads frames until the connection ends, answering the
// connection's control frames and granting the stream no window.
func (s *unreadStream) serve() {
	defer close(s.done)
	fr := s.fr
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			s.end(codes.Unavailable)
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				s.wmu.Lock()
				_ = fr.WriteSettingsAck()
				s.wmu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				s.wmu.Lock()
				_ = fr.WritePing(true, f.Data)
				s.wmu.Unlock()
			}
		case *http2.DataFrame:
			s.mu.Lock()
			if s.frames == 0 {
				s.first = time.Now()
			}
			s.frames++
			s.mu.Unlock()
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					n, _ := strconv.Atoi(hf.Value)
					s.end(codes.Code(n))
				}
			}
		case *http2.RSTStreamFrame:
			s.end(codes.Canceled)
		}
	}
}

func (s *unreadStream) end(code codes.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended.IsZero() {
		s.ended, s.code = time.Now(), code
	}
}

// state returns when the first message came, how many DATA frames came,
// and when and how the stream ended (zero while open).
func (s *unreadStream) state() (first time.Time, frames int, ended time.Time, code codes.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.frames, s.ended, s.code
}
