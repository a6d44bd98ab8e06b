#!/bin/bash
# rigbench rig set-up, run once by cloud-init at first boot.
#
# 1. the work disk: the Deep Learning AMI mounts its instance-store NVMe at the NVMe path before
#    user data runs; on another AMI this script joins the instance-store disks itself (RAID 0
#    when there are several), formats ext4 and mounts them there;
# 2. the work folders on it, owned by the SSH user;
# 3. the spot-interruption watcher (spot market only) and the TTL guard, as systemd units;
# 4. the TTL deadline, written once, and armed now.
#
# infra/user_data.py fills the settings block. Every path and command can be overridden from
# the environment, which is how the tests run this logic against fakes in a temporary folder.
set -euo pipefail

# @@RIGBENCH_SETTINGS@@
: "${RIGBENCH_NVME_PATH:=/opt/dlami/nvme}"
: "${RIGBENCH_EXPECT_DLAMI_NVME:=1}"
: "${RIGBENCH_NVME_WAIT_SECONDS:=300}"
: "${RIGBENCH_OWNER_USER:=ubuntu}"
: "${RIGBENCH_TTL_HOURS:=8}"
: "${RIGBENCH_MARKET:=spot}"

: "${RIGBENCH_POLL_SECONDS:=2}"
: "${RIGBENCH_STATE_DIR:=/var/lib/rigbench}"
: "${RIGBENCH_BIN_DIR:=/usr/local/bin}"
: "${RIGBENCH_SYSTEMD_DIR:=/etc/systemd/system}"
: "${RIGBENCH_FSTAB:=/etc/fstab}"
: "${RIGBENCH_LOG:=/var/log/rigbench-setup.log}"
: "${RIGBENCH_RAID_DEVICE:=/dev/md0}"
: "${RIGBENCH_DEV_DIR:=/dev}"
: "${RIGBENCH_MDADM:=mdadm}"
: "${RIGBENCH_MKFS:=mkfs.ext4}"
: "${RIGBENCH_MOUNT:=mount}"
: "${RIGBENCH_MOUNTPOINT:=mountpoint}"
: "${RIGBENCH_LSBLK:=lsblk}"
: "${RIGBENCH_SYSTEMCTL:=systemctl}"
: "${RIGBENCH_CHOWN:=chown}"
: "${RIGBENCH_NOW:=$(date +%s)}"

WORK_DIR="$RIGBENCH_NVME_PATH/rigbench"
INSTANCE_STORE_MODEL="Amazon EC2 NVMe Instance Storage"

log() {
    local line
    line="$(date -u +%Y-%m-%dT%H:%M:%SZ) rigbench-setup: $*"
    echo "$line" >&2
    echo "$line" >>"$RIGBENCH_LOG" 2>/dev/null || true
}

nvme_mounted() {
    "$RIGBENCH_MOUNTPOINT" -q "$RIGBENCH_NVME_PATH"
}

instance_store_disks() {
    # Whole disks whose model says instance store (EBS volumes say "Amazon Elastic Block Store").
    "$RIGBENCH_LSBLK" -d -n -o NAME,MODEL | while read -r name model; do
        if [[ $model == "$INSTANCE_STORE_MODEL"* ]]; then
            echo "$RIGBENCH_DEV_DIR/$name"
        fi
    done
}

wait_for_dlami_nvme() {
    local deadline=$((SECONDS + RIGBENCH_NVME_WAIT_SECONDS))
    until nvme_mounted; do
        if ((SECONDS >= deadline)); then
            return 1
        fi
        sleep "$RIGBENCH_POLL_SECONDS"
    done
}

assemble_instance_store() {
    local disks device
    mapfile -t disks < <(instance_store_disks)
    case "${#disks[@]}" in
        0)
            log "no instance-store disks found; $RIGBENCH_NVME_PATH is a folder on the root volume"
            mkdir -p "$RIGBENCH_NVME_PATH"
            return 0
            ;;
        1)
            device="${disks[0]}"
            ;;
        *)
            device="$RIGBENCH_RAID_DEVICE"
            log "joining ${#disks[@]} instance-store disks as RAID 0 on $device: ${disks[*]}"
            "$RIGBENCH_MDADM" --create "$device" --level=0 --raid-devices="${#disks[@]}" --run "${disks[@]}"
            ;;
    esac
    log "formatting $device as ext4 and mounting it at $RIGBENCH_NVME_PATH"
    "$RIGBENCH_MKFS" -F -q -L rigbench-nvme "$device"
    mkdir -p "$RIGBENCH_NVME_PATH"
    "$RIGBENCH_MOUNT" -o defaults,noatime "$device" "$RIGBENCH_NVME_PATH"
    # nofail: instance store is blank after a stop/start, and boot must not hang on it.
    echo "LABEL=rigbench-nvme $RIGBENCH_NVME_PATH ext4 defaults,noatime,nofail 0 2" >>"$RIGBENCH_FSTAB"
}

prepare_nvme() {
    if [[ $RIGBENCH_EXPECT_DLAMI_NVME == 1 ]]; then
        log "waiting up to ${RIGBENCH_NVME_WAIT_SECONDS}s for the DLAMI's NVMe volume at $RIGBENCH_NVME_PATH"
    fi
    if wait_for_dlami_nvme; then
        log "$RIGBENCH_NVME_PATH is mounted"
        return 0
    fi
    log "$RIGBENCH_NVME_PATH is not mounted; assembling the instance-store disks"
    assemble_instance_store
}

make_work_folders() {
    mkdir -p "$WORK_DIR"/{models,runs,build,logs}
    "$RIGBENCH_CHOWN" -R "$RIGBENCH_OWNER_USER:" "$WORK_DIR"
}

install_helpers() {
    mkdir -p "$RIGBENCH_BIN_DIR" "$RIGBENCH_SYSTEMD_DIR"
    cat >"$RIGBENCH_BIN_DIR/rigbench-spot-watcher" <<'RIGBENCH_SPOT_WATCHER_EOF'
# @@RIGBENCH_SPOT_WATCHER@@
RIGBENCH_SPOT_WATCHER_EOF
    cat >"$RIGBENCH_BIN_DIR/rigbench-ttl-guard" <<'RIGBENCH_TTL_GUARD_EOF'
# @@RIGBENCH_TTL_GUARD@@
RIGBENCH_TTL_GUARD_EOF
    chmod 755 "$RIGBENCH_BIN_DIR/rigbench-spot-watcher" "$RIGBENCH_BIN_DIR/rigbench-ttl-guard"

    cat >"$RIGBENCH_SYSTEMD_DIR/rigbench-spot-watcher.service" <<UNIT
[Unit]
Description=rigbench spot-interruption watcher
After=network-online.target
Wants=network-online.target

[Service]
Environment=RIGBENCH_SPOT_MARKER=$WORK_DIR/spot-interruption.json
Environment=RIGBENCH_SPOT_LOG=$WORK_DIR/logs/spot-watcher.log
ExecStart=$RIGBENCH_BIN_DIR/rigbench-spot-watcher
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
UNIT
    cat >"$RIGBENCH_SYSTEMD_DIR/rigbench-ttl-guard.service" <<UNIT
[Unit]
Description=rigbench TTL guard (halts the rig at its deadline)

[Service]
Type=oneshot
Environment=RIGBENCH_STATE_DIR=$RIGBENCH_STATE_DIR
ExecStart=$RIGBENCH_BIN_DIR/rigbench-ttl-guard

[Install]
WantedBy=multi-user.target
UNIT
}

write_ttl_deadline() {
    # Written once: a reboot must not move the deadline.
    mkdir -p "$RIGBENCH_STATE_DIR"
    if [[ ! -s $RIGBENCH_STATE_DIR/ttl-deadline ]]; then
        echo $((RIGBENCH_NOW + RIGBENCH_TTL_HOURS * 3600)) >"$RIGBENCH_STATE_DIR/ttl-deadline"
    fi
    log "TTL deadline: $(cat "$RIGBENCH_STATE_DIR/ttl-deadline") (epoch s), ${RIGBENCH_TTL_HOURS} h after first boot"
}

start_services() {
    "$RIGBENCH_SYSTEMCTL" daemon-reload
    "$RIGBENCH_SYSTEMCTL" enable --now rigbench-ttl-guard.service
    if [[ $RIGBENCH_MARKET == spot ]]; then
        "$RIGBENCH_SYSTEMCTL" enable --now rigbench-spot-watcher.service
    fi
}

main() {
    log "start (market $RIGBENCH_MARKET, TTL ${RIGBENCH_TTL_HOURS} h, NVMe path $RIGBENCH_NVME_PATH)"
    prepare_nvme
    make_work_folders
    install_helpers
    write_ttl_deadline
    start_services
    printf '{"completed_at": "%s", "nvme_path": "%s", "market": "%s"}\n' \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$RIGBENCH_NVME_PATH" "$RIGBENCH_MARKET" >"$RIGBENCH_STATE_DIR/setup-complete.json"
    log "done"
}

if [[ ${RIGBENCH_SOURCE_ONLY:-0} != 1 ]]; then
    main "$@"
fi
