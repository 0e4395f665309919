package sqlkit

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/hotcount/hotcount/durable"
)

// CheckRegionParts validates parts for SaveRegionParts and keeps, per
// (Key, Origin, Kind), the one of the highest version, so that a batch
// upsert never touches a row twice. It returns them sorted by (Key,
// Origin, Kind), the order in which every backend locks rows.
func CheckRegionParts(parts []durable.RegionPart) ([]durable.RegionPart, error) {
	out := make([]durable.RegionPart, 0, len(parts))
	for i, p := range parts {
		switch {
		case !durable.ValidKey(p.Key) || !durable.ValidKey(p.Origin):
			return nil, fmt.Errorf("%w: part %d: bad key %q or origin %q", durable.ErrInvalidPart, i, p.Key, p.Origin)
		case p.Kind != durable.PartContribution && p.Kind != durable.PartFence:
			return nil, fmt.Errorf("%w: part %d: kind %d", durable.ErrInvalidPart, i, p.Kind)
		case p.Epoch > math.MaxInt64 || p.Lease > math.MaxInt64 || p.Seq > math.MaxInt64:
			return nil, fmt.Errorf("%w: part %d: version above MaxInt64", durable.ErrInvalidPart, i)
		}
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b durable.RegionPart) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Origin, b.Origin), cmp.Compare(a.Kind, b.Kind))
	})
	// Of the parts of one identity, keep the highest version (the last
	// one given on a tie).
	kept := out[:0]
	for _, p := range out {
		if n := len(kept); n > 0 && kept[n-1].Key == p.Key && kept[n-1].Origin == p.Origin && kept[n-1].Kind == p.Kind {
			if p.Version(kept[n-1]) >= 0 {
				kept[n-1] = p
			}
			continue
		}
		kept = append(kept, p)
	}
	return kept, nil
}

// upsertPart stores one part unless a part of a higher version is stored.
const upsertPart = `INSERT INTO region_parts (key, origin, kind, epoch, lease, seq, value, at_ns)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (key, origin, kind) DO UPDATE SET epoch = excluded.epoch, lease = excluded.lease,
		seq = excluded.seq, value = excluded.value, at_ns = excluded.at_ns
	WHERE (excluded.epoch, excluded.lease, excluded.seq) >= (region_parts.epoch, region_parts.lease, region_parts.seq)`

// SaveRegionParts upserts parts (checked by CheckRegionParts) within
// transaction tx.
func SaveRegionParts(ctx context.Context, tx Conn, parts []durable.RegionPart) error {
	for _, p := range parts {
		if _, err := tx.Exec(ctx, upsertPart, p.Key, p.Origin, int64(p.Kind), int64(p.Epoch), int64(p.Lease),
			int64(p.Seq), p.Value, Nanos(p.At)); err != nil {
			return err
		}
	}
	return nil
}

// regionCols are the columns a part is read from, in scanPart's order.
const regionCols = `key, origin, kind, epoch, lease, seq, value, at_ns`

// scanPart reads one part.
func scanPart(scan func(...any) error) (durable.RegionPart, error) {
	var p durable.RegionPart
	var kind, epoch, lease, seq, at int64
	if err := scan(&p.Key, &p.Origin, &kind, &epoch, &lease, &seq, &p.Value, &at); err != nil {
		return p, err
	}
	p.Kind, p.Epoch, p.Lease, p.Seq, p.At = durable.PartKind(kind), uint64(epoch), uint64(lease), uint64(seq), FromNanos(at)
	return p, nil
}

// LoadRegionParts implements durable.Regions.
func (c *Common) LoadRegionParts(ctx context.Context, keys []string) (map[string][]durable.RegionPart, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	out := make(map[string][]durable.RegionPart)
	if len(keys) == 0 {
		return out, nil
	}
	err := c.cfg.Read.Query(ctx, `SELECT `+regionCols+` FROM region_parts WHERE `+c.cfg.Dialect.In("key", 1)+
		` ORDER BY key, origin, kind`, []any{c.cfg.Dialect.List(keys)}, func(scan func(...any) error) error {
		p, err := scanPart(scan)
		if err == nil {
			out[p.Key] = append(out[p.Key], p)
		}
		return err
	})
	return out, c.cfg.Wrap("load region parts", err)
}

// ListRegionParts implements durable.Regions.
func (c *Common) ListRegionParts(ctx context.Context, origin string, kind durable.PartKind, after string, limit int) ([]durable.RegionPart, error) {
	if err := Check(c); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	var out []durable.RegionPart
	err := c.cfg.Read.Query(ctx, `SELECT `+regionCols+` FROM region_parts WHERE origin = $1 AND kind = $2 AND key > $3
		ORDER BY key LIMIT $4`, []any{origin, int64(kind), after, int64(limit)}, func(scan func(...any) error) error {
		p, err := scanPart(scan)
		if err == nil {
			out = append(out, p)
		}
		return err
	})
	return out, c.cfg.Wrap("list region parts", err)
}

// DeleteRegionParts implements durable.Regions.
func (c *Common) DeleteRegionParts(ctx context.Context, keys []string) error {
	if err := Check(c); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := c.cfg.Write.Exec(ctx, `DELETE FROM region_parts WHERE `+c.cfg.Dialect.In("key", 1), c.cfg.Dialect.List(keys))
	return c.cfg.Wrap("delete region parts", err)
}
