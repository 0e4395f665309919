package durability

import (
	"context"
	"errors"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/meta"
)

// MetaMirror returns b as the durable mirror of counter metadata
// (meta.Durable), or nil when b is nil.
func MetaMirror(b durable.Backend) meta.Durable {
	if b == nil {
		return nil
	}
	return metaMirror{b}
}

// metaMirror adapts a durable.Backend to meta.Durable: "no record" is nil
// data, not an error. An empty record (written as a deletion by builds
// before DeleteMeta) is no record either.
type metaMirror struct{ b durable.Backend }

// SaveMeta implements meta.Durable.
func (d metaMirror) SaveMeta(ctx context.Context, key string, data []byte) error {
	return d.b.SaveMeta(ctx, key, data)
}

// LoadMeta implements meta.Durable.
func (d metaMirror) LoadMeta(ctx context.Context, key string) ([]byte, error) {
	data, err := d.b.LoadMeta(ctx, key)
	if errors.Is(err, durable.ErrNotFound) || (err == nil && len(data) == 0) {
		return nil, nil
	}
	return data, err
}

// DeleteMeta implements meta.Durable: the row goes.
func (d metaMirror) DeleteMeta(ctx context.Context, key string) error {
	return d.b.DeleteMeta(ctx, key)
}

// LoadMetas implements meta.Durable, in one query.
func (d metaMirror) LoadMetas(ctx context.Context, keys []string) (map[string][]byte, error) {
	m, err := d.b.LoadMetas(ctx, keys)
	if err != nil {
		return nil, err
	}
	for k, data := range m {
		if len(data) == 0 {
			delete(m, k)
		}
	}
	return m, nil
}
