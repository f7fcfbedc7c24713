#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# With no usable XRC device, "--mca btl self,xrc" must stop the job cleanly: our help text, a non-zero exit,
# no crash, no core, no hang.
. "$(dirname "$0")/common.sh"

run_mpi "$out" -np 2 --mca pml ob1 --mca btl self,xrc "$RING"
status=$?
no_crash $status "$out" "self,xrc" || finish
if [ $status -ne 0 ]; then pass "self,xrc exits non-zero ($status)"; else fail "self,xrc exited 0"; fi
if grep -q 'The xrc BTL was requested explicitly, but this host has no port it can use' "$out" &&
   grep -q 'ibv_devinfo -v' "$out"; then
    pass "our help message explains what was found and what to do"
else
    fail "our help message is missing"; sed 's/^/    /' "$out" | head -40
fi
if grep -q '^ring: OK' "$out"; then fail "the job claims success"; fi
finish
