package mem

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hotcount/hotcount/store"
)

// The append-only file.
//
// With Config.AOF set, every change the store makes is appended to a file
// as the full new state of what it changed: a key's value and deadline (or
// its removal), a token's or a writer sequence's expiry, a metadata record
// and its expiry. A call that changed something returns only after its
// records were written to the file, so what the store acknowledged
// survives a SIGKILL of the process. When the file is fsynced is
// Config.AOFSync, as Redis's appendfsync: SyncEverySec (the default)
// fsyncs once a second in the background, so a crash of the machine (not
// of the process) loses at most about the last second; SyncAlways fsyncs
// before every acknowledgement, so not even that is lost, at a cost that
// BenchmarkEmbeddedAOF measures. Concurrent calls share one write (and
// one fsync): the first caller to find no write under way writes
// everything appended so far, and every caller whose records it covered
// returns with it (group commit).
//
// Open replays the file into an empty store. Records are states, not
// operations, so replaying one twice changes nothing, and deadlines and
// expiries are absolute, so what expired while the process was down reads
// as expired. Sentinels, store marks, flush tokens, fold markers and
// metadata are replayed like counters: a restart on the file is not a lost
// node, and nothing is restored twice. A record cut short by a kill while
// it was being written (never acknowledged) is dropped. Open then rewrites
// the file as one snapshot of the live state, and the store rewrites it
// again whenever it grows past twice its last snapshot plus
// aofRewriteSlack, holding every node while it does.

// AOF fsync policies (Config.AOFSync).
const (
	// SyncEverySec fsyncs the file once a second: a machine crash loses
	// at most about a second of acknowledged changes, a killed process
	// nothing. The default.
	SyncEverySec = "everysec"
	// SyncAlways fsyncs before every acknowledgement.
	SyncAlways = "always"
)

// aofRewriteSlack is how much the file may grow past twice its last
// snapshot before it is rewritten.
const aofRewriteSlack = 64 << 20

// Record kinds.
const (
	recInt   = 'I' // key, value, deadline ms (0: none)
	recDel   = 'D' // key
	recToken = 'T' // token key, expiry ms
	recSeq   = 'Q' // sequence field, last, expiry ms
	recMeta  = 'M' // counter key, record (empty: none), expiry ms
	recNodes = 'N' // "", node count, 0: the first record of a snapshot
)

// journal is the append-only file of a Store.
type journal struct {
	path   string
	always bool          // fsync before acknowledging
	stop   chan struct{} // ends the once-a-second fsync
	done   chan struct{}

	mu      sync.Mutex
	cond    *sync.Cond
	f       *os.File
	buf     []byte // appended, not written yet
	spare   []byte
	seq     uint64 // records appended
	synced  uint64 // records written and synced
	syncing bool
	err     error // a failed write or sync: the journal is broken
	size    int64 // bytes in the file
	base    int64 // size of the last snapshot
	dirty   bool  // written since the last fsync
}

// ErrAOF: the append-only file could not be written or read.
var ErrAOF = errors.New("mem: append-only file")

// NodesError is the error of Open (wrapped in ErrAOF) when the
// append-only file was written by a store of another number of nodes
// (Config.Nodes): its sentinels would be taken for lost nodes, and the
// checkpoints added to the replayed values again.
type NodesError struct {
	Written int // the nodes of the store that wrote the file
	Nodes   int // the nodes of this store
}

func (e *NodesError) Error() string {
	return fmt.Sprintf("it was written by a store of %d nodes, this one has %d: start with the same number of nodes", e.Written, e.Nodes)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// add appends one record and returns its sequence number; callers hold
// the lock of what the record describes, so records of one key are in
// the order of its changes.
func (j *journal) add(rec []byte) uint64 {
	j.mu.Lock()
	j.buf = append(j.buf, rec...)
	j.seq++
	s := j.seq
	j.mu.Unlock()
	return s
}

// sync returns once every record up to seq is written and synced.
func (j *journal) sync(seq uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.synced < seq && j.err == nil {
		if j.syncing {
			j.cond.Wait()
			continue
		}
		j.syncing = true
		buf, target := j.buf, j.seq
		j.buf = j.spare[:0]
		j.mu.Unlock()
		n, err := j.f.Write(buf)
		if err == nil && j.always {
			err = j.f.Sync()
		}
		j.mu.Lock()
		j.spare = buf[:0]
		j.syncing = false
		j.size += int64(n)
		j.dirty = j.dirty || !j.always
		if err != nil {
			j.err = fmt.Errorf("%w: %w", ErrAOF, err)
		} else {
			j.synced = target
		}
		j.cond.Broadcast()
	}
	if j.err != nil {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, j.err)
	}
	return nil
}

// everySec fsyncs the file once a second while it has unsynced writes,
// until stop is closed.
func (j *journal) everySec() {
	defer close(j.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
		}
		j.mu.Lock()
		for j.syncing {
			j.cond.Wait()
		}
		if !j.dirty || j.f == nil || j.err != nil {
			j.mu.Unlock()
			continue
		}
		j.syncing, j.dirty = true, false
		f := j.f
		j.mu.Unlock()
		err := f.Sync()
		j.mu.Lock()
		j.syncing = false
		if err != nil {
			j.err = fmt.Errorf("%w: %w", ErrAOF, err)
		}
		j.cond.Broadcast()
		j.mu.Unlock()
	}
}

// needsRewrite reports whether the file outgrew its last snapshot.
func (j *journal) needsRewrite() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err == nil && j.size > 2*j.base+aofRewriteSlack
}

// record encoders; each returns the record.

func intRec(key string, v int64, at time.Time) []byte {
	b := append(make([]byte, 0, len(key)+24), recInt)
	b = appendString(b, key)
	b = binary.AppendVarint(b, v)
	return binary.AppendVarint(b, ms(at))
}

func delRec(key string) []byte {
	return appendString([]byte{recDel}, key)
}

func tokenRec(key string, exp time.Time) []byte {
	b := appendString([]byte{recToken}, key)
	return binary.AppendVarint(b, ms(exp))
}

func seqRec(field string, e seqEntry) []byte {
	b := appendString([]byte{recSeq}, field)
	b = binary.AppendUvarint(b, e.last)
	return binary.AppendVarint(b, ms(e.exp))
}

func metaRec(key string, data []byte, exp time.Time) []byte {
	b := appendString([]byte{recMeta}, key)
	b = appendString(b, string(data))
	return binary.AppendVarint(b, ms(exp))
}

// logKey journals key's current state; caller holds nd.mu. It returns the
// record's sequence number (0 without a journal).
func (nd *node) logKey(key string) uint64 {
	if nd.j == nil {
		return 0
	}
	if v, ok := nd.ints[key]; ok {
		return nd.j.add(intRec(key, v, nd.exp[key]))
	}
	return nd.j.add(delRec(key))
}

// logToken journals a token's expiry; caller holds nd.mu.
func (nd *node) logToken(key string) uint64 {
	if nd.j == nil {
		return 0
	}
	return nd.j.add(tokenRec(key, nd.tokens[key]))
}

// logSeq journals a writer sequence; caller holds nd.mu.
func (nd *node) logSeq(field string) uint64 {
	if nd.j == nil {
		return 0
	}
	return nd.j.add(seqRec(field, nd.seqs[field]))
}

// durable waits until the records up to seq are synced (nothing without
// a journal or records), and rewrites the file when it outgrew its
// snapshot.
func (s *Store) durable(seq uint64) error {
	if s.j == nil || seq == 0 {
		return nil
	}
	if err := s.j.sync(seq); err != nil {
		return err
	}
	if s.j.needsRewrite() {
		return s.rewrite()
	}
	return nil
}

// replay applies the records of r to the empty store and returns the
// length of the records read whole.
func (s *Store) replay(r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var good int64
	t := s.metaTable()
	for {
		rec, n, err := readRecord(br)
		if errors.Is(err, io.EOF) {
			return good, nil
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return good, nil // a record cut short by a kill: never acknowledged
		}
		if err != nil {
			return good, err
		}
		good += n
		switch rec.kind {
		case recNodes:
			if int(rec.v) != len(s.nodes) {
				return good, &NodesError{Written: int(rec.v), Nodes: len(s.nodes)}
			}
		case recInt, recDel, recToken, recSeq:
			nd := s.nodeOf(rec.key)
			switch rec.kind {
			case recInt:
				nd.ints[rec.key] = rec.v
				if rec.at.IsZero() {
					delete(nd.exp, rec.key)
				} else {
					nd.exp[rec.key] = rec.at
				}
			case recDel:
				delete(nd.ints, rec.key)
				delete(nd.exp, rec.key)
			case recToken:
				nd.tokens[rec.key] = rec.at
			case recSeq:
				nd.seqs[rec.key] = seqEntry{last: uint64(rec.v), exp: rec.at}
			}
		case recMeta:
			if len(rec.data) == 0 {
				delete(t.recs, rec.key)
				delete(t.exp, rec.key)
				continue
			}
			t.recs[rec.key] = rec.data
			if rec.at.IsZero() {
				delete(t.exp, rec.key)
			} else {
				t.exp[rec.key] = rec.at
			}
		}
	}
}

type record struct {
	kind byte
	key  string
	v    int64
	at   time.Time
	data []byte
}

// countingReader counts the bytes a record took.
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

func (c *countingReader) bytes(n uint64) ([]byte, error) {
	if n > 1<<30 {
		return nil, fmt.Errorf("%w: a field of %d bytes", ErrAOF, n)
	}
	b := make([]byte, n)
	k, err := io.ReadFull(c.r, b)
	c.n += int64(k)
	return b, err
}

// readRecord reads one record; io.EOF at a record boundary, and
// io.ErrUnexpectedEOF inside one.
func readRecord(br *bufio.Reader) (record, int64, error) {
	c := &countingReader{r: br}
	kind, err := c.ReadByte()
	if err != nil {
		return record{}, 0, err
	}
	short := func(err error) (record, int64, error) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return record{}, 0, err
	}
	str := func() ([]byte, error) {
		n, err := binary.ReadUvarint(c)
		if err != nil {
			return nil, err
		}
		return c.bytes(n)
	}
	key, err := str()
	if err != nil {
		return short(err)
	}
	rec := record{kind: kind, key: string(key)}
	switch kind {
	case recInt:
		if rec.v, err = binary.ReadVarint(c); err != nil {
			return short(err)
		}
	case recDel:
		return rec, c.n, nil
	case recNodes:
		if rec.v, err = binary.ReadVarint(c); err != nil {
			return short(err)
		}
	case recToken:
	case recSeq:
		u, err := binary.ReadUvarint(c)
		if err != nil {
			return short(err)
		}
		rec.v = int64(u)
	case recMeta:
		if rec.data, err = str(); err != nil {
			return short(err)
		}
	default:
		return record{}, 0, fmt.Errorf("%w: unknown record kind %q", ErrAOF, kind)
	}
	at, err := binary.ReadVarint(c)
	if err != nil {
		return short(err)
	}
	rec.at = fromMS(at)
	return rec, c.n, nil
}

// snapshot returns the records of the whole live state; every node lock
// and the metadata lock are held.
func (s *Store) snapshot(now time.Time) []byte {
	b := appendString([]byte{recNodes}, "")
	b = binary.AppendVarint(b, int64(len(s.nodes)))
	b = binary.AppendVarint(b, 0)
	for _, nd := range s.nodes {
		for k, v := range nd.ints {
			if at, has := nd.exp[k]; has && !now.Before(at) {
				continue
			}
			b = append(b, intRec(k, v, nd.exp[k])...)
		}
		for k, exp := range nd.tokens {
			if now.Before(exp) {
				b = append(b, tokenRec(k, exp)...)
			}
		}
		for k, e := range nd.seqs {
			if now.Before(e.exp) {
				b = append(b, seqRec(k, e)...)
			}
		}
	}
	t := &s.meta
	for k, data := range t.recs {
		exp, has := t.exp[k]
		if has && !now.Before(exp) {
			continue
		}
		b = append(b, metaRec(k, data, exp)...)
	}
	return b
}

// rewrite replaces the file with one snapshot of the live state, holding
// every node, so that no change falls between the snapshot and the file.
func (s *Store) rewrite() error {
	for _, nd := range s.nodes {
		nd.mu.Lock()
	}
	t := s.metaTable()
	t.mu.Lock()
	j := s.j
	j.mu.Lock()
	defer func() {
		j.mu.Unlock()
		t.mu.Unlock()
		for _, nd := range s.nodes {
			nd.mu.Unlock()
		}
	}()
	for j.syncing {
		j.cond.Wait()
	}
	if j.err != nil {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, j.err)
	}
	f, size, err := writeSnapshot(j.path, s.snapshot(s.now()))
	if err != nil {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	if j.f != nil {
		j.f.Close()
	}
	// Everything appended so far is in the snapshot.
	j.f, j.size, j.base, j.dirty = f, size, size, false
	j.buf = j.buf[:0]
	j.synced = j.seq
	j.cond.Broadcast()
	return nil
}

// writeSnapshot writes data to a new file beside path, syncs it, renames
// it over path, syncs the folder, and returns the file open for appending.
func writeSnapshot(path string, data []byte) (*os.File, int64, error) {
	tmp := path + ".rewrite"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrAOF, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, 0, fmt.Errorf("%w: %w", ErrAOF, err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%w: %w", ErrAOF, err)
	}
	return f, int64(len(data)), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// openJournal replays the file at path (if any) into s, then rewrites it
// as a snapshot and keeps it open for appending.
func (s *Store) openJournal(path, policy string) error {
	if f, err := os.Open(path); err == nil {
		_, err := s.replay(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%w: replay %s: %w", ErrAOF, path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrAOF, err)
	}
	j := &journal{path: path, always: policy == SyncAlways, stop: make(chan struct{}), done: make(chan struct{})}
	j.cond = sync.NewCond(&j.mu)
	s.j = j
	for _, nd := range s.nodes {
		nd.j = j
	}
	if err := s.rewrite(); err != nil {
		return err
	}
	if j.always {
		close(j.done)
	} else {
		go j.everySec()
	}
	return nil
}

// closeJournal syncs and closes the file.
func (s *Store) closeJournal() error {
	if s.j == nil {
		return nil
	}
	j := s.j
	if !j.always {
		close(j.stop)
	}
	<-j.done
	j.mu.Lock()
	seq := j.seq
	j.mu.Unlock()
	err := j.sync(seq)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		if j.err == nil {
			err = errors.Join(err, j.f.Sync())
		}
		err = errors.Join(err, j.f.Close())
		j.f = nil
	}
	return err
}
