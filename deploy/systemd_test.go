package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
)

// TestSystemdUnitRuns runs the unit's command as systemd would, with the
// settings the unit documents for a real deployment: its Environment=
// lines, an EnvironmentFile holding HOTCOUNT_REDIS and HOTCOUNT_POSTGRES,
// its WorkingDirectory (the StateDirectory, here a temporary folder that
// stands for /var/lib/hotcount). serve must get ready on the Redis and
// the PostgreSQL given, and stop cleanly on the unit's KillSignal.
func TestSystemdUnitRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, PostgreSQL's schema and hotcount serve")
	}
	u := unit(t, "systemd/hotcount.service")
	state := "/var/lib/" + strings.Join(u["StateDirectory"], "")
	work := strings.Join(u["WorkingDirectory"], "")
	if work != state {
		t.Fatalf("WorkingDirectory %q is not the StateDirectory %q", work, state)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	bin := filepath.Join(t.TempDir(), "hotcount")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/hotcount").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	node, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Stop() })

	dir := t.TempDir() // the StateDirectory
	listen := freeAddr(t)
	// systemd's environment: no HOTCOUNT_* of ours, the unit's
	// Environment= lines, then the EnvironmentFile (which the unit reads
	// after them), then the free listen address.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOTCOUNT_") {
			env = append(env, kv)
		}
	}
	for _, e := range u["Environment"] {
		env = append(env, strings.ReplaceAll(e, state, dir))
	}
	env = append(env, "HOTCOUNT_REDIS="+node.Addr, "HOTCOUNT_POSTGRES="+postgresURL(t), "HOTCOUNT_LISTEN="+listen)

	args := strings.Fields(strings.Join(u["ExecStart"], ""))
	cmd := exec.Command(bin, args[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	// serve is ready, or it exited: out is read only after it exits or
	// after the wait.
	ready := make(chan struct{})
	go func() {
		defer close(ready)
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if code, _ := do(t, ctx, "GET", "http://"+listen+"/readyz", "", ""); code == 200 {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	select {
	case err := <-done:
		done <- err
		t.Fatalf("serve, run as the unit runs it, exited before it was ready (%v):\n%s", err, out.String())
	case <-ready:
	}
	if code, _ := do(t, ctx, "GET", "http://"+listen+"/readyz", "", ""); code != 200 {
		t.Fatalf("serve did not get ready within two minutes")
	}
	if code, body := do(t, ctx, "POST", "http://"+listen+"/v1/counters/likes:unit/incr", "", `{"by":2}`); code != 200 {
		t.Fatalf("incr: %d %s", code, body)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM) // the unit's KillSignal
	select {
	case err := <-done:
		done <- err
		if err != nil || !strings.Contains(out.String(), "stopped cleanly") {
			t.Errorf("serve stopped with %v after SIGTERM:\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Errorf("serve did not stop within a minute of SIGTERM")
	}
}
