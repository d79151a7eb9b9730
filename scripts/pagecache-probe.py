#!/usr/bin/env python3
"""What a page-cache write costs on this machine, plain and with recycling (docs/performance.md,
"Storage and replication internals").

usage: sync; echo 3 > /proc/sys/vm/drop_caches; sleep 12; python3 scripts/pagecache-probe.py plain|recycle [dir]

Writes 2 GB in 1 MiB steps to a new file in dir (default: current directory) and prints the
elapsed and system time. "recycle" fdatasyncs every 8 MiB and drops the 8 MiB before it from the
page cache (POSIX_FADV_DONTNEED), so later writes reuse pages freed moments before; "plain" leaves
every page cached, so each write needs memory the kernel has not used recently. The file is
removed at the end.
"""
import os
import resource
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "plain"
if mode not in ("plain", "recycle"):
    sys.exit("mode must be plain or recycle")
path = os.path.join(sys.argv[2] if len(sys.argv) > 2 else ".", "pagecache-probe.tmp")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
buf = b"\0" * (1 << 20)
window = 8 << 20
start = time.time()
r0 = resource.getrusage(resource.RUSAGE_SELF)
off = 0
try:
    for _ in range(2000):
        os.pwrite(fd, buf, off)
        off += len(buf)
        if mode == "recycle" and off % window == 0 and off >= 2 * window:
            os.fdatasync(fd)
            os.posix_fadvise(fd, off - 2 * window, window, os.POSIX_FADV_DONTNEED)
    os.fdatasync(fd)
finally:
    os.close(fd)
    os.remove(path)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print("%s: 2 GB in %.2f s, system %.2f s, user %.2f s" % (
    mode, time.time() - start, r1.ru_stime - r0.ru_stime, r1.ru_utime - r0.ru_utime))
