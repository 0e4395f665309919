package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcount/hotcount"
)

// durableSeries exports the durable store's series
// (Stats.Durability.Series, in the Prometheus data model already) as
// Prometheus metrics, under the names serve and the proxy share.
type durableSeries map[string]*prometheus.Desc

// newDurableSeries describes every series: those of the zero Stats.
func newDurableSeries() durableSeries {
	var zero hotcount.Stats
	d := durableSeries{}
	for _, s := range zero.Durability.Series() {
		d[s.Name] = prometheus.NewDesc(s.Name, s.Help, s.Labels, nil)
	}
	return d
}

// Describe sends the description of every series.
func (d durableSeries) Describe(ch chan<- *prometheus.Desc) {
	for _, desc := range d {
		ch <- desc
	}
}

// Collect sends every point of the series of st.
func (d durableSeries) Collect(ch chan<- prometheus.Metric, st *hotcount.Stats) {
	for _, s := range st.Durability.Series() {
		kind := prometheus.GaugeValue
		if s.Counter {
			kind = prometheus.CounterValue
		}
		for _, p := range s.Points {
			ch <- prometheus.MustNewConstMetric(d[s.Name], kind, p.Value, p.LabelValues...)
		}
	}
}
