#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# per-function self instructions per message: (1000-iteration file - 500-iteration file) / 500, objects matching
import subprocess, sys, re, collections
def table(path):
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", path], capture_output=True, text=True).stdout
    t = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)$", line)
        if not m: continue
        name = m.group(2)
        if "mca_btl_xrc" not in name and "simhca/lib" not in name: continue
        fn = name.split(":", 1)[-1]
        fn = re.sub(r"\(.*", "", fn).strip()
        t[fn] += int(m.group(1).replace(",", ""))
    return t
d = sys.argv[1]
a, b = table(d + "/cg.xrc.500.0"), table(d + "/cg.xrc.1000.0")
rows = sorted(((b[k] - a[k]) / 500.0, k) for k in set(a) | set(b))
for v, k in reversed(rows):
    if abs(v) >= 2: print("%8.1f  %s" % (v, k[:110]))
