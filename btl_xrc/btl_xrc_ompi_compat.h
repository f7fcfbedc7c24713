// SPDX-License-Identifier: BSD-3-Clause
// Everything that differs between the Open MPI BTL interfaces we build against lives here (the headers
// themselves are chosen in btl_xrc_ompi.h); no other file of the component tests the Open MPI version.
//   310 = Open MPI 4.1.x (BTL 3.1.0)    330 = Open MPI 5.0.x (BTL 3.3.0)
// What changed from 310 to 330, as far as the component is concerned:
//  - receive callbacks take one mca_btl_base_receive_descriptor_t instead of (tag, descriptor, cbdata);
//  - the modex macros call PMIx directly: PMIx key, type and scope names instead of OPAL's, and the status
//    they set is a pmix_status_t (success is 0 in both);
//  - opal_proc_t lost proc_hostname (opal_get_proc_hostname() gives it);
//  - osc/rdma uses a BTL natively only when it sets MCA_BTL_FLAGS_RDMA_REMOTE_COMPLETION, for which 5.0.0-5.0.9
//    have no name in the btl_flags enumerator: it cannot be part of the btl_xrc_flags default (ompi_info would
//    drop that parameter, and a user's flags string could not keep the bit), so modules add it when created.
// btl_ft_event (gone in 330) is not used; the module table is filled member by member, so the layout change of
// its tail does not matter.
#pragma once

#include <cstdint>

#if BTL_VERSION == 310

#define BTL_XRC_PMIX_JOB_SIZE OPAL_PMIX_JOB_SIZE
#define BTL_XRC_PMIX_NODE_LIST OPAL_PMIX_NODE_LIST
#define BTL_XRC_PMIX_HOSTNAME OPAL_PMIX_HOSTNAME
#define BTL_XRC_PMIX_NODEID OPAL_PMIX_NODEID
#define BTL_XRC_PMIX_LOCAL_RANK OPAL_PMIX_LOCAL_RANK
#define BTL_XRC_PMIX_UINT16 OPAL_UINT16
#define BTL_XRC_PMIX_UINT32 OPAL_UINT32
#define BTL_XRC_PMIX_STRING OPAL_STRING
#define BTL_XRC_PMIX_GLOBAL OPAL_PMIX_GLOBAL
// Flags the module has beyond what btl_xrc_flags says (see above).
inline constexpr uint32_t kBtlXrcModuleFlags = 0;

inline const char *mca_btl_xrc_proc_hostname(const opal_proc_t *proc) noexcept {
    return proc->proc_hostname;
}

// A receive callback of our own in Open MPI's table, from one that takes the module and the segment.
template <void (*Receive)(mca_btl_base_module_t *, const mca_btl_base_segment_t *)>
void mca_btl_xrc_receive_adapter(mca_btl_base_module_t *btl, mca_btl_base_tag_t, mca_btl_base_descriptor_t *des,
                                 void *) {
    Receive(btl, des->des_segments);
}

inline void mca_btl_xrc_call_receive_cb(mca_btl_base_module_t *btl, const mca_btl_active_message_callback_t *reg,
                                        mca_btl_base_endpoint_t *, mca_btl_base_tag_t tag,
                                        const mca_btl_base_segment_t *segment) {
    mca_btl_base_descriptor_t des{};
    des.des_segments = const_cast<mca_btl_base_segment_t *>(segment);
    des.des_segment_count = 1;
    reg->cbfunc(btl, tag, &des, reg->cbdata);
}

#elif BTL_VERSION == 330

#define BTL_XRC_PMIX_JOB_SIZE PMIX_JOB_SIZE
#define BTL_XRC_PMIX_NODE_LIST PMIX_NODE_LIST
#define BTL_XRC_PMIX_HOSTNAME PMIX_HOSTNAME
#define BTL_XRC_PMIX_NODEID PMIX_NODEID
#define BTL_XRC_PMIX_LOCAL_RANK PMIX_LOCAL_RANK
#define BTL_XRC_PMIX_UINT16 PMIX_UINT16
#define BTL_XRC_PMIX_UINT32 PMIX_UINT32
#define BTL_XRC_PMIX_STRING PMIX_STRING
#define BTL_XRC_PMIX_GLOBAL PMIX_GLOBAL
// XRC (like RC) completes an RDMA write or atomic at the initiator only once the target acknowledged it, after
// it was placed in the target's memory.
inline constexpr uint32_t kBtlXrcModuleFlags = MCA_BTL_FLAGS_RDMA_REMOTE_COMPLETION;

inline const char *mca_btl_xrc_proc_hostname(const opal_proc_t *proc) noexcept {
    return opal_get_proc_hostname(proc);
}

// `endpoint` is the sender's when the caller knows it (eager RDMA rings), else null as btl/uct passes: ob1 and
// the FT collectives do not read it. Only the active-message RDMA emulation of osc/rdma needs it, and that
// carries only the operations a BTL lacks: xrc has put, get and the atomics osc/rdma uses.
inline void mca_btl_xrc_call_receive_cb(mca_btl_base_module_t *btl, const mca_btl_active_message_callback_t *reg,
                                        mca_btl_base_endpoint_t *endpoint, mca_btl_base_tag_t tag,
                                        const mca_btl_base_segment_t *segment) {
    const mca_btl_base_receive_descriptor_t des = {
        .endpoint = endpoint,
        .des_segments = segment,
        .des_segment_count = 1,
        .tag = tag,
        .cbdata = reg->cbdata,
    };
    reg->cbfunc(btl, &des);
}

// A receive callback of our own in Open MPI's table, from one that takes the module and the segment.
template <void (*Receive)(mca_btl_base_module_t *, const mca_btl_base_segment_t *)>
void mca_btl_xrc_receive_adapter(mca_btl_base_module_t *btl, const mca_btl_base_receive_descriptor_t *des) {
    Receive(btl, des->des_segments);
}

#else
#error "btl-xrc supports the Open MPI BTL interfaces 310 (Open MPI 4.1.x) and 330 (5.0.x); see btl_xrc_ompi_compat.h"
#endif
