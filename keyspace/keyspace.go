// Package keyspace names sub-counters and computes Redis Cluster slots.
//
// A counter key K with N sub-counters is stored as the sub-keys
// "{K#L}" for each label L. Each sub-key carries its own hash tag, so each
// lands in the slot of "K#L" and different labels spread over the cluster's
// nodes, while auxiliary keys that guard one sub-counter (fold markers,
// flush tokens) can share its slot by reusing the tag: "{K#L}:tok:…".
//
// Slots follow the Redis Cluster specification: CRC16 (XMODEM: polynomial
// 0x1021, initial value 0) of the key, or of the part between the first "{"
// and the next "}" when that part is not empty, modulo 16384.
//
// Validate enforces the input rules for counter keys: 1 to MaxKeyLen bytes
// of valid UTF-8, no control characters, and no braces, so a user key can
// never forge or break a hash tag. "#" is allowed: the label is always the
// text after the last "#" inside the tag.
package keyspace

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

// MaxKeyLen is the longest counter key, in bytes.
const MaxKeyLen = 512

// MaxN is the largest number of sub-counters (labels) a counter may have.
const MaxN = 1024

// ColdLabel is the label of the one sub-counter of a cold counter,
// "{K#0}". Every counter's read set includes it and a write to it is
// always counted, so a writer that does not know a counter's labels yet
// can always send its increment there.
const ColdLabel = "0"

// ErrInvalidKey is wrapped by every key rejection; the wrapped message says
// which rule the key broke.
var ErrInvalidKey = errors.New("hotcount: invalid key")

// Validate reports whether key is a legal counter key. The error wraps
// ErrInvalidKey and names the rule that failed.
func Validate(key string) error {
	if validASCII(key) {
		return nil
	}
	return validate(key)
}

// validate is Validate's full check.
func validate(key string) error {
	switch {
	case len(key) == 0:
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalidKey)
	}
	for i, r := range key {
		switch {
		case r == '{' || r == '}':
			return fmt.Errorf("%w: key contains %q at byte %d (braces are reserved for hash tags)", ErrInvalidKey, r, i)
		case unicode.IsControl(r):
			return fmt.Errorf("%w: key contains control character %U at byte %d", ErrInvalidKey, r, i)
		}
	}
	return nil
}

// validASCII reports whether key is a legal counter key made of ASCII
// alone: one pass over its bytes, where Validate's full check decodes
// runes. It is false for every other key, legal or not, which Validate
// then checks in full.
func validASCII(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		// ASCII control characters are 0x00–0x1F and 0x7F.
		if c := key[i]; c < 0x20 || c >= 0x7f || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// Tag returns the hash tag content of the sub-counter with the given label:
// "K#L". Every key that guards that sub-counter embeds "{"+Tag+"}".
func Tag(key, label string) string { return key + "#" + label }

// SubKey returns the cache key of one sub-counter: "{K#L}".
func SubKey(key, label string) string { return "{" + key + "#" + label + "}" }

// AuxKey returns an auxiliary key co-located with the sub-counter (same hash
// tag, so same slot): "{K#L}:kind:id". id may be empty.
func AuxKey(key, label, kind, id string) string {
	if id == "" {
		return SubKey(key, label) + ":" + kind
	}
	return SubKey(key, label) + ":" + kind + ":" + id
}

// SeqKey returns the hash that records, per writer, the last flush
// sequence applied to a sub-counter: "{K#L}:seq", in the sub-counter's
// slot.
func SeqKey(key, label string) string { return SubKey(key, label) + ":seq" }

// MarkKey returns the record mark of a counter: "{K#0}:rec", in the slot
// of its cold sub-counter. It exists whenever the counter has a metadata
// record (see package meta), so that an increment of the cold sub-counter
// can tell, in the same round trip to the same node, whether the counter
// is cold: no mark, no record.
func MarkKey(key string) string { return SubKey(key, ColdLabel) + ":rec" }

// MetaKey returns the key of a counter's metadata: "{K#meta}". It has its
// own tag so it is placed like a sub-counter named "meta".
func MetaKey(key string) string { return "{" + key + "#meta}" }

// ParseSubKey splits a sub-key "{K#L}" into its counter key and label.
func ParseSubKey(sub string) (key, label string, ok bool) {
	if len(sub) < 4 || sub[0] != '{' || sub[len(sub)-1] != '}' {
		return "", "", false
	}
	inner := sub[1 : len(sub)-1]
	i := strings.LastIndexByte(inner, '#')
	if i <= 0 || i == len(inner)-1 {
		return "", "", false
	}
	key, label = inner[:i], inner[i+1:]
	if Validate(key) != nil {
		return "", "", false
	}
	return key, label, true
}

// NaiveLabels returns the labels "0" … "n-1".
func NaiveLabels(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// Slot returns the Redis Cluster hash slot of a key, honouring hash tags.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return CRC16(key) % SlotCount
}

// CRC16 is the CRC16-CCITT (XMODEM) checksum that Redis Cluster uses.
func CRC16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
