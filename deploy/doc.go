// Package deploy holds no code: it is the home of what deploys hotcount
// (the container image's Containerfile, Kubernetes manifests, a systemd
// unit, Prometheus rules and a Grafana dashboard), and its tests check
// them: the manifests against the settings and routes the binary really
// has, and, where podman runs, the image itself (built with scripts/image,
// its stamped --version, and `serve` answering /healthz as the Kubernetes
// Deployment runs it).
package deploy
