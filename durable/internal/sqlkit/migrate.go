package sqlkit

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/durable"
)

// Tx is a transaction of the migration runner.
type Tx interface {
	// Exec runs a statement (several, without arguments).
	Exec(ctx context.Context, sql string, args ...any) error
	// Int runs a query that returns one integer.
	Int(ctx context.Context, sql string, args ...any) (int64, error)
}

// Schema describes the migrations of one backend.
type Schema struct {
	// VersionTable creates the schema_version table if missing.
	VersionTable string
	// Record inserts a version (first argument) applied at Now (second
	// argument, Unix nanoseconds) into schema_version.
	Record string
	// Now is the time of the migration, Unix nanoseconds.
	Now int64
	// Steps are the migrations: Steps[i] brings the schema to version i+1.
	// Never edit an applied one: append a new one.
	Steps []string
	// Where names the database in errors.
	Where string
}

// Migrate applies the pending steps within tx; the caller commits. A
// schema newer than the steps is ErrSchemaVersion.
func Migrate(ctx context.Context, tx Tx, s Schema) error {
	if err := tx.Exec(ctx, s.VersionTable); err != nil {
		return err
	}
	have, err := tx.Int(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`)
	if err != nil {
		return err
	}
	if have > int64(len(s.Steps)) {
		return fmt.Errorf("%w: %s has version %d, this build knows %d",
			durable.ErrSchemaVersion, s.Where, have, len(s.Steps))
	}
	for v := have + 1; v <= int64(len(s.Steps)); v++ {
		if err := tx.Exec(ctx, s.Steps[v-1]); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if err := tx.Exec(ctx, s.Record, v, s.Now); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	return nil
}
