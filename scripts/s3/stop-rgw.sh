#!/usr/bin/env bash
# Stop what scripts/s3/start-rgw.sh DIR started: SIGTERM to radosgw, then the OSD, then the monitor
# (the pids it wrote under DIR/run), waiting for each to exit (SIGKILL after 10 s). Idempotent.
# The directory and its logs are left in place.
set -uo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR="$1"

for name in rgw osd mon; do
    pidfile="$DIR/run/$name.pid"
    [[ -f "$pidfile" ]] || continue
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "stop-rgw: $name (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
    rm -f "$pidfile"
done
exit 0
