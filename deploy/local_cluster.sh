#!/usr/bin/env bash
# A local dapple cluster on 127.0.0.1 from a build tree: one dapple-coordinator, N cpu
# dapple-workers and, with --prometheus, a Prometheus server scraping them. Processes run in the
# background; pids and logs live in the run folder, and `stop` ends exactly those processes.
#
#   deploy/local_cluster.sh start [-n WORKERS] [--port PORT] [--metrics-port PORT] [--prometheus]
#                                 [--prometheus-port PORT] [--build-dir DIR] [--run-dir DIR] [--devices DEV]
#                                 [--join-token-file F] [--admin-token-file F] [-- WORKER_FLAGS...]
#   deploy/local_cluster.sh status [--run-dir DIR]
#   deploy/local_cluster.sh stop   [--run-dir DIR]
#   deploy/local_cluster.sh rotate-join-token [--run-dir DIR] [--build-dir DIR] [--admin-token-file F]
#
# Defaults: 2 workers, gRPC port 7600 (0: a free port), coordinator metrics on 9400 and worker i
# (1..N) on 9400+i (0: no metrics), build dir $DAPPLE_BUILD_DIR or build/, run dir
# $DAPPLE_RUN_DIR or /tmp/dapple-local, worker devices cpu. Prometheus (Debian's `prometheus`)
# listens on 127.0.0.1:9090 with deploy/prometheus/prometheus.yml's rules and its targets pointed at
# this cluster's ports. Tokens: the coordinator's first start writes RUN_DIR/admin.token and
# RUN_DIR/join.token and never again; workers join with the join token file, readiness is checked
# with the admin token file. rotate-join-token rotates the join token of the running cluster and
# writes the new one to RUN_DIR/join.token (rotating with dapplectl directly leaves that file stale:
# write the new token there, or pass --join-token-file). A revoked admin token: pass a valid one.
# Exit codes: 0 ok, 1 a process failed to start (its log is printed), 2 usage.
set -euo pipefail
# Logs name tenants, jobs and checkpoint paths, and the folder holds tokens and the database:
# everything this script creates is its user's alone (docs/security.md).
umask 077
SRC="$(cd "$(dirname "$0")/.." && pwd)"

# The comment block above, up to its first line of code. help: stdout, exit 0; misuse: stderr, 2.
help_text() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
usage() { help_text >&2; exit 2; }
die() { echo "local_cluster: $*" >&2; exit 1; }
usage_error() { echo "local_cluster: $*" >&2; exit 2; }

cmd="${1:-}"
[[ -z "$cmd" ]] && usage
shift
workers=2
port=7600
metrics_port=9400
prometheus=0
prometheus_port=9090
build_dir="${DAPPLE_BUILD_DIR:-$SRC/build}"
run_dir="${DAPPLE_RUN_DIR:-/tmp/dapple-local}"
devices=cpu
join_token_file=""
admin_token_file=""
worker_flags=()
while (($#)); do
  case "$1" in
    -n|--workers) workers="${2:?}"; shift 2 ;;
    --port) port="${2:?}"; shift 2 ;;
    --metrics-port) metrics_port="${2:?}"; shift 2 ;;
    --prometheus) prometheus=1; shift ;;
    --prometheus-port) prometheus_port="${2:?}"; shift 2 ;;
    --build-dir) build_dir="${2:?}"; shift 2 ;;
    --run-dir) run_dir="${2:?}"; shift 2 ;;
    --devices) devices="${2:?}"; shift 2 ;;
    --join-token-file) join_token_file="${2:?}"; shift 2 ;;
    --admin-token-file) admin_token_file="${2:?}"; shift 2 ;;
    --) shift; worker_flags=("$@"); break ;;
    -h|--help) help_text; exit 0 ;;
    *) echo "local_cluster: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "$workers" =~ ^[0-9]+$ ]] || usage_error "-n needs a number of workers, got '$workers'"
[[ "$port" =~ ^[0-9]+$ ]] || usage_error "--port needs a port number, got '$port'"
[[ "$metrics_port" =~ ^[0-9]+$ ]] ||
  usage_error "--metrics-port needs a port number, got '$metrics_port'"
[[ "$prometheus_port" =~ ^[0-9]+$ ]] ||
  usage_error "--prometheus-port needs a port number, got '$prometheus_port'"
pids="$run_dir/pids"
join_token_file="${join_token_file:-$run_dir/join.token}"
admin_token_file="${admin_token_file:-$run_dir/admin.token}"

# A pid file names a process of ours only while that pid still runs the binary it was started as
# (pids are reused after a process ends).
alive() {  # alive NAME -> 0 if NAME's recorded process still runs
  local f="$pids/$1.pid" pid exe
  [[ -f "$f" ]] || return 1
  read -r pid exe <"$f"
  [[ -n "$pid" ]] || return 1
  # argv[0] up to its NUL, read without a pipe (under pipefail a `| head | grep -q` can fail
  # on SIGPIPE) and quietly when the process has just ended.
  local first
  { IFS= read -r -d '' first <"/proc/$pid/cmdline"; } 2>/dev/null || return 1
  [[ "$first" == "$exe" ]]
}

stop_all() {  # stop_all [quiet]: quiet after a failed start, whose failed process is gone
  local f name pid exe deadline quiet="${1:-}"
  [[ -d "$pids" ]] || { echo "local_cluster: nothing running in $run_dir"; return 0; }
  for f in "$pids"/*.pid; do
    [[ -e "$f" ]] || continue
    name="$(basename "$f" .pid)"
    if alive "$name"; then
      read -r pid exe <"$f"
      kill -TERM "$pid" 2>/dev/null || true
    else
      # Not ours any more: stop never kills a process it did not start (one restarted by hand
      # on the same port keeps running: say so).
      read -r pid exe <"$f"
      [[ -n "$quiet" ]] || echo "local_cluster: $name (pid $pid) was not running any more" >&2
    fi
  done
  deadline=$((SECONDS + 15))
  for f in "$pids"/*.pid; do
    [[ -e "$f" ]] || continue
    name="$(basename "$f" .pid)"
    read -r pid exe <"$f"
    while alive "$name" && ((SECONDS < deadline)); do sleep 0.1; done
    # An exiting process drops its command line before it is gone: wait for the end itself.
    while [[ -r "/proc/$pid/status" ]] && ! grep -q '^State:[[:space:]]*[ZX]' "/proc/$pid/status" 2>/dev/null &&
      [[ ! -s "/proc/$pid/cmdline" ]] && ((SECONDS < deadline)); do sleep 0.05; done
    if alive "$name"; then
      read -r pid exe <"$f"
      echo "local_cluster: $name (pid $pid) ignored SIGTERM for 15 s; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
    fi
    rm -f "$f"
  done
  echo "local_cluster: stopped (logs kept in $run_dir)"
}

status_all() {
  local f name pid exe
  [[ -d "$pids" ]] || { echo "local_cluster: nothing running in $run_dir"; return 1; }
  local down=0 any=0
  for f in "$pids"/*.pid; do
    [[ -e "$f" ]] || continue
    any=1
    name="$(basename "$f" .pid)"
    read -r pid exe <"$f"
    if alive "$name"; then echo "$name pid $pid running"; else echo "$name pid $pid NOT running"; down=1; fi
  done
  ((any)) || { echo "local_cluster: nothing running in $run_dir"; return 1; }
  [[ -f "$run_dir/address" ]] && echo "coordinator $(cat "$run_dir/address")"
  return $down
}

launch() {  # launch NAME BINARY ARGS... : starts BINARY in its own session, logs to NAME.log
  local name="$1" exe="$2"
  shift 2
  local pidtmp="$pids/$name.starting"
  rm -f "$pidtmp"
  # In its own session, so a Ctrl-C meant for the shell does not reach it; the exec'd shell writes
  # its own pid, which stays the binary's (setsid may fork, so $! is not it).
  setsid sh -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidtmp" "$exe" "$@" \
    >>"$run_dir/$name.log" 2>&1 </dev/null &
  local deadline=$((SECONDS + 5))
  while [[ ! -s "$pidtmp" ]] && ((SECONDS < deadline)); do sleep 0.02; done
  [[ -s "$pidtmp" ]] || die "$name did not start"
  local pid
  pid="$(cat "$pidtmp")"
  echo "$pid $exe" >"$pids/$name.pid"
  rm -f "$pidtmp"
  # sh writes its pid before it execs the binary: until the exec, alive() reads "sh" and would
  # take the process for gone. Wait for it (a process that already ended stops the wait).
  deadline=$((SECONDS + 5))
  while ! alive "$name" && [[ -s "/proc/$pid/cmdline" ]] && ((SECONDS < deadline)); do sleep 0.01; done
}

fail_start() {  # fail_start NAME MESSAGE: prints NAME's log, stops what started, exits 1
  echo "local_cluster: $2; last lines of $run_dir/$1.log:" >&2
  tail -20 "$run_dir/$1.log" >&2 || true
  # The coordinator writes the token files at its first start only: after a rotation or a
  # revocation they are stale, and the fix is the operator's.
  if grep -q "refused the join token" "$run_dir/$1.log" 2>/dev/null; then
    echo "local_cluster: the join token in $join_token_file was refused: it was rotated (dapplectl admin join-token rotate) since the coordinator's first start wrote that file. Put the current token there or pass --join-token-file FILE; if it is lost, make a new one: $0 start -n 0 --run-dir $run_dir, then $0 rotate-join-token --run-dir $run_dir, stop and start again" >&2
  fi
  stop_all quiet >/dev/null
  exit 1
}

# Runs dapplectl as the admin of the run folder's cluster; exit code 6 (UNAUTHENTICATED) gets a
# message that says which token and what to do.
admin_ctl() {
  local ctl="$build_dir/dapplectl/dapplectl" rc=0
  env -u DAPPLE_TOKEN DAPPLE_TOKEN_FILE="$admin_token_file" "$ctl" --coordinator "$(cat "$run_dir/address")" "$@" || rc=$?
  if ((rc == 6)); then
    echo "local_cluster: the admin token in $admin_token_file was refused (revoked or expired?): pass a valid admin token with --admin-token-file FILE (another admin issues one: dapplectl admin token issue admin)" >&2
  fi
  return $rc
}

rotate_join_token() {
  [[ -f "$run_dir/address" ]] && alive coordinator || die "no coordinator runs in $run_dir: start the cluster first"
  local tmp="$join_token_file.new.$$"
  # dapplectl's note ("shown only this once: keep it secret") is about a token on the terminal;
  # here it goes to the file, so its stderr is shown only when the rotation fails.
  if ! admin_ctl admin join-token rotate >"$tmp" 2>"$tmp.err"; then
    cat "$tmp.err" >&2
    rm -f "$tmp" "$tmp.err"
    die "join-token rotate failed"
  fi
  rm -f "$tmp.err"
  mv -f "$tmp" "$join_token_file"
  echo "local_cluster: rotated the join token; the new one is in $join_token_file (running workers keep their credentials; new workers and the next start use it)"
}

# Read the whole help first: `--help | grep -q` under pipefail failed whenever grep's early exit
# made --help die of SIGPIPE (141), which dropped flags in about one start of three.
has_flag() {
  local help
  help=$("$1" --help 2>&1) || true
  [[ "$help" == *"$2"* ]]
}

start_all() {
  local coordinator="$build_dir/coordinator/dapple-coordinator"
  local worker="$build_dir/worker/dapple-worker"
  local ctl="$build_dir/dapplectl/dapplectl"
  for b in "$coordinator" "$worker" "$ctl"; do
    [[ -x "$b" ]] || die "$b is missing: build it first (ninja -C $build_dir dapple-coordinator dapple-worker dapplectl)"
  done
  mkdir -p "$pids"
  for f in "$pids"/*.pid; do
    [[ -e "$f" ]] || continue
    if alive "$(basename "$f" .pid)"; then
      die "a cluster already runs in $run_dir ($(basename "$f" .pid)); stop it first: $0 stop --run-dir $run_dir"
    fi
    rm -f "$f"
  done
  rm -f "$run_dir/port" "$run_dir/address"
  # The previous run's logs stay one start longer (NAME.log.1), for a start that follows a
  # failed one.
  local log
  for log in "$run_dir"/*.log; do
    [[ -e "$log" ]] && mv -f "$log" "$log.1"
  done

  # Metrics flags only where the binaries have them (older builds do not).
  local cargs=(--listen "127.0.0.1:$port" --port-file "$run_dir/port" --db "$run_dir/dapple.db")
  if has_flag "$coordinator" --metrics-port; then cargs+=(--metrics-port "$metrics_port"); fi
  if has_flag "$coordinator" --checkpoint-dir; then
    mkdir -p "$run_dir/checkpoints"
    cargs+=(--checkpoint-dir "$run_dir/checkpoints")
  fi
  launch coordinator "$coordinator" "${cargs[@]}"
  local deadline=$((SECONDS + 20)) bound=""
  while ((SECONDS < deadline)); do
    [[ -s "$run_dir/port" ]] && bound="$(cat "$run_dir/port")" && break
    alive coordinator || fail_start coordinator "the coordinator exited"
    sleep 0.05
  done
  [[ -n "$bound" ]] || fail_start coordinator "the coordinator did not listen within 20 s"
  local address="127.0.0.1:$bound"
  echo "$address" >"$run_dir/address"
  # The first start of a database writes its admin's token and the join token next to it
  # (docs/security.md); a restart on the same run folder keeps the files of the first.
  local auth=0
  if has_flag "$coordinator" --join-token-file; then auth=1; fi

  local worker_metrics=0
  if ((metrics_port > 0)) && has_flag "$worker" --metrics-port; then worker_metrics=1; fi
  for i in $(seq 1 "$workers"); do
    local wargs=(--coordinator "$address" --name "local-w$i" --devices "$devices")
    ((auth)) && wargs+=(--join-token-file "$join_token_file")
    ((worker_metrics)) && wargs+=(--metrics-port "$((metrics_port + i))")
    launch "worker-$i" "$worker" "${wargs[@]}" "${worker_flags[@]}"
  done
  # Ready when every worker is registered (the coordinator lists it).
  deadline=$((SECONDS + 30))
  local registered=0 listed
  while ((SECONDS < deadline)); do
    for i in $(seq 1 "$workers"); do
      alive "worker-$i" || fail_start "worker-$i" "worker local-w$i exited"
    done
    if listed="$(admin_ctl workers -o json 2>"$run_dir/dapplectl.err")"; then
      registered="$(python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin).get("workers", []) if w.get("id","").startswith("local-w") and not w.get("state","").endswith("DEAD")))' <<<"$listed" 2>/dev/null || echo 0)"
    elif grep -q "admin token in" "$run_dir/dapplectl.err"; then
      cat "$run_dir/dapplectl.err" >&2
      fail_start coordinator "dapplectl could not list the workers"
    fi
    ((registered >= workers)) && break
    sleep 0.2
  done
  ((registered >= workers)) || fail_start coordinator "only $registered of $workers workers registered within 30 s"

  if ((prometheus)); then start_prometheus "$worker_metrics"; fi

  local worker_text="no workers"
  if ((workers == 1)); then worker_text="1 worker (local-w1, devices $devices)"; fi
  if ((workers > 1)); then
    worker_text="$workers workers (local-w1..local-w$workers, devices $devices)"
  fi
  cat <<EOF
local_cluster: coordinator $address, $worker_text
  run folder: $run_dir (logs: coordinator.log, worker-<i>.log; database dapple.db)
  export DAPPLE_COORDINATOR=$address
  export DAPPLE_TOKEN_FILE=$admin_token_file   # the admin's token (docs/security.md)
  $ctl workers
  $ctl submit $SRC/examples/fashion_mnist_mlp.yaml --watch
EOF
  if ((workers < 2)); then
    # The example's parallel.devices is 2: with fewer workers it would wait forever.
    echo "  (the example runs 2 stages on 2 workers: start with -n 2, or submit a copy with" \
      "parallel.stages: 1 and parallel.devices: 1)"
  fi
  if ((metrics_port > 0)) && has_flag "$coordinator" --metrics-port; then
    echo "  metrics: http://127.0.0.1:$metrics_port/metrics (workers: ports $((metrics_port + 1))..$((metrics_port + workers)))"
  fi
  ((prometheus)) && echo "  prometheus: http://127.0.0.1:$prometheus_port"
  echo "  stop: $0 stop --run-dir $run_dir"
}

# Prometheus with deploy/prometheus/prometheus.yml, its scrape targets rewritten to this cluster's
# ports (job dapple-coordinator: the coordinator, job dapple-worker: every worker).
start_prometheus() {
  local worker_metrics="$1"
  command -v prometheus >/dev/null || fail_start coordinator "--prometheus: prometheus is not installed (apt-get install prometheus)"
  local config="$SRC/deploy/prometheus/prometheus.yml"
  [[ -f "$config" ]] || fail_start coordinator "--prometheus: $config is missing"
  local wtargets=()
  if ((worker_metrics)); then
    for i in $(seq 1 "$workers"); do wtargets+=("127.0.0.1:$((metrics_port + i))"); done
  fi
  mkdir -p "$run_dir/prometheus"
  python3 - "$config" "$run_dir/prometheus/prometheus.yml" "127.0.0.1:$metrics_port" "${wtargets[@]}" <<'EOF'
import os, sys, yaml
src, dst, coordinator, workers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
config = yaml.safe_load(open(src))
targets = {"dapple-coordinator": [coordinator], "dapple-worker": workers}
for job in config.get("scrape_configs", []):
    if job.get("job_name") in targets:
        job.pop("file_sd_configs", None)
        job["static_configs"] = [{"targets": targets[job["job_name"]]}]
# Rule files are relative to the source config's folder.
config["rule_files"] = [os.path.join(os.path.dirname(os.path.abspath(src)), f)
                        for f in config.get("rule_files", [])]
yaml.safe_dump(config, open(dst, "w"), sort_keys=False)
EOF
  launch prometheus "$(command -v prometheus)" --config.file="$run_dir/prometheus/prometheus.yml" \
    --storage.tsdb.path="$run_dir/prometheus/data" --web.listen-address="127.0.0.1:$prometheus_port"
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$prometheus_port/-/ready', timeout=1)" 2>/dev/null && return 0
    alive prometheus || fail_start prometheus "prometheus exited"
    sleep 0.2
  done
  fail_start prometheus "prometheus was not ready within 30 s"
}

case "$cmd" in
  start) start_all ;;
  stop) stop_all ;;
  status) status_all ;;
  rotate-join-token) rotate_join_token ;;
  -h|--help|help) help_text; exit 0 ;;
  *) echo "local_cluster: unknown command '$cmd' (start, status, stop, rotate-join-token)" >&2; usage ;;
esac
