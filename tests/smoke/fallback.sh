#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# With no usable XRC device, "--mca btl self,vader,xrc" must still run (Open MPI falls back to vader) and the
# verbose output must say why xrc stood aside; the data must arrive intact.
. "$(dirname "$0")/common.sh"

run_mpi "$out" -np 2 --mca pml ob1 --mca btl self,vader,xrc --mca btl_xrc_verbose 1 "$RING"
status=$?
no_crash $status "$out" "self,vader,xrc" || finish
if [ $status -eq 0 ] && grep -q '^ring: OK ranks=2 messages=16 errors=0' "$out"; then
    pass "self,vader,xrc job ran and verified its data"
else
    fail "self,vader,xrc job did not complete (exit $status)"; sed 's/^/    /' "$out" | head -40
fi
if grep -q 'btl:xrc: disqualified on .*: no ACTIVE port of an XRC-capable device' "$out"; then
    pass "the fallback is explained in the verbose output"
else
    fail "no verbose line explaining the fallback"; sed 's/^/    /' "$out" | head -40
fi
if grep -q 'The xrc BTL was requested explicitly' "$out"; then
    fail "help message shown although xrc was not required"
fi
finish
