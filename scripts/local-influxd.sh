# Sourced by scripts/demo.sh and bench/agent.sh: a throw-away influxd (InfluxDB 1.x, Debian's
# influxdb package) on a free loopback port.
#
#   start_local_influxd WORK_DIR     starts it (data under WORK_DIR/influx, log WORK_DIR/influxd.log),
#                                    sets $influx (base URL) and $influx_pid, waits for /ping
#   stop_local_influxd               SIGTERM, waits; the data stays, start again to resume
#   influx_query STATEMENT [DB]      runs InfluxQL, prints the JSON answer
start_local_influxd() {
    local work="$1"
    if [ ! -f "$work/influxdb.conf" ]; then
        local ports
        ports=($(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])'))
        cat > "$work/influxdb.conf" <<CONF
reporting-disabled = true
bind-address = "127.0.0.1:${ports[1]}"
[meta]
  dir = "$work/influx/meta"
[data]
  dir = "$work/influx/data"
  wal-dir = "$work/influx/wal"
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:${ports[0]}"
  log-enabled = false
[monitor]
  store-enabled = false
CONF
        influx="http://127.0.0.1:${ports[0]}"
    fi
    influxd -config "$work/influxdb.conf" >> "$work/influxd.log" 2>&1 &
    influx_pid=$!
    for _ in $(seq 300); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$influx/ping")" = 204 ] && return 0
        sleep 0.1
    done
    echo "influxd did not start: $(tail -5 "$work/influxd.log")" >&2
    return 1
}

stop_local_influxd() {
    [ -n "${influx_pid:-}" ] || return 0
    kill "$influx_pid" 2>/dev/null || true
    wait "$influx_pid" 2>/dev/null || true
    influx_pid=""
}

influx_query() {
    curl -s -G "$influx/query" --data-urlencode "db=${2:-fleet}" --data-urlencode "q=$1"
}
