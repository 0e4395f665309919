package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Timings is the latency histogram of the Client's background operations
// (hotcount_background_duration_seconds, by op: flush, commit, checkpoint,
// rollup). Create it before the Client, give its Observe to
// hotcount.Config.Observe, and the Timings to Config.Timings.
type Timings struct{ vec *prometheus.HistogramVec }

// NewTimings returns an empty Timings.
func NewTimings() *Timings {
	return &Timings{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hotcount_background_duration_seconds",
		Help:    "Latency of the Client's background operations, by op: flush (a buffered flush round), commit (a durable group commit), checkpoint, rollup.",
		Buckets: latencyBuckets,
	}, []string{"op"})}
}

// Observe records one operation; it is hotcount.Config.Observe.
func (t *Timings) Observe(op string, d time.Duration) {
	t.vec.WithLabelValues(op).Observe(d.Seconds())
}
