package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/wiremsg"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func wireMessage(opCode int32, flags uint32) []byte {
	msg := make([]byte, 21)
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[12:], uint32(opCode))
	binary.LittleEndian.PutUint32(msg[16:], flags)
	return msg
}

// command returns an OP_MSG carrying the command {name: 1}.
func command(t *testing.T, name string) []byte {
	t.Helper()
	doc, err := bson.Marshal(bson.D{{Key: name, Value: 1}})
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, headerLen+4+1, headerLen+4+1+len(doc))
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[12:], opMsg)
	return msg
}

func TestNeedsSerializing(t *testing.T) {
	for name, want := range map[string]bool{
		"hello": false, "isMaster": false, "ping": false, "buildInfo": false,
		"find": true, "findAndModify": true, "update": true, "insert": true, "delete": true,
	} {
		if got := needsSerializing(command(t, name)); got != want {
			t.Errorf("needsSerializing(%s) = %v, want %v", name, got, want)
		}
	}
	if needsSerializing(wireMessage(2004, 0)) {
		t.Error("needsSerializing(OP_QUERY) = true")
	}
}

// hangingBackend answers every command except "hang", which it reads and
// never answers. It stands for a FerretDB that deadlocked on one command.
func hangingBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				for {
					req, err := wiremsg.Read(c)
					if err != nil {
						return
					}
					if bytes.Contains(req, []byte("hang\x00")) {
						continue
					}
					if _, err := c.Write(req); err != nil { // any message will do as a reply
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestReplyTimeout: a command the backend never answers fails after the
// reply timeout and frees the proxy for the other clients. Without the
// timeout the second client would wait for ever.
func TestReplyTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s, err := newSerializer(AnyAddr, hangingBackend(t), timeout, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()

	dial := func() net.Conn {
		c, err := net.Dial("tcp", s.addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	a, b := dial(), dial()

	// b's command must pass through on its own first: the backend works.
	if _, err := b.Write(command(t, "find")); err != nil {
		t.Fatal(err)
	}
	if _, err := wiremsg.Read(b); err != nil {
		t.Fatalf("reply to find: %v", err)
	}

	start := time.Now()
	if _, err := a.Write(command(t, "hang")); err != nil {
		t.Fatal(err)
	}
	// Give a's command the proxy's lock, then queue b's behind it.
	waitFor(t, func() bool {
		if s.cmd.TryLock() {
			s.cmd.Unlock()
			return false
		}
		return true
	})
	if _, err := b.Write(command(t, "find")); err != nil {
		t.Fatal(err)
	}
	if _, err := wiremsg.Read(b); err != nil {
		t.Fatalf("reply to the queued find: %v", err)
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("the queued command was answered after %v, before the hung one timed out (%v)", took, timeout)
	}
	_, err = wiremsg.Read(a)
	var ne net.Error
	switch {
	case err == nil:
		t.Fatal("the hung command got a reply")
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatal("the hung command's connection was not closed")
	case !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET):
		t.Fatalf("reading the hung command's reply: %v, want the connection closed", err)
	}
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
