package hotcount

import (
	"context"

	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/redis"
)

func openRedis(ctx context.Context, s settings) (store.Store, error) {
	return redis.New(ctx, redis.Config{
		Addrs:    s.Redis,
		Username: s.RedisUsername,
		Password: s.RedisPassword,
		Timeout:  s.Timeout,
	})
}
