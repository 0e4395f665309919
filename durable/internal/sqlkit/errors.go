package sqlkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// named are the errors passed through as they are.
var named = []error{
	store.ErrUnavailable, store.ErrClosed, store.ErrOverflow,
	durable.ErrSchemaVersion, durable.ErrIDConflict, durable.ErrInvalidEvent,
	durable.ErrInvalidCheckpoint, durable.ErrInvalidConfig, durable.ErrNotFound,
	durable.ErrBackend, keyspace.ErrInvalidKey,
}

// Classify wraps a backend error of operation op: named errors pass
// through; context errors and errors transient reports match
// store.ErrUnavailable (and still match err); the rest match
// durable.ErrBackend.
func Classify(op string, err error, transient func(error) bool) error {
	if err == nil {
		return nil
	}
	for _, n := range named {
		if errors.Is(err, n) {
			return err
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || transient(err) {
		return fmt.Errorf("%w: durable %s: %w", store.ErrUnavailable, op, err)
	}
	return fmt.Errorf("%w: durable %s: %w", durable.ErrBackend, op, err)
}
