// Package wiremsg reads MongoDB wire protocol messages off a connection,
// for the proxies in front of the test server (internal/embedded's
// serializer, internal/wirefault's rewriting proxy).
package wiremsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	// HeaderLen is the length of a message header: messageLength,
	// requestID, responseTo, opCode.
	HeaderLen = 16
	// MaxLen bounds a message: above MongoDB's maxMessageSizeBytes (48 MB).
	MaxLen = 64 << 20

	opMsg          = 2013
	flagMoreToCome = 1 << 1
)

// ErrLength reports a message whose length prefix is out of bounds.
var ErrLength = errors.New("wiremsg: bad wire message length")

// Read reads one length-prefixed wire message. A message cut short is
// io.ErrUnexpectedEOF; a clean end before it began is io.EOF.
func Read(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.LittleEndian.Uint32(size[:]))
	if n < HeaderLen || n > MaxLen {
		return nil, fmt.Errorf("%w: %d", ErrLength, n)
	}
	msg := make([]byte, n)
	copy(msg, size[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return msg, nil
}

// MoreToCome reports whether msg is an OP_MSG with the moreToCome flag: a
// request that gets no reply, or a reply that more replies follow.
func MoreToCome(msg []byte) bool {
	if len(msg) < HeaderLen+4 || int32(binary.LittleEndian.Uint32(msg[12:16])) != opMsg {
		return false
	}
	return binary.LittleEndian.Uint32(msg[16:20])&flagMoreToCome != 0
}
