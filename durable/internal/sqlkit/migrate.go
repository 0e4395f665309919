package sqlkit

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/durable"
)

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

// Migrate applies the pending steps within transaction tx; the caller
// commits. A schema newer than the steps is ErrSchemaVersion.
func Migrate(ctx context.Context, tx Conn, s Schema) error {
	if _, err := tx.Exec(ctx, s.VersionTable); err != nil {
		return err
	}
	var have int64
	if err := QueryOne(ctx, tx, `SELECT coalesce(max(version), 0) FROM schema_version`, nil, &have); err != nil {
		return err
	}
	if have > int64(len(s.Steps)) {
		return fmt.Errorf("%w: %s has version %d, this build knows %d",
			durable.ErrSchemaVersion, s.Where, have, len(s.Steps))
	}
	for v := have + 1; v <= int64(len(s.Steps)); v++ {
		if _, err := tx.Exec(ctx, s.Steps[v-1]); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, s.Record, v, s.Now); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	return nil
}
