#!/usr/bin/env python3
"""A stand-in ``nvidia-smi`` for tests: ``--query-gpu=F,... --format=csv,noheader,nounits [-lms N]`` printed
as the real one prints it (values as an H200 gave them), with what a test needs to go wrong set by environment:

    STANDIN_GPUS       how many GPUs (default 1)
    STANDIN_NAME       the cards' name (default NVIDIA H200)
    STANDIN_POWER      each GPU's power draw, comma-separated in index order (default: the H200's for every GPU),
                       so that a test of several GPUs can tell their samples apart
    STANDIN_UNKNOWN    fields this "driver" does not know (comma-separated): the real error line, exit 2
    STANDIN_NA         fields printed as [N/A]
    STANDIN_LOSE_AFTER after this many loop lines, GPU 0 is lost: the real message, then exit 15
"""

import os
import sys
import time

VALUES = {
    "index": None, "name": "NVIDIA H200", "power.draw": "81.24", "power.draw.instant": "81.88",
    "utilization.gpu": "37", "utilization.memory": "12", "memory.used": "874", "clocks.sm": "1980",
    "temperature.gpu": "41", "clocks_event_reasons.active": "0x0000000000000001",
    "clocks_throttle_reasons.active": "0x0000000000000001", "uuid": None, "driver_version": "580.159.04",
    "memory.total": "143771",
}


def main() -> int:
    arguments = sys.argv[1:]
    query = next(a.split("=", 1)[1] for a in arguments if a.startswith("--query-gpu="))
    fields = query.split(",")
    unknown = [f for f in os.environ.get("STANDIN_UNKNOWN", "").split(",") if f]
    for field in fields:
        if field in unknown or (field not in VALUES and field != "timestamp"):
            print(f'Field "{field}" is not a valid field to query.\n')
            return 2
    na = set(os.environ.get("STANDIN_NA", "").split(","))
    gpus = int(os.environ.get("STANDIN_GPUS", "1"))
    name = os.environ.get("STANDIN_NAME", VALUES["name"])
    power = [value for value in os.environ.get("STANDIN_POWER", "").split(",") if value]
    loop_ms = int(arguments[arguments.index("-lms") + 1]) if "-lms" in arguments else None
    lose_after = int(os.environ.get("STANDIN_LOSE_AFTER", "0"))
    printed = 0
    while True:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime()) + f".{int(time.time() * 1000) % 1000:03d}"
        for gpu in range(gpus):
            if lose_after and printed >= lose_after and gpu == 0:
                print("Unable to determine the device handle for GPU0000:18:00.0: GPU is lost. Reboot the system "
                      "to recover this GPU", flush=True)
                return 15
            values = {**VALUES, "index": str(gpu), "name": name, "uuid": f"GPU-5e1f0c2a-0000-4000-8000-{gpu:012d}"}
            if power:
                values["power.draw"] = values["power.draw.instant"] = power[gpu % len(power)]
            cells = [stamp if f == "timestamp" else "[N/A]" if f in na else values[f] for f in fields]
            print(", ".join(cells), flush=True)
            printed += 1
        if loop_ms is None:
            return 0
        time.sleep(loop_ms / 1000)


sys.exit(main())
