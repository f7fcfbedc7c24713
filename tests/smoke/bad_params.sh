#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Every invalid MCA value is refused with our help message naming the parameter and the value: the job still
# runs over the other BTLs when xrc was optional, and stops with a non-zero exit when xrc was required.
. "$(dirname "$0")/common.sh"

# parameter|value|text the message must contain
cases=(
    "btl_xrc_receive_queues|256,10:128,10|SIZE must be larger than the previous class"
    "btl_xrc_receive_queues|garbage|expected SIZE,COUNT or SIZE,COUNT,LOW"
    "btl_xrc_receive_queues|12x,10|SIZE is not a number"
    "btl_xrc_receive_queues|256,10:4096,10|less than the largest fragment"
    "btl_xrc_rnr_retry|9|out of range"
    "btl_xrc_mtu|1000|not an InfiniBand MTU"
    "btl_xrc_timeout|-1|out of range"
    "btl_xrc_if_include|mlx5_0:0|the port must be a number from 1 to 254"
    "btl_xrc_free_list_max|3|smaller than btl_xrc_free_list_num"
    "btl_xrc_eager_rdma_slot_size|100|not a multiple of 64 from 64 to 65536"
    "btl_xrc_eager_rdma_num|1|out of range"
)
for c in "${cases[@]}"; do
    IFS='|' read -r param value expect <<<"$c"
    run_mpi "$out" -np 2 --mca pml ob1 --mca btl self,vader,xrc --mca "$param" "$value" "$RING"
    status=$?
    no_crash $status "$out" "$param=$value (optional)" || continue
    if [ $status -eq 0 ] && grep -q '^ring: OK' "$out" && grep -q "Parameter: $param" "$out" &&
       grep -qF "Value:     \"$value\"" "$out" && grep -qF "$expect" "$out"; then
        pass "$param=$value: refused with a clear message, job fell back"
    else
        fail "$param=$value with xrc optional (exit $status)"; sed 's/^/    /' "$out" | head -30
    fi
    run_mpi "$out" -np 2 --mca pml ob1 --mca btl self,xrc --mca "$param" "$value" "$RING"
    status=$?
    no_crash $status "$out" "$param=$value (required)" || continue
    if [ $status -ne 0 ] && grep -q "Parameter: $param" "$out"; then
        pass "$param=$value: required xrc stops the job (exit $status)"
    else
        fail "$param=$value with xrc required (exit $status)"; sed 's/^/    /' "$out" | head -30
    fi
done

run_mpi "$out" -np 2 --mca pml ob1 --mca btl self,vader,xrc --mca btl_xrc_if_include a --mca btl_xrc_if_exclude b "$RING"
status=$?
if [ $status -eq 0 ] && grep -q 'Both btl_xrc_if_include and btl_xrc_if_exclude are set' "$out"; then
    pass "include and exclude together are refused"
else
    fail "include+exclude (exit $status)"; sed 's/^/    /' "$out" | head -30
fi
finish
