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
#define BTL_XRC_PMIX_LOCAL_PEERS OPAL_PMIX_LOCAL_PEERS
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

// The descriptor and segment handed to the callbacks for the messages of one eager RDMA ring, zeroed and filled in
// once (mca_btl_xrc_ring_receive_init) instead of per message: the descriptor is 104 bytes. One per ring is enough
// because a ring's deliveries never overlap (the manager does not poll a ring while one of its messages is being
// delivered, so a progress call made from a callback reaches other rings only), and a callback reads what it is
// handed and keeps nothing of it. Aligned so that a ring's entry is found with a shift.
struct alignas(64) mca_btl_xrc_ring_receive_t {
    mca_btl_base_segment_t segment;
    mca_btl_base_descriptor_t des;
};

inline void mca_btl_xrc_ring_receive_init(mca_btl_xrc_ring_receive_t &r) noexcept {
    r.segment = {};
    r.des = {};
    r.des.des_segments = &r.segment;
    r.des.des_segment_count = 1;
}

inline void mca_btl_xrc_call_ring_receive_cb(mca_btl_base_module_t *btl, const mca_btl_active_message_callback_t *reg,
                                             mca_btl_base_endpoint_t *, mca_btl_base_tag_t tag,
                                             mca_btl_xrc_ring_receive_t &r, void *data, size_t length) {
    r.segment.seg_addr.pval = data;
    r.segment.seg_len = length;
    reg->cbfunc(btl, tag, &r.des, reg->cbdata);
}

// Open MPI 4.1 has no User-Level Failure Mitigation: a process's death ends the job.
inline bool mca_btl_xrc_compat_ft_enabled() noexcept {
    return false;
}
inline void mca_btl_xrc_compat_watch_deaths(void (*)(uint32_t)) noexcept {}
inline void mca_btl_xrc_compat_unwatch_deaths() noexcept {}

#elif BTL_VERSION == 330

#define BTL_XRC_PMIX_JOB_SIZE PMIX_JOB_SIZE
#define BTL_XRC_PMIX_NODE_LIST PMIX_NODE_LIST
#define BTL_XRC_PMIX_HOSTNAME PMIX_HOSTNAME
#define BTL_XRC_PMIX_NODEID PMIX_NODEID
#define BTL_XRC_PMIX_LOCAL_RANK PMIX_LOCAL_RANK
#define BTL_XRC_PMIX_LOCAL_PEERS PMIX_LOCAL_PEERS
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

// Open MPI 5.0's descriptor is 5 fields, made per message on the stack (mca_btl_xrc_call_receive_cb): a ring needs
// nothing kept for its deliveries.
struct mca_btl_xrc_ring_receive_t {};

inline void mca_btl_xrc_ring_receive_init(mca_btl_xrc_ring_receive_t &) noexcept {}

inline void mca_btl_xrc_call_ring_receive_cb(mca_btl_base_module_t *btl, const mca_btl_active_message_callback_t *reg,
                                             mca_btl_base_endpoint_t *endpoint, mca_btl_base_tag_t tag,
                                             mca_btl_xrc_ring_receive_t &, void *data, size_t length) {
    mca_btl_base_segment_t segment{};
    segment.seg_addr.pval = data;
    segment.seg_len = length;
    mca_btl_xrc_call_receive_cb(btl, reg, endpoint, tag, &segment);
}

// A receive callback of our own in Open MPI's table, from one that takes the module and the segment.
template <void (*Receive)(mca_btl_base_module_t *, const mca_btl_base_segment_t *)>
void mca_btl_xrc_receive_adapter(mca_btl_base_module_t *btl, const mca_btl_base_receive_descriptor_t *des) {
    Receive(btl, des->des_segments);
}

// Whether the job runs with User-Level Failure Mitigation (mpirun --with-ft ulfm sets mpi_ft_enable): a process's
// death is then reported to ob1 as that process's failure, and the job goes on.
inline bool mca_btl_xrc_compat_ft_enabled() noexcept {
    const int index = mca_base_var_find("ompi", "mpi", nullptr, "ft_enable");
    const void *value = nullptr;
    if (index < 0 || mca_base_var_get_value(index, &value, nullptr, nullptr) != OPAL_SUCCESS || value == nullptr)
        return false;
    return *static_cast<const bool *>(value);
}

namespace mca_btl_xrc_compat_detail {
inline void (*died)(uint32_t) = nullptr;
inline size_t handler_id = 0;
inline bool handler_registered = false;

// The runtime's word that a process terminated (PRRTE under --with-ft ulfm): the affected process (or the source)
// of this job, a definite rank. Handed on, and the chain goes on to Open MPI's own handler.
inline void on_death(size_t, pmix_status_t, const pmix_proc_t *source, pmix_info_t info[], size_t ninfo, pmix_info_t *,
                     size_t, pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata) {
    const pmix_proc_t *proc = source;
    for (size_t i = 0; i < ninfo; ++i)
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && info[i].value.type == PMIX_PROC)
            proc = info[i].value.data.proc;
    if (proc != nullptr && proc->rank < PMIX_RANK_VALID &&
        PMIX_CHECK_NSPACE(proc->nspace, opal_process_info.myprocid.nspace) && died != nullptr)
        died(proc->rank);
    if (cbfunc != nullptr) cbfunc(PMIX_EVENT_NO_ACTION_TAKEN, nullptr, 0, nullptr, nullptr, cbdata);
}

}  // namespace mca_btl_xrc_compat_detail

// `died(rank)` is called, on the runtime's thread, for each process of this job the runtime says terminated.
// Registered in front of Open MPI's own handler, which ends the chain (so it still runs: ours passes it on).
inline void mca_btl_xrc_compat_watch_deaths(void (*died)(uint32_t)) noexcept {
    namespace d = mca_btl_xrc_compat_detail;
    d::died = died;
    pmix_status_t codes[] = {PMIX_ERR_PROC_ABORTED_BY_SIG, PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_EVENT_PROC_TERMINATED,
                             PMIX_ERR_PROC_ABORTED};
    pmix_info_t info;
    bool prepend = true;
    PMIX_INFO_LOAD(&info, PMIX_EVENT_HDLR_PREPEND, &prepend, PMIX_BOOL);
    // Blocking (no callback): the handler's reference, or a negative error.
    const pmix_status_t id =
        PMIx_Register_event_handler(codes, sizeof(codes) / sizeof(codes[0]), &info, 1, d::on_death, nullptr, nullptr);
    PMIX_INFO_DESTRUCT(&info);
    if (id >= 0) {
        d::handler_id = static_cast<size_t>(id);
        d::handler_registered = true;
    }
}

inline void mca_btl_xrc_compat_unwatch_deaths() noexcept {
    namespace d = mca_btl_xrc_compat_detail;
    if (d::handler_registered) PMIx_Deregister_event_handler(d::handler_id, nullptr, nullptr);
    d::handler_registered = false;
    d::died = nullptr;
}

#else
#error "btl-xrc supports the Open MPI BTL interfaces 310 (Open MPI 4.1.x) and 330 (5.0.x); see btl_xrc_ompi_compat.h"
#endif
