#!/usr/bin/env bash
# Installs Debian's Chromium when it is not on the PATH: the tests of the HTML
# reports (internal/testkit/browser) render them in a real headless Chromium, so that a
# blank or broken report fails the build. Prints the path of the browser, found
# as internal/testkit/browser's Path finds it: SLOPROBER_CHROMIUM, then chromium,
# chromium-browser or google-chrome on the PATH.
set -euo pipefail
if [ -n "${SLOPROBER_CHROMIUM:-}" ]; then
  if ! command -v "$SLOPROBER_CHROMIUM"; then
    echo "SLOPROBER_CHROMIUM=$SLOPROBER_CHROMIUM is not an executable: fix it, or unset it to install Debian's chromium" >&2
    exit 1
  fi
  exit 0
fi
for bin in chromium chromium-browser google-chrome; do
  if command -v "$bin"; then
    exit 0
  fi
done
if ! command -v apt-get >/dev/null; then
  echo "chromium is not installed and apt-get is not available: install Chromium (or set SLOPROBER_CHROMIUM to its binary), or skip the browser tests with SLOPROBER_SKIP_BROWSER=1" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# Without recommends, nothing brings a font: fonts-dejavu-core is the one the
# screenshots need to show text at all.
$sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium
