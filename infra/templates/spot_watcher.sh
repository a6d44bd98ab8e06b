#!/bin/bash
# rigbench spot-interruption watcher.
#
# EC2 posts a two-minute notice at /latest/meta-data/spot/instance-action before it reclaims a
# spot instance (404 until then). With IMDSv2 required every read needs a session token, fetched
# with a PUT. On the notice this writes a JSON marker on the work disk, so the load test and the
# analysis can tell an interrupted run from a failed one, logs one line, and exits.
#
# Everything can be overridden from the environment; the tests point RIGBENCH_IMDS_URL at a fake
# IMDS on 127.0.0.1.
set -uo pipefail

IMDS_URL="${RIGBENCH_IMDS_URL:-http://169.254.169.254}"
MARKER="${RIGBENCH_SPOT_MARKER:-/opt/dlami/nvme/rigbench/spot-interruption.json}"
INTERVAL="${RIGBENCH_SPOT_POLL_SECONDS:-5}"
LOG_FILE="${RIGBENCH_SPOT_LOG:-/var/log/rigbench-spot-watcher.log}"
CURL="${RIGBENCH_CURL:-curl}"
TOKEN_TTL_SECONDS=21600

token=""
token_fetched_at=0
last_problem=""

log() {
    local line
    line="$(date -u +%Y-%m-%dT%H:%M:%SZ) rigbench-spot-watcher: $*"
    echo "$line" >&2
    echo "$line" >>"$LOG_FILE" 2>/dev/null || true
}

fetch_token() {
    token="$("$CURL" -sS -f -m 2 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: $TOKEN_TTL_SECONDS" \
        "$IMDS_URL/latest/api/token" 2>/dev/null)" || token=""
    token_fetched_at=$SECONDS
}

json_value() {
    # The notice is JSON ({"action": "terminate", "time": "..."}); anything else is kept as a string.
    local text
    text="$(tr -d '\n' <"$1")"
    if [[ $text == \{* ]]; then
        printf '%s' "$text"
    else
        text="${text//\\/\\\\}"
        printf '"%s"' "${text//\"/\\\"}"
    fi
}

write_marker() {
    local notice_file="$1" tmp
    mkdir -p "$(dirname "$MARKER")"
    tmp="$MARKER.tmp.$$"
    printf '{"detected_at": "%s", "instance_action": %s}\n' \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(json_value "$notice_file")" >"$tmp"
    mv "$tmp" "$MARKER"
}

report_problem() {
    # Log a failing IMDS once, not every poll.
    if [[ $1 != "$last_problem" ]]; then
        log "$1"
        last_problem="$1"
    fi
}

notice="$(mktemp)"
trap 'rm -f "$notice"' EXIT
log "watching $IMDS_URL/latest/meta-data/spot/instance-action every ${INTERVAL}s; marker: $MARKER"

while true; do
    if [[ -z $token ]] || ((SECONDS - token_fetched_at > TOKEN_TTL_SECONDS / 2)); then
        fetch_token
    fi
    if [[ -z $token ]]; then
        report_problem "no IMDSv2 token from $IMDS_URL/latest/api/token; retrying"
    else
        code="$("$CURL" -sS -m 2 -o "$notice" -w '%{http_code}' -H "X-aws-ec2-metadata-token: $token" \
            "$IMDS_URL/latest/meta-data/spot/instance-action" 2>/dev/null)" || code="000"
        case "$code" in
            200)
                write_marker "$notice"
                log "spot interruption notice $(tr -d '\n' <"$notice"); wrote $MARKER"
                exit 0
                ;;
            404) last_problem="" ;;
            401) token="" ;;
            *) report_problem "unexpected HTTP $code from IMDS instance-action; retrying" ;;
        esac
    fi
    sleep "$INTERVAL"
done
