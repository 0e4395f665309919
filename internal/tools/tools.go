//go:build tools

// Package tools pins modules that later packages use, so that go mod tidy
// keeps their versions in go.mod.
package tools

import (
	_ "github.com/chromedp/chromedp"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/rueidis"
	_ "go.uber.org/goleak"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/sync/singleflight"
	_ "modernc.org/sqlite"
)
