#!/bin/bash
# The built plugin: loadable from the build tree, ompi_info lists every parameter with a description, and
# the shared object exports exactly one symbol, the component.
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
         use_eager_rdma eager_rdma_threshold max_eager_rdma eager_rdma_num eager_rdma_slot_size; do
    if grep -q "^mca:btl:xrc:param:btl_xrc_${p}:help:." "$out"; then
        pass "ompi_info lists btl_xrc_$p with a description"
    else
        fail "ompi_info does not describe btl_xrc_$p"
    fi
done
finish
