"""Leaves an orphaned grandchild that exits at once, then counts the zombies in the container."""

import os
import time

if os.fork() == 0:
    if os.fork() == 0:
        os._exit(0)  # the grandchild: orphaned when its parent leaves, then exits
    os._exit(0)
os.wait()
time.sleep(2)
zombies = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    zombies.append(int(pid))
        except OSError:
            pass
with open("/proc/1/cmdline", "rb") as cmdline:
    init = cmdline.read().split(b"\0")[0].decode()
print(f"ZOMBIES {len(zombies)} pid1 {init}", flush=True)
