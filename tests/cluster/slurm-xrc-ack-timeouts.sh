#!/bin/bash
# No job launched by Slurm (slurm-xrc.sh's jobs, Slurm's default settings) spends an ACK timeout: the HCAs'
# port counters (hw_counters/local_ack_timeout_err) did not move during any of them. Reads the record
# slurm-xrc.sh wrote (Makefile.am runs that test first); 99 (hard error) when the record is missing or cut short.
#
# EXPECTED TO FAIL (XFAIL_TESTS in Makefile.am) until btl xrc connects without trusting the launcher's fence:
# Slurm 22.05's data-less PMIx fence (the last MPI_Init barrier) is not a barrier with its default TreeWidth, so a
# rank may send its first message before the peer node readied its XRC TGT QP; the HCA drops it, as InfiniBand
# does, and the sender retransmits after one ACK timeout (4.3 s with btl_xrc_timeout 20). Data stays correct
# (slurm-xrc.sh checks it). Remove this test from XFAIL_TESTS when the wire-up no longer sends to a TGT QP that
# is not ready: it then passes, and an unexpected pass fails `make check` until then.
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
    info "expected to fail until the wire-up no longer trusts Slurm's fence: Slurm 22.05's data-less PMIx fence" \
        "is not a barrier, a first message reached a TGT QP that was not ready and was retransmitted after an" \
        "ACK timeout (workaround: SLURM_PMIX_FENCE=ring, see README)"
    fail "$spent of $jobs jobs under srun spent ACK timeouts"
fi
info "PASS: none of $jobs jobs under srun spent an ACK timeout"
