package deploy

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hotcount/hotcount/internal/testenv"
)

// asKubernetes returns the podman run arguments (after "run -d --name
// NAME") that start container c of pod as the kubelet would:
//
//   - the image's VOLUME is ignored: Kubernetes mounts the pod's volumes
//     and nothing else, so a path no volume covers is the image's own
//     (read-only under readOnlyRootFilesystem);
//   - the root filesystem is read-only when the manifest says so, without
//     the tmpfs podman adds on /tmp and /run;
//   - emptyDir volumes are empty tmpfs, ConfigMap and Secret volumes are
//     their files, bound read-only (a Secret's values are taken from
//     secret, by key);
//   - the environment is the manifest's, a secretKeyRef taken from
//     secret (an optional one left out when secret lacks its key), and
//     the variables of override replace or add to it (listen addresses on
//     free loopback ports, the Redis the test started);
//   - the user, group, capabilities and privilege escalation are the
//     manifest's.
//
// The container runs on the host's network, to reach Redis and PostgreSQL
// on loopback. The arguments end with the image tag and c's arguments.
func asKubernetes(t *testing.T, objs []object, pod podSpec, c container, tag, dir string, secret, override map[string]string) []string {
	t.Helper()
	args := []string{"--network", "host", "--image-volume", "ignore"}
	if c.SecurityContext["readOnlyRootFilesystem"] == true {
		args = append(args, "--read-only", "--read-only-tmpfs=false")
	}
	if c.SecurityContext["allowPrivilegeEscalation"] == false {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	args = append(args, "--cap-drop", "all")
	user, group := c.SecurityContext["runAsUser"], c.SecurityContext["runAsGroup"]
	if user == nil {
		user = pod.SecurityContext["runAsUser"]
	}
	if group == nil {
		group = pod.SecurityContext["runAsGroup"]
	}
	if u, ok := user.(int); ok {
		g, ok := group.(int)
		if !ok {
			g = u
		}
		args = append(args, "--user", strconv.Itoa(u)+":"+strconv.Itoa(g))
	}

	for _, m := range c.VolumeMounts {
		found := false
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			found = true
			files := map[string]string{}
			switch {
			case v.EmptyDir != nil:
				args = append(args, "--tmpfs", m.MountPath+":rw,mode=1777")
				continue
			case v.ConfigMap != nil:
				files = find(t, objs, "ConfigMap", v.ConfigMap.Name).Data
			case v.Secret != nil:
				if len(v.Secret.Items) == 0 {
					files = secret
				}
				for _, it := range v.Secret.Items {
					val, ok := secret[it.Key]
					if !ok {
						t.Fatalf("volume %s: the test's Secret has no key %s", v.Name, it.Key)
					}
					files[it.Path] = val
				}
			default:
				t.Fatalf("volume %s: a kind the test does not mount", v.Name)
			}
			host := filepath.Join(dir, "volume-"+v.Name)
			if err := os.MkdirAll(host, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, text := range files {
				if err := os.WriteFile(filepath.Join(host, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args = append(args, "-v", host+":"+m.MountPath+":ro")
		}
		if !found {
			t.Fatalf("%s mounts %s, which the pod does not have", c.Name, m.Name)
		}
	}

	set := map[string]bool{}
	for _, e := range c.Env {
		set[e.Name] = true
		if v, ok := override[e.Name]; ok {
			args = append(args, "-e", e.Name+"="+v)
			continue
		}
		if e.ValueFrom == nil {
			args = append(args, "-e", e.Name+"="+e.Value)
			continue
		}
		ref, _ := e.ValueFrom["secretKeyRef"].(map[string]any)
		key, _ := ref["key"].(string)
		if ref == nil || key == "" {
			t.Fatalf("%s: env %s comes from %v, which the test does not resolve", c.Name, e.Name, e.ValueFrom)
		}
		v, ok := secret[key]
		if !ok {
			if ref["optional"] == true {
				continue
			}
			t.Fatalf("%s: env %s needs the Secret's key %s, which the test's Secret lacks", c.Name, e.Name, key)
		}
		args = append(args, "-e", e.Name+"="+v)
	}
	for name, v := range override {
		if !set[name] {
			args = append(args, "-e", name+"="+v)
		}
	}
	return append(append(args, tag), c.Args...)
}

// postgresURL returns the test database's URL with a new, empty schema of
// its own as the search path (dropped when the test ends).
func postgresURL(t *testing.T) string {
	t.Helper()
	schema := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatalf("PostgreSQL (%s): %v", testenv.PostgresURL(), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
