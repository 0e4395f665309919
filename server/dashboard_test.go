package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium. The test fails without it:
// scripts/test installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: install it with `apt-get install -y chromium` (scripts/test does)")
	return ""
}

// artifactDir is where screenshots go: $HOTCOUNT_ARTIFACTS or a temp dir.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("HOTCOUNT_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestDashboardInBrowser opens the dashboard in headless Chromium over a
// real loopback listener, increments a key through the API, waits until
// the page lists it with its value, increments again and waits for the new
// value, then saves a screenshot.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromiumPath(t)
	s, _ := newTestServer(t, nil, Config{})
	ts := httptest.NewServer(s)
	defer ts.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()

	const key = "likes:post:42"
	incr := func(by int) {
		t.Helper()
		resp, err := http.Post(ts.URL+"/v1/counters/"+key+"/incr", "application/json", strings.NewReader(fmt.Sprintf(`{"by":%d}`, by)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("incr: %d", resp.StatusCode)
		}
	}
	cell := fmt.Sprintf(`document.querySelector('#hotkeys tr[data-key="%s"] td.value')`, key)
	wait := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			text, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, text)
		}
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/")); err != nil {
		t.Fatalf("opening the dashboard: %v", err)
	}
	wait("the page to poll", `document.querySelector('#status').textContent.startsWith('live')`)
	incr(3)
	wait("the key to appear with value 3", cell+`?.textContent === "3"`)
	incr(7)
	wait("the value to change to 10", cell+`?.textContent === "10"`)
	wait("the node-rate chart", `document.querySelector('#node-chart .uplot canvas') !== null`)
	wait("the chosen counter's sub-counters", `document.querySelectorAll('#shards tbody tr').length > 0 && document.querySelector('#chosen-msg').textContent.includes("= 10")`)
	wait("the sub-counter chart", `document.querySelector('#shard-chart .uplot canvas') !== null`)

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	out := filepath.Join(artifactDir(t), "dashboard.png")
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshot: %s (%d bytes)", out, len(png))
}
