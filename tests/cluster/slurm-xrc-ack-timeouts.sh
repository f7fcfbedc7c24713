#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# No job launched by Slurm (slurm-xrc.sh's jobs, Slurm's default settings) spends an ACK timeout: the HCAs'
# port counters (hw_counters/local_ack_timeout_err) did not move during any of them. Reads the record
# slurm-xrc.sh wrote (Makefile.am runs that test first); 99 (hard error) when the record is missing or cut short.
#
# Under Slurm 22.05's defaults the data-less PMIx fence (the last MPI_Init barrier) is not a barrier, so a rank may
# send its first message before the peer node has done its wire-up. The connection manager never sends to a TGT QP
# before its creator said it is ready, so the HCAs drop nothing and nobody waits for an ACK timeout (4.3 s with
# btl_xrc_timeout 20).
. "$(dirname "$0")/common.sh"
RECORD=${SLURM_ACK_RECORD:-$PWD/slurm-xrc.acks}
hard_error() { echo "ERROR: $T: $*"; exit 99; }
[ -s "$RECORD" ] || hard_error "no record of slurm-xrc.sh's jobs at $RECORD (run slurm-xrc.sh first)"
grep -qx complete "$RECORD" || hard_error "slurm-xrc.sh's record is incomplete (did it fail?): $(tr '\n' ';' <"$RECORD")"
sed '/^complete$/,$d' "$RECORD" | sed "s/^/$T: /"
spent=$(sed '/^complete$/,$d' "$RECORD" | grep -cv ' ack_timeouts=0$')
jobs=$(sed '/^complete$/,$d' "$RECORD" | grep -c '^job=')
[ "$jobs" -gt 0 ] || hard_error "the record names no job"
if [ "$spent" != 0 ]; then
    die "$spent of $jobs jobs under srun spent ACK timeouts (a first message reached a TGT QP that was not ready)"
fi
info "PASS: none of $jobs jobs under srun spent an ACK timeout"
