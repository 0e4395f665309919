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
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/sqlite"
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
// real loopback listener while a buffered counter takes about 100
// increments a second, and checks what an operator sees:
//   - the page asks for the token, and works once it is given;
//   - the absorption chart of the hottest counter: increments arriving,
//     cache writes reaching each node (one series per node, each its own
//     colour) and the node budget as a line; arrivals above the writes
//     of any node;
//   - every y axis starts at zero;
//   - table rows are updated in place: the same row element survives
//     polls that change its value, and no row is removed;
//   - no request answers 404 (the favicon included) and no script error;
//   - at a phone's 390 px width nothing overflows and the charts shrink.
//
// Screenshots at both widths are kept in $HOTCOUNT_ARTIFACTS.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromiumPath(t)
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "hc.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := hotcount.New(ctx, hotcount.Config{
		// Sharded from the first write, so that writes reach every node.
		Namespaces: []hotcount.Namespace{{Prefix: "likes:", Buffered: true, FlushInterval: 200 * time.Millisecond, NoColdStart: true}},
		Durability: hotcount.DurabilityConfig{Store: db, CheckpointInterval: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	const token, key = "dash-t0ken", "likes:post:42"
	s, _ := newTestServer(t, c, Config{Token: token, NodeBudget: 20})
	ts := httptest.NewServer(s)
	defer ts.Close()

	// About 100 increments a second until the test ends (at most 9,000).
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	traffic.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for range 9000 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			req, _ := http.NewRequest("POST", ts.URL+"/v1/counters/"+key+"/incr", strings.NewReader(`{"by":1}`))
			req.Header.Set("Authorization", "Bearer "+token)
			if resp, err := ts.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})
	defer traffic.Wait()
	defer close(stop)

	tctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(tctx,
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

	var mu sync.Mutex
	var notFound, scriptErrors []string
	if err := chromedp.Listen(bctx, func(ev any) {
		switch e := ev.(type) {
		case *network.EventResponseReceived:
			if e.Response.Status == 404 {
				mu.Lock()
				notFound = append(notFound, e.Response.URL)
				mu.Unlock()
			}
		case *runtime.EventExceptionThrown:
			mu.Lock()
			msg := e.ExceptionDetails.Text
			if ex := e.ExceptionDetails.Exception; ex != nil {
				msg += " " + ex.Description
			}
			scriptErrors = append(scriptErrors, msg)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}

	wait := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			text, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, text)
		}
	}
	eval := func(expr string) any {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[any](expr))
		if err != nil {
			t.Fatalf("evaluating %s: %v", expr, err)
		}
		return v
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		out := filepath.Join(artifactDir(t), name)
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", out, len(png))
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(ts.URL+"/")); err != nil {
		t.Fatalf("opening the dashboard: %v", err)
	}
	wait("the token field", `!document.querySelector('#token-form').hidden && document.querySelector('#status').textContent.startsWith('token needed')`)
	if err := chromedp.Do(bctx, chromedp.SendKeys("#token", token), chromedp.Click("#token-form button")); err != nil {
		t.Fatalf("entering the token: %v", err)
	}
	wait("the page to poll", `document.querySelector('#status').textContent.startsWith('live')`)
	row := fmt.Sprintf(`Array.from(document.querySelectorAll('#hotkeys tbody tr')).find(r => r.dataset.key === %q)`, key)
	wait("the hot key", row+` !== undefined`)

	// The absorption chart: arrivals, one series per node, the budget.
	chart := `document.querySelector('#absorption-chart').hotcountChart`
	wait("the absorption chart with 3 nodes", chart+` && `+chart+`.series.filter(s => (s.label||'').startsWith('→ ')).length === 3`)
	wait("arrivals above every node's writes", `(() => { const c = `+chart+`; const last = (i) => c.data[i][c.data[i].length-1];
		const lbl = c.series.map(s => s.label || '');
		const arr = last(lbl.findIndex(l => l === 'arriving: `+key+`'));
		const nodes = lbl.map((l, i) => l.startsWith('→ ') ? last(i) : null).filter(v => v !== null);
		return arr > 20 && nodes.every(v => v !== null && v < arr) && nodes.some(v => v > 0); })()`)
	labels := eval(chart + `.series.slice(1).map(s => s.label)`).([]any)
	if fmt.Sprint(labels[0]) != "arriving: "+key || fmt.Sprint(labels[len(labels)-1]) != "node budget" {
		t.Errorf("absorption series %v", labels)
	}
	if budget := eval(chart + `.data[` + fmt.Sprint(len(labels)) + `].every(v => v === 20)`); budget != true {
		t.Errorf("the budget line is not the configured 20 writes/s")
	}
	colours := eval(`(() => { const c = ` + chart + `; return c.series.slice(1).map((s, i) => typeof s.stroke === 'function' ? s.stroke(c, i+1) : s.stroke); })()`).([]any)
	seen := map[string]bool{}
	for _, col := range colours {
		if seen[fmt.Sprint(col)] {
			t.Errorf("colour %v is used twice in %v", col, colours)
		}
		seen[fmt.Sprint(col)] = true
	}
	for _, sel := range []string{"#absorption-chart", "#loss-chart"} {
		if v := eval(`document.querySelector('` + sel + `').hotcountChart.scales.y.min`); v != float64(0) {
			t.Errorf("%s: the y axis starts at %v, not 0", sel, v)
		}
	}

	// Rows are updated in place while their values change.
	eval(`window.probe = ` + row + `; window.probeValue = window.probe.querySelector('td.value').textContent;
		window.removed = 0; window.probeObserver = new MutationObserver(ms => { for (const m of ms) window.removed += m.removedNodes.length; });
		for (const s of ['#hotkeys tbody', '#nodes tbody', '#shards tbody']) window.probeObserver.observe(document.querySelector(s), {childList: true}); true`)
	wait("the value to change twice in the same row", `(() => { const v = window.probe.querySelector('td.value').textContent;
		if (v !== window.probeValue) { window.changes = (window.changes||0) + 1; window.probeValue = v; } return window.changes >= 2; })()`)
	if v := eval(`document.contains(window.probe) && ` + row + ` === window.probe`); v != true {
		t.Errorf("the hot key's row was replaced while its value changed")
	}
	if v := eval(`window.removed`); v != float64(0) {
		t.Errorf("%v table rows were removed while the same keys were shown", v)
	}
	wait("the chosen counter's sub-counters", `document.querySelectorAll('#shards tbody tr').length >= 3 && document.querySelector('#shards-title').textContent.includes('`+key+`')`)
	wait("the loss-window tiles", `document.querySelector('#t-oldest').textContent !== '–' && document.querySelector('#t-checkpoint').textContent.endsWith(' ago')`)
	wait("8 samples on the chart", chart+`.data[0].length >= 8`)
	screenshot("dashboard.png")

	// The favicon and every asset the page names answer 200.
	st, err := chromedp.Run(bctx, chromedp.Evaluate[[]int](`Promise.all(['/favicon.ico', document.querySelector('link[rel=icon]').href].map(u => fetch(u).then(r => r.status)))`, chromedp.EvalAwaitPromise))
	if err != nil || len(st) != 2 || st[0] != 200 || st[1] != 200 {
		t.Errorf("the favicon answers %v (%v), want 200", st, err)
	}

	// A phone: 390 px wide.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	wait("the charts to fit 390 px", `document.querySelector('#absorption-chart').hotcountChart.width <= 390 && document.querySelector('#loss-chart').hotcountChart.width <= 390`)
	wait("two more polls", `(() => { window.polls = (window.polls||0) + (document.querySelector('#status').textContent !== window.lastStatus ? 1 : 0);
		window.lastStatus = document.querySelector('#status').textContent; return window.polls >= 3; })()`)
	if w := eval(`document.documentElement.scrollWidth`); w.(float64) > 390 {
		t.Errorf("at 390 px the page is %v px wide (horizontal scrolling)", w)
	}
	for _, sel := range []string{"#absorption-chart canvas", "#loss-chart canvas"} {
		if w := eval(`document.querySelector('` + sel + `').getBoundingClientRect().right`); w.(float64) > 390 {
			t.Errorf("%s reaches %v px at a 390 px width", sel, w)
		}
	}
	screenshot("dashboard-390.png")

	mu.Lock()
	defer mu.Unlock()
	if len(notFound) > 0 {
		t.Errorf("404 answers: %v", notFound)
	}
	if len(scriptErrors) > 0 {
		t.Errorf("script errors: %v", scriptErrors)
	}
}
