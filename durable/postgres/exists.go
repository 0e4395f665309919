package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hotcount/hotcount/durable"
)

// Exists reports whether cfg names a store that was created already: its
// schema (or the search_path) holds hotcount's tables. Unlike Open it
// creates nothing, so that repair tools can refuse a store that is not
// there.
func Exists(ctx context.Context, cfg Config) (bool, error) {
	if cfg.Schema != "" && !schemaRE.MatchString(cfg.Schema) {
		return false, fmt.Errorf("%w: schema name %q", durable.ErrInvalidConfig, cfg.Schema)
	}
	cc, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return false, fmt.Errorf("%w: %w", durable.ErrInvalidConfig, err)
	}
	if cfg.Schema != "" {
		cc.RuntimeParams["search_path"] = cfg.Schema
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, wrap("connect", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('checkpoints') IS NOT NULL`).Scan(&ok); err != nil {
		return false, wrap("look up the store", err)
	}
	return ok, nil
}
