package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
)

var _ durable.Regions = (*DB)(nil)

// SaveRegionParts implements durable.Regions in one transaction; its
// parts are written in (key, origin, kind) order, so concurrent saves
// lock rows in one order.
func (db *DB) SaveRegionParts(ctx context.Context, parts []durable.RegionPart) error {
	parts, err := sqlkit.CheckRegionParts(parts)
	if err != nil || len(parts) == 0 {
		return err
	}
	if err := db.check(); err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		return sqlkit.SaveRegionParts(ctx, conn{tx}, parts)
	})
	return wrap("save region parts", err)
}
