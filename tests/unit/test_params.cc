// SPDX-License-Identifier: BSD-3-Clause
// The MCA parameter schema: defaults, the check of values with the messages the BTL shows, and what the values
// mean for the transport.
#include "src/core/params.h"
#include "src/core/port_health.h"
#include "src/core/port_transport.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace {

constexpr std::size_t kMaxSend = 64 * 1024;

xrc::Params defaults() {
    xrc::Params params{};
    for (const xrc::ParamSpec &spec : xrc::param_schema()) EXPECT_NE(spec.store_default(params), nullptr) << spec.name;
    return params;
}

const xrc::ParamSpec &spec_of(const std::string &name) {
    for (const xrc::ParamSpec &spec : xrc::param_schema())
        if (name == spec.name) return spec;
    ADD_FAILURE() << "no parameter " << name;
    return xrc::param_schema().front();
}

// The one problem of `params`, which must be about `param`.
xrc::ParamProblem only_problem(const xrc::Params &params, const std::string &param) {
    const auto problems = xrc::check_params(params, kMaxSend);
    EXPECT_EQ(problems.size(), 1u);
    if (problems.empty()) return {};
    EXPECT_EQ(problems.front().param, param);
    return problems.front();
}

}  // namespace

TEST(Params, EveryParameterHasOneFieldALevelAndADescription) {
    std::set<std::string> names;
    for (const xrc::ParamSpec &spec : xrc::param_schema()) {
        EXPECT_TRUE(names.insert(spec.name).second) << "twice: " << spec.name;
        EXPECT_GE(spec.level, 1) << spec.name;
        EXPECT_LE(spec.level, 9) << spec.name;
        ASSERT_NE(spec.description, nullptr) << spec.name;
        EXPECT_GT(std::string(spec.description).size(), 20u) << spec.name;
        const int fields = (spec.integer != nullptr) + (spec.string != nullptr) + (spec.boolean != nullptr);
        EXPECT_EQ(fields, 1) << spec.name;
        EXPECT_EQ(spec.type == xrc::ParamType::integer, spec.integer != nullptr) << spec.name;
        EXPECT_EQ(spec.type == xrc::ParamType::string, spec.string != nullptr) << spec.name;
        // An integer is checked by a range or a rule; only free text and switches take anything.
        if (spec.type == xrc::ParamType::integer) {
            EXPECT_TRUE(spec.range || spec.rule != nullptr) << spec.name;
        }
    }
    EXPECT_EQ(names.size(), 42u);
}

TEST(Params, DefaultsAreTheCoresAndAllAccepted) {
    const xrc::Params params = defaults();
    EXPECT_TRUE(xrc::check_params(params, kMaxSend).empty());
    const xrc::TransportConfig transport{};
    EXPECT_EQ(params.cq_size, transport.cq_size);
    EXPECT_EQ(params.send_queue_depth, transport.send_queue_depth);
    EXPECT_EQ(params.timeout, xrc::PathSettings{}.timeout);
    EXPECT_STREQ(params.receive_queues, "256,1024,256:16384,256,64:65536,64,16");
    EXPECT_STREQ(params.connect, "auto");
    EXPECT_STREQ(params.node_id, "launcher");
    EXPECT_EQ(params.if_include, nullptr);
    EXPECT_TRUE(params.use_eager_rdma);
    EXPECT_TRUE(params.rail_failover);
    EXPECT_FALSE(params.ignore_locality);
    EXPECT_EQ(params.port_down_grace, -1);
    EXPECT_EQ(params.free_list_max, -1);
}

TEST(Params, StoreDefaultGivesTheFieldTheVariableSystemWrites) {
    xrc::Params params{};
    EXPECT_EQ(spec_of("rnr_retry").store_default(params), &params.rnr_retry);
    EXPECT_EQ(spec_of("xrcd_dir").store_default(params), &params.xrcd_dir);
    EXPECT_EQ(spec_of("async_progress").store_default(params), &params.async_progress);
    EXPECT_EQ(spec_of("async_progress").type, xrc::ParamType::boolean);
}

TEST(Params, AnIntegerOutOfRangeNamesItsRangeAndMeaning) {
    xrc::Params params = defaults();
    params.rnr_retry = 9;
    const auto problem = only_problem(params, "btl_xrc_rnr_retry");
    EXPECT_EQ(problem.value, "9");
    EXPECT_EQ(problem.why, "out of range");
    EXPECT_EQ(problem.allowed, "an integer from 0 to 7 (7 = infinite)");
    params = defaults();
    params.timeout = -1;
    EXPECT_EQ(only_problem(params, "btl_xrc_timeout").value, "-1");
    params = defaults();
    params.retry_count = 8;
    EXPECT_EQ(only_problem(params, "btl_xrc_retry_count").allowed, "an integer from 0 to 7");
}

TEST(Params, RulesOfTheirOwn) {
    xrc::Params params = defaults();
    params.mtu = 1000;
    EXPECT_EQ(only_problem(params, "btl_xrc_mtu").why, "not an InfiniBand MTU");
    params.mtu = 2048;
    EXPECT_TRUE(xrc::check_params(params, kMaxSend).empty());

    params.eager_rdma_slot_size = 100;
    EXPECT_EQ(only_problem(params, "btl_xrc_eager_rdma_slot_size").why, "not a multiple of 64 from 64 to 65536");
    params.eager_rdma_slot_size = 65536 + 64;
    EXPECT_EQ(only_problem(params, "btl_xrc_eager_rdma_slot_size").value, "65600");
    params.eager_rdma_slot_size = 128;
    EXPECT_TRUE(xrc::check_params(params, kMaxSend).empty());

    char connect[] = "sometimes";
    params.connect = connect;
    EXPECT_EQ(only_problem(params, "btl_xrc_connect").allowed, "auto, eager or on-demand");
    params = defaults();
    char node_id[] = "guess";
    params.node_id = node_id;
    EXPECT_EQ(only_problem(params, "btl_xrc_node_id").why, "not a node id source");
}

TEST(Params, RulesAcrossParameters) {
    xrc::Params params = defaults();
    params.free_list_max = 3;
    EXPECT_EQ(only_problem(params, "btl_xrc_free_list_max").why, "smaller than btl_xrc_free_list_num");
    params.free_list_max = params.free_list_num;
    EXPECT_TRUE(xrc::check_params(params, kMaxSend).empty());

    params.send_queue_depth = 64;
    params.signal_interval = 65;
    EXPECT_EQ(only_problem(params, "btl_xrc_signal_interval").allowed,
              "an integer from 1 to 64 (at most btl_xrc_send_queue_depth)");
}

TEST(Params, ReceiveQueuesMustParseAndHoldTheLargestFragment) {
    xrc::Params params = defaults();
    char garbage[] = "garbage";
    params.receive_queues = garbage;
    EXPECT_NE(only_problem(params, "btl_xrc_receive_queues").why.find("expected SIZE,COUNT or SIZE,COUNT,LOW"),
              std::string::npos);
    char small[] = "256,10:4096,10";
    params.receive_queues = small;
    const auto problem = only_problem(params, "btl_xrc_receive_queues");
    EXPECT_NE(problem.why.find("less than the largest fragment"), std::string::npos) << problem.why;
    EXPECT_EQ(problem.allowed, "a list whose largest SIZE is at least btl_xrc_max_send_size (65536)");
    EXPECT_TRUE(xrc::check_params(params, 4096).empty());
}

TEST(Params, PortListsParseAndAreNotBothSet) {
    xrc::Params params = defaults();
    char bad[] = "mlx5_0:0";
    params.if_include = bad;
    EXPECT_NE(only_problem(params, "btl_xrc_if_include").why.find("the port must be a number from 1 to 254"),
              std::string::npos);
    char include[] = "a", exclude[] = "b";
    params.if_include = include;
    params.if_exclude = exclude;
    const auto problems = xrc::check_params(params, kMaxSend);
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_EQ(problems.front().kind, xrc::ParamProblem::Kind::include_and_exclude);
    EXPECT_EQ(problems.front().include, "a");
    EXPECT_EQ(problems.front().exclude, "b");
}

TEST(Params, EveryRefusedValueIsReported) {
    xrc::Params params = defaults();
    params.verbose = 101;
    params.gid_index = 256;
    params.status_interval = -2;
    EXPECT_EQ(xrc::check_params(params, kMaxSend).size(), 3u);
}

TEST(Params, PortGraceIsTheRetryBudgetUnlessSet) {
    xrc::Params params = defaults();
    EXPECT_EQ(xrc::port_down_grace_us(params), xrc::retry_budget_us(20, 7));
    params.port_down_grace = 0;
    EXPECT_EQ(xrc::port_down_grace_us(params), 0u);
    params.port_down_grace = 3;
    EXPECT_EQ(xrc::port_down_grace_us(params), 3000000u);
}

TEST(Params, EagerConnectionsByModeAndJobSize) {
    xrc::Params params = defaults();
    EXPECT_TRUE(xrc::connects_eagerly(params, 16));
    EXPECT_FALSE(xrc::connects_eagerly(params, 17));
    char eager[] = "eager", on_demand[] = "on-demand";
    params.connect = eager;
    EXPECT_TRUE(xrc::connects_eagerly(params, 1000));
    params.connect = on_demand;
    EXPECT_FALSE(xrc::connects_eagerly(params, 2));
}

TEST(Params, XrcIsRequiredOnlyWhenNothingElseCarriesTheJob) {
    EXPECT_TRUE(xrc::xrc_required("self,xrc", 2, 2));
    EXPECT_FALSE(xrc::xrc_required("self,vader,xrc", 4, 4));  // one node: vader carries it
    EXPECT_TRUE(xrc::xrc_required("self,vader,xrc", 4, 2));   // across nodes
    EXPECT_FALSE(xrc::xrc_required("self,tcp,xrc", 4, 2));
    EXPECT_FALSE(xrc::xrc_required("self,vader", 4, 2));
    EXPECT_FALSE(xrc::xrc_required("^tcp", 4, 2));
    EXPECT_FALSE(xrc::xrc_required("", 4, 2));
}

TEST(Params, TransportSettingsFollowTheParametersAndTheJob) {
    xrc::Params params = defaults();
    params.timeout = 14;
    params.finalize_wait = 30;
    params.finalize_peer_wait = 40;
    const auto spec = xrc::parse_receive_queues(params.receive_queues);
    ASSERT_TRUE(spec.has_value());
    xrc::JobShape job;
    job.my_rank = 3;
    job.size = 8;
    job.jobid = 77;
    job.local_ranks = 2;
    job.local_index = 1;
    job.node_count = 4;
    job.eager = true;
    auto c = xrc::transport_config(params, *spec, job, "/session", 1000);
    EXPECT_EQ(c.receive_classes.size(), 3u);
    EXPECT_EQ(c.path.timeout, 14);
    EXPECT_EQ(c.xrcd_dir, "/session");
    EXPECT_EQ(c.job_name, "77.1000");
    EXPECT_EQ(c.expected_links, 4u);
    EXPECT_EQ(c.cm.local_index, 1u);
    EXPECT_EQ(c.cm.leaving_wait_us, 15000000u);  // half the shorter of the two waits
    EXPECT_EQ(c.port_down_grace_us, xrc::retry_budget_us(14, 7));
    char dir[] = "/scratch";
    params.xrcd_dir = dir;
    job.eager = false;
    c = xrc::transport_config(params, *spec, job, nullptr, 0);
    EXPECT_EQ(c.xrcd_dir, "/scratch");
    EXPECT_EQ(c.expected_links, 4u);
    params.xrcd_dir = nullptr;
    EXPECT_EQ(xrc::transport_config(params, *spec, job, nullptr, 0).xrcd_dir, "/tmp");
    // An outage limit, 300 s by default: the connection manager reconnects that long, and the port may stay down as
    // long.
    EXPECT_EQ(c.cm.outage_limit_us, 300000000u);
    params.outage_limit = 0;  // off
    EXPECT_EQ(xrc::transport_config(params, *spec, job, nullptr, 0).cm.outage_limit_us, 0u);
    params.outage_limit = 300;
    EXPECT_EQ(c.port_down_grace_us, xrc::port_down_grace_us(params));  // btl_xrc_port_down_grace's, as set
    EXPECT_EQ(xrc::effective_port_grace_us(c.port_down_grace_us, c.cm.outage_limit_us), 300000000u);
    EXPECT_EQ(xrc::effective_port_grace_us(c.port_down_grace_us, 0), c.port_down_grace_us);  // the limit not applied
    EXPECT_EQ(xrc::effective_port_grace_us(400000000u, c.cm.outage_limit_us), 400000000u);   // a longer grace stays
    params.port_down_grace = 0;                                                              // no limit stays no limit
    c = xrc::transport_config(params, *spec, job, nullptr, 0);
    EXPECT_EQ(xrc::effective_port_grace_us(c.port_down_grace_us, c.cm.outage_limit_us), 0u);
}

// A transport whose queues keep a copy of every inline send per ring slot (riding outages on one rail, ULFM) makes its
// queues and INI QPs at most 128 deep, so that the copies cost a link 58 KiB; otherwise btl_xrc_send_queue_depth
// within the device's limit.
TEST(Params, QueuesThatKeepCopiesAreAtMost128Deep) {
    xrc::TransportConfig c;
    c.send_queue_depth = 512;
    EXPECT_EQ(xrc::send_queue_depth(c, 16384), 512u);
    EXPECT_EQ(xrc::send_queue_depth(c, 200), 200u);  // the device's max_qp_wr
    c.keep_inline_copies = true;
    EXPECT_EQ(xrc::send_queue_depth(c, 16384), 128u);
    EXPECT_EQ(xrc::send_queue_depth(c, 100), 100u);
    c.send_queue_depth = 64;
    EXPECT_EQ(xrc::send_queue_depth(c, 16384), 64u);  // a shallower queue stays as asked
    c.send_queue_depth = 512;
    c.max_inline = 0;  // nothing inline: no copies, no bound
    EXPECT_EQ(xrc::send_queue_depth(c, 16384), 512u);
}

TEST(Params, EagerRingsFromTheParameters) {
    xrc::Params params = defaults();
    xrc::EagerConfig c = xrc::eager_config(params, 12 * 1024, 6, true);
    EXPECT_EQ(c.my_rank, 6u);
    EXPECT_EQ(c.max_peers, 8u);
    EXPECT_EQ(c.slots, 8u);
    EXPECT_EQ(c.slot_size, xrc::eager_span(12 * 1024));  // the largest eager message fits
    EXPECT_EQ(c.slot_size % xrc::kEagerGranule, 0u);
    EXPECT_EQ(c.threshold, 16u);
    EXPECT_TRUE(c.inline_reports);
    params.eager_rdma_slot_size = 4096;
    EXPECT_EQ(xrc::eager_config(params, 12 * 1024, 6, true).slot_size, 4096u);
    EXPECT_EQ(xrc::eager_config(params, 1 << 20, 6, true).slot_size, 4096u);
    params.eager_rdma_slot_size = 0;
    EXPECT_EQ(xrc::eager_config(params, 1 << 20, 6, true).slot_size, xrc::kEagerMaxSlotSize);
    params.use_eager_rdma = false;
    c = xrc::eager_config(params, 12 * 1024, 6, true);
    EXPECT_EQ(c.max_peers, 0u);  // off
    EXPECT_EQ(c.my_rank, 6u);    // still named in its refusals
    EXPECT_FALSE(c.inline_reports);
}
