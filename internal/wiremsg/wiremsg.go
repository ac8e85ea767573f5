// Package wiremsg reads MongoDB wire protocol messages off a connection,
// for the proxies in front of the test server (internal/embedded's
// serializer, internal/wirefault's rewriting proxy).
package wiremsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
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

// ErrMalformed reports a message that cannot be parsed.
var ErrMalformed = errors.New("wiremsg: malformed wire message")

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

// FoldMsg reads the flags and sections of an OP_MSG (src follows its
// header), folding every kind 1 document sequence into the body as an array
// named by its identifier: the command as the server sees it.
func FoldMsg(src []byte) (wiremessage.MsgFlag, bsoncore.Document, error) {
	flags, src, ok := wiremessage.ReadMsgFlags(src)
	if !ok {
		return 0, nil, ErrMalformed
	}
	if flags&wiremessage.ChecksumPresent != 0 {
		if len(src) < 4 {
			return 0, nil, ErrMalformed
		}
		src = src[:len(src)-4]
	}
	var body bsoncore.Document
	type sequence struct {
		id   string
		docs []bsoncore.Document
	}
	var seqs []sequence
	for len(src) > 0 {
		kind, rem, ok := wiremessage.ReadMsgSectionType(src)
		if !ok {
			return 0, nil, ErrMalformed
		}
		switch kind {
		case wiremessage.SingleDocument:
			if body != nil {
				return 0, nil, fmt.Errorf("%w: two body sections", ErrMalformed)
			}
			body, src, ok = wiremessage.ReadMsgSectionSingleDocument(rem)
		case wiremessage.DocumentSequence:
			var s sequence
			s.id, s.docs, src, ok = wiremessage.ReadMsgSectionDocumentSequence(rem)
			seqs = append(seqs, s)
		default:
			return 0, nil, fmt.Errorf("%w: section kind %d", ErrMalformed, kind)
		}
		if !ok {
			return 0, nil, ErrMalformed
		}
	}
	if body == nil {
		return 0, nil, fmt.Errorf("%w: no body section", ErrMalformed)
	}
	if err := body.Validate(); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(seqs) == 0 {
		return flags, body, nil
	}
	elems, err := body.Elements()
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	idx, doc := bsoncore.AppendDocumentStart(nil)
	for _, e := range elems {
		doc = append(doc, e...)
	}
	for _, s := range seqs {
		var aidx int32
		aidx, doc = bsoncore.AppendArrayElementStart(doc, s.id)
		for i, d := range s.docs {
			doc = bsoncore.AppendDocumentElement(doc, fmt.Sprint(i), d)
		}
		doc, _ = bsoncore.AppendArrayEnd(doc, aidx)
	}
	doc, _ = bsoncore.AppendDocumentEnd(doc, idx)
	if err := bsoncore.Document(doc).Validate(); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return flags, bsoncore.Document(doc), nil
}

// BuildMsg builds an OP_MSG with one body section.
func BuildMsg(requestID, responseTo int32, flags wiremessage.MsgFlag, doc bsoncore.Document) []byte {
	idx, dst := wiremessage.AppendHeaderStart(nil, requestID, responseTo, wiremessage.OpMsg)
	dst = wiremessage.AppendMsgFlags(dst, flags)
	dst = wiremessage.AppendMsgSectionType(dst, wiremessage.SingleDocument)
	dst = append(dst, doc...)
	return bsoncore.UpdateLength(dst, idx, int32(len(dst[idx:])))
}
