// SPDX-License-Identifier: BSD-3-Clause
// The port's completion loop, PortTransport::progress(Sink&), on the software HCA (each test starts a daemon of its
// own, tests/simhca/simhca_fixture): a PortTransport made as the BTL makes one, an on-node peer reached through
// the HCA's loopback, and a sink that records what it hears. Checked:
//   - a message reaches the sink with its tag, length and bytes, and its receive buffer is posted again (more
//     messages than the SRQ has buffers all arrive);
//   - a send completion completes the operation it belongs to;
//   - a failed send completion reaches the sink with its status and send queue, naming the failed operation,
//     and completes that operation with the same status;
//   - a datagram to the connection manager's UD QP goes to the connection manager, never to the sink;
//   - riding outages, a loopback send the HCA gave up on while the port was down hands back its operation (the
//     queue stays usable), the on-node peer's next message is first of a new pair, made by the next tick and
//     opened when the port is back, and the copy sent again arrives through it.
#include "simhca_fixture.hpp"
#include "src/core/device_discovery.h"
#include "src/core/port_progress.h"
#include "src/core/port_transport.h"
#include "src/core/registered_block.h"
#include "src/core/wire_format.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace xrc;

namespace {

struct RecordingSink {
    struct Message {
        std::uint8_t tag;
        std::vector<unsigned char> bytes;
    };
    struct SendFailure {
        SendQueue *queue;
        ibv_wc_status status;
        const SendOp *op;
    };
    std::vector<Message> messages;
    std::vector<std::uint32_t> controls, dropped_lengths;
    std::vector<ibv_wc_status> receive_failures;
    std::vector<SendFailure> send_failures;

    bool deliver(std::uint8_t tag, unsigned char *data, std::uint32_t length) noexcept {
        messages.push_back({tag, std::vector<unsigned char>(data, data + length)});
        return true;
    }
    void control(const unsigned char *, std::uint32_t length) noexcept { controls.push_back(length); }
    void dropped(std::uint32_t length, std::uint32_t) noexcept { dropped_lengths.push_back(length); }
    void receive_failed(ibv_wc_status status) noexcept { receive_failures.push_back(status); }
    void send_failed(SendQueue &queue, const ibv_wc &wc) noexcept {
        send_failures.push_back({&queue, wc.status, queue.failed_op(wc)});
    }
};

// What the operations' completion callbacks were called with.
std::vector<std::pair<SendOp *, ibv_wc_status>> g_completed;
void record_completion(SendOp *op, ibv_wc_status status) noexcept {
    g_completed.emplace_back(op, status);
}

constexpr std::uint32_t kSmallBuffers = 4;  // the first receive class's SRQ holds this many buffers

class PortProgress : public simhca::test::DaemonTest {
protected:
    void SetUp() override {
        DaemonTest::SetUp();
        if (HasFatalFailure()) return;
        g_completed.clear();
        DiscoveryReport report = discover_xrc_ports(PortFilter{}, PortFilter{});
        ASSERT_EQ(report.devices.size(), 1u) << report.error;
        auto device = std::make_shared<OpenedDevice>(std::move(report.devices.front()));
        TransportConfig config;
        config.receive_classes = {{256, kSmallBuffers, 1}, {8192, 16, 4}};
        config.send_queue_depth = 64;
        config.signal_interval = 4;
        config.xrcd_dir = tmpdir;
        config.job_name = "port-progress";
        config.cm.my_rank = 0;
        config.cm.jobid = 1;
        configure(config);
        PortTransport::Listener listener;
        listener.note = [this](const std::string &what) { notes.push_back(what); };
        listener.link_failed = [this](const NodeLink *, const std::string &why) { failures.push_back(why); };
        // The only rank of the job is this process.
        auto lookup = [this](std::uint32_t rank) -> const PortAddress * {
            return rank == 0 && transport ? &transport->address() : nullptr;
        };
        auto made = PortTransport::make(device, device->ports.front(), config, lookup, listener);
        ASSERT_TRUE(made) << made.error().message();
        transport = std::move(*made);
        transport->count_into(&counters);
        ASSERT_TRUE(buffer.allocate(4096));
        ASSERT_TRUE(buffer.register_on(transport->pd(), IBV_ACCESS_LOCAL_WRITE, counters));
        peer.rank = 0;
        transport->attach(peer, transport->address(), 0);  // on this very port: the loopback queue
        ASSERT_NE(peer.queue, nullptr);
    }
    void TearDown() override {
        if (transport) transport->detach(peer);
        buffer.reset();  // before its PD goes
        transport.reset();
        // The fixture's own CQ and PD (the UD test's QP used them): destroyed, not left to ibv_close_device, so
        // that LeakSanitizer has nothing of this test to report.
        if (cq != nullptr) ibv_destroy_cq(cq);
        if (pd != nullptr) ibv_dealloc_pd(pd);
        cq = nullptr;
        pd = nullptr;
        DaemonTest::TearDown();
    }

    // What a test's transport has beyond the common configuration.
    virtual void configure(TransportConfig &) {}

    // Ticks and polls until `done` holds or 5 s passed (a bound for "it ends", not a timing); false on the bound.
    bool progress_until(const std::function<bool()> &done) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!done()) {
            if (std::chrono::steady_clock::now() > end) return false;
            transport->tick();
            (void)transport->progress(sink);
        }
        return true;
    }

    // `op` as a message of `len` bytes at `offset` of the registered buffer, for `tag`, with a completion callback.
    void prepare(SendOp &op, std::size_t offset, std::uint32_t len, std::uint8_t tag) {
        peer.prepare_srq(op, buffer.data() + offset, len, buffer.lkey(), make_imm(tag));
        op.on_complete = record_completion;
    }

    std::vector<std::string> notes, failures;
    Counters counters;
    std::unique_ptr<PortTransport> transport;
    RegisteredBlock buffer;
    Peer peer;
    RecordingSink sink;
};

TEST_F(PortProgress, DeliversEachMessageAndRepostsItsBuffer) {
    // Three times as many messages as the SRQ has buffers, one after the other: each arrives only if the buffer
    // of the one before was posted again.
    constexpr std::uint32_t kMessages = 3 * kSmallBuffers;
    for (std::uint32_t i = 0; i < kMessages; ++i) {
        const std::uint32_t len = 16 + i;
        for (std::uint32_t b = 0; b < len; ++b) buffer.data()[b] = static_cast<unsigned char>(i * 31 + b);
        SendOp op;
        prepare(op, 0, len, static_cast<std::uint8_t>(10 + i));
        ASSERT_EQ(peer.queue->post_or_queue(op), 0);
        ASSERT_TRUE(progress_until([&] { return sink.messages.size() == i + 1 && g_completed.size() == i + 1; }))
            << "message " << i << " did not arrive";
        const auto &m = sink.messages.back();
        EXPECT_EQ(m.tag, 10 + i);
        ASSERT_EQ(m.bytes.size(), len);
        for (std::uint32_t b = 0; b < len; ++b) ASSERT_EQ(m.bytes[b], static_cast<unsigned char>(i * 31 + b));
        EXPECT_EQ(g_completed.back().first, &op);
        EXPECT_EQ(g_completed.back().second, IBV_WC_SUCCESS);
    }
    EXPECT_EQ(counters.srq_receives, kMessages);
    EXPECT_EQ(counters.srq_reposts, kMessages);
    EXPECT_EQ(counters.send_errors, 0u);
    EXPECT_TRUE(sink.dropped_lengths.empty());
    EXPECT_TRUE(sink.send_failures.empty());
    EXPECT_TRUE(sink.receive_failures.empty());
    EXPECT_TRUE(failures.empty());
}

TEST_F(PortProgress, SendCompletionsRetireTheirOwnOperations) {
    // Two messages with callbacks among unsignaled ones: each callback hears of its own operation, in order.
    SendOp first, second;
    SendOp plain[3];
    prepare(first, 0, 64, 1);
    for (SendOp &p : plain) {
        peer.prepare_srq(p, buffer.data() + 128, 32, buffer.lkey(), make_imm(2));  // no callback: unsignaled
    }
    prepare(second, 256, 64, 3);
    ASSERT_EQ(peer.queue->post_or_queue(first), 0);
    for (SendOp &p : plain) ASSERT_EQ(peer.queue->post_or_queue(p), 0);
    ASSERT_EQ(peer.queue->post_or_queue(second), 0);
    ASSERT_TRUE(progress_until([&] { return g_completed.size() == 2 && sink.messages.size() == 5; }));
    EXPECT_EQ(g_completed[0].first, &first);
    EXPECT_EQ(g_completed[1].first, &second);
    EXPECT_EQ(g_completed[0].second, IBV_WC_SUCCESS);
    EXPECT_EQ(g_completed[1].second, IBV_WC_SUCCESS);
    EXPECT_TRUE(progress_until([&] { return peer.queue->idle(); }));
    EXPECT_EQ(peer.queue->outstanding_callbacks(), 0u);
}

TEST_F(PortProgress, FailedSendIsReportedWithItsStatusAndOperation) {
    SendOp good, bad;
    prepare(good, 0, 32, 7);
    ASSERT_EQ(peer.queue->post_or_queue(good), 0);
    ASSERT_TRUE(progress_until([&] { return g_completed.size() == 1; }));
    prepare(bad, 64, 32, 8);
    bad.wr.qp_type.xrc.remote_srqn = 0xabcde;  // no such SRQ: the responder refuses it
    ASSERT_EQ(peer.queue->post_or_queue(bad), 0);
    ASSERT_TRUE(progress_until([&] { return g_completed.size() == 2; }));
    ASSERT_EQ(sink.send_failures.size(), 1u);
    const auto &f = sink.send_failures.front();
    EXPECT_EQ(f.queue, peer.queue);
    EXPECT_TRUE(transport->is_loopback(*f.queue));
    EXPECT_EQ(f.op, &bad);
    EXPECT_NE(f.status, IBV_WC_SUCCESS);
    EXPECT_NE(f.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(g_completed.back().first, &bad);
    EXPECT_EQ(g_completed.back().second, f.status);
    EXPECT_EQ(counters.send_errors, 1u);
    EXPECT_TRUE(peer.queue->broken());
    EXPECT_EQ(sink.messages.size(), 1u);  // only the good one
}

TEST_F(PortProgress, DatagramToTheConnectionManagerGoesToIt) {
    // A UD QP of another context sends a datagram that is not a connection manager message to the transport's
    // UD QP, with its Q_Key: the connection manager receives and rejects it; the sink hears nothing.
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_UD;
    init.cap.max_send_wr = 4;
    init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    ibv_qp *ud = ibv_create_qp(pd, &init);
    ASSERT_NE(ud, nullptr);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = transport->port_num();
    attr.qkey = cm_qkey(transport->address().token);
    ASSERT_EQ(ibv_modify_qp(ud, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(ibv_modify_qp(ud, &attr, IBV_QP_STATE), 0);
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(ibv_modify_qp(ud, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    ibv_ah_attr ah_attr{};
    ah_attr.dlid = transport->address().lid;
    ah_attr.port_num = transport->port_num();
    ibv_ah *ah = ibv_create_ah(pd, &ah_attr);
    ASSERT_NE(ah, nullptr);
    static char junk[kCmMessageSize] = "not a connection manager message";
    ibv_mr *mr = ibv_reg_mr(pd, junk, sizeof(junk), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(junk), sizeof(junk), mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = transport->address().cm_qpn;
    wr.wr.ud.remote_qkey = cm_qkey(transport->address().token);
    ibv_send_wr *bad = nullptr;
    ASSERT_EQ(ibv_post_send(ud, &wr, &bad), 0);
    EXPECT_TRUE(progress_until([&] { return counters.cm_rejected == 1; }));
    EXPECT_EQ(counters.cm_datagrams_received, 1u);
    EXPECT_TRUE(sink.messages.empty());
    EXPECT_TRUE(sink.dropped_lengths.empty());
    EXPECT_TRUE(sink.receive_failures.empty());
    EXPECT_TRUE(sink.send_failures.empty());
    ibv_wc wc{};
    EXPECT_EQ(simhca::test::poll_n(cq, &wc, 1), 1);  // our own send's completion, on our own CQ
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ibv_destroy_qp(ud);
    ibv_destroy_ah(ah);
    ibv_dereg_mr(mr);
}

}  // namespace

namespace {

// A transport riding outages (btl_xrc_outage_limit), with a retry budget of a few milliseconds: (1 + 1) ACK
// timeouts of 4.096 us * 2^8.
class PortProgressRidingOutages : public PortProgress {
protected:
    void configure(TransportConfig &config) override {
        config.cm.outage_limit_us = 60'000'000;
        config.path.timeout = 8;
        config.path.retry_count = 1;
    }
};

}  // namespace

TEST_F(PortProgressRidingOutages, ALoopbackSendTheHcaGaveUpOnGoesAgainOverANewPairWhenThePortIsBack) {
    SendOp before;
    prepare(before, 0, 32, 1);
    ASSERT_EQ(peer.queue->post_or_queue(before), 0);
    ASSERT_TRUE(progress_until([&] { return g_completed.size() == 1 && sink.messages.size() == 1; }));
    ASSERT_NE(peer.queue->qp(), nullptr);
    const std::uint32_t first_pair = peer.queue->qp()->qp_num;
    const std::uint64_t opened = counters.connections_opened, closed = counters.connections_closed;

    // Posted into a port that is down (the HCA retries it), then the port's event: the queue holds what follows.
    ASSERT_EQ(ctl("fault port-down"), 0);
    SendOp lost;
    prepare(lost, 64, 32, 2);
    ASSERT_EQ(peer.queue->post_or_queue(lost), 0);
    ASSERT_TRUE(transport->port_down());
    ASSERT_TRUE(progress_until([&] { return g_completed.size() == 2; }));
    EXPECT_EQ(g_completed.back().first, &lost);
    EXPECT_EQ(g_completed.back().second, IBV_WC_RETRY_EXC_ERR);
    EXPECT_NE(lost.posted_on, 0u);  // the pair it may have reached: what the receiver judges a copy against
    ASSERT_EQ(sink.send_failures.size(), 1u);
    EXPECT_TRUE(transport->is_loopback(*sink.send_failures.front().queue));
    EXPECT_FALSE(peer.queue->broken());
    EXPECT_TRUE(failures.empty());
    EXPECT_EQ(peer.imm_flags, kImmFirst);

    // Its owner sends a copy: it waits for the port; the new pair is made meanwhile.
    SendOp copy;
    prepare(copy, 64, 32, 2);
    EXPECT_NE(ntohl(copy.wr.imm_data) & kImmFirst, 0u);
    ASSERT_EQ(peer.queue->post_or_queue(copy), 0);
    ASSERT_TRUE(progress_until([&] { return counters.connections_opened == opened + 1; }));
    EXPECT_EQ(counters.connections_closed, closed + 1);
    EXPECT_EQ(g_completed.size(), 2u);
    EXPECT_TRUE(peer.queue->has_pending());

    ASSERT_EQ(ctl("fault port-up"), 0);
    ASSERT_TRUE(transport->port_up());
    ASSERT_TRUE(progress_until([&] { return g_completed.size() == 3 && sink.messages.size() == 2; }));
    EXPECT_EQ(g_completed.back().first, &copy);
    EXPECT_EQ(g_completed.back().second, IBV_WC_SUCCESS);
    EXPECT_EQ(sink.messages.back().tag, 2);
    ASSERT_NE(peer.queue->qp(), nullptr);
    EXPECT_NE(peer.queue->qp()->qp_num, first_pair);
    EXPECT_EQ(sink.send_failures.size(), 1u);
    EXPECT_TRUE(failures.empty());
}
