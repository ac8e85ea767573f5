// Package wirefault is a test-only MongoDB wire proxy whose rules make one
// server look like a deployment the tests cannot run: a mongos with its own
// clock, a sharded cluster that counts orphaned documents, FerretDB 2.x's
// error shapes and buildInfo, MongoDB 4.4 or 5.0 (their version, and a
// collMod that cannot make a plain index a TTL one), a server whose
// timestamps tie or go backwards, or whose clock is set back.
//
//	p, err := wirefault.Start(upstream, wirefault.Mongos(), wirefault.ClockOffset(time.Minute))
//	...
//	client, err := mongo.Connect(options.Client().SetHosts([]string{p.Addr()}).SetDirect(true))
//
// (mongotest.NewRewrittenClient does this for a test.)
//
// Each client connection gets its own upstream connection; requests on it
// go one at a time, so every reply is paired with its command. Rules see
// commands sent as OP_MSG (document sequences folded into the body as
// arrays) and the legacy OP_QUERY handshake, and their replies, including
// every reply of a streaming (exhaust) hello. A command or reply the rules
// leave alone is forwarded byte for byte. A rewritten OP_MSG goes out as one
// body section without a checksum, so it is bound by the 16 MB document
// limit rather than the 48 MB message limit. Other opcodes pass through
// untouched.
//
// What it does not do: it cannot read TLS, so rules need a plain connection.
// It removes the compressors a handshake offers, so that no message is
// compressed. It plays what a client sees, not the other deployment's
// semantics: Mongos does not route, Timestamps changes only what is stored.
//
// # Backends
//
// FerretDB 1.24 (the embedded server) accepts and ignores $readPreference and
// txnNumber, which the driver sends once Mongos makes the server a mongos, so
// Mongos forwards them. It answers a colliding findAndModify upsert with a
// top-level {ok: 0, code: 11000, codeName: "DuplicateKey"} as MongoDB does,
// and it implements no collMod.
package wirefault
