#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The built plugin: loadable from the build tree, ompi_info lists every parameter and performance variable with a
# description, and the shared object exports exactly one symbol, the component.
. "$(dirname "$0")/common.sh"
so="$BTL_XRC_BUILDDIR/btl_xrc/.libs/mca_btl_xrc.so"

exported=$(nm -D --defined-only "$so" | awk '$2 ~ /[A-Z]/ {print $3}')
if [ "$exported" = "mca_btl_xrc_component" ]; then
    pass "exports only mca_btl_xrc_component"
else
    fail "exported symbols: $(echo $exported)"
fi
if nm -D "$so" | grep -q ' u '; then fail "STB_GNU_UNIQUE symbols would pin the plugin in memory"; fi

timeout 60 "${OMPI_INFO:-ompi_info}" --param btl xrc --level 9 --parsable >"$out" 2>&1
for p in verbose if_include if_exclude xrcd_dir receive_queues cq_size send_queue_depth max_inline_data mtu \
         timeout retry_count rnr_retry min_rnr_timer max_rdma_dst_ops service_level pkey gid_index \
         signal_interval cq_poll_batch free_list_num free_list_max free_list_inc ignore_locality \
         exclusivity eager_limit rndv_eager_limit max_send_size flags atomic_flags \
         rdma_pipeline_send_length rdma_pipeline_frag_size min_rdma_pipeline_size put_limit get_limit \
         use_eager_rdma eager_rdma_threshold max_eager_rdma eager_rdma_num eager_rdma_slot_size port_down_grace \
         async_progress connect_timeout finalize_peer_wait bandwidth rail_failover other_jobs; do
    if grep -q "^mca:btl:xrc:param:btl_xrc_${p}:help:." "$out"; then
        pass "ompi_info lists btl_xrc_$p with a description"
    else
        fail "ompi_info does not describe btl_xrc_$p"
    fi
done
# With several rails the loss of one is survived unless the admin turns it off (docs/admin.md, "Several rails").
if grep -qx 'mca:btl:xrc:param:btl_xrc_rail_failover:value:true' "$out"; then
    pass "btl_xrc_rail_failover is on by default"
else
    fail "btl_xrc_rail_failover: $(grep '^mca:btl:xrc:param:btl_xrc_rail_failover:value:' "$out")"
fi
# The MPI_T performance variables (btl_xrc_pvars.cc) are listed too, each with its class and a description.
known=0
for p in ring_sends:counter srq_sends:counter srq_sends_ring_active:counter ring_receives:counter \
         srq_receives:counter bytes_sent:counter bytes_received:counter credit_writes:counter rdma_writes:counter \
         rdma_bytes_written:counter rdma_reads:counter rdma_bytes_read:counter atomics:counter \
         eager_ring_requests:counter eager_rings_granted:counter eager_rings_refused:counter \
         eager_rings_used:counter eager_ring_refusals:counter eager_ring_resumes_asked:counter \
         eager_rings_resumed:counter eager_ring_resumes_agreed:counter eager_ring_resumes_refused:counter \
         eager_ring_skips:counter connections_opened:counter \
         connections_closed:counter connections_open:level connection_attempts:counter \
         connection_failures:counter reconnections:counter evictions:counter ini_qps:level ini_qps_peak:high_watermark tgt_qps:level \
         tgt_handles:level cm_datagrams_sent:counter cm_datagrams_received:counter cm_retransmissions:counter \
         cm_rejected:counter cm_duplicates:counter cm_stale:counter cm_rotations:counter srq_reposts:counter srq_limit_events:counter \
         async_events:counter rnr_retry_exceeded:counter send_errors:counter port_downs:counter port_ups:counter \
         port_down_ms:counter lid_changes:counter peer_lid_changes:counter paths_migrated:counter \
         failovers:counter failbacks:counter failover_sends:counter replays_dropped:counter replays_delivered:counter \
         registered_bytes:level \
         registered_bytes_peak:high_watermark; do
    known=$((known + 1))
    name=${p%%:*} class=${p#*:}
    class=${class//_/ }
    if grep -qx "mca:btl:xrc:pvar:btl_xrc_$name:class:$class" "$out" &&
       grep -q "^mca:btl:xrc:pvar:btl_xrc_$name:help:." "$out"; then
        pass "ompi_info lists the $class btl_xrc_$name with a description"
    else
        fail "ompi_info does not describe the $class btl_xrc_$name"
    fi
done
listed=$(grep -c '^mca:btl:xrc:pvar:btl_xrc_[a-z_]*:class:' "$out")
[ "$listed" = "$known" ] || fail "ompi_info lists $listed btl_xrc_ pvars, the test knows $known"
finish
