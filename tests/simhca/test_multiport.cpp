// SPDX-License-Identifier: BSD-3-Clause
// Several devices and ports (simhcad --devices 2 --ports 2): every device and port is visible with its own
// LID, GID (per-fabric subnet prefix), state, speed and width; faults and events reach one port only;
// traffic leaves and arrives through the QP's port; each rail is a fabric of its own, so a LID of another
// rail is unreachable.
#include <cstring>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <string>
#include <vector>

#include "simhca_fixture.hpp"
#include "two_node_fixture.hpp"

using namespace simhca::test;

namespace {

class MultiPort : public DaemonTest {
protected:
    void SetUp() override {
        daemon_args = {"--devices", "2", "--ports", "2"};
        DaemonTest::SetUp();
        buf.assign(1 << 16, 0);
        mr = ibv_reg_mr(pd, buf.data(), buf.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
        ASSERT_NE(mr, nullptr);
    }
    void TearDown() override {
        if (other) ibv_close_device(other);
        DaemonTest::TearDown();
    }
    // A context on simhca1.
    ibv_context *open_second() {
        int n = 0;
        ibv_device **list = ibv_get_device_list(&n);
        ibv_context *c = n >= 2 ? ibv_open_device(list[1]) : nullptr;
        ibv_free_device_list(list);
        return c;
    }
    static bool next_event(ibv_context *c, ibv_async_event &ev, int timeout_ms = 3000) {
        pollfd pf{c->async_fd, POLLIN, 0};
        if (poll(&pf, 1, timeout_ms) != 1) return false;
        return ibv_get_async_event(c, &ev) == 0;
    }
    std::string read_file(const std::string &path) {
        std::ifstream in(path);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    // The daemon's sysfs directory of device `dev` (the fixture's --sysfs DIR is simhca0's, DIR-N simhcaN's).
    std::string dir(int dev) { return tmpdir + (dev ? "/sysfs-" + std::to_string(dev) : std::string("/sysfs")); }
    uint64_t counter(int dev, int port) {
        return std::stoull(
            read_file(dir(dev) + "/ports/" + std::to_string(port) + "/hw_counters/local_ack_timeout_err"));
    }
    std::vector<uint8_t> buf;
    ibv_mr *mr = nullptr;
    ibv_context *other = nullptr;
};

uint32_t checksum(const uint8_t *p, size_t n) {
    uint32_t s = 0;
    for (size_t i = 0; i < n; ++i) s = s * 31 + p[i];
    return s;
}

TEST_F(MultiPort, DevicesAndPortsAreListedWithTheirAttributes) {
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    ASSERT_EQ(n, 2);
    EXPECT_STREQ(ibv_get_device_name(list[0]), "simhca0");
    EXPECT_STREQ(ibv_get_device_name(list[1]), "simhca1");
    EXPECT_NE(ibv_get_device_guid(list[0]), ibv_get_device_guid(list[1]));
    ibv_free_device_list(list);
    other = open_second();
    ASSERT_NE(other, nullptr);
    std::vector<uint16_t> lids;
    std::vector<std::string> prefixes, guids;
    for (ibv_context *c : {ctx, other}) {
        ibv_device_attr da;
        ASSERT_EQ(ibv_query_device(c, &da), 0);
        EXPECT_EQ(da.phys_port_cnt, 2);
        for (uint8_t p = 1; p <= 2; ++p) {
            ibv_port_attr pa;
            ASSERT_EQ(ibv_query_port(c, p, &pa), 0);
            EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
            EXPECT_EQ(pa.active_speed, 32);  // EDR
            EXPECT_EQ(pa.active_width, 2);   // 4X
            lids.push_back(pa.lid);
            ibv_gid gid;
            ASSERT_EQ(ibv_query_gid(c, p, 0, &gid), 0);
            prefixes.emplace_back(reinterpret_cast<char *>(gid.raw), 8);
            guids.emplace_back(reinterpret_cast<char *>(gid.raw) + 8, 8);
        }
        ibv_port_attr pa;
        EXPECT_NE(ibv_query_port(c, 3, &pa), 0);  // no third port
    }
    // Rail r = device * 2 + port has LID r (no fabric file) and is fabric r: prefix fe80::(r-1).
    EXPECT_EQ(lids, (std::vector<uint16_t>{1, 2, 3, 4}));
    for (size_t r = 0; r < 4; ++r) {
        EXPECT_EQ(uint8_t(prefixes[r][0]), 0xfe);
        EXPECT_EQ(uint8_t(prefixes[r][7]), r);
        for (size_t q = 0; q < r; ++q) EXPECT_NE(guids[r], guids[q]);
    }
    // sysfs: one directory per device, one per port.
    EXPECT_EQ(read_file(dir(1) + "/ports/2/lid"), "0x4\n");
    EXPECT_EQ(read_file(dir(1) + "/ports/2/state"), "4: ACTIVE\n");
    EXPECT_EQ(read_file(dir(0) + "/ports/2/gids/0").substr(0, 20), "fe80:0000:0000:0001:");
    EXPECT_EQ(counter(1, 2), 0u);
}

TEST_F(MultiPort, SpeedAndWidthAreSettablePerPort) {
    other = open_second();
    ASSERT_NE(other, nullptr);
    ASSERT_EQ(ctl("fault speed --device simhca1 --port 2 --speed 64 --width 1"), 0);
    ibv_port_attr pa;
    ASSERT_EQ(ibv_query_port(other, 2, &pa), 0);
    EXPECT_EQ(pa.active_speed, 64);  // HDR
    EXPECT_EQ(pa.active_width, 1);   // 1X
    EXPECT_EQ(read_file(dir(1) + "/ports/2/rate"), "50 Gb/sec (1X HDR)\n");
    for (auto [c, p] : {std::pair{ctx, 1}, {ctx, 2}, {other, 1}}) {
        ASSERT_EQ(ibv_query_port(c, uint8_t(p), &pa), 0);
        EXPECT_EQ(pa.active_speed, 32);
        EXPECT_EQ(pa.active_width, 2);
    }
    EXPECT_NE(ctl("fault speed --port 1 --speed 3 2>/dev/null"), 0);    // not an IB speed encoding
    EXPECT_NE(ctl("fault port-down --device simhca2 2>/dev/null"), 0);  // no such device
}

TEST_F(MultiPort, PortDownReachesOnlyThatPortsDevice) {
    other = open_second();
    ASSERT_NE(other, nullptr);
    ASSERT_EQ(ctl("fault port-down --device simhca0 --port 2"), 0);
    ibv_async_event ev;
    ASSERT_TRUE(next_event(ctx, ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
    EXPECT_EQ(ev.element.port_num, 2);
    ibv_ack_async_event(&ev);
    EXPECT_FALSE(next_event(other, ev, 200));  // simhca1's contexts hear nothing
    ibv_port_attr pa;
    ASSERT_EQ(ibv_query_port(ctx, 2, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_DOWN);
    ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
    ASSERT_EQ(ibv_query_port(other, 2, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(read_file(dir(0) + "/ports/2/state"), "1: DOWN\n");

    // Port 1 still carries traffic; port 2 does not (retry_cnt 1, timeout 8 ~ 1 ms).
    ibv_qp *a1 = create_rc(pd, cq), *b1 = create_rc(pd, cq), *a2 = create_rc(pd, cq), *b2 = create_rc(pd, cq);
    ASSERT_TRUE(a1 && b1 && a2 && b2);
    ASSERT_EQ(connect_qp(a1, b1->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8, 1, 1), 0);
    ASSERT_EQ(connect_qp(b1, a1->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8, 1, 1), 0);
    ASSERT_EQ(connect_qp(a2, b2->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8, 2, 2), 0);
    ASSERT_EQ(connect_qp(b2, a2->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8, 2, 2), 0);
    ASSERT_EQ(post_recv_simple(b1, mr, buf.data(), 64, 1), 0);
    ASSERT_EQ(post_recv_simple(b2, mr, buf.data() + 64, 64, 2), 0);
    ASSERT_EQ(post_send_simple(a1, mr, buf.data() + 1000, 8, 11), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq, wc, 2), 2);  // a1's send and b1's receive
    for (auto &w : wc) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    const uint64_t before = counter(0, 2);
    ASSERT_EQ(post_send_simple(a2, mr, buf.data() + 1000, 8, 12), 0);
    ASSERT_EQ(poll_n(cq, wc, 1), 1);
    EXPECT_EQ(wc[0].wr_id, 12u);
    EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(counter(0, 2), before + 1);  // counted on port 2, not on port 1
    EXPECT_EQ(counter(0, 1), 0u);

    ASSERT_EQ(ctl("fault port-up --device simhca0 --port 2"), 0);
    ASSERT_TRUE(next_event(ctx, ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    EXPECT_EQ(ev.element.port_num, 2);
    ibv_ack_async_event(&ev);
}

TEST_F(MultiPort, TrafficUsesTheQpsPortWithDataIntact) {
    // Port 2 of simhca0 (LID 2) both ways; the first half of the buffer goes to the second half.
    ibv_qp *a = create_rc(pd, cq), *b = create_rc(pd, cq);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(connect_qp(a, b->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 7, 14, 2, 2), 0);
    ASSERT_EQ(connect_qp(b, a->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 7, 14, 2, 2), 0);
    ibv_qp_attr qa;
    ibv_qp_init_attr qi;
    ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_PORT, &qi), 0);
    EXPECT_EQ(qa.port_num, 2);
    for (size_t i = 0; i < 32768; ++i) buf[i] = uint8_t(i * 7 + 3);
    ASSERT_EQ(post_recv_simple(b, mr, buf.data() + 32768, 32768, 1), 0);
    ASSERT_EQ(post_send_simple(a, mr, buf.data(), 32768, 2), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq, wc, 2), 2);
    for (auto &w : wc) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    EXPECT_EQ(checksum(buf.data() + 32768, 32768), checksum(buf.data(), 32768));
    // The port is checked against the device: simhca0 has no port 3.
    ibv_qp *c = create_rc(pd, cq);
    EXPECT_NE(connect_qp(c, a->qp_num, 7, 1, 0, 7, 14, 3, 2), 0);
}

TEST_F(MultiPort, AnotherFabricsLidIsUnreachable) {
    // Port 1 is fabric 1, port 2 (LID 2) fabric 2, simhca1's port 1 (LID 3) fabric 3: a QP on port 1 addressed
    // to LID 2 or 3 reaches nobody (its requests time out), even though the peer QP is on this very node.
    other = open_second();
    ASSERT_NE(other, nullptr);
    ibv_pd *opd = ibv_alloc_pd(other);
    ibv_cq *ocq = ibv_create_cq(other, 16, nullptr, nullptr, 0);
    ASSERT_TRUE(opd && ocq);
    std::vector<uint8_t> obuf(4096, 0);
    ibv_mr *omr = ibv_reg_mr(opd, obuf.data(), obuf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(omr, nullptr);

    ibv_qp *a = create_rc(pd, cq), *b = create_rc(pd, cq), *c = create_rc(opd, ocq);
    ASSERT_TRUE(a && b && c);
    ASSERT_EQ(connect_qp(a, b->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8, 1, 2), 0);  // port 1 -> LID 2
    ASSERT_EQ(connect_qp(b, a->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8, 2, 1), 0);  // port 2 -> LID 1
    ASSERT_EQ(post_recv_simple(b, mr, buf.data(), 64, 1), 0);
    std::memset(buf.data() + 1000, 0x5a, 8);
    ASSERT_EQ(post_send_simple(a, mr, buf.data() + 1000, 8, 2), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(buf[0], 0);  // nothing arrived
    EXPECT_GE(counter(0, 1), 1u);

    // simhca1 port 1 is LID 3: a QP on simhca0 port 1 addressed to it is just as unreachable.
    ibv_qp *d = create_rc(pd, cq);
    ASSERT_EQ(connect_qp(d, c->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8, 1, 3), 0);
    ASSERT_EQ(connect_qp(c, d->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8, 1, 1), 0);
    ASSERT_EQ(post_recv_simple(c, omr, obuf.data(), 64, 3), 0);
    ASSERT_EQ(post_send_simple(d, mr, buf.data() + 1000, 8, 4), 0);
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 4u);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(obuf[0], 0);
}

TEST_F(MultiPort, FlapBringsThePortBackByItself) {
    ASSERT_EQ(ctl("fault flap --device simhca0 --port 2 --seconds 0.2"), 0);
    ibv_async_event ev;
    ASSERT_TRUE(next_event(ctx, ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
    EXPECT_EQ(ev.element.port_num, 2);
    ibv_ack_async_event(&ev);
    ASSERT_TRUE(next_event(ctx, ev, 10000));
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    EXPECT_EQ(ev.element.port_num, 2);
    ibv_ack_async_event(&ev);
    ibv_port_attr pa;
    ASSERT_EQ(ibv_query_port(ctx, 2, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
    EXPECT_NE(ctl("fault flap --port 2 2>/dev/null"), 0);  // needs --seconds
}

// Two daemons with two rails each (fabric file "lid 1,101" / "lid 2,102"): rail 2 carries traffic between the
// nodes; a port-1 QP addressed to the peer's rail-2 LID reaches nobody; rail 2 down leaves rail 1 working.
class TwoRails : public TwoNode {
protected:
    void SetUp() override {
        two_rails = true;
        TwoNode::SetUp();
    }
    // An RC QP on each node connected through port `port` to the peer's LID `lid_a` / `lid_b`.
    void pair(ibv_qp *&a, ibv_qp *&b, uint8_t port, uint16_t lid_a, uint16_t lid_b) {
        use(0);
        a = create_rc(pd[0], cq[0]);
        use(1);
        b = create_rc(pd[1], cq[1]);
        ASSERT_TRUE(a && b);
        use(0);
        ASSERT_EQ(connect_remote(a, b->qp_num, lid_b, 1, 10, port), 0);
        use(1);
        ASSERT_EQ(connect_remote(b, a->qp_num, lid_a, 1, 10, port), 0);
    }
};

TEST_F(TwoRails, Rail2CarriesDataAndOtherFabricsAreUnreachable) {
    ibv_qp *a = nullptr, *b = nullptr;
    ASSERT_NO_FATAL_FAILURE(pair(a, b, 2, 101, 102));
    for (size_t i = 0; i < 65536; ++i) buf[0][i] = uint8_t(i * 13 + 1);
    use(1);
    ASSERT_EQ(post_recv_simple(b, mr[1], buf[1].data(), 65536, 1), 0);
    use(0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 65536, 2), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    use(1);
    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(checksum(buf[1].data(), 65536), checksum(buf[0].data(), 65536));

    // Port 1 of nodeA toward LID 102 (nodeB's rail 2): another fabric, nobody answers.
    ibv_qp *c = nullptr, *d = nullptr;
    ASSERT_NO_FATAL_FAILURE(pair(c, d, 1, 101, 102));
    use(1);
    ASSERT_EQ(post_recv_simple(d, mr[1], buf[1].data() + 65536, 64, 3), 0);
    use(0);
    ASSERT_EQ(post_send_simple(c, mr[0], buf[0].data(), 8, 4), 0);
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 4u);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(TwoRails, Rail2DownLeavesRail1Working) {
    ibv_qp *a1 = nullptr, *b1 = nullptr, *a2 = nullptr, *b2 = nullptr;
    ASSERT_NO_FATAL_FAILURE(pair(a1, b1, 1, 1, 2));
    ASSERT_NO_FATAL_FAILURE(pair(a2, b2, 2, 101, 102));
    ASSERT_EQ(ctl(1, "fault port-down --port 2"), 0);  // nodeB's rail 2
    use(1);
    ASSERT_EQ(post_recv_simple(b1, mr[1], buf[1].data(), 64, 1), 0);
    ASSERT_EQ(post_recv_simple(b2, mr[1], buf[1].data() + 64, 64, 2), 0);
    use(0);
    ASSERT_EQ(post_send_simple(a1, mr[0], buf[0].data(), 8, 11), 0);
    ASSERT_EQ(post_send_simple(a2, mr[0], buf[0].data(), 8, 12), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq[0], wc, 2), 2);
    for (const ibv_wc &w : wc)
        EXPECT_EQ(w.status, w.wr_id == 11 ? IBV_WC_SUCCESS : IBV_WC_RETRY_EXC_ERR) << "wr " << w.wr_id;
}

}  // namespace
