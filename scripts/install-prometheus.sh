#!/usr/bin/env bash
# Installs Prometheus 2.42 (server and promtool) from Debian's package when
# it is not on the PATH: the end-to-end rules test runs it. Prometheus 3.x's
# promtool comes from the Go module proxy (see the Makefile).
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "prometheus is not installed and apt-get is not available: install Prometheus, or skip the end-to-end test with SLOPROBER_SKIP_E2E=1" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package may start its service; the tests run their own Prometheus.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  $sudo systemctl stop prometheus || true
fi
command -v prometheus
