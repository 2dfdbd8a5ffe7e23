#!/usr/bin/env bash
# Start a throwaway single-node Ceph cluster plus radosgw (Ceph's S3 gateway) on 127.0.0.1.
#
#   scripts/s3/start-rgw.sh DIR      # DIR: an empty or missing directory; everything lives there
#   . DIR/endpoint.env               # exports AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
#                                    # AWS_DEFAULT_REGION (read by botocore, so by s3fs and GuideLoom)
#                                    # and GUIDELOOM_TEST_S3_ENDPOINT (the test suite's switch)
#   scripts/s3/stop-rgw.sh DIR
#
# radosgw takes a free port of 127.0.0.1 as it binds (GUIDELOOM_RGW_PORT=PORT asks for that one);
# endpoint.env and the last line printed name it. GUIDELOOM_RGW_TIMEOUT_S: each step's limit (120).
# One monitor, one memstore OSD (data lives in RAM and dies with the OSD), cephx off, the beast
# frontend on a free port of 127.0.0.1, and one S3 user with fixed test keys. It takes about 12 s.
# Needs Debian's radosgw, ceph-mon and ceph-osd:
#   apt-get install -y radosgw && apt-get install -y --no-install-recommends ceph-mon ceph-osd
# On failure it stops what it started, prints the tail of the logs (kept in DIR/log) and exits 1.
set -euo pipefail

ACCESS_KEY="${GUIDELOOM_RGW_ACCESS_KEY:-guideloomtestkey}"
SECRET_KEY="${GUIDELOOM_RGW_SECRET_KEY:-guideloomtestsecret0000000000000000000000}"
TIMEOUT_S="${GUIDELOOM_RGW_TIMEOUT_S:-120}"

die() { echo "start-rgw: $*" >&2; exit 1; }

[[ $# -eq 1 ]] || die "usage: $0 DIR"
for tool in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph python3; do
    command -v "$tool" >/dev/null || die "'$tool' not found; install Debian's radosgw, ceph-mon and ceph-osd:
  apt-get install -y radosgw && apt-get install -y --no-install-recommends ceph-mon ceph-osd"
done

mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
[[ -e "$DIR/ceph.conf" ]] && die "$DIR already holds a cluster; stop it with scripts/s3/stop-rgw.sh $DIR and use a fresh directory"
mkdir -p "$DIR/mon" "$DIR/osd" "$DIR/run" "$DIR/log"
CONF="$DIR/ceph.conf"
STARTED_AT=$SECONDS

on_error() {
    local rc=$?
    trap - ERR
    echo "start-rgw: FAILED after $((SECONDS - STARTED_AT)) s (exit $rc); logs are in $DIR/log" >&2
    for f in "$DIR"/log/*.log; do
        [[ -s "$f" ]] || continue
        echo "----- tail of $f -----" >&2
        tail -n 15 "$f" >&2
    done
    "$(dirname "$0")/stop-rgw.sh" "$DIR" >&2 || true
    exit 1
}
trap on_error ERR

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for SECONDS WHAT COMMAND...: run COMMAND until it succeeds or the time is up.
wait_for() {
    local limit=$1 what=$2; shift 2
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            echo "start-rgw: timed out after ${limit} s waiting for $what" >&2
            return 1
        fi
        sleep 0.2
    done
}

# A daemon that died is a failure now, not after the timeout.
alive() { kill -0 "$(cat "$DIR/run/$1.pid")" 2>/dev/null || { echo "start-rgw: $1 exited; see $DIR/log" >&2; return 1; }; }

MON_PORT=$(free_port)
# radosgw's port: 0 lets it take a free one as it binds (read back below), so no other program can
# take it in between, as one could take a port picked here about 10 s before radosgw binds it (the
# test suite starts other servers on ports picked that way); GUIDELOOM_RGW_PORT asks for a port.
RGW_PORT="${GUIDELOOM_RGW_PORT:-0}"
if [[ "$RGW_PORT" != 0 ]] && ! python3 -c '
import socket, sys
with socket.socket() as s:
    s.bind(("127.0.0.1", int(sys.argv[1])))' "$RGW_PORT" 2>/dev/null; then
    die "GUIDELOOM_RGW_PORT=$RGW_PORT: 127.0.0.1:$RGW_PORT is in use or not a port; name a free port, or unset GUIDELOOM_RGW_PORT (radosgw then takes a free one)"
fi
FSID=$(python3 -c 'import uuid; print(uuid.uuid4())')
OSD_UUID=$(python3 -c 'import uuid; print(uuid.uuid4())')

cat > "$CONF" <<CONF
[global]
fsid = $FSID
mon host = v2:127.0.0.1:$MON_PORT
mon initial members = a
ms bind msgr1 = false
ms bind msgr2 = true
# cephx off; with auth 'none' the mon client mode must be crc, else radosgw hangs for 300 s.
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
ms mon client mode = crc
run dir = $DIR/run
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
log to stderr = false
err to stderr = false
keyring = $DIR/keyring
# one OSD, no replicas, few placement groups
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
mon data avail warn = 1
mon data avail crit = 0

[mon.a]
mon data = $DIR/mon

[osd.0]
osd data = $DIR/osd
osd objectstore = memstore
memstore device bytes = $((4 * 1024 * 1024 * 1024))
osd max object name len = 460
osd max object namespace len = 64

[client.rgw.test]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw data = $DIR/rgw
rgw enable usage log = false
# no lifecycle/gc threads: a throwaway gateway, and the lifecycle thread delays shutdown by 5 s
rgw enable lc threads = false
rgw enable gc threads = false
CONF
mkdir -p "$DIR/rgw"
: > "$DIR/keyring"

# monitor
monmaptool --create --clobber --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" "$DIR/monmap" \
    >"$DIR/log/monmaptool.out" 2>&1
ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" >"$DIR/log/mon-mkfs.out" 2>&1
setsid ceph-mon -c "$CONF" -i a -f >"$DIR/log/mon.out" 2>&1 &
echo $! > "$DIR/run/mon.pid"
wait_for "$TIMEOUT_S" "the monitor" bash -c "kill -0 $(cat "$DIR/run/mon.pid") && ceph -c '$CONF' --connect-timeout 5 mon stat"
alive mon

# one memstore OSD
ceph -c "$CONF" osd new "$OSD_UUID" 0 >"$DIR/log/osd-new.out" 2>&1
ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$OSD_UUID" >"$DIR/log/osd-mkfs.out" 2>&1
setsid ceph-osd -c "$CONF" -i 0 -f >"$DIR/log/osd.out" 2>&1 &
echo $! > "$DIR/run/osd.pid"
wait_for "$TIMEOUT_S" "the OSD to come up" bash -c \
    "kill -0 $(cat "$DIR/run/osd.pid") && ceph -c '$CONF' --connect-timeout 5 osd dump | grep -q '^osd.0 up'"
alive osd

# radosgw
setsid radosgw -c "$CONF" -n client.rgw.test -f >"$DIR/log/rgw.out" 2>&1 &
echo $! > "$DIR/run/rgw.pid"
RGW_LOG="$DIR/log/client.rgw.test.log"
# rgw_answers: prints the port once radosgw listens there and answers it with an S3 bucket list
# (its listening socket found through /proc: the port it bound); fails until then.
rgw_answers() {
    python3 - "$(cat "$DIR/run/rgw.pid")" <<'PY'
import os, sys, urllib.request
pid = sys.argv[1]
sockets = set()
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if target.startswith("socket:["):
        sockets.add(target[8:-1])
with open("/proc/net/tcp") as table:
    ports = [int(f[1].split(":")[1], 16) for f in map(str.split, list(table)[1:]) if f[3] == "0A" and f[9] in sockets]
if len(ports) != 1:  # (0A: listening)
    sys.exit(1)
body = urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/", timeout=5).read()
if b"ListAllMyBucketsResult" not in body:
    sys.exit(1)
print(ports[0])
PY
}
deadline=$((SECONDS + TIMEOUT_S))
until BOUND=$(rgw_answers 2>/dev/null); do
    if [[ -f "$RGW_LOG" ]] && grep -q "failed to bind address" "$RGW_LOG"; then
        echo "start-rgw: radosgw could not bind 127.0.0.1:$RGW_PORT (is GUIDELOOM_RGW_PORT in use?)" >&2
        false
    fi
    alive rgw
    if ((SECONDS >= deadline)); then
        echo "start-rgw: timed out after ${TIMEOUT_S} s waiting for radosgw to answer S3 on 127.0.0.1" >&2
        false
    fi
    sleep 0.2
done
RGW_PORT=$BOUND

radosgw-admin -c "$CONF" -n client.rgw.test --admin-socket "$DIR/run/radosgw-admin.asok" user create --uid=guideloom-test \
    --display-name="GuideLoom tests" --access-key="$ACCESS_KEY" --secret="$SECRET_KEY" \
    >"$DIR/log/user-create.out" 2>&1

# `export` so that a sourced file reaches the programs the shell starts (Python, Ray workers).
cat > "$DIR/endpoint.env" <<ENV
export AWS_ENDPOINT_URL=http://127.0.0.1:$RGW_PORT
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_DEFAULT_REGION=\${AWS_DEFAULT_REGION:-us-east-1}
export GUIDELOOM_TEST_S3_ENDPOINT=http://127.0.0.1:$RGW_PORT
ENV
echo "start-rgw: radosgw ready at http://127.0.0.1:$RGW_PORT in $((SECONDS - STARTED_AT)) s (dir $DIR)"
