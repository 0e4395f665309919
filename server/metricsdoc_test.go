package server

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// docMetricSections are the parts of the docs that list the metrics of
// `hotcount serve`: file and "## " section ("" for the whole file).
var docMetricSections = []struct{ file, section string }{
	{"../docs/operations.md", "Monitoring"},
	{"../docs/regions.md", "Metrics and alert"},
	{"../docs/http-api.md", ""},
}

// needsRedis are metrics the docs list that only a server on Redis
// exports (figures of each Redis primary); liveMetrics runs on the
// embedded store.
var needsRedis = map[string]bool{"hotcount_cache_keys": true, "hotcount_cache_memory_bytes": true}

// docMetricName is a metric a doc names, with the labels it shows:
// `hotcount_cache_keys{node}`, or a family: `hotcount_region_*`.
var docMetricName = regexp.MustCompile(`\bhotcount_[a-z0-9_]*(?:[a-z0-9]|_\*)(?:\{([a-z_, ]+)\})?`)

// TestDocumentedMetricsExported: every metric the Monitoring section of
// docs/operations.md, the metrics of docs/regions.md and docs/http-api.md
// name is exported by a live server (a family named `hotcount_region_*`
// has at least one), with every label the doc shows beside it. The
// source having the name is not enough: a metric that is never
// registered, or renamed in one place, fails here.
func TestDocumentedMetricsExported(t *testing.T) {
	fams := families(t, liveMetrics(t))
	exported := exportedNames(fams)
	checked := 0
	for _, ds := range docMetricSections {
		b, err := os.ReadFile(ds.file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if ds.section != "" {
			_, sec, ok := strings.Cut(text, "\n## "+ds.section+"\n")
			if !ok {
				t.Fatalf("%s has no section %q", ds.file, ds.section)
			}
			text, _, _ = strings.Cut(sec, "\n## ")
		}
		for _, m := range docMetricName.FindAllStringSubmatch(text, -1) {
			name, _, _ := strings.Cut(m[0], "{")
			if needsRedis[name] {
				continue
			}
			checked++
			if prefix, ok := strings.CutSuffix(name, "*"); ok {
				found := false
				for n := range exported {
					found = found || strings.HasPrefix(n, prefix)
				}
				if !found {
					t.Errorf("%s names %s; the server exports no such metric", ds.file, name)
				}
				continue
			}
			if !exported[name] {
				t.Errorf("%s names %s; the server does not export it", ds.file, name)
				continue
			}
			if m[1] == "" {
				continue
			}
			f := fams[name]
			for _, label := range strings.Split(m[1], ",") {
				label = strings.TrimSpace(label)
				has := false
				for _, s := range f.GetMetric() {
					for _, lp := range s.GetLabel() {
						has = has || lp.GetName() == label
					}
				}
				if !has {
					t.Errorf("%s shows %s with the label %s; the server's %s has no such label", ds.file, m[0], label, name)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d metric names", checked)
	}
}
