package sqlite

import (
	"context"
	"database/sql"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
)

var _ durable.Regions = (*DB)(nil)

// SaveRegionParts implements durable.Regions in one transaction.
func (db *DB) SaveRegionParts(ctx context.Context, parts []durable.RegionPart) error {
	parts, err := sqlkit.CheckRegionParts(parts)
	if err != nil || len(parts) == 0 {
		return err
	}
	return db.inTx(ctx, "save region parts", func(tx *sql.Tx) error {
		return sqlkit.SaveRegionParts(ctx, conn{tx}, parts)
	})
}
