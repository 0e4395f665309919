package sqlkit

import (
	"math"
	"math/big"
	"sync/atomic"
)

// Bounds of the cheap overflow check (see the package documentation).
const (
	// FastBound: a key whose bound, this batch included, is at most
	// FastBound needs no exact check.
	FastBound = 1 << 62
	// FastDelta: the most sum of |Delta| one batch may bring to a key
	// without an exact check.
	FastDelta = 1 << 40
	// Stripes is the number of bounds rows a key may have.
	Stripes = 16
)

// Fast reports whether a key with rollup total total, bound rows summing
// to mag (this batch not included) and abs brought by this batch needs no
// exact check.
func Fast(total, mag, abs int64) bool {
	if abs > FastDelta {
		return false
	}
	b := new(big.Int).Abs(big.NewInt(total))
	b.Add(b, big.NewInt(mag))
	b.Add(b, big.NewInt(abs))
	return b.Cmp(big.NewInt(FastBound)) <= 0
}

// Stripe hands out stripe numbers: consecutive calls get consecutive
// stripes, from a random start, so that the concurrent batches of one
// process write distinct bounds rows.
type Stripe struct{ n atomic.Uint32 }

// NewStripe returns a Stripe starting at start.
func NewStripe(start uint32) *Stripe {
	s := &Stripe{}
	s.n.Store(start)
	return s
}

// Next returns the next stripe, in [0, Stripes).
func (s *Stripe) Next() int { return int(s.n.Add(1) % Stripes) }

// Clamp returns v as an int64 saturated to [0, math.MaxInt64] (for bounds).
func Clamp(v *big.Int) int64 {
	switch {
	case v.Sign() <= 0:
		return 0
	case !v.IsInt64():
		return math.MaxInt64
	}
	return v.Int64()
}
