package postgres

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestArrays decodes the arrays that fast encodes with pgtype, as the
// server would read them: empty, one element, several, odd strings.
func TestArrays(t *testing.T) {
	m := pgtype.NewMap()
	for _, strs := range [][]string{nil, {"a"}, {"likes:post:42", "", "é€😀", "x\ty'\"\\"}} {
		ints := make([]int64, len(strs))
		for i := range ints {
			ints[i] = int64(i*i) - 1<<62
		}
		buf, ta := textArray([]byte("junk"), len(strs), func(j int) string { return strs[j] })
		_, ia := int8Array(buf, len(ints), func(j int) int64 { return ints[j] })
		var gotS []string
		if err := m.Scan(pgtype.TextArrayOID, pgtype.BinaryFormatCode, ta, &gotS); err != nil {
			t.Fatal(err)
		}
		var gotI []int64
		if err := m.Scan(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, ia, &gotI); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(gotS, strs) || !slices.Equal(gotI, ints) {
			t.Errorf("%q %v: decoded %q %v", strs, ints, gotS, gotI)
		}
	}
}
