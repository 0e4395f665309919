package regions

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hotcount/hotcount/durable"
)

// WireVersion is the version of the record format; a record of another
// version is refused (ErrWire), never misread.
const WireVersion = 1

// MaxVersionField is the largest Epoch, Lease or Seq a record may carry:
// the receiving script compares them as Lua numbers (doubles), exact up to
// 2^53.
const MaxVersionField = 1<<53 - 1

// maxMillis bounds the time of a record (Unix milliseconds), so that it
// converts to a time.Time and back.
const maxMillis = math.MaxInt64 / 2 / 1_000_000

// ErrWire: a record is malformed or of another WireVersion.
var ErrWire = errors.New("hotcount: malformed region record")

// Field names in a counter's region hash: "c:"+origin holds the origin's
// contribution, "f:"+origin the fence on it, fieldEpoch the local region's
// own clear epoch.
const (
	prefixContribution = "c:"
	prefixFence        = "f:"
	fieldEpoch         = "e"
)

// field returns the hash field of p.
func field(p durable.RegionPart) string {
	if p.Kind == durable.PartFence {
		return prefixFence + p.Origin
	}
	return prefixContribution + p.Origin
}

// Encode returns the wire form of p (without Key, Origin and Kind, which
// the hash key and field carry): "1:epoch:lease:seq:value:at_ms", all
// decimal. It is what a region's hash holds and what the receiving script
// compares.
func Encode(p durable.RegionPart) string {
	var b strings.Builder
	b.Grow(64)
	b.WriteString("1:")
	b.WriteString(strconv.FormatUint(p.Epoch, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(p.Lease, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(p.Seq, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(p.Value, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(p.At.UnixMilli(), 10))
	return b.String()
}

// Check reports whether p can be sent: valid key and origin, a known kind,
// version fields within MaxVersionField.
func Check(p durable.RegionPart) error {
	switch {
	case !durable.ValidKey(p.Key) || !ValidName(p.Origin):
		return fmt.Errorf("%w: key %q origin %q", ErrWire, p.Key, p.Origin)
	case p.Kind != durable.PartContribution && p.Kind != durable.PartFence:
		return fmt.Errorf("%w: kind %d", ErrWire, p.Kind)
	case p.Epoch > MaxVersionField || p.Lease > MaxVersionField || p.Seq > MaxVersionField:
		return fmt.Errorf("%w: version (%d, %d, %d) past 2^53", ErrWire, p.Epoch, p.Lease, p.Seq)
	}
	return nil
}

// Decode parses a hash field and its value back into a part of key.
func Decode(key, fieldName, value string) (durable.RegionPart, error) {
	p := durable.RegionPart{Key: key}
	switch {
	case strings.HasPrefix(fieldName, prefixContribution):
		p.Kind, p.Origin = durable.PartContribution, fieldName[len(prefixContribution):]
	case strings.HasPrefix(fieldName, prefixFence):
		p.Kind, p.Origin = durable.PartFence, fieldName[len(prefixFence):]
	default:
		return p, fmt.Errorf("%w: field %q", ErrWire, fieldName)
	}
	f := strings.Split(value, ":")
	if len(f) != 6 || f[0] != "1" {
		return p, fmt.Errorf("%w: %q", ErrWire, value)
	}
	var err [5]error
	p.Epoch, err[0] = strconv.ParseUint(f[1], 10, 64)
	p.Lease, err[1] = strconv.ParseUint(f[2], 10, 64)
	p.Seq, err[2] = strconv.ParseUint(f[3], 10, 64)
	p.Value, err[3] = strconv.ParseInt(f[4], 10, 64)
	var at int64
	at, err[4] = strconv.ParseInt(f[5], 10, 64)
	if e := errors.Join(err[:]...); e != nil {
		return p, fmt.Errorf("%w: %q: %w", ErrWire, value, e)
	}
	if at < -maxMillis || at > maxMillis {
		return p, fmt.Errorf("%w: time %d", ErrWire, at)
	}
	p.At = time.UnixMilli(at)
	if e := Check(p); e != nil {
		return p, e
	}
	return p, nil
}

// ValidName reports whether name can name a region: 1 to 64 bytes of
// letters, digits, '-' and '_'.
func ValidName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// fieldDeadline is the hash field of the counter's deadline register.
const fieldDeadline = "d"

// StampTTL is the Stamp of a deadline that a namespace ttl gave a counter
// at its first write in a region: below every Expire's and Persist's, and
// of two such deadlines the earlier wins (the counter expires ttl after
// its first write in any region).
const StampTTL = 1

// Deadline is a counter's deadline as the regions agree on it: a register
// that every region keeps in the counter's region hash and ships with the
// counter's contribution. Of two settings, the higher Stamp wins; of two of
// one Stamp, the earlier deadline (none counting as the latest).
type Deadline struct {
	// Stamp orders settings: the region cache's clock in ms when Expire or
	// Persist set it (raised above the stamp it replaces), or StampTTL.
	// Zero: no register.
	Stamp uint64
	// At is the deadline; zero: none (a Persist).
	At time.Time
}

// Set reports whether d holds a register.
func (d Deadline) Set() bool { return d.Stamp != 0 }

// Passed reports whether d's deadline is at or before now.
func (d Deadline) Passed(now time.Time) bool { return !d.At.IsZero() && !now.Before(d.At) }

// expiredEpoch is the own epoch a counter takes when deadline at passes
// (a clear at at): above every epoch a clear before at gave it
// (2 × its ms + 2).
func expiredEpoch(at time.Time) uint64 { return 2*uint64(max(at.UnixMilli(), 0)) + 2 }

// encodeDeadline returns the wire form of d: "stamp:at_ms" (at 0: none).
func encodeDeadline(d Deadline) string {
	ms := int64(0)
	if !d.At.IsZero() {
		ms = d.At.UnixMilli()
	}
	return strconv.FormatUint(d.Stamp, 10) + ":" + strconv.FormatInt(ms, 10)
}

// decodeDeadline parses the wire form of a deadline register.
func decodeDeadline(v string) (Deadline, error) {
	s, at, ok := strings.Cut(v, ":")
	stamp, err1 := strconv.ParseUint(s, 10, 64)
	ms, err2 := strconv.ParseInt(at, 10, 64)
	if !ok || err1 != nil || err2 != nil || stamp == 0 || stamp > MaxVersionField || ms < 0 || ms > maxMillis {
		return Deadline{}, fmt.Errorf("%w: deadline %q", ErrWire, v)
	}
	d := Deadline{Stamp: stamp}
	if ms != 0 {
		d.At = time.UnixMilli(ms)
	}
	return d, nil
}
