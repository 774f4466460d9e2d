// Package deploy holds no code of its own: its tests check the files under
// deploy/ (the compose stack, the kustomize base, the Helm chart) and the
// repository's Dockerfile, offline. cmd/k8sgen writes the copies of rules/
// and dashboards/ that the base and the chart need.
package deploy

//go:generate go run ./cmd/k8sgen
