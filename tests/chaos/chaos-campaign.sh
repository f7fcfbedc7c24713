#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. The long run of the fault campaign for scripts/stress:
# CHAOS_STRESS_N schedules (default 20) from CHAOS_STRESS_FIRST_SEED, by default a new range every run (the seed is
# printed first, so a failing round replays with `tests/chaos/chaos --seed S`), CHAOS_STRESS_JOBS at a time (1). Fails when any schedule is a VIOLATION; the
# table at the end lists them. Logs: BUILD/tests/chaos/stress-FIRSTSEED/seed-S.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
TOP_SRCDIR=${TOP_SRCDIR:-$(cd "$HERE/../.." && pwd)}
TOP_BUILDDIR=${TOP_BUILDDIR:-$TOP_SRCDIR/build}
[ "$(id -u)" = 0 ] || { echo "SKIP: chaos-campaign: needs root (namespaces, mounts, veth pairs)"; exit 77; }
first=${CHAOS_STRESS_FIRST_SEED:-$(( ($(date +%s) % 100000) * 1000 + 1000 ))}
echo "chaos-campaign: ${CHAOS_STRESS_N:-20} schedules from seed $first, ${CHAOS_STRESS_JOBS:-1} at a time"
exec python3 "$HERE/chaos" --campaign "${CHAOS_STRESS_N:-20}" --first-seed "$first" --jobs "${CHAOS_STRESS_JOBS:-1}" \
    --build-dir "$TOP_BUILDDIR" \
    --log-dir "$TOP_BUILDDIR/tests/chaos/stress-$first"
