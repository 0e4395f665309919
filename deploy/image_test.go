package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
)

// podman runs podman as scripts/image does: runc when installed (podman's
// default crun fails on some hybrid cgroup setups), the cgroupfs manager
// without systemd, and containers.conf of deploy/container.
type podman struct {
	bin  string
	args []string
	env  []string
}

// findPodman returns podman, or skips the test saying why it cannot run.
func findPodman(t *testing.T) podman {
	t.Helper()
	bin, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("podman not found, so the image is not built here (apt-get install -y podman runc; scripts/test installs them)")
	}
	p := podman{bin: bin}
	if _, err := exec.LookPath("runc"); err == nil {
		p.args = append(p.args, "--runtime", "runc")
	}
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		p.args = append(p.args, "--cgroup-manager", "cgroupfs")
	}
	conf, err := filepath.Abs("container/containers.conf")
	if err != nil {
		t.Fatal(err)
	}
	p.env = append(os.Environ(), "CONTAINERS_CONF="+conf)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if out, err := p.cmd(ctx, "info").CombinedOutput(); err != nil {
		t.Skipf("podman does not run here, so the image is not built: podman info: %v\n%s", err, lastLines(out, 5))
	}
	return p
}

func (p podman) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, p.bin, append(slices.Clone(p.args), args...)...)
	c.Env = p.env
	return c
}

// run runs podman and returns its stdout; on failure the test fails with
// stderr.
func (p podman) run(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	c := p.cmd(ctx, args...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, lastLines(stderr.Bytes(), 20))
	}
	return strings.TrimSpace(string(out))
}

// start runs a container named name in the background with the run
// arguments args, removes it (and its anonymous volumes) when the test
// ends, and returns a function that reads its last log lines.
func (p podman) start(t *testing.T, ctx context.Context, name string, args []string) (logs func() string) {
	t.Helper()
	p.run(t, ctx, append([]string{"run", "-d", "--name", name}, args...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.cmd(ctx, "rm", "-f", "-v", name).Run()
	})
	return func() string {
		out, _ := p.cmd(ctx, "logs", name).CombinedOutput()
		return lastLines(out, 20)
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestImage builds the image with scripts/image and runs it: --version
// shows the stamped version and revision; `serve`, with the arguments and
// the ConfigMap of deploy/kubernetes/serve.yaml, runs as 65532, keeps its
// data in the /data volume and answers /healthz and the API; the
// Deployment of serve.yaml, run as the kubelet runs it (asKubernetes:
// read-only root, only the pod's volumes, its Redis and the Secret's
// PostgreSQL), gets ready and serves; the proxy sidecar, run the same
// way with and without the Secret's database URL, gets ready on its admin
// port in front of a real redis-server.
func TestImage(t *testing.T) {
	p := findPodman(t)
	// Only a bound against a hang: on a busy machine the static build
	// alone (its own cache: CGO_ENABLED=0, -trimpath) took over 10 min.
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()

	id := randomHex(t, 4)
	tag := "localhost/hotcount-test:" + id
	version, revision := "v0.0.0-imagetest", randomHex(t, 20)
	build := exec.CommandContext(ctx, "../scripts/image", tag)
	build.Env = append(p.env, "VERSION="+version, "REVISION="+revision, "ENGINE=podman")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, lastLines(out, 30))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.cmd(ctx, "rmi", "-f", tag).Run()
	})

	t.Run("version", func(t *testing.T) {
		got := p.run(t, ctx, "run", "--rm", tag, "--version")
		want := "hotcount " + version + " (revision " + revision + ", "
		if !strings.HasPrefix(got, want) {
			t.Errorf("--version printed %q, want it to start with %q", got, want)
		}
		if user := p.run(t, ctx, "image", "inspect", "--format", "{{.Config.User}}", tag); user != "65532:65532" {
			t.Errorf("the image runs as %q, want 65532:65532", user)
		}
	})

	t.Run("serve", func(t *testing.T) {
		objs := readManifest(t, "kubernetes/serve.yaml")
		pod := find(t, objs, "Deployment", "hotcount").Spec.Template.Spec
		c := hotcountContainer(t, pod, "serve")
		dir := t.TempDir()
		cfgPath := c.arg("--config")
		cfgText := configFile(t, objs, pod, c)
		token := randomHex(t, 16)
		for name, text := range map[string]string{"config": cfgText, "token": token} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		name := "hotcount-test-serve-" + id
		// The Deployment's arguments and config; no HOTCOUNT_REDIS or
		// HOTCOUNT_POSTGRES, so the embedded store with its data folder in
		// the image's /data volume.
		args := []string{"run", "-d", "--name", name, "-p", "127.0.0.1::7070",
			"-v", filepath.Join(dir, "config") + ":" + cfgPath + ":ro",
			"-v", filepath.Join(dir, "token") + ":" + tokenFile(t, cfgText) + ":ro",
			"-e", "HOTCOUNT_LISTEN=" + c.env("HOTCOUNT_LISTEN"), tag}
		p.run(t, ctx, append(args, c.Args...)...)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p.cmd(ctx, "rm", "-f", "-v", name).Run()
		})
		logs := func() string {
			out, _ := p.cmd(ctx, "logs", name).CombinedOutput()
			return lastLines(out, 20)
		}
		hostPort := p.run(t, ctx, "port", name, "7070")
		if _, port, err := net.SplitHostPort(hostPort); err != nil {
			t.Fatalf("podman port: %q", hostPort)
		} else {
			hostPort = "127.0.0.1:" + port
		}
		base := "http://" + hostPort
		waitHTTP(t, ctx, p, name, base+"/healthz", "", logs)
		// The API with the ConfigMap's token: an increment lands in
		// the volume's SQLite-backed store and reads back.
		if code, body := do(t, ctx, "POST", base+"/v1/counters/views:image/incr", token, `{"by":3}`); code != 200 {
			t.Fatalf("incr: %d %s\n%s", code, body, logs())
		}
		if code, _ := do(t, ctx, "GET", base+"/v1/counters/views:image", "", ""); code != 401 {
			t.Errorf("a read without the token answered %d, want 401", code)
		}
		mount := p.run(t, ctx, "inspect", "--format", "{{range .Mounts}}{{if eq .Destination \"/data\"}}{{.Source}}{{end}}{{end}}", name)
		if mount == "" {
			t.Errorf("no volume at /data")
		} else if st, err := os.Stat(filepath.Join(mount, "hotcount-data", "hotcount.db")); err != nil {
			t.Errorf("no SQLite file in the /data volume (serve's default data folder, ./hotcount-data, in the working folder /data): %v", err)
		} else if uid := fileUID(st); uid != 65532 {
			t.Errorf("hotcount.db belongs to uid %d, want 65532", uid)
		}
		p.run(t, ctx, "stop", "-t", "30", name)
		if code := p.run(t, ctx, "inspect", "--format", "{{.State.ExitCode}}", name); code != "0" {
			t.Errorf("serve exited with %s after SIGTERM\n%s", code, logs())
		}
		if l := logs(); !strings.Contains(l, "stopped cleanly") {
			t.Errorf("serve did not say it stopped cleanly:\n%s", l)
		}
	})

	t.Run("serve in Kubernetes", func(t *testing.T) {
		objs := readManifest(t, "kubernetes/serve.yaml")
		pod := find(t, objs, "Deployment", "hotcount").Spec.Template.Spec
		c := hotcountContainer(t, pod, "serve")
		node, err := testenv.StartNode(ctx, testenv.NodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Stop() })
		token := randomHex(t, 16)
		// The Deployment as the kubelet runs it: its environment (Redis
		// seeds, the Secret's PostgreSQL URL), its volumes only, a
		// read-only root.
		listen := freeAddr(t)
		name := "hotcount-test-serve-k8s-" + id
		secret := map[string]string{"token": token, "postgres-url": postgresURL(t)}
		override := map[string]string{"HOTCOUNT_LISTEN": listen, "HOTCOUNT_REDIS": node.Addr}
		logs := p.start(t, ctx, name, asKubernetes(t, objs, pod, c, tag, t.TempDir(), secret, override))
		base := "http://" + listen
		waitHTTP(t, ctx, p, name, base+c.StartupProbe.HTTPGet.Path, "", logs)
		waitHTTP(t, ctx, p, name, base+c.ReadinessProbe.HTTPGet.Path, "", logs)
		if code, body := do(t, ctx, "POST", base+"/v1/counters/likes:k8s/incr", token, `{"by":4}`); code != 200 {
			t.Fatalf("incr: %d %s\n%s", code, body, logs())
		}
		if code, body := do(t, ctx, "GET", base+"/v1/counters/likes:k8s", token, ""); code != 200 || !strings.Contains(body, `"value":4`) {
			t.Errorf("read: %d %s, want the value 4\n%s", code, body, logs())
		}
		p.run(t, ctx, "stop", "-t", "30", name)
		if code := p.run(t, ctx, "inspect", "--format", "{{.State.ExitCode}}", name); code != "0" {
			t.Errorf("serve exited with %s after SIGTERM\n%s", code, logs())
		}
		if l := logs(); !strings.Contains(l, "stopped cleanly") {
			t.Errorf("serve did not say it stopped cleanly:\n%s", l)
		}
	})

	// The sidecar with the Secret's optional database URL, and without it.
	for _, withPostgres := range []bool{true, false} {
		t.Run(fmt.Sprintf("proxy sidecar/postgres=%v", withPostgres), func(t *testing.T) {
			objs := readManifest(t, "kubernetes/proxy-sidecar.yaml")
			var pod podSpec
			for _, o := range objs {
				if o.Kind == "Deployment" {
					pod = o.Spec.Template.Spec
				}
			}
			c := hotcountContainer(t, pod, "proxy")
			node, err := testenv.StartNode(ctx, testenv.NodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { node.Stop() })
			cfgText := configFile(t, objs, pod, c)
			checkTokenFile(t, c, cfgText)
			token := randomHex(t, 16)
			// As the kubelet runs the sidecar (read-only root, only the
			// pod's volumes), with the Secret's database URL; on free
			// loopback ports rather than the pod's.
			admin, resp := freeAddr(t), freeAddr(t)
			name := fmt.Sprintf("hotcount-test-proxy-%s-%v", id, withPostgres)
			secret := map[string]string{"token": token}
			if withPostgres {
				secret["postgres-url"] = postgresURL(t)
			}
			override := map[string]string{"HOTCOUNT_REDIS": node.Addr, "HOTCOUNT_ADMIN_LISTEN": admin, "HOTCOUNT_RESP_LISTEN": resp}
			logs := p.start(t, ctx, name, asKubernetes(t, objs, pod, c, tag, t.TempDir(), secret, override))
			waitHTTP(t, ctx, p, name, "http://"+admin+c.ReadinessProbe.HTTPGet.Path, "", logs)
			if got, err := testenv.Do(ctx, resp, "INCRBY", "views:sidecar", "2"); err != nil || got != "2" {
				t.Errorf("INCRBY through the proxy: %q, %v\n%s", got, err, logs())
			}
			// The admin port: metrics public, the dashboard's routes behind
			// the Secret's token.
			if code, body := do(t, ctx, "GET", "http://"+admin+"/metrics", "", ""); code != 200 {
				t.Errorf("/metrics without a token: %d %s", code, body)
			}
			if code, _ := do(t, ctx, "GET", "http://"+admin+"/v1/stats", "", ""); code != 401 {
				t.Errorf("/v1/stats without a token answered %d, want 401", code)
			}
			if code, body := do(t, ctx, "GET", "http://"+admin+"/v1/stats", token, ""); code != 200 {
				t.Errorf("/v1/stats with the token: %d %s", code, body)
			}
		})
	}
}

// waitHTTP polls url until it answers 200, for up to two minutes; it
// stops early when the container has exited.
func waitHTTP(t *testing.T, ctx context.Context, p podman, name, url, token string, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		if !p.running(ctx, name) {
			t.Fatalf("%s: the container exited\n%s", url, logs())
		}
		code, body := do(t, ctx, "GET", url, token, "")
		if code == 200 {
			return
		}
		last = fmt.Sprintf("%d %s", code, body)
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 (last: %s)\n%s", url, last, logs())
}

// running reports whether the container name is running (false also
// when podman cannot tell).
func (p podman) running(ctx context.Context, name string) bool {
	out, err := p.cmd(ctx, "inspect", "--format", "{{.State.Running}}", name).Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

// do sends one request; a failed connection is code 0.
func do(t *testing.T, ctx context.Context, method, url, token, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

// freeAddr returns a free loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
