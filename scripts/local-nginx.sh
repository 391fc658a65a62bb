# Sourced by scripts/demo.sh and bench/run.sh: a throw-away nginx on a free loopback port.
#
#   start_local_nginx WORK_DIR [EXTRA_SERVER_DIRECTIVES [EXTRA_HTTP_DIRECTIVES]]
#
# Serves WORK_DIR/www (created by the caller), writes its config, pid and logs under WORK_DIR,
# sets $port and $base, and waits until it answers. stop_local_nginx WORK_DIR stops it.
start_local_nginx() {
    local work="$1" extra="${2:-}" http_extra="${3:-}"
    local nginx_bin
    nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
    chmod 755 "$work"                 # nginx workers run as www-data
    chmod -R a+rX "$work/www"
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    base="http://127.0.0.1:$port"
    cat > "$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 64; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000;
  default_type application/octet-stream;
  client_body_temp_path $work/body; proxy_temp_path $work/proxy; fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;
  $http_extra
  server { listen 127.0.0.1:$port; root $work/www; $extra }
}
CONF
    "$nginx_bin" -c "$work/nginx.conf" -e "$work/error.log"
    for _ in $(seq 100); do
        curl -s -o /dev/null "$base/" && return 0
        sleep 0.1
    done
    echo "nginx did not start on port $port (see $work/error.log)" >&2
    return 1
}

stop_local_nginx() {
    [ -f "$1/nginx.pid" ] && kill "$(cat "$1/nginx.pid")" 2>/dev/null || true
}
