package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// object is what the tests read of a Kubernetes object.
type object struct {
	Kind     string            `yaml:"kind"`
	Metadata meta              `yaml:"metadata"`
	Data     map[string]string `yaml:"data"`
	Spec     struct {
		// Selector is a Deployment's {matchLabels: ...} or a Service's
		// labels.
		Selector map[string]any `yaml:"selector"`
		Template struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
		Ports []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type meta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type podSpec struct {
	SecurityContext map[string]any `yaml:"securityContext"`
	InitContainers  []container    `yaml:"initContainers"`
	Containers      []container    `yaml:"containers"`
	Volumes         []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
			Items      []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"secret"`
		EmptyDir *struct{} `yaml:"emptyDir"`
	} `yaml:"volumes"`
}

type container struct {
	Name          string   `yaml:"name"`
	Image         string   `yaml:"image"`
	Args          []string `yaml:"args"`
	RestartPolicy string   `yaml:"restartPolicy"`
	Env           []struct {
		Name      string         `yaml:"name"`
		Value     string         `yaml:"value"`
		ValueFrom map[string]any `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe  *probe         `yaml:"readinessProbe"`
	LivenessProbe   *probe         `yaml:"livenessProbe"`
	StartupProbe    *probe         `yaml:"startupProbe"`
	SecurityContext map[string]any `yaml:"securityContext"`
	Resources       struct {
		Requests map[string]string `yaml:"requests"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// readManifest decodes every document of a YAML file.
func readManifest(t *testing.T, file string) []object {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// find returns the object of kind named name.
func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %q", kind, name)
	return object{}
}

// env returns the value of the variable name set in c ("" when unset or
// set from a reference).
func (c container) env(name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// port resolves a probe's or Service's port (a number or a port name) to
// a number of c.
func (c container) port(p any) int {
	switch v := p.(type) {
	case int:
		return v
	case string:
		for _, cp := range c.Ports {
			if cp.Name == v {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// arg returns the value of flag in c's arguments ("--flag value").
func (c container) arg(flag string) string {
	if i := slices.Index(c.Args, flag); i >= 0 && i+1 < len(c.Args) {
		return c.Args[i+1]
	}
	return ""
}

// hotcountContainer returns the container (or native sidecar) of pod
// running `hotcount <command>`.
func hotcountContainer(t *testing.T, pod podSpec, command string) container {
	t.Helper()
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if len(c.Args) > 0 && c.Args[0] == command && strings.Contains(c.Image, "hotcount") {
			return c
		}
	}
	t.Fatalf("no container runs hotcount %s", command)
	return container{}
}

// configFile returns the ConfigMap key mounted at c's --config path, and
// checks that it is.
func configFile(t *testing.T, objs []object, pod podSpec, c container) string {
	t.Helper()
	file := c.arg("--config")
	if file == "" {
		t.Fatalf("%s: no --config in %q", c.Name, c.Args)
	}
	for _, m := range c.VolumeMounts {
		if path.Dir(file) != m.MountPath {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm := find(t, objs, "ConfigMap", v.ConfigMap.Name)
				text, ok := cm.Data[path.Base(file)]
				if !ok {
					t.Fatalf("ConfigMap %s has no key %s", cm.Metadata.Name, path.Base(file))
				}
				return text
			}
		}
	}
	t.Fatalf("%s: --config %s is not on a ConfigMap volume", c.Name, file)
	return ""
}

// checkProbe checks that p asks for path on the port of listen.
func checkProbe(t *testing.T, c container, what string, p *probe, wantPath, listen string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP %s probe", c.Name, what)
		return
	}
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		t.Errorf("%s: listen address %q: %v", c.Name, listen, err)
		return
	}
	if p.HTTPGet.Path != wantPath || strconv.Itoa(c.port(p.HTTPGet.Port)) != port {
		t.Errorf("%s: %s probe asks for %s on port %v (%d); want %s on %s, where it listens", c.Name, what, p.HTTPGet.Path, p.HTTPGet.Port, c.port(p.HTTPGet.Port), wantPath, port)
	}
}

// checkHardening checks requests and the non-root user (65532, the image's).
func checkHardening(t *testing.T, pod podSpec, c container) {
	t.Helper()
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" {
		t.Errorf("%s: resource requests %v lack cpu or memory", c.Name, c.Resources.Requests)
	}
	user := c.SecurityContext["runAsUser"]
	if user == nil {
		user = pod.SecurityContext["runAsUser"]
	}
	nonRoot := c.SecurityContext["runAsNonRoot"]
	if nonRoot == nil {
		nonRoot = pod.SecurityContext["runAsNonRoot"]
	}
	if user != 65532 || nonRoot != true {
		t.Errorf("%s: runs as user %v, runAsNonRoot %v; want 65532 and true", c.Name, user, nonRoot)
	}
	if c.SecurityContext["readOnlyRootFilesystem"] != true || c.SecurityContext["allowPrivilegeEscalation"] != false {
		t.Errorf("%s: securityContext %v: want readOnlyRootFilesystem and no privilege escalation", c.Name, c.SecurityContext)
	}
}

// tokenFile returns the token_file of a config file's text.
func tokenFile(t *testing.T, cfgText string) string {
	t.Helper()
	var cfg struct {
		TokenFile string `yaml:"token_file"`
	}
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatalf("the ConfigMap's config: %v", err)
	}
	return cfg.TokenFile
}

// checkTokenFile checks that the config names a token file on a volume
// mounted in c.
func checkTokenFile(t *testing.T, c container, cfgText string) {
	t.Helper()
	file := tokenFile(t, cfgText)
	for _, m := range c.VolumeMounts {
		if file != "" && m.MountPath == path.Dir(file) {
			return
		}
	}
	t.Errorf("%s: token_file %q is not on a mounted volume", c.Name, file)
}

func TestServeManifest(t *testing.T) {
	objs := readManifest(t, "kubernetes/serve.yaml")
	dep := find(t, objs, "Deployment", "hotcount")
	pod := dep.Spec.Template.Spec
	c := hotcountContainer(t, pod, "serve")
	listen := c.env("HOTCOUNT_LISTEN")
	if listen != "0.0.0.0:7070" {
		t.Errorf("HOTCOUNT_LISTEN = %q, want 0.0.0.0:7070 (the image's default, reachable from the Service)", listen)
	}
	checkProbe(t, c, "readiness", c.ReadinessProbe, "/readyz", listen)
	checkProbe(t, c, "liveness", c.LivenessProbe, "/healthz", listen)
	checkHardening(t, pod, c)
	checkTokenFile(t, c, configFile(t, objs, pod, c))

	svc := find(t, objs, "Service", "hotcount")
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("Service selects %s=%v; the pods are labelled %v", k, v, dep.Spec.Template.Metadata.Labels)
		}
	}
	if len(svc.Spec.Ports) != 1 || strconv.Itoa(c.port(svc.Spec.Ports[0].TargetPort)) != "7070" {
		t.Errorf("Service ports %+v: want one, to the container's 7070", svc.Spec.Ports)
	}
}

func TestProxySidecarManifest(t *testing.T) {
	objs := readManifest(t, "kubernetes/proxy-sidecar.yaml")
	var dep object
	for _, o := range objs {
		if o.Kind == "Deployment" {
			dep = o
		}
	}
	pod := dep.Spec.Template.Spec
	c := hotcountContainer(t, pod, "proxy")
	if slices.ContainsFunc(pod.InitContainers, func(i container) bool { return i.Name == c.Name }) && c.RestartPolicy != "Always" {
		t.Errorf("%s is an init container without restartPolicy Always: it would block the app", c.Name)
	}
	var apps []container
	for _, o := range pod.Containers {
		if o.Name != c.Name {
			apps = append(apps, o)
		}
	}
	if len(apps) == 0 {
		t.Fatal("no app container beside the proxy")
	}
	admin := c.env("HOTCOUNT_ADMIN_LISTEN")
	host, _, err := net.SplitHostPort(admin)
	if err != nil || host == "127.0.0.1" || host == "localhost" {
		t.Errorf("HOTCOUNT_ADMIN_LISTEN = %q: the kubelet probes the pod's address, not loopback", admin)
	}
	checkProbe(t, c, "readiness", c.ReadinessProbe, "/readyz", admin)
	checkProbe(t, c, "liveness", c.LivenessProbe, "/healthz", admin)
	checkHardening(t, pod, c)
	resp := c.env("HOTCOUNT_RESP_LISTEN")
	if !strings.HasPrefix(resp, "127.0.0.1:") {
		t.Errorf("HOTCOUNT_RESP_LISTEN = %q: the app reaches its sidecar on loopback; nothing else should", resp)
	}
	if apps[0].env("REDIS_ADDR") != resp {
		t.Errorf("the app's REDIS_ADDR %q is not the proxy's %q", apps[0].env("REDIS_ADDR"), resp)
	}
	if c.env("HOTCOUNT_REDIS") == "" {
		t.Error("the proxy has no HOTCOUNT_REDIS")
	}
	var cfg struct {
		Namespaces []map[string]any `yaml:"namespaces"`
	}
	text := configFile(t, objs, pod, c)
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil || len(cfg.Namespaces) == 0 {
		t.Errorf("the proxy's config names no namespaces (%v): every key would pass through", err)
	}
	// The admin port listens beyond loopback: its dashboard routes need
	// a token.
	checkTokenFile(t, c, text)
}

// unit reads a systemd unit: each key's values in order.
func unit(t *testing.T, file string) map[string][]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is not KEY=VALUE", file, line)
		}
		keys[k] = append(keys[k], v)
	}
	return keys
}

func TestSystemdUnit(t *testing.T) {
	u := unit(t, "systemd/hotcount.service")
	if exec := u["ExecStart"]; len(exec) != 1 || !strings.HasSuffix(strings.Fields(exec[0])[0], "/hotcount") || !slices.Contains(strings.Fields(exec[0]), "serve") {
		t.Errorf("ExecStart = %q, want one hotcount serve", exec)
	}
	// serve's default data folder, ./hotcount-data, is in the
	// StateDirectory; a HOTCOUNT_DATA would refuse the HOTCOUNT_POSTGRES
	// the unit's comment tells one to set (TestSystemdUnitRuns).
	if got, want := strings.Join(u["WorkingDirectory"], ""), "/var/lib/"+strings.Join(u["StateDirectory"], ""); got != want {
		t.Errorf("WorkingDirectory %q is not the StateDirectory %q", got, want)
	}
	for _, e := range u["Environment"] {
		if strings.HasPrefix(e, "HOTCOUNT_DATA=") || strings.HasPrefix(e, "HOTCOUNT_POSTGRES=") {
			t.Errorf("Environment=%s: the durable store is the operator's choice (hotcount.env)", e)
		}
	}
	if len(u["User"]) == 0 && !slices.Contains(u["DynamicUser"], "yes") {
		t.Error("the unit runs as root: set User= or DynamicUser=yes")
	}
	if got := u["KillSignal"]; len(got) > 0 && got[0] != "SIGTERM" {
		t.Errorf("KillSignal = %q: serve drains on SIGTERM", got)
	}
}
