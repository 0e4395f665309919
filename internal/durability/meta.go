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
// data, not an error.
type metaMirror struct{ b durable.Backend }

// SaveMeta implements meta.Durable.
func (d metaMirror) SaveMeta(ctx context.Context, key string, data []byte) error {
	return d.b.SaveMeta(ctx, key, data)
}

// LoadMeta implements meta.Durable. An empty record is a deleted one.
func (d metaMirror) LoadMeta(ctx context.Context, key string) ([]byte, error) {
	data, err := d.b.LoadMeta(ctx, key)
	if errors.Is(err, durable.ErrNotFound) || (err == nil && len(data) == 0) {
		return nil, nil
	}
	return data, err
}

// DeleteMeta implements meta.Durable.
func (d metaMirror) DeleteMeta(ctx context.Context, key string) error {
	return d.b.SaveMeta(ctx, key, []byte{})
}

// LoadMetas implements meta.Durable.
func (d metaMirror) LoadMetas(ctx context.Context, keys []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, k := range keys {
		data, err := d.LoadMeta(ctx, k)
		if err != nil {
			return nil, err
		}
		if data != nil {
			out[k] = data
		}
	}
	return out, nil
}
