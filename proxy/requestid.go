package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// idGen makes request IDs: a random per-process prefix and a counter. IDs only
// need to be unique, not unpredictable, and this costs one allocation.
type idGen struct {
	prefix string
	n      atomic.Uint64
}

func newIDGen() *idGen {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &idGen{prefix: "fg-" + hex.EncodeToString(b[:]) + "-"}
}

func (g *idGen) next() string {
	var buf [48]byte
	out := append(buf[:0], g.prefix...)
	out = strconv.AppendUint(out, g.n.Add(1), 36)
	return string(out)
}
