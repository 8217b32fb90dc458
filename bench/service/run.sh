#!/usr/bin/env bash
# The service beside what its users would run instead, in one run, phases
# interleaved round by round (so a slow spell of a shared machine touches
# every side alike), and one markdown table of the figures and ratios:
#
#   HTTP proxy      rl-wasm-host (one rule, key_by ip, admits everything)
#                   vs nginx limit_req (keyed by the client address, admits
#                   everything), both in front of the same upstream
#                   (cmd/upstream); wrk, 2 threads, 64 and 8 connections:
#                   req/s, p50, p99, CPU µs per request of the proxy and
#                   of the upstream (utime+stime from /proc/PID/stat)
#   HTTP proxy,     the same two proxies in front of an upstream fast enough
#   fast upstream   that the proxies, not the upstream, set the rate: an
#                   nginx of its own answering a fixed 31-byte document
#                   from a `return 200` location (one upstream for both
#                   proxies); 64 and 8 connections, the proxies' CPU µs per
#                   request beside req/s
#   decision API    POST /v1/ratelimit/check, wrk, 64 connections, 1000 keys
#   rate limit      cmd/rlsload, 64 callers over 1 and 64 gRPC connections,
#   service (gRPC)  one descriptor per call, 1000 keys: rl-wasm-host on the
#                   memory store, rl-wasm-host on PostgreSQL (pgstore
#                   batched, synchronous_commit off: the defaults of
#                   -store postgres), envoyproxy/ratelimit v1.4.0 on Redis
#                   (pool 64), with the same configuration file
#
#   bench/service/run.sh                   # ROUNDS=3 DURATION=5s, about 10 minutes
#   ROUNDS=5 DURATION=10s OUT=/tmp/svc bench/service/run.sh
#   PPROF=1 bench/service/run.sh           # also 5 s CPU profiles of the proxy under wrk -c64
#                                          # ($OUT/proxy.pprof; $OUT/proxy-fast.pprof, fast upstream)
#   ONLY=proxy bench/service/run.sh        # the HTTP proxy phases alone (no PostgreSQL, Redis,
#                                          # envoyproxy/ratelimit, decision API or gRPC)
#   RL_TREE=../other bench/service/run.sh  # rl-wasm-host built from another checkout (a before/after)
#
# Missing tools are installed with apt-get (nginx-light, wrk, redis-server,
# iproute2) when run as root. PostgreSQL must be running (DATABASE_URL's
# server, default postgres://postgres@127.0.0.1:5432; the database
# rl_bench_service is dropped and created anew; rl-wasm-host connects
# without TLS, as envoyproxy/ratelimit to its Redis). envoyproxy/ratelimit
# v1.4.0 binds every interface and has no setting for it, so it runs with
# its Redis in a network namespace of their own that has only a loopback
# interface (unshare); its load client runs there too.
set -euo pipefail
# The tree rl-wasm-host is built from: this one, or RL_TREE (relative to
# the directory the script is started in).
ROOT=$(cd "${RL_TREE:-$(dirname "$0")/../..}" && pwd)
cd "$(dirname "$0")"
BENCH=$PWD
ONLY=${ONLY:-}                          # proxy: the HTTP proxy phases alone
case "$ONLY" in "" | proxy) ;; *) echo "ONLY=$ONLY: only ONLY=proxy is known" >&2; exit 2 ;; esac
all() { [ "$ONLY" != proxy ]; }

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-2s}
OUT=${OUT:-$(mktemp -d /tmp/rl-bench-service.XXXXXX)}
PGURL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
PGBASE=${PGURL%/*}
DB=rl_bench_service
mkdir -p "$OUT"

# Ports (loopback).
UP=127.0.0.1:18090
RL=127.0.0.1:18091 RL_API=127.0.0.1:18092 RL_GRPC=127.0.0.1:18093 RL_PPROF=127.0.0.1:18094
NGINX=127.0.0.1:18095
FAST_UP=127.0.0.1:18105 RL_FAST=127.0.0.1:18106 RL_FAST_API=127.0.0.1:18107 RL_FAST_PPROF=127.0.0.1:18108
NGINX_FAST=127.0.0.1:18109
PG_PROXY=127.0.0.1:18096 PG_API=127.0.0.1:18097 PG_GRPC=127.0.0.1:18098
PGGO_PROXY=127.0.0.1:18102 PGGO_API=127.0.0.1:18103 PGGO_GRPC=127.0.0.1:18104
ERL_GRPC=18099 ERL_HTTP=18100 ERL_DEBUG=18101 REDIS_PORT=16379 # inside the namespace

log() { echo "[$(date +%T)] $*" >&2; }

# --- tools -------------------------------------------------------------------
need=()
command -v nginx >/dev/null || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
if all; then
	command -v redis-server >/dev/null || need+=(redis-server)
	command -v ip >/dev/null || need+=(iproute2)
	command -v psql >/dev/null || need+=(postgresql-client)
fi
if ((${#need[@]})); then
	if [ "$(id -u)" != 0 ]; then
		echo "missing: ${need[*]}; run as root (the script installs them with apt-get) or install them" >&2
		exit 1
	fi
	log "installing ${need[*]}"
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

# --- builds ------------------------------------------------------------------
log "building rl-wasm-host (from $ROOT), the upstream, the gRPC load client, envoyproxy/ratelimit v1.4.0"
(cd "$ROOT" && go build -o "$OUT/rl-wasm-host" ./cmd/rl-wasm-host)
go build -o "$OUT/upstream" ./cmd/upstream
go build -o "$OUT/rlsload" ./cmd/rlsload
go build -o "$OUT/report" ./cmd/report
# envoyproxy/ratelimit's tagged release, from the Go module proxy (its
# go.mod predates modules' checks, hence -mod=mod).
if all && [ ! -x "$OUT/erl/service_cmd" ]; then
	GOFLAGS=-mod=mod GOBIN="$OUT/erl" go install github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.0
fi

# --- processes ---------------------------------------------------------------
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT
wait_tcp() { # host:port [nsenter prefix...]
	local a=$1 i
	shift
	for ((i = 0; i < 100; i++)); do
		if "$@" bash -c "exec 3<>/dev/tcp/${a%:*}/${a#*:}" 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "nothing listens on $a" >&2
	return 1
}

"$OUT/upstream" -listen "$UP" &
UP_PID=$!
pids+=("$UP_PID")

cat >"$OUT/rules.yaml" <<EOF
upstream: http://$UP
rules:
  # The proxy: every path, keyed by the client address, admits everything.
  - {name: all, endpoint: /, key_by: ip, strategy: token, limit: 1000000000, window: 1s}
  # The decision API's rule.
  - {name: api, strategy: token, limit: 1000000000, window: 1s}
EOF
# One envoyproxy/ratelimit configuration for all three rate limit services:
# a fixed window (both services' default), every call admitted.
mkdir -p "$OUT/erl/runtime/ratelimit/config"
cat >"$OUT/erl/runtime/ratelimit/config/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
EOF

"$OUT/rl-wasm-host" -config "$OUT/rules.yaml" -listen "$RL" -api-listen "$RL_API" -pprof-listen "$RL_PPROF" \
	-grpc-listen "$RL_GRPC" -rls-config "$OUT/erl/runtime/ratelimit/config/bench.yaml" -log-level warn 2>"$OUT/rl.log" &
RL_PID=$!
pids+=("$RL_PID")

# The fast upstream's proxy: the same rules, default flags, another process
# (one upstream per configuration), so that each phase reads the CPU of the
# process that served it.
sed "s|^upstream: .*|upstream: http://$FAST_UP|" "$OUT/rules.yaml" >"$OUT/rules-fast.yaml"
"$OUT/rl-wasm-host" -config "$OUT/rules-fast.yaml" -listen "$RL_FAST" -api-listen "$RL_FAST_API" \
	-pprof-listen "$RL_FAST_PPROF" -log-level warn 2>"$OUT/rl-fast.log" &
RL_FAST_PID=$!
pids+=("$RL_FAST_PID")

if all; then
	psql -q "$PGBASE/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
	"$OUT/rl-wasm-host" -config "$OUT/rules.yaml" -listen "$PG_PROXY" -api-listen "$PG_API" \
		-grpc-listen "$PG_GRPC" -rls-config "$OUT/erl/runtime/ratelimit/config/bench.yaml" \
		-store postgres -database-url "$PGBASE/$DB?sslmode=disable" -migrate -log-level warn 2>"$OUT/rl-pg.log" &
	PG_PID=$!
	pids+=("$PG_PID")
	wait_tcp "$PG_GRPC" # migrated: the second one starts on the schema
	# The same with -pg-decide go: rows locked, the WASM core decides in the
	# service (needs the owner or rl_admin: here the superuser).
	"$OUT/rl-wasm-host" -config "$OUT/rules.yaml" -listen "$PGGO_PROXY" -api-listen "$PGGO_API" \
		-grpc-listen "$PGGO_GRPC" -rls-config "$OUT/erl/runtime/ratelimit/config/bench.yaml" \
		-store postgres -database-url "$PGBASE/$DB?sslmode=disable" -pg-decide go -log-level warn 2>"$OUT/rl-pg-go.log" &
	PGGO_PID=$!
	pids+=("$PGGO_PID")
fi

mkdir -p "$OUT/nginx/logs" "$OUT/nginx/tmp"
cat >"$OUT/nginx/nginx.conf" <<EOF
# nginx in front of the same upstream, limit_req keyed by the client address
# (as rl's key_by: ip), admitting everything; two workers for two cores (as
# GOMAXPROCS); keep-alive to the upstream; the X-Forwarded-* fields rl sends.
daemon off;
worker_processes $(nproc);
pid $OUT/nginx/nginx.pid;
error_log $OUT/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $OUT/nginx/tmp/body;
    proxy_temp_path $OUT/nginx/tmp/proxy;
    fastcgi_temp_path $OUT/nginx/tmp/fastcgi;
    uwsgi_temp_path $OUT/nginx/tmp/uwsgi;
    scgi_temp_path $OUT/nginx/tmp/scgi;
    limit_req_zone \$binary_remote_addr zone=bench:10m rate=100000000r/s;
    upstream up {
        server $UP;
        keepalive 64;
    }
    upstream fast {
        server $FAST_UP;
        keepalive 64;
    }
    server {
        listen $NGINX;
        location / {
            limit_req zone=bench burst=100000000 nodelay;
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Host \$host;
            proxy_set_header X-Forwarded-Proto \$scheme;
        }
    }
    # The same proxy in front of the fast upstream.
    server {
        listen $NGINX_FAST;
        location / {
            limit_req zone=bench burst=100000000 nodelay;
            proxy_pass http://fast;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Host \$host;
            proxy_set_header X-Forwarded-Proto \$scheme;
        }
    }
}
EOF
nginx -p "$OUT/nginx" -c "$OUT/nginx/nginx.conf" &
NGINX_PID=$!
pids+=("$NGINX_PID")

# The fast upstream: an nginx of its own (its CPU is not the proxy's), two
# workers, answering every request with cmd/upstream's 31-byte document
# from a return 200 location, keep-alive without a bound on the requests
# of a connection.
mkdir -p "$OUT/nginx-fast/logs" "$OUT/nginx-fast/tmp"
cat >"$OUT/nginx-fast/nginx.conf" <<EOF
daemon off;
worker_processes $(nproc);
pid $OUT/nginx-fast/nginx.pid;
error_log $OUT/nginx-fast/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $OUT/nginx-fast/tmp/body;
    proxy_temp_path $OUT/nginx-fast/tmp/proxy;
    fastcgi_temp_path $OUT/nginx-fast/tmp/fastcgi;
    uwsgi_temp_path $OUT/nginx-fast/tmp/uwsgi;
    scgi_temp_path $OUT/nginx-fast/tmp/scgi;
    keepalive_requests 1000000000;
    server {
        listen $FAST_UP;
        location / {
            default_type application/json;
            return 200 '{"upstream":"bench","ok":true}\n';
        }
    }
}
EOF
nginx -p "$OUT/nginx-fast" -c "$OUT/nginx-fast/nginx.conf" &
NGINX_FAST_PID=$!
pids+=("$NGINX_FAST_PID")

if all; then
	# envoyproxy/ratelimit and its Redis in a network namespace with only a
	# loopback interface.
	if [ "$(id -u)" = 0 ]; then
		unshare --net sleep infinity &
		NS_PID=$!
		NS=(nsenter -t "$NS_PID" -n)
	else
		unshare -rn sleep infinity &
		NS_PID=$!
		NS=(nsenter -t "$NS_PID" -U -n --preserve-credentials)
	fi
	pids+=("$NS_PID")
	sleep 0.2
	"${NS[@]}" ip link set lo up
	"${NS[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$OUT/redis.log" 2>&1 &
	pids+=($!)
	wait_tcp "127.0.0.1:$REDIS_PORT" "${NS[@]}"
	REDIS_PID=$(pgrep -f "redis-server 127.0.0.1:$REDIS_PORT" | head -1)
	"${NS[@]}" env USE_STATSD=false LOG_LEVEL=warn RUNTIME_ROOT="$OUT/erl/runtime" RUNTIME_SUBDIRECTORY=ratelimit \
		REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$REDIS_PORT" REDIS_POOL_SIZE=64 \
		GRPC_PORT=$ERL_GRPC PORT=$ERL_HTTP DEBUG_PORT=$ERL_DEBUG "$OUT/erl/service_cmd" >"$OUT/erl.log" 2>&1 &
	pids+=($!)
fi

wait_tcp "$UP"
wait_tcp "$RL"
wait_tcp "$RL_GRPC"
wait_tcp "$NGINX"
wait_tcp "$FAST_UP"
wait_tcp "$RL_FAST"
wait_tcp "$NGINX_FAST"
if all; then
	wait_tcp "$PGGO_GRPC"
	wait_tcp "127.0.0.1:$ERL_GRPC" "${NS[@]}"
	ERL_PID=$(pgrep -f "$OUT/erl/service_cmd" | head -1)
fi
sleep 0.5

# --- measuring ---------------------------------------------------------------
# ticks PID...: utime+stime of the processes (clock ticks).
ticks() {
	local t=0 p v
	for p in "$@"; do
		v=$(awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null || echo 0)
		t=$((t + v))
	done
	echo "$t"
}
HZ=$(getconf CLK_TCK)
nginx_pids() { echo "$NGINX_PID" $(pgrep -P "$NGINX_PID"); }
fast_pids() { echo "$NGINX_FAST_PID" $(pgrep -P "$NGINX_FAST_PID"); }
pg_pids() { pgrep -x postgres || true; }

cat >"$OUT/api.lua" <<'EOF'
-- POST /v1/ratelimit/check on 1000 keys, round robin per thread.
local reqs, n = {}, 0
init = function()
  for i = 0, 999 do
    reqs[i] = wrk.format("POST", "/v1/ratelimit/check", {["Content-Type"] = "application/json"},
      '{"rule":"api","key":"user-' .. i .. '"}')
  end
end
request = function()
  n = (n + 1) % 1000
  return reqs[n]
end
EOF

RESULTS=$OUT/results.tsv
: >"$RESULTS"
# wrk_phase NAME ROUND URL CONNS "SERVER PIDS" "BACKEND PIDS" [wrk args...]
wrk_phase() {
	local name=$1 round=$2 url=$3 conns=$4 spids=$5 bpids=$6
	shift 6
	local s0 b0 s1 b1 out
	s0=$(ticks $spids)
	b0=$(ticks $bpids)
	out=$(wrk -t2 -c"$conns" -d"$DURATION" --latency "$@" "$url")
	s1=$(ticks $spids)
	b1=$(ticks $bpids)
	echo "$out" >>"$OUT/wrk.txt"
	echo "$out" | awk -v name="$name" -v round="$round" -v hz="$HZ" -v ds=$((s1 - s0)) -v db=$((b1 - b0)) '
		function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
		$1 == "50%" { p50 = ms($2) }
		$1 == "99%" { p99 = ms($2) }
		/requests in/ { n = $1 }
		/Requests\/sec/ { rps = $2 }
		/Non-2xx/ { bad = $NF }
		/Socket errors/ { err = $0 }
		END {
			printf "%s\t%d\t%.0f\t%.3f\t%.3f\t%.1f\t%.1f\t%d\n", name, round, rps, p50, p99,
				n ? ds * 1e6 / hz / n : 0, n ? db * 1e6 / hz / n : 0, bad + 0
		}' >>"$RESULTS"
	tail -1 "$RESULTS" >&2
}
# rls_phase NAME ROUND "SERVER PIDS" "BACKEND PIDS" [nsenter...] -- rlsload args...
rls_phase() {
	local name=$1 round=$2 spids=$3 bpids=$4
	shift 4
	local pre=()
	while [ "$1" != -- ]; do pre+=("$1"); shift; done
	shift
	local s0 b0 s1 b1 out
	s0=$(ticks $spids)
	b0=$(ticks $bpids)
	out=$("${pre[@]}" "$OUT/rlsload" -d "$DURATION" -warmup 0 "$@")
	s1=$(ticks $spids)
	b1=$(ticks $bpids)
	echo "$name $out" >>"$OUT/rlsload.txt"
	echo "$out" | awk -v name="$name" -v round="$round" -v hz="$HZ" -v ds=$((s1 - s0)) -v db=$((b1 - b0)) '
		{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
		END {
			n = v["calls"]
			printf "%s\t%d\t%.0f\t%.3f\t%.3f\t%.1f\t%.1f\t%d\n", name, round, v["calls_per_s"], v["p50_us"] / 1000,
				v["p99_us"] / 1000, n ? ds * 1e6 / hz / n : 0, n ? db * 1e6 / hz / n : 0, v["failed"]
		}' >>"$RESULTS"
	tail -1 "$RESULTS" >&2
}

log "warming up (keys created, connections opened)"
for u in "http://$RL/" "http://$NGINX/" "http://$RL_FAST/" "http://$NGINX_FAST/"; do wrk -t2 -c64 -d"$WARMUP" "$u" >/dev/null; done
if all; then
	wrk -t2 -c64 -d"$WARMUP" -s "$OUT/api.lua" "http://$RL_API" >/dev/null
	"$OUT/rlsload" -addr "$RL_GRPC" -d "$WARMUP" -warmup 0 >/dev/null
	"$OUT/rlsload" -addr "$PG_GRPC" -d "$WARMUP" -warmup 0 >/dev/null
	"$OUT/rlsload" -addr "$PGGO_GRPC" -d "$WARMUP" -warmup 0 >/dev/null
	"${NS[@]}" "$OUT/rlsload" -addr "127.0.0.1:$ERL_GRPC" -api v2 -d "$WARMUP" -warmup 0 >/dev/null
fi

if [ "${PPROF:-0}" = 1 ]; then
	log "CPU profile of the proxy under wrk -c64 ($OUT/proxy.pprof)"
	wrk -t2 -c64 -d7s "http://$RL/" >/dev/null &
	sleep 1
	curl -s -o "$OUT/proxy.pprof" "http://$RL_PPROF/debug/pprof/profile?seconds=5"
	wait $!
	log "CPU profile of the proxy in front of the fast upstream under wrk -c64 ($OUT/proxy-fast.pprof)"
	wrk -t2 -c64 -d7s "http://$RL_FAST/" >/dev/null &
	sleep 1
	curl -s -o "$OUT/proxy-fast.pprof" "http://$RL_FAST_PPROF/debug/pprof/profile?seconds=5"
	wait $!
	log "read them with: go tool pprof -top -cum $OUT/rl-wasm-host $OUT/proxy-fast.pprof"
fi

for ((r = 1; r <= ROUNDS; r++)); do
	log "round $r/$ROUNDS"
	wrk_phase "proxy rl c64" "$r" "http://$RL/" 64 "$RL_PID" "$UP_PID"
	wrk_phase "proxy nginx c64" "$r" "http://$NGINX/" 64 "$(nginx_pids)" "$UP_PID"
	wrk_phase "proxy rl c8" "$r" "http://$RL/" 8 "$RL_PID" "$UP_PID"
	wrk_phase "proxy nginx c8" "$r" "http://$NGINX/" 8 "$(nginx_pids)" "$UP_PID"
	# The fast upstream: the proxies set the rate.
	wrk_phase "fast proxy rl c64" "$r" "http://$RL_FAST/" 64 "$RL_FAST_PID" "$(fast_pids)"
	wrk_phase "fast proxy nginx c64" "$r" "http://$NGINX_FAST/" 64 "$(nginx_pids)" "$(fast_pids)"
	wrk_phase "fast proxy rl c8" "$r" "http://$RL_FAST/" 8 "$RL_FAST_PID" "$(fast_pids)"
	wrk_phase "fast proxy nginx c8" "$r" "http://$NGINX_FAST/" 8 "$(nginx_pids)" "$(fast_pids)"
	if all; then
		wrk_phase "api rl c64" "$r" "http://$RL_API" 64 "$RL_PID" "" -s "$OUT/api.lua"
	fi
	# References: the upstream alone (the latency of a bare net/http
	# handler under the same load), and behind nginx at fewer connections
	# (the upstream's CPU per request at a rate nearer rl's).
	wrk_phase "upstream alone c64" "$r" "http://$UP/" 64 "$UP_PID" ""
	wrk_phase "fast upstream alone c64" "$r" "http://$FAST_UP/" 64 "$(fast_pids)" ""
	wrk_phase "proxy nginx c4" "$r" "http://$NGINX/" 4 "$(nginx_pids)" "$UP_PID"
	wrk_phase "proxy nginx c2" "$r" "http://$NGINX/" 2 "$(nginx_pids)" "$UP_PID"
	if ! all; then continue; fi
	rls_phase "grpc rl-memory conns1" "$r" "$RL_PID" "" -- -addr "$RL_GRPC" -conns 1 -callers 64
	rls_phase "grpc rl-memory conns64" "$r" "$RL_PID" "" -- -addr "$RL_GRPC" -conns 64 -callers 64
	rls_phase "grpc rl-postgres conns1" "$r" "$PG_PID" "$(pg_pids)" -- -addr "$PG_GRPC" -conns 1 -callers 64
	rls_phase "grpc rl-postgres-go conns1" "$r" "$PGGO_PID" "$(pg_pids)" -- -addr "$PGGO_GRPC" -conns 1 -callers 64
	rls_phase "grpc erl-redis conns1" "$r" "$ERL_PID" "$REDIS_PID" "${NS[@]}" -- -addr "127.0.0.1:$ERL_GRPC" -api v2 -conns 1 -callers 64
	rls_phase "grpc rl-postgres conns64" "$r" "$PG_PID" "$(pg_pids)" -- -addr "$PG_GRPC" -conns 64 -callers 64
	rls_phase "grpc rl-postgres-go conns64" "$r" "$PGGO_PID" "$(pg_pids)" -- -addr "$PGGO_GRPC" -conns 64 -callers 64
	rls_phase "grpc erl-redis conns64" "$r" "$ERL_PID" "$REDIS_PID" "${NS[@]}" -- -addr "127.0.0.1:$ERL_GRPC" -api v2 -conns 64 -callers 64
done

echo "## The service beside nginx and envoyproxy/ratelimit, $(date -u '+%Y-%m-%d %H:%M UTC')${ONLY:+ (ONLY=$ONLY)}"
echo
echo "rl-wasm-host from $ROOT at $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '(no git)')."
echo
echo "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(go version | cut -d' ' -f3), $(nginx -v 2>&1 | cut -d' ' -f3)$(all && echo ", $(redis-server --version | cut -d' ' -f3), $(psql -V | cut -d' ' -f3-)"); $ROUNDS interleaved rounds × $DURATION; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
"$OUT/report" "$RESULTS"
log "raw output in $OUT"
