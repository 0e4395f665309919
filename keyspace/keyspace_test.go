package keyspace

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCRC16SpecVector(t *testing.T) {
	// The Redis Cluster specification: CRC16 of "123456789" is 0x31C3.
	if got := CRC16("123456789"); got != 0x31C3 {
		t.Fatalf("CRC16(123456789) = %#x, want 0x31c3", got)
	}
}

func TestSlot(t *testing.T) {
	cases := []struct {
		key  string
		same string // a key that must share the slot, or ""
		slot int    // expected slot, or -1
	}{
		{"foo", "", 12182},
		{"somekey", "", 11058},
		{"foo{hash_tag}", "hash_tag", 2515},
		{"{user1000}.following", "{user1000}.followers", -1},
		{"foo{}{bar}", "", int(CRC16("foo{}{bar}") % SlotCount)}, // empty tag: whole key
		{"foo{{bar}}zap", "{bar", -1},                            // tag is "{bar"
		{"foo{bar}{zap}", "bar", -1},                             // first tag only
		{"{k#3}", "k#3", -1},
		{"{k#3}:tok:abc", "{k#3}", -1},
		{"no}close{", "no}close{", -1},
	}
	for _, tc := range cases {
		got := Slot(tc.key)
		if tc.slot >= 0 && int(got) != tc.slot {
			t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.slot)
		}
		if tc.same != "" && got != Slot(tc.same) {
			t.Errorf("Slot(%q) = %d, Slot(%q) = %d, want equal", tc.key, got, tc.same, Slot(tc.same))
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		key string
		ok  bool
	}{
		{"likes:post:42", true},
		{"a", true},
		{strings.Repeat("x", MaxKeyLen), true},
		{"ünïcødé:😀", true},
		{"with#hash", true},
		{"with space", true},
		{"", false},
		{strings.Repeat("x", MaxKeyLen+1), false},
		{"bad\xff", false},
		{"tab\t", false},
		{"nul\x00", false},
		{"del\x7f", false},
		{"c1\u0080", false},
		{"{tag}", false},
		{"a}", false},
	}
	for _, tc := range cases {
		err := Validate(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", tc.key, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Validate(%q) error %v does not wrap ErrInvalidKey", tc.key, err)
		}
	}
}

// TestValidASCII: Validate's one-pass check accepts a key only when the
// full check does, and every legal key of ASCII alone.
func TestValidASCII(t *testing.T) {
	for c := range 256 {
		for _, k := range []string{string(rune(c)), "a" + string([]byte{byte(c)}) + "b", string([]byte{byte(c)})} {
			full := validate(k) == nil
			if fast := validASCII(k); fast && !full || !fast && full && isASCII(k) {
				t.Errorf("validASCII(%q) = %v, full check ok=%v", k, fast, full)
			}
		}
	}
	for _, k := range []string{"", strings.Repeat("x", MaxKeyLen), strings.Repeat("x", MaxKeyLen+1)} {
		if validASCII(k) != (validate(k) == nil) {
			t.Errorf("validASCII of a %d-byte key disagrees with the full check", len(k))
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func TestNaming(t *testing.T) {
	if got := SubKey("likes:post:42", "3"); got != "{likes:post:42#3}" {
		t.Fatalf("SubKey = %q", got)
	}
	if got := AuxKey("k", "3", "tok", "ab"); got != "{k#3}:tok:ab" || Slot(got) != Slot(SubKey("k", "3")) {
		t.Fatalf("AuxKey = %q (slot %d vs %d)", got, Slot(got), Slot(SubKey("k", "3")))
	}
	if got := AuxKey("k", "3", "fold", ""); got != "{k#3}:fold" {
		t.Fatalf("AuxKey without id = %q", got)
	}
	if got := MetaKey("k"); got != "{k#meta}" {
		t.Fatalf("MetaKey = %q", got)
	}
	k, l, ok := ParseSubKey("{a#b#7}")
	if !ok || k != "a#b" || l != "7" {
		t.Fatalf("ParseSubKey = %q %q %v", k, l, ok)
	}
	for _, bad := range []string{"", "{}", "{#1}", "{a#}", "a#1", "{a1}", "{a{b#1}"} {
		if _, _, ok := ParseSubKey(bad); ok {
			t.Errorf("ParseSubKey(%q) accepted", bad)
		}
	}
	if got := NaiveLabels(3); strings.Join(got, ",") != "0,1,2" {
		t.Fatalf("NaiveLabels = %v", got)
	}
}

func FuzzSubKey(f *testing.F) {
	for _, s := range []string{"likes:post:42", "a#b", "", "{x}", "ü", "a\x00"} {
		f.Add(s, "3")
	}
	f.Fuzz(func(t *testing.T, key, label string) {
		if Validate(key) != nil {
			return
		}
		if len(key) == 0 || len(key) > MaxKeyLen || !utf8.ValidString(key) || strings.ContainsAny(key, "{}") {
			t.Fatalf("Validate accepted %q", key)
		}
		if label == "" || strings.ContainsAny(label, "{}#") {
			return
		}
		sub := SubKey(key, label)
		k, l, ok := ParseSubKey(sub)
		if !ok || k != key || l != label {
			t.Fatalf("round trip of %q/%q: %q %q %v", key, label, k, l, ok)
		}
		tag := Slot(Tag(key, label))
		if Slot(sub) != tag || Slot(AuxKey(key, label, "tok", "x")) != tag {
			t.Fatalf("sub-key %q and its aux key are not in the tag's slot", sub)
		}
	})
}
