package testenv

import (
	"bytes"
	"strings"
	"testing"
)

func TestMainWithoutRedisFailsLoudly(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	var c *Cluster
	ran := false
	code := runMain(func() int { ran = true; return 0 }, ClusterOptions{}, &c, &stderr,
		func() (string, error) { return "", ErrNoRedis })
	if code != 1 || ran || c != nil {
		t.Errorf("runMain without redis: code %d, ran %v, cluster %v", code, ran, c)
	}
	if !strings.Contains(stderr.String(), "apt-get install -y redis-server") {
		t.Errorf("stderr %q does not say how to install redis-server", stderr.String())
	}
}
