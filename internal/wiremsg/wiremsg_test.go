package wiremsg

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func message(opCode int32, flags uint32) []byte {
	msg := make([]byte, 21)
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[12:], uint32(opCode))
	binary.LittleEndian.PutUint32(msg[16:], flags)
	return msg
}

func TestReadMessage(t *testing.T) {
	msg := message(2013, flagMoreToCome)
	got, err := Read(bytes.NewReader(append(msg, 0xff)))
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("Read = %x, %v; want %x", got, err, msg)
	}
	if !MoreToCome(got) {
		t.Error("MoreToCome = false for an OP_MSG with the flag")
	}
	if MoreToCome(message(2013, 0)) || MoreToCome(message(2004, flagMoreToCome)) {
		t.Error("MoreToCome = true without an OP_MSG flag")
	}

	for _, size := range []uint32{0, 15, MaxLen + 1, 1 << 31} {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], size)
		if _, err := Read(bytes.NewReader(b[:])); err == nil {
			t.Errorf("Read accepted length %d", size)
		}
	}
	if _, err := Read(bytes.NewReader(msg[:10])); err == nil {
		t.Error("Read accepted a truncated message")
	}
}
