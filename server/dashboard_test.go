package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
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
	"github.com/hotcount/hotcount/internal/testenv"
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

	b := openBrowser(t)
	defer b.close()
	bctx, wait, eval, screenshot := b.ctx, b.wait, b.eval, b.screenshot

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
	wait("the regions panel to say regions are off", `document.querySelector('#t-region').textContent === 'off' &&
		!document.querySelector('#regions-msg').hidden && document.querySelector('#regions-msg').textContent.startsWith('Regions are off') &&
		document.querySelector('#region-links').hidden`)
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

	b.checkErrors()
}

// TestDashboardRegions opens the dashboard of a server in region eu,
// whose peers are region us (a second Client on its own redis-server,
// shipping back) and region ap (an address that refuses connections),
// while eu's counter takes increments. The Regions panel shows what the
// shipping code measured: eu and its shipping lease; for us a lag figure,
// records and bytes shipped and counting, no link errors and a recent
// last success; for ap link errors growing, the last error on hover and
// no success. At a phone's 390 px width nothing overflows. The JSON of /v1/stats carries the same figures, and us
// reads eu's increments (the records really arrived).
func TestDashboardRegions(t *testing.T) {
	ctx := context.Background()
	var nodes [2]*testenv.Node
	for i := range nodes {
		n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Stop()
		nodes[i] = n
	}
	// ap: a port that was free a moment ago and refuses connections now.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := ln.Addr().String()
	ln.Close()
	open := func(region string, self *testenv.Node, peers ...hotcount.PeerConfig) *hotcount.Client {
		c, err := hotcount.New(ctx, hotcount.Config{
			Redis: hotcount.RedisConfig{Addrs: []string{self.Addr}}, Region: region, Peers: peers,
			ShipInterval: 200 * time.Millisecond, Timeout: time.Second,
			Defaults: hotcount.Namespace{ReadCacheTTL: 100 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	eu := open("eu", nodes[0], hotcount.PeerConfig{Name: "us", Redis: hotcount.RedisConfig{Addrs: []string{nodes[1].Addr}}},
		hotcount.PeerConfig{Name: "ap", Redis: hotcount.RedisConfig{Addrs: []string{ap}}})
	defer eu.Close(ctx)
	us := open("us", nodes[1], hotcount.PeerConfig{Name: "eu", Redis: hotcount.RedisConfig{Addrs: []string{nodes[0].Addr}}})
	defer us.Close(ctx)
	const token, key = "regions-t0ken", "likes:post:7"
	s, _ := newTestServer(t, eu, Config{Token: token})
	ts := httptest.NewServer(s)
	defer ts.Close()

	// 20 increments a second in eu until the test ends (at most 3,000).
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	traffic.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for range 3000 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			eu.Incr(ctx, key, 1)
		}
	})
	defer traffic.Wait()
	defer close(stop)

	b := openBrowser(t)
	defer b.close()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(ts.URL+"/")); err != nil {
		t.Fatalf("opening the dashboard: %v", err)
	}
	b.wait("the token field", `!document.querySelector('#token-form').hidden`)
	if err := chromedp.Do(b.ctx, chromedp.SendKeys("#token", token), chromedp.Click("#token-form button")); err != nil {
		t.Fatalf("entering the token: %v", err)
	}
	b.wait("the page to poll", `document.querySelector('#status').textContent.startsWith('live')`)
	peer := func(name string) string {
		return `Array.from(document.querySelectorAll('#region-links tbody tr')).find(r => r.dataset.id === '` + name + `')`
	}
	cell := func(name, cls string) string { return peer(name) + `.querySelector('td.` + cls + `')` }
	b.wait("eu holding the lease", `document.querySelector('#t-region').textContent === 'eu' && document.querySelector('#t-lease').textContent === 'held here' &&
		document.querySelector('#regions-msg').hidden && !document.querySelector('#region-links').hidden`)
	b.wait("a row per peer", `document.querySelectorAll('#region-links tbody tr').length === 2 && `+peer("us")+` !== undefined && `+peer("ap")+` !== undefined`)
	b.wait("records shipped to us and counting", `(() => { const n = Number(`+cell("us", "records")+`.textContent);
		if (n > (window.usRecords || 0)) { window.usGrew = (window.usGrew || 0) + (window.usRecords ? 1 : 0); window.usRecords = n; }
		return window.usGrew >= 2 && Number(`+cell("us", "rate")+`.textContent) > 0; })()`)
	b.wait("a lag and a recent success for us", `/^\d+(\.\d)? (ms|s)$/.test(`+cell("us", "lag")+`.textContent) && `+cell("us", "age")+`.textContent.endsWith(' ago') &&
		`+cell("us", "errors")+`.textContent === '0' && !`+cell("us", "errors")+`.classList.contains('bad') && /B$/.test(`+cell("us", "bytes")+`.textContent)`)
	b.wait("link errors to ap growing", `(() => { const n = Number(`+cell("ap", "errors")+`.textContent);
		if (n > (window.apErrors || 0)) { window.apGrew = (window.apGrew || 0) + (window.apErrors ? 1 : 0); window.apErrors = n; }
		return window.apGrew >= 2; })()`)
	if v := b.eval(`[` + cell("ap", "errors") + `.classList.contains('bad'), ` + cell("ap", "errors") + `.title !== '', ` +
		cell("ap", "age") + `.textContent, ` + cell("ap", "records") + `.textContent]`); fmt.Sprint(v) != "[true true never 0]" {
		t.Errorf("ap's row: bad, has a title, last success, records = %v; want [true true never 0]", v)
	}
	b.screenshot("dashboard-regions.png")
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	b.wait("a poll at 390 px", `(() => { const s = document.querySelector('#status').textContent; if (window.lastStatus !== s) { window.polls = (window.polls || 0) + 1; window.lastStatus = s; } return window.polls >= 2; })()`)
	if w := b.eval(`document.documentElement.scrollWidth`); w.(float64) > 390 {
		t.Errorf("at 390 px the page is %v px wide (horizontal scrolling)", w)
	}
	b.screenshot("dashboard-regions-390.png")
	shown := b.eval(`Number(` + cell("us", "records") + `.textContent)`).(float64)

	// The JSON the panel was drawn from.
	r := call(t, s, "GET", "/v1/stats", "", "Authorization", "Bearer "+token)
	var st statsResponse
	if err := json.Unmarshal([]byte(r.raw), &st); r.status != 200 || err != nil {
		t.Fatalf("/v1/stats: %d %v %s", r.status, err, r.raw)
	}
	rg := st.Regions
	if !rg.Enabled || rg.Region != "eu" || !rg.Shipping || len(rg.Peers) != 2 {
		t.Fatalf("regions %+v", rg)
	}
	for _, p := range rg.Peers {
		switch p.Peer {
		case "us":
			if p.LagMS == nil || p.LastSuccess == nil || p.LastSuccessAgeMS == nil || p.LinkErrors != 0 || float64(p.ShippedRecords) < shown || p.ShippedBytes == 0 {
				t.Errorf("us: %+v (the panel showed %v records)", p, shown)
			}
		case "ap":
			if p.LagMS == nil || p.LastSuccess != nil || p.LinkErrors == 0 || p.LastError == "" || p.ShippedRecords != 0 {
				t.Errorf("ap: %+v", p)
			}
		}
	}
	// us reads eu's increments: the shipped records arrived.
	rd, err := us.Get(ctx, key)
	if err != nil || rd.Value <= 0 || rd.Regions["eu"].Value <= 0 {
		t.Errorf("us reads %+v (%v), want eu's increments", rd, err)
	}
	b.checkErrors()
}

// browser is a headless Chromium tab that records 404 answers and script
// errors; close ends it.
type browser struct {
	t      *testing.T
	ctx    context.Context
	cancel context.CancelFunc

	mu                     sync.Mutex
	notFound, scriptErrors []string
}

// openBrowser starts headless Chromium with a 1280x900 window.
func openBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromiumPath(t)
	tctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
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

	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	b := &browser{t: t, ctx: bctx, cancel: func() { bcancel(); acancel(); cancel() }}
	if err := chromedp.Listen(bctx, func(ev any) {
		switch e := ev.(type) {
		case *network.EventResponseReceived:
			if e.Response.Status == 404 {
				b.mu.Lock()
				b.notFound = append(b.notFound, e.Response.URL)
				b.mu.Unlock()
			}
		case *runtime.EventExceptionThrown:
			b.mu.Lock()
			msg := e.ExceptionDetails.Text
			if ex := e.ExceptionDetails.Exception; ex != nil {
				msg += " " + ex.Description
			}
			b.scriptErrors = append(b.scriptErrors, msg)
			b.mu.Unlock()
		}
	}); err != nil {
		b.close()
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		b.close()
		t.Fatal(err)
	}
	return b
}

// close closes the tab and the browser.
func (b *browser) close() { b.cancel() }

// wait polls expr until it is true (30 s at most).
func (b *browser) wait(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, text)
	}
}

// eval evaluates expr in the page.
func (b *browser) eval(expr string) any {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// screenshot keeps a full-page screenshot in the artifact directory.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	out := filepath.Join(artifactDir(b.t), name)
	if err := os.WriteFile(out, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s (%d bytes)", out, len(png))
}

// checkErrors fails the test if a request answered 404 or a script threw.
func (b *browser) checkErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.notFound) > 0 {
		b.t.Errorf("404 answers: %v", b.notFound)
	}
	if len(b.scriptErrors) > 0 {
		b.t.Errorf("script errors: %v", b.scriptErrors)
	}
}
