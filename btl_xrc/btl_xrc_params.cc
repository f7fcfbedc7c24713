// SPDX-License-Identifier: BSD-3-Clause
// The component's MCA parameters: registration (what `ompi_info --param btl xrc --level 9` lists) and
// validation (a bad value names the parameter, the value and what is allowed, then disqualifies the BTL).
#include "btl_xrc.h"
#include "btl_xrc_job.h"

#include "src/core/eager_rdma.h"
#include "src/core/port_filter.h"
#include "src/core/port_transport.h"
#include "src/core/port_health.h"
#include "src/core/receive_queue_spec.h"
#include "src/core/text_list.h"

#include <cstring>
#include <string>

namespace {

// Three classes: control messages, eager fragments (btl_xrc_eager_limit), max-size fragments (max_send_size).
constexpr const char *kDefaultReceiveQueues = "256,1024,256:16384,256,64:65536,64,16";

mca_btl_xrc_params_t &P = mca_btl_xrc_component.params;

// The transport's defaults are the core's (one place for each): the parameters below register them as theirs.
const xrc::TransportConfig kTransport{};
const xrc::PathSettings kPath{};
const xrc::CmConfig kCm{};

int reg_int(const char *name, const char *desc, int default_value, int *storage, mca_base_var_info_lvl_t level) {
    *storage = default_value;
    return mca_base_component_var_register(&mca_btl_xrc_component.super.btl_version, name, desc, MCA_BASE_VAR_TYPE_INT,
                                           nullptr, 0, MCA_BASE_VAR_FLAG_SETTABLE, level, MCA_BASE_VAR_SCOPE_READONLY,
                                           storage);
}

int reg_string(const char *name, const char *desc, const char *default_value, char **storage,
               mca_base_var_info_lvl_t level) {
    *storage = const_cast<char *>(default_value);
    return mca_base_component_var_register(&mca_btl_xrc_component.super.btl_version, name, desc,
                                           MCA_BASE_VAR_TYPE_STRING, nullptr, 0, MCA_BASE_VAR_FLAG_SETTABLE, level,
                                           MCA_BASE_VAR_SCOPE_READONLY, storage);
}

int reg_bool(const char *name, const char *desc, bool default_value, bool *storage, mca_base_var_info_lvl_t level) {
    *storage = default_value;
    return mca_base_component_var_register(&mca_btl_xrc_component.super.btl_version, name, desc, MCA_BASE_VAR_TYPE_BOOL,
                                           nullptr, 0, MCA_BASE_VAR_FLAG_SETTABLE, level, MCA_BASE_VAR_SCOPE_READONLY,
                                           storage);
}

void register_module_defaults() {
    mca_btl_base_module_t &m = mca_btl_xrc_module_template;
    // DEFAULT exclusivity: vader/self (HIGH) keep on-node sends, but osc/rdma may still use xrc for every peer.
    m.btl_exclusivity = MCA_BTL_EXCLUSIVITY_DEFAULT;
    m.btl_eager_limit = 12 * 1024;
    m.btl_rndv_eager_limit = 12 * 1024;
    m.btl_max_send_size = 64 * 1024;
    m.btl_rdma_pipeline_send_length = 1024 * 1024;
    m.btl_rdma_pipeline_frag_size = 1024 * 1024;
    m.btl_min_rdma_pipeline_size = 256 * 1024;
    // Latency is not something a port reports: one figure for every rail keeps them all in ob1's eager list.
    m.btl_latency = 4;
    // 0: each module takes its port's data rate (active speed x width) at btl_init; a value set here wins.
    m.btl_bandwidth = 0;
    m.btl_flags = MCA_BTL_FLAGS_SEND | MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET | MCA_BTL_FLAGS_SEND_INPLACE |
                  MCA_BTL_FLAGS_ATOMIC_OPS | MCA_BTL_FLAGS_ATOMIC_FOPS;
    m.btl_atomic_flags = MCA_BTL_ATOMIC_SUPPORTS_ADD | MCA_BTL_ATOMIC_SUPPORTS_CSWAP;
    // RDMA in pieces of at most 1 MiB: ob1 keeps several in flight per request (pml_ob1_max_rdma_per_request),
    // which pipelines far better than one long read (docs/benchmarks.md, "Figures behind constants in the code").
    m.btl_get_limit = 1024 * 1024;
    m.btl_put_limit = 1024 * 1024;
}

std::string str_or_empty(const char *s) {
    return s != nullptr ? s : "";
}

// Shows the invalid-parameter help and returns the error for the caller to pass up.
int invalid(const char *param, const std::string &value, const std::string &why, std::string_view allowed) {
    mca_btl_xrc_show_help("invalid-param", opal_process_info.nodename, param, value.c_str(), why.c_str(),
                          std::string(allowed).c_str());
    return OPAL_ERR_BAD_PARAM;
}

int check_range(const char *param, int value, int lo, int hi, const char *meaning) {
    if (value >= lo && value <= hi) return OPAL_SUCCESS;
    const std::string allowed = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                                (meaning[0] != '\0' ? std::string(" (") + meaning + ")" : std::string());
    return invalid(param, std::to_string(value), "out of range", allowed);
}

}  // namespace

int mca_btl_xrc_register_params() noexcept {
    reg_int("verbose",
            "Verbosity of the xrc BTL's diagnostic output (0: none, 1: why the BTL is or is not used, "
            "10: connection set-up, 100: every event)",
            0, &P.verbose, OPAL_INFO_LVL_5);
    reg_string("if_include",
               "Comma-separated list of DEVICE[:PORT] the xrc BTL may use, e.g. mlx5_0:1,mlx5_1 "
               "(default: every ACTIVE port of every XRC-capable device; mutually exclusive with btl_xrc_if_exclude)",
               nullptr, &P.if_include, OPAL_INFO_LVL_1);
    reg_string("if_exclude",
               "Comma-separated list of DEVICE[:PORT] the xrc BTL must not use (mutually exclusive "
               "with btl_xrc_if_include)",
               nullptr, &P.if_exclude, OPAL_INFO_LVL_1);
    reg_string("xrcd_dir",
               "Directory holding the per-job XRC domain file (mode 0600) that the job's ranks on a node "
               "share (default: the job session directory, private to the job and the user)",
               nullptr, &P.xrcd_dir, OPAL_INFO_LVL_5);
    reg_string("receive_queues",
               "Receive size classes, one XRC SRQ per class per process: "
               "SIZE,COUNT[,LOW][:SIZE,COUNT[,LOW]]... (buffer bytes, buffers posted, low watermark at which "
               "buffers are reposted; sizes ascending, the largest must hold btl_xrc_max_send_size)",
               kDefaultReceiveQueues, &P.receive_queues, OPAL_INFO_LVL_4);
    reg_int("cq_size", "Completion queue entries per device (raise it when many sends are in flight)",
            kTransport.cq_size, &P.cq_size, OPAL_INFO_LVL_5);
    reg_int("send_queue_depth",
            "Send work requests per XRC send QP (one such QP per remote node); sends beyond it "
            "are queued, never dropped",
            kTransport.send_queue_depth, &P.send_queue_depth, OPAL_INFO_LVL_5);
    reg_int("max_inline_data",
            "Largest send copied inline into the work request (-1: as much as the device "
            "allows, up to 256 bytes; 0: never inline)",
            kTransport.max_inline, &P.max_inline_data, OPAL_INFO_LVL_5);
    reg_int("mtu", "InfiniBand path MTU in bytes: 256, 512, 1024, 2048 or 4096 (0: the port's active MTU)",
            kTransport.mtu_bytes, &P.mtu, OPAL_INFO_LVL_5);
    reg_int("timeout",
            "Local ACK timeout exponent: a lost packet is retransmitted after 4.096 us * 2^value "
            "(0-31; 0 waits forever)",
            kPath.timeout, &P.timeout, OPAL_INFO_LVL_5);
    reg_int("retry_count", "Retransmissions of a lost packet before the connection fails (0-7)", kPath.retry_count,
            &P.retry_count, OPAL_INFO_LVL_5);
    reg_int("rnr_retry",
            "Retries when the receiver has no buffer posted (receiver-not-ready) before the "
            "connection fails (0-6, 7 = retry forever)",
            kPath.rnr_retry, &P.rnr_retry, OPAL_INFO_LVL_5);
    reg_int("min_rnr_timer",
            "Receiver-not-ready back-off code the receiving side asks for (0-31, IB encoding: "
            "25 = 2.56 ms, 1 = 0.01 ms)",
            kPath.min_rnr_timer, &P.min_rnr_timer, OPAL_INFO_LVL_5);
    reg_int("max_rdma_dst_ops", "RDMA reads and atomics in flight per connection (1-255, capped by the device)",
            kPath.max_rd_atomic, &P.max_rdma_dst_ops, OPAL_INFO_LVL_5);
    reg_int("service_level", "InfiniBand service level of all connections (0-15)", kPath.service_level,
            &P.service_level, OPAL_INFO_LVL_5);
    reg_int("pkey",
            "Partition key to use (0: the port's pkey at index 0; otherwise a value 1-65535 that must be in "
            "the port's pkey table)",
            0, &P.pkey, OPAL_INFO_LVL_5);
    reg_int("gid_index", "Index into the port's GID table of the GID to use (0-255)", kPath.gid_index, &P.gid_index,
            OPAL_INFO_LVL_5);
    reg_int("signal_interval",
            "Request a send completion every N sends (selective signaling; 1 = every send; "
            "at most btl_xrc_send_queue_depth)",
            kTransport.signal_interval, &P.signal_interval, OPAL_INFO_LVL_6);
    reg_int("cq_poll_batch", "Completions taken from the completion queue per poll (1-256)", kTransport.poll_batch,
            &P.cq_poll_batch, OPAL_INFO_LVL_6);
    reg_int("free_list_num", "Send fragments allocated at start-up per module (1 or more)", 256, &P.free_list_num,
            OPAL_INFO_LVL_5);
    reg_int("free_list_max", "Maximum send fragments per module (-1: unlimited; otherwise >= btl_xrc_free_list_num)",
            -1, &P.free_list_max, OPAL_INFO_LVL_5);
    reg_int("free_list_inc", "Send fragments added when the free list runs empty (1 or more)", 64, &P.free_list_inc,
            OPAL_INFO_LVL_5);
    reg_bool("ignore_locality",
             "Use every usable device port even when some are nearer to the process's CPUs than "
             "others (default: only the nearest ones)",
             false, &P.ignore_locality, OPAL_INFO_LVL_5);

    reg_bool("use_eager_rdma",
             "Give the peers this process hears from most a ring of receive memory that they "
             "write eager messages into with RDMA (lower latency and higher message rate than the shared receive "
             "queues; memory per process is btl_xrc_max_eager_rdma * btl_xrc_eager_rdma_num * "
             "btl_xrc_eager_rdma_slot_size)",
             true, &P.use_eager_rdma, OPAL_INFO_LVL_4);
    reg_int("eager_rdma_threshold",
            "Messages sent to a peer before this process asks it for an eager RDMA ring "
            "(1 or more)",
            16, &P.eager_rdma_threshold, OPAL_INFO_LVL_5);
    reg_int("max_eager_rdma",
            "Peers per process that get an eager RDMA ring, in each direction (0-1024; 0 turns "
            "eager RDMA off)",
            8, &P.max_eager_rdma, OPAL_INFO_LVL_5);
    reg_int("eager_rdma_num",
            "Size of each eager RDMA ring, in messages of btl_xrc_eager_rdma_slot_size bytes "
            "(2-1024); smaller messages pack tighter (a message takes its size plus a 24-byte footer, in 64-byte "
            "granules), so a ring holds many more of them",
            8, &P.eager_rdma_num, OPAL_INFO_LVL_5);
    reg_int("eager_rdma_slot_size",
            "Largest message an eager RDMA ring takes, in bytes with its 24-byte footer "
            "(0: enough for btl_xrc_eager_limit; otherwise a multiple of 64 from 64 to 65536); larger messages use "
            "the shared receive queues",
            0, &P.eager_rdma_slot_size, OPAL_INFO_LVL_5);

    reg_string("connect",
               "When connections to other nodes are made: auto (eager up to btl_xrc_eager_max_nodes nodes, "
               "on demand above), eager (to every node of the job during MPI_Init) or on-demand (to a node on the "
               "first message for it). Either way the modex address is fixed-size and no message is sent to a peer "
               "before its side of the connection is ready",
               "auto", &P.connect, OPAL_INFO_LVL_4);
    reg_string("node_id",
               "Where the number that labels this node in messages, xrc-status and the connection "
               "manager's notes comes from: launcher (the launcher's PMIx node id; a hash of the host name when it "
               "gives none) or hostname (always the hash of the host name: the same number for a node in every job "
               "and under every launcher). Only a label: connections and routing go by HCA port",
               "launcher", &P.node_id, OPAL_INFO_LVL_6);
    reg_int("eager_max_nodes",
            "With btl_xrc_connect auto: the largest job (in nodes) that connects to every node "
            "during MPI_Init (1 or more)",
            16, &P.eager_max_nodes, OPAL_INFO_LVL_5);
    reg_int("max_ini_qps",
            "XRC send (INI) QPs a process keeps open at most, one per remote node it talks to (0: no "
            "cap). Beyond it the least recently used node's connection is drained, closed on both sides and made "
            "again on its next use: it bounds QPs per node for all-to-all patterns at scale",
            static_cast<int>(kCm.max_ini_qps), &P.max_ini_qps, OPAL_INFO_LVL_4);
    reg_int("connect_timeout",
            "Seconds a connection request may go unanswered before the connection fails: the "
            "peer is gone (with btl_xrc_async_progress 0 the peer's process must call MPI to answer: then raise it "
            "above the longest compute phase; 1-86400)",
            static_cast<int>(kCm.connect_timeout_us / 1000000u), &P.connect_timeout, OPAL_INFO_LVL_5);
    reg_bool("async_progress",
             "Answer other processes' connection requests and read the device's asynchronous "
             "events on a service thread per port, which sleeps until something arrives (no CPU while idle), so a "
             "process that computes without calling MPI never delays a peer's first message; off: only when the "
             "process calls MPI (then btl_xrc_connect_timeout must exceed the longest compute phase)",
             true, &P.async_progress, OPAL_INFO_LVL_5);
    reg_bool("rail_failover",
             "With several rails, survive the loss of one (a port down past btl_xrc_port_down_grace, a device's "
             "fatal error, sends that exhaust the retry budget): its traffic continues over the others instead of "
             "ending the job, what it had in flight is sent again and the receiver drops a copy of what it already "
             "had. Costs every send on several rails a completion, a number and a failover check, and ob1 a "
             "descriptor instead of an inline send (docs/admin.md, \"Several rails\"); nothing with one rail. Off: "
             "a lost rail ends the job",
             true, &P.rail_failover, OPAL_INFO_LVL_5);
    reg_bool("other_jobs",
             "Reach the processes of other jobs (MPI_Comm_spawn, MPI_Comm_connect/accept) over xrc too: one "
             "connection per (node, job) met, TGT QPs for their senders in this job's XRC domain, released when "
             "the job's processes leave (docs/connections.md, \"Other jobs\"); off: another BTL (sm, tcp) must "
             "carry messages between jobs",
             true, &P.other_jobs, OPAL_INFO_LVL_5);
    reg_int("port_down_grace",
            "Seconds a port may stay down (link flap, cable reseated, subnet manager re-sweep) "
            "before the job is ended: meanwhile new sends are held and what is in flight is retransmitted by the HCA "
            "(-1: the HCA's own retry budget, 4.096 us * 2^btl_xrc_timeout * (btl_xrc_retry_count + 1), 34 s with "
            "the defaults, and without limit when btl_xrc_timeout is 0; 0: without limit; -1-86400)",
            -1, &P.port_down_grace, OPAL_INFO_LVL_4);
    reg_int("cm_receives",
            "Connection manager datagrams a process can hold before it drops new ones (they are "
            "retransmitted): raise it for all-to-all starts of very large jobs (16-65536)",
            static_cast<int>(kTransport.cm_receives), &P.cm_receives, OPAL_INFO_LVL_6);
    reg_int("finalize_wait",
            "Seconds MPI_Finalize waits at most for the process's sends to drain and for the other "
            "ranks of its node to stop receiving before it destroys its QPs (1-86400)",
            300, &P.finalize_wait, OPAL_INFO_LVL_6);
    reg_int("finalize_peer_wait",
            "Seconds MPI_Finalize waits at most, once its own sends have drained, for senders on other nodes to close "
            "the XRC receive (TGT) QPs this process made for them. A sender still alive that has not reached its own "
            "finalize by then is told this process leaves: it retires what it posted toward this node, answers, and "
            "signals every later send on that connection, which it closes without a fence. The answer is awaited "
            "for half this time at most; then the TGT QP goes with the last rank of this node that holds it "
            "(0-86400)",
            5, &P.finalize_peer_wait, OPAL_INFO_LVL_6);
    reg_int("status_interval",
            "Seconds between refreshes of the process's status record (what xrc-status lists: "
            "XRC domain, QPs, SRQs, counters), kept next to the XRC domain file; it is also rewritten after every "
            "connection event and removed at MPI_Finalize (0: only on connection events; -1: no status record; "
            "-1-86400)",
            10, &P.status_interval, OPAL_INFO_LVL_5);

    register_module_defaults();
    return mca_btl_base_param_register(&mca_btl_xrc_component.super.btl_version, &mca_btl_xrc_module_template);
}

int mca_btl_xrc_validate_params() {
    int rc = OPAL_SUCCESS;
    auto fail = [&rc](int r) {
        if (r != OPAL_SUCCESS) rc = r;
    };
    const std::string inc = str_or_empty(P.if_include), exc = str_or_empty(P.if_exclude);
    if (!inc.empty() && !exc.empty()) {
        mca_btl_xrc_show_help("include-and-exclude", opal_process_info.nodename, inc.c_str(), exc.c_str());
        fail(OPAL_ERR_BAD_PARAM);
    }
    if (const auto f = xrc::parse_port_filter(inc); !f)
        fail(invalid("btl_xrc_if_include", inc, f.error().message(), xrc::kPortFilterSyntax));
    if (const auto f = xrc::parse_port_filter(exc); !f)
        fail(invalid("btl_xrc_if_exclude", exc, f.error().message(), xrc::kPortFilterSyntax));

    const std::string rq = str_or_empty(P.receive_queues);
    const auto spec = xrc::parse_receive_queues(rq);
    if (!spec) {
        fail(invalid("btl_xrc_receive_queues", rq, spec.error().message(), xrc::kReceiveQueueSyntax));
    } else if (const auto covered =
                   xrc::check_receive_queues_cover(*spec, mca_btl_xrc_module_template.btl_max_send_size);
               !covered) {
        fail(invalid("btl_xrc_receive_queues", rq, covered.error().message(),
                     "a list whose largest SIZE is at least btl_xrc_max_send_size (" +
                         std::to_string(mca_btl_xrc_module_template.btl_max_send_size) + ")"));
    }

    fail(check_range("btl_xrc_verbose", P.verbose, 0, 100, ""));
    fail(check_range("btl_xrc_cq_size", P.cq_size, 64, 4194304, "capped by the device's max_cqe"));
    fail(check_range("btl_xrc_send_queue_depth", P.send_queue_depth, 16, 65536, "capped by the device's max_qp_wr"));
    fail(check_range("btl_xrc_max_inline_data", P.max_inline_data, -1, 1024, "-1 = automatic"));
    if (P.mtu != 0 && P.mtu != 256 && P.mtu != 512 && P.mtu != 1024 && P.mtu != 2048 && P.mtu != 4096)
        fail(invalid("btl_xrc_mtu", std::to_string(P.mtu), "not an InfiniBand MTU",
                     "0 (the port's active MTU), 256, 512, 1024, 2048 or 4096"));
    fail(check_range("btl_xrc_timeout", P.timeout, 0, 31, "IB local ACK timeout exponent"));
    fail(check_range("btl_xrc_retry_count", P.retry_count, 0, 7, ""));
    fail(check_range("btl_xrc_rnr_retry", P.rnr_retry, 0, 7, "7 = infinite"));
    fail(check_range("btl_xrc_min_rnr_timer", P.min_rnr_timer, 0, 31, "IB RNR timer code"));
    fail(check_range("btl_xrc_max_rdma_dst_ops", P.max_rdma_dst_ops, 1, 255, ""));
    fail(check_range("btl_xrc_service_level", P.service_level, 0, 15, ""));
    fail(check_range("btl_xrc_pkey", P.pkey, 0, 65535, "0 = the pkey at index 0"));
    fail(check_range("btl_xrc_gid_index", P.gid_index, 0, 255, ""));
    fail(check_range("btl_xrc_signal_interval", P.signal_interval, 1, P.send_queue_depth > 0 ? P.send_queue_depth : 1,
                     "at most btl_xrc_send_queue_depth"));
    fail(check_range("btl_xrc_cq_poll_batch", P.cq_poll_batch, 1, 256, ""));
    fail(check_range("btl_xrc_free_list_num", P.free_list_num, 1, 1 << 20, ""));
    fail(check_range("btl_xrc_free_list_inc", P.free_list_inc, 1, 1 << 20, ""));
    fail(check_range("btl_xrc_eager_rdma_threshold", P.eager_rdma_threshold, 1, 1 << 30, ""));
    fail(check_range("btl_xrc_max_eager_rdma", P.max_eager_rdma, 0, 1024, "0 = no eager RDMA"));
    fail(check_range("btl_xrc_eager_rdma_num", P.eager_rdma_num, 2, static_cast<int>(xrc::kEagerMaxSlots), ""));
    if (P.eager_rdma_slot_size != 0 && (P.eager_rdma_slot_size < static_cast<int>(xrc::kEagerMinSlotSize) ||
                                        P.eager_rdma_slot_size > static_cast<int>(xrc::kEagerMaxSlotSize) ||
                                        P.eager_rdma_slot_size % static_cast<int>(xrc::kEagerGranule) != 0))
        fail(invalid("btl_xrc_eager_rdma_slot_size", std::to_string(P.eager_rdma_slot_size),
                     "not a multiple of 64 from 64 to 65536", "0 (automatic) or a multiple of 64 from 64 to 65536"));
    const std::string mode = str_or_empty(P.connect);
    if (mode != "auto" && mode != "eager" && mode != "on-demand")
        fail(invalid("btl_xrc_connect", mode, "not a connection mode", "auto, eager or on-demand"));
    const std::string node_id = str_or_empty(P.node_id);
    if (node_id != "launcher" && node_id != "hostname")
        fail(invalid("btl_xrc_node_id", node_id, "not a node id source", "launcher or hostname"));
    fail(check_range("btl_xrc_eager_max_nodes", P.eager_max_nodes, 1, 1 << 20, ""));
    fail(check_range("btl_xrc_max_ini_qps", P.max_ini_qps, 0, 1 << 24, "0 = no cap"));
    fail(check_range("btl_xrc_connect_timeout", P.connect_timeout, 1, 86400, "seconds"));
    fail(check_range("btl_xrc_port_down_grace", P.port_down_grace, -1, 86400,
                     "seconds; -1 = the retry budget, 0 = no limit"));
    fail(check_range("btl_xrc_cm_receives", P.cm_receives, 16, 65536, ""));
    fail(check_range("btl_xrc_finalize_wait", P.finalize_wait, 1, 86400, "seconds"));
    fail(check_range("btl_xrc_finalize_peer_wait", P.finalize_peer_wait, 0, 86400, "seconds"));
    fail(check_range("btl_xrc_status_interval", P.status_interval, -1, 86400,
                     "seconds; 0 = on connection events only, -1 = no status record"));
    if (P.free_list_max != -1 && P.free_list_max < P.free_list_num)
        fail(invalid("btl_xrc_free_list_max", std::to_string(P.free_list_max), "smaller than btl_xrc_free_list_num",
                     "-1 (unlimited) or at least btl_xrc_free_list_num"));
    return rc;
}

// True when the job cannot do without xrc, so a missing device is an error worth stopping for rather than a
// quiet fallback: the btl include list names xrc, every other BTL listed only reaches processes on the same
// node (self, vader, sm, smcuda), and either none of those carries on-node traffic or the job spans nodes.
// "--mca btl self,xrc" requires xrc; "--mca btl self,vader,xrc" requires it only for a multi-node job.
bool mca_btl_xrc_explicitly_requested() noexcept {
    try {
        const int index = mca_base_var_find("opal", "btl", nullptr, nullptr);
        if (index < 0) return false;
        char **value = nullptr;
        if (mca_base_var_get_value(index, &value, nullptr, nullptr) != OPAL_SUCCESS || value == nullptr ||
            *value == nullptr)
            return false;
        const std::string list = *value;
        if (list.empty() || list[0] == '^') return false;
        bool names_xrc = false, on_node_transport = false;
        for (const std::string_view name : xrc::split_list(list, ',')) {
            if (name == "xrc") {
                names_xrc = true;
            } else if (name == "vader" || name == "sm" || name == "smcuda") {
                on_node_transport = true;
            } else if (name != "self") {
                return false;  // another network BTL can carry the job
            }
        }
        if (!names_xrc) return false;
        if (!on_node_transport) return true;
        const uint32_t procs = mca_btl_xrc_job_size();
        return procs > static_cast<uint32_t>(opal_process_info.num_local_peers) + 1;
    } catch (...) {
        return false;
    }
}

uint64_t mca_btl_xrc_port_down_grace_us() noexcept {
    const auto &P = mca_btl_xrc_component.params;
    if (P.port_down_grace >= 0) return static_cast<uint64_t>(P.port_down_grace) * 1000000u;
    return xrc::retry_budget_us(static_cast<uint8_t>(P.timeout), static_cast<uint8_t>(P.retry_count));
}
