// SPDX-License-Identifier: BSD-3-Clause
#include "operation_text.h"

#include <cstdio>

namespace xrc {

namespace {

std::string hex(std::uint64_t value) {
    char text[24];
    snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
    return text;
}

}  // namespace

std::string describe_operation(const ibv_send_wr &wr) {
    const std::string bytes = std::to_string(wr.num_sge > 0 ? wr.sg_list[0].length : 0) + " bytes";
    switch (wr.opcode) {
        case IBV_WR_RDMA_READ:
            return "RDMA read of " + bytes + " at " + hex(wr.wr.rdma.remote_addr);
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            return "RDMA write of " + bytes + " at " + hex(wr.wr.rdma.remote_addr);
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
            return "atomic fetch-and-add at " + hex(wr.wr.atomic.remote_addr);
        case IBV_WR_ATOMIC_CMP_AND_SWP:
            return "atomic compare-and-swap at " + hex(wr.wr.atomic.remote_addr);
        default:
            return "send of " + bytes;
    }
}

std::string one_sided_rail_failure(const ibv_send_wr &wr, ibv_wc_status status) {
    const std::string why = std::string(" failed with its rail (") + ibv_wc_status_str(status) + ")";
    if (is_atomic(wr))
        return std::string("an atomic ") +
               (wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? "fetch-and-add" : "compare-and-swap") + why +
               ": it may have executed, so it is not sent again, and no other rail reaches the window it targets";
    return describe_operation(wr) + " of a one-sided window" + why +
           ": the window is registered on this rail only, so no other rail can carry it";
}

std::string failed_completion_text(const std::string &operation, const ibv_wc &wc,
                                   std::optional<ibv_port_state> port_state, std::uint32_t my_rank,
                                   const std::string &qp) {
    std::string text =
        operation + " failed: " + ibv_wc_status_str(wc.status) + " (vendor error " + hex(wc.vendor_err) + ")";
    if (port_state) text += std::string("; the port is not active (") + ibv_port_state_str(*port_state) + ")";
    if (wc.status == IBV_WC_REM_INV_REQ_ERR || wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_REM_OP_ERR)
        text += "; the responder refused it: this rank (" + std::to_string(my_rank) + ") sent it on its " + qp +
                ", and that TGT QP is now in the error state";
    return text;
}

}  // namespace xrc
