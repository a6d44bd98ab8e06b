#!/bin/bash
# rigbench TTL guard: a cost guard that halts the rig at its deadline.
#
# The deadline (epoch seconds) is written once, at first boot, by the user-data script. This
# guard runs then and at every later boot (a systemd unit), and asks `shutdown` to halt the
# machine when the deadline comes; the instance is launched with shutdown behaviour
# "terminate", so halting ends the billing. Past the deadline it halts now.
set -euo pipefail

STATE_DIR="${RIGBENCH_STATE_DIR:-/var/lib/rigbench}"
SHUTDOWN="${RIGBENCH_SHUTDOWN:-shutdown}"
NOW="${RIGBENCH_NOW:-$(date +%s)}"
DEADLINE_FILE="$STATE_DIR/ttl-deadline"

if [[ ! -s $DEADLINE_FILE ]]; then
    echo "rigbench-ttl-guard: no deadline at $DEADLINE_FILE; nothing scheduled" >&2
    exit 1
fi
deadline="$(tr -dc '0-9' <"$DEADLINE_FILE")"
remaining=$((deadline - NOW))
if ((remaining <= 0)); then
    echo "rigbench-ttl-guard: deadline $deadline has passed; halting now" >&2
    exec "$SHUTDOWN" -h now "rigbench TTL reached"
fi
minutes=$(((remaining + 59) / 60))
echo "rigbench-ttl-guard: halting in $minutes min (deadline $deadline)" >&2
exec "$SHUTDOWN" -h "+$minutes" "rigbench TTL: this rig halts (and terminates) in $minutes min"
