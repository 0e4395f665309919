package server

import (
	"context"
	"time"

	"github.com/hotcount/hotcount"
)

// Backend lists the methods of *hotcount.Client that the server uses; a
// *hotcount.Client is what every caller passes. It exists so that tests of
// error paths can wrap a Client and change one answer.
type Backend interface {
	Incr(ctx context.Context, key string, delta int64) error
	IncrID(ctx context.Context, key string, delta int64, id string) error
	Get(ctx context.Context, key string) (hotcount.Reading, error)
	GetExact(ctx context.Context, key string) (hotcount.Reading, error)
	GetMulti(ctx context.Context, keys []string) (map[string]hotcount.Reading, error)
	Clear(ctx context.Context, key string) error
	Mode(key string) hotcount.Mode
	Namespace(key string) (hotcount.Namespace, bool)
	Shards(ctx context.Context, key string) (hotcount.ShardReport, error)
	ShardsN(ctx context.Context, key string, n int) (hotcount.ShardReport, error)
	Resize(ctx context.Context, key string, n int) error
	Unpin(ctx context.Context, key string) error
	Create(ctx context.Context, key string, n int) (bool, error)
	Expire(ctx context.Context, key string, at time.Time) (bool, error)
	Persist(ctx context.Context, key string) (bool, error)
	Deadline(ctx context.Context, key string) (time.Time, bool, error)
	HotKeys(ctx context.Context, n int) []hotcount.HotKey
	Decisions() []hotcount.Decision
	Nodes(ctx context.Context) []hotcount.NodeWrites
	Stats() hotcount.Stats
	Region() string
	Ping(ctx context.Context) error
}

var _ Backend = (*hotcount.Client)(nil)
