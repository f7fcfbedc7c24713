// SPDX-License-Identifier: BSD-3-Clause
// xrc-status's merge of a node's records: a TGT QP's holders are its owner and every local rank with a handle;
// processes group by job and XRC domain; a stale process is listed but its objects are not; a handle whose owner
// has no record still shows; a bad record is a problem, not a crash.
#include "src/xrc-status/node_view.h"

#include <gtest/gtest.h>

using namespace xrc;
using namespace xrc_status;

namespace {

StatusRecord process(std::uint32_t rank, std::uint32_t pid, std::uint32_t jobid = 7) {
    StatusRecord r;
    r.process.pid = pid;
    r.process.host = "nodeB";
    r.process.jobid = jobid;
    r.process.rank = rank;
    r.process.node = 1;
    r.process.state = "running";
    r.process.written_us = 1'000'000;
    StatusPort port;
    port.device = "simhca0";
    port.port = 1;
    port.xrcd_dev = 5;
    port.xrcd_ino = 99;
    port.cm_qpn = 0x100 + rank;
    port.srqs = {{256, 0x10 + rank, 1024, 1024, 256}};
    r.ports.push_back(port);
    return r;
}

Environment env(std::vector<std::uint32_t> dead = {}) {
    Environment e;
    e.host = "nodeB.cluster";
    e.now_us = 3'500'000;
    e.liveness = [dead](const StatusProcess &p) {
        for (auto pid : dead)
            if (p.pid == pid) return Liveness::gone;
        return p.host == "nodeB" ? Liveness::alive : Liveness::other_host;
    };
    return e;
}

}  // namespace

TEST(NodeView, HoldersAreOwnerAndHandles) {
    StatusRecord a = process(2, 1002), b = process(3, 1003);
    a.ports[0].tgts.push_back({0x59, "RTS", 0, 0, "nodeA", 0x57, 1, 0, false});
    b.ports[0].handles.push_back({0x59, 0x57});
    a.ports[0].links.push_back({0, "nodeA", "connected", 0x58, "RTS", 0, 0x5a, 1, 0, false});
    b.ports[0].links.push_back({2, "nodeC", "failed", 0, "", 4, 0, 1, 0, true});
    const NodeView v = merge_records({{"/s/job/btl_xrc_status.7.0.3", encode_status(b)},
                                      {"/s/job/btl_xrc_status.7.0.2", encode_status(a)}},
                                     env());
    ASSERT_TRUE(v.problems.empty());
    ASSERT_EQ(v.jobs.size(), 1u);
    const JobView &job = v.jobs[0];
    EXPECT_EQ(job.dir, "/s/job");
    ASSERT_EQ(job.processes.size(), 2u);
    EXPECT_EQ(job.processes[0].record.process.rank, 2u);  // by rank
    EXPECT_DOUBLE_EQ(job.processes[0].age_s, 2.5);
    ASSERT_EQ(job.domains.size(), 1u);
    const DomainView &d = job.domains[0];
    EXPECT_EQ(d.ranks, (std::vector<std::uint32_t>{2, 3}));
    ASSERT_EQ(d.tgts.size(), 1u);
    EXPECT_TRUE(d.tgts[0].owner_known);
    EXPECT_EQ(d.tgts[0].owner, 2u);
    EXPECT_EQ(d.tgts[0].holders, (std::vector<std::uint32_t>{2, 3}));
    EXPECT_EQ(d.tgts[0].holder_pids, (std::vector<std::uint32_t>{1002, 1003}));
    ASSERT_EQ(d.inis.size(), 1u);
    EXPECT_EQ(d.inis[0].link.ini_qpn, 0x58u);
    ASSERT_EQ(d.idle_links.size(), 1u);
    EXPECT_EQ(d.idle_links[0].link.state, "failed");
    EXPECT_EQ(d.srqs.size(), 2u);
    EXPECT_EQ(d.cms.size(), 2u);
    EXPECT_FALSE(v.any_stale());
}

TEST(NodeView, StaleProcessesAreListedNotMerged) {
    StatusRecord a = process(2, 1002), b = process(3, 1003);
    a.ports[0].tgts.push_back({0x59, "RTS", 0, 0, "nodeA", 0x57, 1, 0, false});
    b.ports[0].handles.push_back({0x59, 0x57});
    const NodeView v = merge_records({{"/s/btl_xrc_status.7.0.2", encode_status(a)},
                                      {"/s/btl_xrc_status.7.0.3", encode_status(b)}},
                                     env({1002}));
    ASSERT_EQ(v.jobs.size(), 1u);
    EXPECT_TRUE(v.any_stale());
    EXPECT_EQ(v.jobs[0].processes[0].liveness, Liveness::gone);
    EXPECT_EQ(v.jobs[0].processes[0].tgt_qps, 1u);  // what it held, as its record says
    const DomainView &d = v.jobs[0].domains.at(0);
    EXPECT_EQ(d.ranks, std::vector<std::uint32_t>{3});
    ASSERT_EQ(d.tgts.size(), 1u);  // the handle rank 3 still holds, its owner unknown here
    EXPECT_FALSE(d.tgts[0].owner_known);
    EXPECT_EQ(d.tgts[0].holders, std::vector<std::uint32_t>{3});
    EXPECT_EQ(d.tgts[0].tgt.ini_qpn, 0x57u);
}

TEST(NodeView, JobsAndDomainsApart) {
    StatusRecord a = process(0, 10, 7), b = process(0, 20, 8), c = process(1, 11, 7);
    c.ports[0].device = "simhca1";
    StatusRecord other = process(5, 30, 7);
    other.process.host = "nodeC";
    const NodeView v = merge_records({{"/s/a/btl_xrc_status.7.0.0", encode_status(a)},
                                      {"/s/b/btl_xrc_status.8.0.0", encode_status(b)},
                                      {"/s/a/btl_xrc_status.7.0.1", encode_status(c)},
                                      {"/s/a/btl_xrc_status.7.0.5", encode_status(other)}},
                                     env());
    ASSERT_EQ(v.jobs.size(), 2u);
    EXPECT_EQ(v.jobs[0].processes.size(), 3u);
    EXPECT_EQ(v.jobs[0].domains.size(), 2u);  // two devices, the other host's process in neither
    EXPECT_EQ(v.jobs[0].processes[2].liveness, Liveness::other_host);
    EXPECT_FALSE(v.any_stale());
}

TEST(NodeView, BadRecordsAreProblems) {
    const NodeView v = merge_records({{"/s/btl_xrc_status.1", "not a record"},
                                      {"/s/btl_xrc_status.2", encode_status(process(0, 10)).substr(0, 40)}},
                                     env());
    EXPECT_TRUE(v.jobs.empty());
    ASSERT_EQ(v.problems.size(), 2u);
    EXPECT_NE(v.problems[0].error.find("not a btl-xrc status record"), std::string::npos);
    EXPECT_NE(v.problems[1].error, "");
}

TEST(NodeView, HostNamesWithAndWithoutDomain) {
    EXPECT_TRUE(same_host("nodeB", "nodeB.cluster"));
    EXPECT_TRUE(same_host("nodeB.cluster", "nodeB"));
    EXPECT_FALSE(same_host("nodeB", "nodeBB"));
}
