package mongotest

import (
	"bytes"
	"encoding/binary"
	"regexp"
	"strings"
	"testing"
)

func TestDatabaseName(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)
	for _, name := range []string{
		"TestX",
		"TestX/sub_test#01",
		"Test with spaces/and.dots$and\"quotes\\",
		strings.Repeat("TestLong/", 20),
		"/",
	} {
		a, b := databaseName(name), databaseName(name)
		if !valid.MatchString(a) {
			t.Errorf("databaseName(%q) = %q, not a valid name", name, a)
		}
		if a == b {
			t.Errorf("databaseName(%q) repeated %q", name, a)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"mongodb://localhost:27017/":                        "mongodb://localhost:27017/",
		"mongodb://user:secret@h1:1,h2:2/db?replicaSet=rs0": "mongodb://xxxxx@h1:1,h2:2/db?replicaSet=rs0",
		"mongodb+srv://u:p%40ss@cluster.example.net/":       "mongodb+srv://xxxxx@cluster.example.net/",
		"not a uri user:pw@host":                            "<redacted>",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func wireMessage(opCode int32, flags uint32) []byte {
	msg := make([]byte, 21)
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[12:], uint32(opCode))
	binary.LittleEndian.PutUint32(msg[16:], flags)
	return msg
}

func TestReadMessage(t *testing.T) {
	msg := wireMessage(opMsg, flagMoreToCome)
	got, err := readMessage(bytes.NewReader(append(msg, 0xff)))
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("readMessage = %x, %v; want %x", got, err, msg)
	}
	if !moreToCome(got) {
		t.Error("moreToCome = false for an OP_MSG with the flag")
	}
	if moreToCome(wireMessage(opMsg, 0)) || moreToCome(wireMessage(2004, flagMoreToCome)) {
		t.Error("moreToCome = true without an OP_MSG flag")
	}

	for _, size := range []uint32{0, 15, maxMessageLen + 1, 1 << 31} {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], size)
		if _, err := readMessage(bytes.NewReader(b[:])); err == nil {
			t.Errorf("readMessage accepted length %d", size)
		}
	}
	if _, err := readMessage(bytes.NewReader(msg[:10])); err == nil {
		t.Error("readMessage accepted a truncated message")
	}
}
