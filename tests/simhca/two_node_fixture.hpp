// SPDX-License-Identifier: BSD-3-Clause
// Two simulated nodes on the host: two daemons (private instances, nodes
// "na" LID 1 and "nb" LID 2) joined by a fabric file on 127.0.0.1, each with
// a context, PD, CQ and a 1 MiB registered buffer; stopped by pid.
#pragma once
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace simhca::test {

class TwoNode : public ::testing::Test {
protected:
    void SetUp() override;
    void TearDown() override;
    void use(int i); // later verbs calls talk to node i's daemon
    // Connects an RC QP on each node to the other (LIDs 1 and 2).
    void rc_pair(ibv_qp *&a, ibv_qp *&b, uint8_t retry_cnt = 7, uint8_t timeout = 14);
    static int connect_remote(ibv_qp *qp, uint32_t rqpn, uint16_t dlid, uint8_t retry_cnt, uint8_t timeout);
    // An XRC INI QP on node 0 (connected, in RTS) toward a TGT QP on node 1 in a new XRC domain with one XRC
    // SRQ (8 WRs, node 1's CQ). The TGT QP is readied too unless `ready_tgt` is false (then it stays in INIT,
    // where it drops whatever reaches it). Objects go with the contexts at TearDown.
    struct Xrc {
        int fd = -1;  // the domain's file
        ibv_xrcd *xrcd = nullptr;
        ibv_srq *srq = nullptr;
        uint32_t srqn = 0;
        ibv_qp *tgt = nullptr, *ini = nullptr;
    };
    void xrc_pair(Xrc &x, bool ready_tgt = true, uint8_t retry_cnt = 7, uint8_t timeout = 14);
    // Node i's port counter NAME, as its sysfs file says and as `simhca-ctl counters` says (-1 if missing).
    long long counter_file(int i, const std::string &name) const;
    long long counter_ctl(int i, const std::string &name) const;
    // Runs `simhca-ctl ARGS` against node i's daemon; returns system()'s status.
    int ctl(int i, const std::string &args);

    std::string dir, fabric, inst[2];
    pid_t pid[2] = {-1, -1};
    ibv_context *ctx[2] = {};
    ibv_pd *pd[2] = {};
    ibv_cq *cq[2] = {};
    ibv_mr *mr[2] = {};
    std::vector<uint8_t> buf[2];
};

} // namespace simhca::test
