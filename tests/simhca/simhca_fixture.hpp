// SPDX-License-Identifier: BSD-3-Clause
// Test support for the software HCA: every test gets its own private
// simhcad (unique SIMHCA_INSTANCE), stopped by pid in TearDown, plus small
// helpers to build connected QPs and wait for completions.
#pragma once
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace simhca::test {

class DaemonTest : public ::testing::Test {
protected:
    void SetUp() override;
    void TearDown() override;

    // Output of `simhca-ctl list --json` for this test's daemon.
    std::string ctl_list_json();
    // Count of "key":N in the JSON summary (e.g. "qps").
    long ctl_count(const std::string &key);
    // Waits up to 2 s for ctl_count(key) == want (cleanup is asynchronous).
    bool wait_count(const std::string &key, long want);

    // Runs `simhca-ctl ARGS` against this test's daemon; its exit status.
    int ctl(const std::string &args);

    std::vector<std::string> daemon_args;  // extra simhcad options, set before DaemonTest::SetUp()
    ibv_context *ctx = nullptr;
    ibv_pd *pd = nullptr;
    ibv_cq *cq = nullptr;
    pid_t daemon_pid = -1;
    std::string instance;
    std::string tmpdir;
};

ibv_context *open_device();
ibv_qp *create_rc(ibv_pd *pd, ibv_cq *cq, ibv_srq *srq = nullptr, uint32_t depth = 16);
// RESET -> INIT -> RTR -> RTS towards `remote_qpn` on LID `dlid` (default 1), through port `port`.
int connect_qp(ibv_qp *qp, uint32_t remote_qpn, uint8_t rnr_retry = 7, uint8_t min_rnr_timer = 1,
               int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
               uint8_t retry_cnt = 7, uint8_t timeout = 14, uint8_t port = 1, uint16_t dlid = 1);
// Polls until `n` completions arrived or `timeout_ms` passed; returns the count.
int poll_n(ibv_cq *cq, ibv_wc *wc, int n, int timeout_ms = 5000);
int post_send_simple(ibv_qp *qp, ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id, ibv_wr_opcode op = IBV_WR_SEND,
                     uint64_t raddr = 0, uint32_t rkey = 0, uint32_t remote_srqn = 0);
int post_recv_simple(ibv_qp *qp, ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id);
int post_srq_recv_simple(ibv_srq *srq, ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id);
// The next asynchronous event of `ctx`, waiting up to `timeout_ms`; false when none came (the caller acks it).
bool next_async_event(ibv_context *ctx, ibv_async_event &ev, int timeout_ms = 3000);

}  // namespace simhca::test
