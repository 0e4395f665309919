package buffer

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// Constants of the string hash (those of wyhash).
const (
	hashM1 = 0xa0761d6478bd642f
	hashM2 = 0xe7037ed1a0b428db
)

// hashString returns a seeded 64-bit hash of s. It is wyhash's mixing
// (the portable hash the Go runtime uses where AES is missing): the bytes
// are read 8 at a time with unaligned loads, overlapping at the end, and
// folded with 64×64→128-bit multiplications. For the short keys counters
// have it costs about a third of hash/maphash.String, which calls the
// runtime's AES hash through two wrappers. The seed is
// random per Buffer, so an adversary who picks keys cannot aim them at
// one slot.
func hashString(seed uint64, s string) uint64 {
	n := len(s)
	p := unsafe.Pointer(unsafe.StringData(s))
	var a, b uint64
	switch {
	case n == 0:
		return mix(seed^hashM1, hashM2)
	case n < 4:
		a = uint64(*(*byte)(p))<<16 | uint64(*(*byte)(unsafe.Add(p, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(p, n-1)))
	case n <= 8:
		a = load32(p)<<32 | load32(unsafe.Add(p, n-4))
	case n <= 16:
		a = load64(p)
		b = load64(unsafe.Add(p, n-8))
	default:
		for n > 16 {
			seed = mix(load64(p)^hashM2, load64(unsafe.Add(p, 8))^seed)
			p = unsafe.Add(p, 16)
			n -= 16
		}
		// The last 16 bytes, overlapping what the loop read.
		a = load64(unsafe.Add(p, n-16))
		b = load64(unsafe.Add(p, n-8))
	}
	return mix(hashM2^uint64(len(s)), mix(a^hashM2, b^seed))
}

// mix folds the 128-bit product of a and b to 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// load64 and load32 read unaligned little-endian words; the compiler turns
// each into one load where the machine allows unaligned loads.
func load64(p unsafe.Pointer) uint64 { return binary.LittleEndian.Uint64((*[8]byte)(p)[:]) }
func load32(p unsafe.Pointer) uint64 { return uint64(binary.LittleEndian.Uint32((*[4]byte)(p)[:])) }
