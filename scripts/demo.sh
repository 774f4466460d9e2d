#!/usr/bin/env bash
# `make demo`: the compose stack of deploy/compose/ as plain processes on this
# machine, for where no container runtime is: the simulator, sloprober with
# deploy/compose/sloprober.yml, Prometheus with rules/sloprober.rules.yml,
# and Grafana with dashboards/ if it is installed. Everything listens on
# 127.0.0.1 only. Ctrl-C (or SIGTERM) stops it all.
#
# Settings (environment):
#   SLOPROBER_BIN     the sloprober binary (default: `make build`, ./sloprober)
#   SIM_PORT          8000     the simulator
#   SLOPROBER_PORT    9477     sloprober's /metrics and landing page
#   PROMETHEUS_PORT   9090
#   GRAFANA_PORT      3000
#   DEMO_DIR          where data, generated configurations and logs go
#                     (default: a new temporary directory, removed at the end)
#   DEMO_INSTALL      yes: install Prometheus without asking when it is
#                     missing (otherwise asked on a terminal, refused elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

SIM_PORT=${SIM_PORT:-8000}
SLOPROBER_PORT=${SLOPROBER_PORT:-9477}
PROMETHEUS_PORT=${PROMETHEUS_PORT:-9090}
GRAFANA_PORT=${GRAFANA_PORT:-3000}

# say tolerates a closed stdout: `make demo | tee log` then Ctrl-C ends
# tee first, and a message that killed this script (SIGPIPE) or failed it
# (set -e) would leave the processes running.
say() { printf 'demo: %s\n' "$*" 2>/dev/null || true; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

if [ -z "${SLOPROBER_BIN:-}" ]; then
  make -s build
  SLOPROBER_BIN=./sloprober
fi
bin=$(cd "$(dirname "$SLOPROBER_BIN")" && pwd)/$(basename "$SLOPROBER_BIN")
[ -x "$bin" ] || die "no sloprober binary at $SLOPROBER_BIN"

# Prometheus is installed only when the user says so: on a terminal, by
# answering; otherwise with DEMO_INSTALL=yes.
if ! command -v prometheus >/dev/null; then
  answer=${DEMO_INSTALL:-}
  if [ -z "$answer" ] && [ -t 0 ]; then
    read -r -p "demo: Prometheus is not installed. Install Debian's prometheus package (scripts/install-prometheus.sh, apt-get, with sudo if not root)? [y/N] " answer
  fi
  case "$answer" in
    y | Y | yes | YES) ;;
    *) die "Prometheus is needed: install it (or answer yes, or set DEMO_INSTALL=yes to run scripts/install-prometheus.sh)" ;;
  esac
  say "installing Debian's Prometheus (scripts/install-prometheus.sh)"
  scripts/install-prometheus.sh >/dev/null
fi

# The ports must be free: a stale demo or a real Prometheus would be
# scraped or queried in place of ours.
for port in "$SIM_PORT" "$SLOPROBER_PORT" "$PROMETHEUS_PORT" "$GRAFANA_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "127.0.0.1:$port is in use; set SIM_PORT, SLOPROBER_PORT, PROMETHEUS_PORT or GRAFANA_PORT"
  fi
done

keep_dir=1
if [ -z "${DEMO_DIR:-}" ]; then
  DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sloprober-demo.XXXXXX")
  keep_dir=0
fi
mkdir -p "$DEMO_DIR"
dir=$(cd "$DEMO_DIR" && pwd)

# Processes in start order: names and pids.
names=()
pids=()
stopping=0

# stop ends every process, the last started first, so that Prometheus is
# still there for sloprober's final scrape (sloprober waits up to its
# --shutdown.linger, 5 s, for one). Each gets SIGTERM and 30 s before SIGKILL.
stop() {
  local code=$?
  [ "$stopping" = 1 ] && return
  stopping=1
  trap '' INT TERM PIPE
  say "stopping"
  local i order=()
  # sloprober before Prometheus: Prometheus scrapes its final counts.
  for i in "${!names[@]}"; do
    if [ "${names[$i]}" = sloprober ]; then order+=("$i"); fi
  done
  for ((i = ${#names[@]} - 1; i >= 0; i--)); do
    if [ "${names[$i]}" != sloprober ]; then order+=("$i"); fi
  done
  for i in "${order[@]}"; do
    local pid=${pids[$i]} name=${names[$i]}
    kill -0 "$pid" 2>/dev/null || continue
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      say "$name did not stop within 30 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    say "$name stopped"
  done
  if [ "$keep_dir" = 0 ]; then
    rm -rf "$dir"
  else
    say "data and logs kept in $dir"
  fi
  exit "$code"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME COMMAND...: start a process in the background, its output in
# $dir/NAME.log, in a process group of its own (set -m): Ctrl-C at the
# terminal then reaches only make and this script, whose trap stops the
# processes in order, sloprober while Prometheus still scrapes.
start() {
  local name=$1
  shift
  set -m
  "$@" >"$dir/$name.log" 2>&1 &
  set +m
  names+=("$name")
  pids+=("$!")
}

# ready NAME URL: poll URL with `sloprober healthcheck` (no curl needed)
# until it answers 2xx, for at most 60 s; fail if the process exits.
ready() {
  local name=$1 url=$2 pid=${pids[${#pids[@]} - 1]}
  local deadline=$((SECONDS + 60))
  until "$bin" healthcheck --url "$url" --timeout 2s >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      printf 'demo: %s exited; the end of %s:\n' "$name" "$dir/$name.log" >&2
      tail -n 20 "$dir/$name.log" >&2
      exit 1
    fi
    ((SECONDS < deadline)) || die "$name: $url not ready within 60 s (log: $dir/$name.log)"
    sleep 0.2
  done
  say "$name ready (pid $pid)"
}

say "working directory $dir"

start sim "$bin" sim --web.listen-address="127.0.0.1:$SIM_PORT"
ready sim "http://127.0.0.1:$SIM_PORT/v1/models"

# The compose stack's configuration itself, its ${SIM_ADDR} pointed here.
export SIM_ADDR="127.0.0.1:$SIM_PORT"
start sloprober "$bin" run \
  --config.file="$repo/deploy/compose/sloprober.yml" --config.expand-env \
  --storage.path="$dir/data" --web.enable-test-api \
  --web.listen-address="127.0.0.1:$SLOPROBER_PORT"
ready sloprober "http://127.0.0.1:$SLOPROBER_PORT/-/ready"

# The compose stack's prometheus.yml with this machine's addresses: the
# rules from the repository, sloprober on its loopback port. Prometheus 2.x
# (Debian's 2.42) knows neither native-histogram setting; it scrapes classic
# buckets only, which is what the rules read.
prom_major=$(prometheus --version 2>&1 | sed -n 's/^prometheus, version \([0-9]*\)\..*/\1/p')
sed -e "s|\"sloprober:9477\"|\"127.0.0.1:$SLOPROBER_PORT\"|" \
    -e "s|/etc/prometheus/rules/\*\.yml|$repo/rules/sloprober.rules.yml|" \
    deploy/compose/prometheus.yml >"$dir/prometheus.yml"
if [ "${prom_major:-2}" -lt 3 ]; then
  sed -i -e '/^  scrape_native_histograms:/d' -e '/^  always_scrape_classic_histograms:/d' "$dir/prometheus.yml"
fi
if command -v promtool >/dev/null; then
  promtool check config "$dir/prometheus.yml" >"$dir/promtool.log" 2>&1 ||
    { cat "$dir/promtool.log" >&2; die "promtool check config $dir/prometheus.yml failed"; }
fi
start prometheus prometheus \
  --config.file="$dir/prometheus.yml" \
  --storage.tsdb.path="$dir/prometheus" \
  --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" \
  --enable-feature=exemplar-storage
ready prometheus "http://127.0.0.1:$PROMETHEUS_PORT/-/ready"

# Grafana, if installed: the compose stack's provisioning with this
# machine's paths and addresses.
grafana_cmd=()
if command -v grafana >/dev/null; then
  grafana_cmd=(grafana server)
elif command -v grafana-server >/dev/null; then
  grafana_cmd=(grafana-server)
fi
grafana_url=""
if [ ${#grafana_cmd[@]} -gt 0 ]; then
  grafana_home=${GRAFANA_HOME:-/usr/share/grafana}
  prov=$dir/grafana/provisioning
  mkdir -p "$prov/datasources" "$prov/dashboards" "$prov/plugins" "$prov/alerting" "$dir/grafana/data"
  sed -e "s|http://prometheus:9090|http://127.0.0.1:$PROMETHEUS_PORT|" \
    deploy/compose/grafana/provisioning/datasources/prometheus.yml >"$prov/datasources/prometheus.yml"
  sed -e "s|/etc/grafana/dashboards/sloprober|$repo/dashboards|" \
    deploy/compose/grafana/provisioning/dashboards/sloprober.yml >"$prov/dashboards/sloprober.yml"
  start grafana env \
    GF_PATHS_DATA="$dir/grafana/data" GF_PATHS_LOGS="$dir/grafana" GF_PATHS_PROVISIONING="$prov" \
    GF_SERVER_HTTP_ADDR=127.0.0.1 GF_SERVER_HTTP_PORT="$GRAFANA_PORT" \
    GF_AUTH_ANONYMOUS_ENABLED=true GF_AUTH_ANONYMOUS_ORG_ROLE=Editor \
    GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH="$repo/dashboards/sloprober-slo.json" \
    "${grafana_cmd[@]}" --homepath="$grafana_home"
  ready grafana "http://127.0.0.1:$GRAFANA_PORT/api/health"
  grafana_url="http://127.0.0.1:$GRAFANA_PORT/"
fi

# The alerts page of the Prometheus found: /alerts in the React UI;
# Debian's 2.42 is built without it and serves /classic/alerts only.
alerts=/alerts
if ! "$bin" healthcheck --url "http://127.0.0.1:$PROMETHEUS_PORT/alerts" --timeout 2s >/dev/null 2>&1 &&
  "$bin" healthcheck --url "http://127.0.0.1:$PROMETHEUS_PORT/classic/alerts" --timeout 2s >/dev/null 2>&1; then
  alerts=/classic/alerts
fi

cat <<EOF

  sloprober    http://127.0.0.1:$SLOPROBER_PORT/          landing page; /metrics, /config
  Prometheus   http://127.0.0.1:$PROMETHEUS_PORT$alerts   rules and alerts (strict-ttft misses its
                                                 SLO by design: its burn alert goes pending)
  simulator    http://127.0.0.1:$SIM_PORT/
               break it:  curl -X PUT 127.0.0.1:$SIM_PORT/sim/faults -d '{"error_rate":{"503":0.2}}'
               heal it:   curl -X PUT 127.0.0.1:$SIM_PORT/sim/faults -d '{}'
  step test    curl -X POST 127.0.0.1:$SLOPROBER_PORT/api/v1/tests/knee/run   (about 2.5 minutes)
EOF
if [ -n "$grafana_url" ]; then
  printf '  Grafana      %s          the sloprober dashboards, anonymous editor\n' "$grafana_url"
else
  cat <<EOF
  Grafana      not installed (no grafana or grafana-server on the PATH). In any
               Grafana: add a Prometheus datasource at http://127.0.0.1:$PROMETHEUS_PORT,
               then Dashboards > New > Import dashboards/sloprober-slo.json and
               dashboards/sloprober-prober.json (they pick the datasource
               with their datasource variable). With Grafana installed,
               this script provisions both itself.
EOF
fi
printf '\n  logs in %s; Ctrl-C stops everything\n\n' "$dir"

# Prometheus' first scrape of sloprober, as a check that the stack is wired.
if command -v promtool >/dev/null; then
  deadline=$((SECONDS + 30))
  until promtool query instant "http://127.0.0.1:$PROMETHEUS_PORT" 'up{job="sloprober"} == 1' 2>/dev/null | grep -q sloprober; do
    ((SECONDS < deadline)) || die "Prometheus has not scraped sloprober within 30 s (log: $dir/prometheus.log)"
    sleep 1
  done
  say "Prometheus scrapes sloprober (up{job=\"sloprober\"} == 1)"
fi

# Until Ctrl-C, until whoever started this script is gone (`kill <make's
# pid>`: make passes SIGTERM to its shell and dies, and a shell that did
# not exec this script leaves it to init), or until a process dies on its
# own: then stop the others. The watcher looks every second, and ends with
# the script.
# A parent that died is seen by this script's parent becoming another
# (init, a subreaper) at once, while its pid may live on as a zombie that
# `kill -0` still finds.
parent=$PPID
parent_alive() {
  local _pid _comm _state ppid _rest
  if [ -r "/proc/$$/stat" ] && read -r _pid _comm _state ppid _rest <"/proc/$$/stat"; then
    [ "$ppid" = "$parent" ]
  else
    kill -0 "$parent" 2>/dev/null
  fi
}
(
  trap - INT TERM
  while parent_alive; do
    kill -0 $$ 2>/dev/null || exit 0
    sleep 1
  done
  kill -TERM $$ 2>/dev/null
) &
watcher=$!
while :; do
  if wait -n "${pids[@]}" "$watcher"; then code=0; else code=$?; fi
  kill -0 "$watcher" 2>/dev/null || exit 143
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      printf 'demo: %s exited (status %s); the end of %s:\n' "${names[$i]}" "$code" "$dir/${names[$i]}.log" >&2
      tail -n 20 "$dir/${names[$i]}.log" >&2
      exit 1
    fi
  done
done
