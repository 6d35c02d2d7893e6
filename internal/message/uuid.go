package message

import (
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
)

// NewID returns a random version-4 UUID: the id of a new event.
func NewID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails on Linux (getrandom)
	return formatV4(b)
}

// SeededID draws a version-4 UUID from rng, so that a seed fixes every id (load
// generation, tests).
func SeededID(rng *rand.Rand) string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return formatV4(b)
}

func formatV4(b [16]byte) string {
	b[6] = (b[6] & 0x0f) | 0x40 // version 4
	return format(b)
}

// format renders b as a lower-case hyphenated UUID with the RFC 4122 variant bits.
func format(b [16]byte) string {
	b[8] = (b[8] & 0x3f) | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], b[10:16])
	return string(out[:])
}
