package embedded

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongoutil"
)

// TestProbe: a client of the proxy learns that it talks to FerretDB 1.x
// with commands serialized; one connected to FerretDB directly, that they
// are not.
func TestProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	s.proxy.mu.Lock()
	backend := s.proxy.backend
	s.proxy.mu.Unlock()

	for _, tc := range []struct {
		name, addr string
		serialized bool
	}{{"proxy", s.Addr(), true}, {"FerretDB directly", backend, false}} {
		c, err := mongo.Connect(options.Client().SetHosts([]string{tc.addr}).SetDirect(true).
			SetServerSelectionTimeout(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		dep, err := mongoutil.Probe(ctx, c.Database("probe"))
		_ = c.Disconnect(ctx)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := mongoutil.Deployment{FerretDB1: true, FerretDBVersion: dep.FerretDBVersion, Serialized: tc.serialized}
		if dep != want || dep.FerretDBVersion == "" {
			t.Errorf("%s: probe %+v, want %+v with a version", tc.name, dep, want)
		}
	}
}

func TestSerializedReply(t *testing.T) {
	req := command(t, mongoutil.SerializedCommand)
	binary.LittleEndian.PutUint32(req[4:], 42) // requestID
	reply := serializedReply(req)
	if len(reply) < headerLen+5 || int(binary.LittleEndian.Uint32(reply)) != len(reply) ||
		binary.LittleEndian.Uint32(reply[8:]) != 42 || binary.LittleEndian.Uint32(reply[12:]) != opMsg {
		t.Fatalf("reply header % x", reply)
	}
	var doc bson.D
	if err := bson.Unmarshal(reply[headerLen+5:], &doc); err != nil || len(doc) != 1 || doc[0].Key != "ok" || doc[0].Value != 1.0 {
		t.Errorf("reply body %v %v", doc, err)
	}
	for _, other := range [][]byte{command(t, "hello"), command(t, "find"), wireMessage(2004, 0),
		wireMessage(opMsg, 1<<1)} {
		if serializedReply(other) != nil {
			t.Errorf("answered % x", other)
		}
	}
}
