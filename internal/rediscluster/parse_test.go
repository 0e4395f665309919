package rediscluster

import (
	"bufio"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	for _, tc := range []struct {
		in      string
		text    string
		wantErr error
	}{
		{"+OK\r\n", "OK", nil},
		{":-42\r\n", "-42", nil},
		{"$3\r\nbar\r\n", "bar", nil},
		{"$0\r\n\r\n", "", nil},
		{"$5\r\na\r\nb\r\r\n", "a\r\nb\r", nil},
		{"$-1\r\n", "", ErrNil},
		{"*-1\r\n", "", ErrNil},
		{"*2\r\n$1\r\na\r\n:2\r\n", "a\n2", nil},
		{"*2\r\n*1\r\n+x\r\n$1\r\ny\r\n", "x\ny", nil},
		{"-ERR unknown command\r\n", "", ErrReply},
		{"-MOVED 3999 127.0.0.1:7001\r\n", "", ErrReply},
	} {
		r, err := readReply(bufio.NewReader(strings.NewReader(tc.in)), 0)
		if err != nil {
			t.Errorf("readReply(%q): %v", tc.in, err)
			continue
		}
		if err := r.err(); !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
			t.Errorf("readReply(%q).err() = %v, want %v", tc.in, err, tc.wantErr)
		}
		if tc.wantErr == nil && r.text() != tc.text {
			t.Errorf("readReply(%q).text() = %q, want %q", tc.in, r.text(), tc.text)
		}
	}
	for _, bad := range []string{"", "+OK", "+OK\n", "?x\r\n", "$x\r\n", "$-2\r\n", "$3\r\nab", "*x\r\n", "*2\r\n+a\r\n", "$222222222222220\r\n", "$536870913\r\n", "*222222222222220\r\n+a\r\n", "$3\r\nabcde"} {
		if _, err := readReply(bufio.NewReader(strings.NewReader(bad)), 0); err == nil {
			t.Errorf("readReply(%q) accepted", bad)
		}
	}
	deep := strings.Repeat("*1\r\n", maxReplyDepth+2) + "+x\r\n"
	if _, err := readReply(bufio.NewReader(strings.NewReader(deep)), 0); !errors.Is(err, ErrProtocol) {
		t.Errorf("deep nesting: %v, want ErrProtocol", err)
	}
}

func FuzzReadReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "$3\r\nbar\r\n", "*2\r\n$1\r\na\r\n:2\r\n", "-ERR x\r\n", "$-1\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r, err := readReply(bufio.NewReader(strings.NewReader(in)), 0)
		if err == nil {
			_ = r.text()
			_ = r.err()
		}
	})
}

func TestParseCommandStats(t *testing.T) {
	in := "# Commandstats\r\n" +
		"cmdstat_incrby:calls=12,usec=40,usec_per_call=3.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_GET:calls=3,usec=4,usec_per_call=1.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_cluster|nodes:calls=7,usec=9,usec_per_call=1.2,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"incrby": 12, "get": 3, "cluster|nodes": 7}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseCommandStats = %v, want %v", got, want)
	}
	for _, bad := range []string{"cmdstat_get\r\n", "cmdstat_get:usec=1\r\n", "cmdstat_get:calls=x\r\n"} {
		if _, err := parseCommandStats(bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("parseCommandStats(%q) = %v, want ErrProtocol", bad, err)
		}
	}
}

func TestParseClusterNodes(t *testing.T) {
	in := "" +
		"07c3 127.0.0.1:30004@31004 slave e7d1 0 1426238317239 4 connected\n" +
		"67ed 127.0.0.1:30002@31002,host-b master - 0 1426238316232 2 connected 5461-10922\n" +
		"292f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383\n" +
		"6ec2 127.0.0.1:30005@31005 master,fail 67ed 1426238316232 1426238315232 5 connected\n" +
		"e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5459 5460 [5461->-67ed]\n" +
		"garbage\n"
	es := parseClusterNodes(in)
	if len(es) != 5 {
		t.Fatalf("parsed %d entries, want 5", len(es))
	}
	me, ok := myself(es)
	if !ok || me.id != "e7d1" || me.addr != "127.0.0.1:30001" || me.slotText() != "0-5459,5460" {
		t.Errorf("myself = %+v", me)
	}
	if es[1].addr != "127.0.0.1:30002" {
		t.Errorf("address with hostname parsed as %q", es[1].addr)
	}
	if got := primariesOf(es); !reflect.DeepEqual(got, []string{"127.0.0.1:30001", "127.0.0.1:30002", "127.0.0.1:30003"}) {
		t.Errorf("primariesOf = %v", got)
	}
	sig, owners := slotOwners(es)
	if sig != "0-5459=e7d1 5460-5460=e7d1 5461-10922=67ed 10923-16383=292f " || len(owners) != 3 {
		t.Errorf("slotOwners = %q, %v", sig, owners)
	}
	if !es[3].has("fail") || es[3].has("myself") {
		t.Errorf("flags of %+v", es[3])
	}
}
