// SPDX-License-Identifier: BSD-3-Clause
#include "params.h"

#include "eager_rdma.h"
#include "port_filter.h"
#include "port_health.h"
#include "text_list.h"

#include <algorithm>

namespace xrc {

namespace {

// Three classes: control messages, eager fragments (btl_xrc_eager_limit), max-size fragments (max_send_size).
constexpr const char *kDefaultReceiveQueues = "256,1024,256:16384,256,64:65536,64,16";

std::string text_of(const char *s) {
    return s != nullptr ? s : "";
}

ParamProblem invalid(std::string param, std::string value, std::string why, std::string_view allowed) {
    ParamProblem problem;
    problem.param = std::move(param);
    problem.value = std::move(value);
    problem.why = std::move(why);
    problem.allowed = allowed;
    return problem;
}

std::optional<ParamProblem> out_of_range(const char *param, int value, int lo, int hi, std::string_view meaning) {
    if (value >= lo && value <= hi) return std::nullopt;
    std::string allowed = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
    if (!meaning.empty()) allowed += " (" + std::string(meaning) + ")";
    return invalid(param, std::to_string(value), "out of range", allowed);
}

std::optional<ParamProblem> port_list(const char *param, const char *text) {
    const auto filter = parse_port_filter(text_of(text));
    if (filter) return std::nullopt;
    return invalid(param, text_of(text), filter.error().message(), kPortFilterSyntax);
}

std::optional<ParamProblem> if_include_rule(const Params &p, std::size_t) {
    return port_list("btl_xrc_if_include", p.if_include);
}

std::optional<ParamProblem> if_exclude_rule(const Params &p, std::size_t) {
    return port_list("btl_xrc_if_exclude", p.if_exclude);
}

std::optional<ParamProblem> receive_queues_rule(const Params &p, std::size_t max_send_size) {
    const std::string text = text_of(p.receive_queues);
    const auto spec = parse_receive_queues(text);
    if (!spec) return invalid("btl_xrc_receive_queues", text, spec.error().message(), kReceiveQueueSyntax);
    const auto covered = check_receive_queues_cover(*spec, max_send_size);
    if (covered) return std::nullopt;
    return invalid(
        "btl_xrc_receive_queues", text, covered.error().message(),
        "a list whose largest SIZE is at least btl_xrc_max_send_size (" + std::to_string(max_send_size) + ")");
}

std::optional<ParamProblem> mtu_rule(const Params &p, std::size_t) {
    for (const int mtu : {0, 256, 512, 1024, 2048, 4096})
        if (p.mtu == mtu) return std::nullopt;
    return invalid("btl_xrc_mtu", std::to_string(p.mtu), "not an InfiniBand MTU",
                   "0 (the port's active MTU), 256, 512, 1024, 2048 or 4096");
}

std::optional<ParamProblem> signal_interval_rule(const Params &p, std::size_t) {
    return out_of_range("btl_xrc_signal_interval", p.signal_interval, 1,
                        p.send_queue_depth > 0 ? p.send_queue_depth : 1, "at most btl_xrc_send_queue_depth");
}

std::optional<ParamProblem> free_list_max_rule(const Params &p, std::size_t) {
    if (p.free_list_max == -1 || p.free_list_max >= p.free_list_num) return std::nullopt;
    return invalid("btl_xrc_free_list_max", std::to_string(p.free_list_max), "smaller than btl_xrc_free_list_num",
                   "-1 (unlimited) or at least btl_xrc_free_list_num");
}

std::optional<ParamProblem> slot_size_rule(const Params &p, std::size_t) {
    const int size = p.eager_rdma_slot_size;
    if (size == 0 || (size >= static_cast<int>(kEagerMinSlotSize) && size <= static_cast<int>(kEagerMaxSlotSize) &&
                      size % static_cast<int>(kEagerGranule) == 0))
        return std::nullopt;
    return invalid("btl_xrc_eager_rdma_slot_size", std::to_string(size), "not a multiple of 64 from 64 to 65536",
                   "0 (automatic) or a multiple of 64 from 64 to 65536");
}

std::optional<ParamProblem> connect_rule(const Params &p, std::size_t) {
    const std::string mode = text_of(p.connect);
    if (mode == "auto" || mode == "eager" || mode == "on-demand") return std::nullopt;
    return invalid("btl_xrc_connect", mode, "not a connection mode", "auto, eager or on-demand");
}

std::optional<ParamProblem> node_id_rule(const Params &p, std::size_t) {
    const std::string source = text_of(p.node_id);
    if (source == "launcher" || source == "hostname") return std::nullopt;
    return invalid("btl_xrc_node_id", source, "not a node id source", "launcher or hostname");
}

ParamSpec integer(const char *name, int level, int Params::*field, int default_value, std::optional<ParamRange> range,
                  const char *description) {
    ParamSpec spec{name, ParamType::integer, level, description};
    spec.integer = field;
    spec.integer_default = default_value;
    spec.range = range;
    return spec;
}

ParamSpec string(const char *name, int level, char *Params::*field, const char *default_value,
                 const char *description) {
    ParamSpec spec{name, ParamType::string, level, description};
    spec.string = field;
    spec.string_default = default_value;
    return spec;
}

ParamSpec boolean(const char *name, int level, bool Params::*field, bool default_value, const char *description) {
    ParamSpec spec{name, ParamType::boolean, level, description};
    spec.boolean = field;
    spec.boolean_default = default_value;
    return spec;
}

ParamSpec with_rule(ParamSpec spec, std::optional<ParamProblem> (*rule)(const Params &, std::size_t)) {
    spec.rule = rule;
    return spec;
}

// The transport's defaults are the core's (one place for each): the parameters register them as theirs.
std::vector<ParamSpec> make_schema() {
    const TransportConfig transport{};
    const PathSettings path{};
    const CmConfig cm{};
    // An integer whose value is checked by a rule of its own.
    constexpr std::optional<ParamRange> kRule;
    return {
        integer("verbose", 5, &Params::verbose, 0, ParamRange{0, 100, ""},
                "Verbosity of the xrc BTL's diagnostic output (0: none, 1: why the BTL is or is not used, "
                "10: connection set-up, 100: every event)"),
        with_rule(string("if_include", 1, &Params::if_include, nullptr,
                         "Comma-separated list of DEVICE[:PORT] the xrc BTL may use, e.g. mlx5_0:1,mlx5_1 "
                         "(default: every ACTIVE port of every XRC-capable device; mutually exclusive with "
                         "btl_xrc_if_exclude)"),
                  if_include_rule),
        with_rule(string("if_exclude", 1, &Params::if_exclude, nullptr,
                         "Comma-separated list of DEVICE[:PORT] the xrc BTL must not use (mutually exclusive "
                         "with btl_xrc_if_include)"),
                  if_exclude_rule),
        string("xrcd_dir", 5, &Params::xrcd_dir, nullptr,
               "Directory holding the per-job XRC domain file (mode 0600) that the job's ranks on a node "
               "share (default: the job session directory, private to the job and the user)"),
        with_rule(string("receive_queues", 4, &Params::receive_queues, kDefaultReceiveQueues,
                         "Receive size classes, one XRC SRQ per class per process: "
                         "SIZE,COUNT[,LOW][:SIZE,COUNT[,LOW]]... (buffer bytes, buffers posted, low watermark at "
                         "which buffers are reposted; sizes ascending, the largest must hold btl_xrc_max_send_size)"),
                  receive_queues_rule),
        integer("cq_size", 5, &Params::cq_size, transport.cq_size,
                ParamRange{64, 4194304, "capped by the device's max_cqe"},
                "Completion queue entries per device (raise it when many sends are in flight)"),
        integer("send_queue_depth", 5, &Params::send_queue_depth, transport.send_queue_depth,
                ParamRange{16, 65536, "capped by the device's max_qp_wr"},
                "Send work requests per XRC send QP (one such QP per remote node); sends beyond it "
                "are queued, never dropped. At most 128 where inline sends are kept to be sent again "
                "(btl_xrc_outage_limit on one rail, ULFM): each request then keeps a copy"),
        integer("max_inline_data", 5, &Params::max_inline_data, transport.max_inline,
                ParamRange{-1, 1024, "-1 = automatic"},
                "Largest send copied inline into the work request (-1: as much as the device "
                "allows, up to 256 bytes; 0: never inline)"),
        with_rule(integer("mtu", 5, &Params::mtu, transport.mtu_bytes, kRule,
                          "InfiniBand path MTU in bytes: 256, 512, 1024, 2048 or 4096 (0: the port's active MTU)"),
                  mtu_rule),
        integer("timeout", 5, &Params::timeout, path.timeout, ParamRange{0, 31, "IB local ACK timeout exponent"},
                "Local ACK timeout exponent: a lost packet is retransmitted after 4.096 us * 2^value "
                "(0-31; 0 waits forever)"),
        integer("retry_count", 5, &Params::retry_count, path.retry_count, ParamRange{0, 7, ""},
                "Retransmissions of a lost packet before the connection fails (0-7)"),
        integer("rnr_retry", 5, &Params::rnr_retry, path.rnr_retry, ParamRange{0, 7, "7 = infinite"},
                "Retries when the receiver has no buffer posted (receiver-not-ready) before the "
                "connection fails (0-6, 7 = retry forever)"),
        integer("min_rnr_timer", 5, &Params::min_rnr_timer, path.min_rnr_timer, ParamRange{0, 31, "IB RNR timer code"},
                "Receiver-not-ready back-off code the receiving side asks for (0-31, IB encoding: "
                "25 = 2.56 ms, 1 = 0.01 ms)"),
        integer("max_rdma_dst_ops", 5, &Params::max_rdma_dst_ops, path.max_rd_atomic, ParamRange{1, 255, ""},
                "RDMA reads and atomics in flight per connection (1-255, capped by the device)"),
        integer("service_level", 5, &Params::service_level, path.service_level, ParamRange{0, 15, ""},
                "InfiniBand service level of all connections (0-15)"),
        integer("pkey", 5, &Params::pkey, 0, ParamRange{0, 65535, "0 = the pkey at index 0"},
                "Partition key to use (0: the port's pkey at index 0; otherwise a value 1-65535 that must be in "
                "the port's pkey table)"),
        integer("gid_index", 5, &Params::gid_index, path.gid_index, ParamRange{0, 255, ""},
                "Index into the port's GID table of the GID to use (0-255)"),
        with_rule(integer("signal_interval", 6, &Params::signal_interval, transport.signal_interval, kRule,
                          "Request a send completion every N sends (selective signaling; 1 = every send; "
                          "at most btl_xrc_send_queue_depth)"),
                  signal_interval_rule),
        integer("cq_poll_batch", 6, &Params::cq_poll_batch, transport.poll_batch, ParamRange{1, 256, ""},
                "Completions taken from the completion queue per poll (1-256)"),
        integer("free_list_num", 5, &Params::free_list_num, 256, ParamRange{1, 1 << 20, ""},
                "Send fragments allocated at start-up per module (1 or more)"),
        with_rule(integer("free_list_max", 5, &Params::free_list_max, -1, kRule,
                          "Maximum send fragments per module (-1: unlimited; otherwise >= btl_xrc_free_list_num)"),
                  free_list_max_rule),
        integer("free_list_inc", 5, &Params::free_list_inc, 64, ParamRange{1, 1 << 20, ""},
                "Send fragments added when the free list runs empty (1 or more)"),
        boolean("ignore_locality", 5, &Params::ignore_locality, false,
                "Use every usable device port even when some are nearer to the process's CPUs than "
                "others (default: only the nearest ones)"),
        boolean("use_eager_rdma", 4, &Params::use_eager_rdma, true,
                "Give the peers this process hears from most a ring of receive memory that they "
                "write eager messages into with RDMA (lower latency and higher message rate than the shared receive "
                "queues; memory per process is btl_xrc_max_eager_rdma * btl_xrc_eager_rdma_num * "
                "btl_xrc_eager_rdma_slot_size)"),
        integer("eager_rdma_threshold", 5, &Params::eager_rdma_threshold, 16, ParamRange{1, 1 << 30, ""},
                "Messages sent to a peer before this process asks it for an eager RDMA ring "
                "(1 or more)"),
        integer("max_eager_rdma", 5, &Params::max_eager_rdma, 8, ParamRange{0, 1024, "0 = no eager RDMA"},
                "Peers per process that get an eager RDMA ring, in each direction (0-1024; 0 turns "
                "eager RDMA off)"),
        integer("eager_rdma_num", 5, &Params::eager_rdma_num, 8, ParamRange{2, static_cast<int>(kEagerMaxSlots), ""},
                "Size of each eager RDMA ring, in messages of btl_xrc_eager_rdma_slot_size bytes "
                "(2-1024); smaller messages pack tighter (a message takes its size plus a 24-byte footer, in "
                "64-byte granules), so a ring holds many more of them"),
        with_rule(integer("eager_rdma_slot_size", 5, &Params::eager_rdma_slot_size, 0, kRule,
                          "Largest message an eager RDMA ring takes, in bytes with its 24-byte footer "
                          "(0: enough for btl_xrc_eager_limit; otherwise a multiple of 64 from 64 to 65536); larger "
                          "messages use the shared receive queues"),
                  slot_size_rule),
        with_rule(string("connect", 4, &Params::connect, "auto",
                         "When connections to other nodes are made: auto (eager up to btl_xrc_eager_max_nodes "
                         "nodes, on demand above), eager (to every node of the job during MPI_Init) or on-demand (to "
                         "a node on the first message for it). Either way the modex address is fixed-size and no "
                         "message is sent to a peer before its side of the connection is ready"),
                  connect_rule),
        with_rule(string("node_id", 6, &Params::node_id, "launcher",
                         "Where the number that labels this node in messages, xrc-status and the connection "
                         "manager's notes comes from: launcher (the launcher's PMIx node id; a hash of the host name "
                         "when it gives none) or hostname (always the hash of the host name: the same number for a "
                         "node in every job and under every launcher). Only a label: connections and routing go by "
                         "HCA port"),
                  node_id_rule),
        integer("eager_max_nodes", 5, &Params::eager_max_nodes, 16, ParamRange{1, 1 << 20, ""},
                "With btl_xrc_connect auto: the largest job (in nodes) that connects to every node "
                "during MPI_Init (1 or more)"),
        integer("max_ini_qps", 4, &Params::max_ini_qps, static_cast<int>(cm.max_ini_qps),
                ParamRange{0, 1 << 24, "0 = no cap"},
                "XRC send (INI) QPs a process keeps open at most, one per remote node it talks to (0: no "
                "cap). Beyond it the least recently used node's connection is drained, closed on both sides and "
                "made again on its next use: it bounds QPs per node for all-to-all patterns at scale"),
        integer("connect_timeout", 5, &Params::connect_timeout, static_cast<int>(cm.connect_timeout_us / 1000000u),
                ParamRange{1, 86400, "seconds"},
                "Seconds a connection request may go unanswered before the connection fails: the "
                "peer is gone (with btl_xrc_async_progress 0 the peer's process must call MPI to answer: then raise "
                "it above the longest compute phase; 1-86400)"),
        boolean("async_progress", 5, &Params::async_progress, true,
                "Answer other processes' connection requests and read the device's asynchronous "
                "events on a service thread per port, which sleeps until something arrives (no CPU while idle), so "
                "a process that computes without calling MPI never delays a peer's first message; off: only when "
                "the process calls MPI (then btl_xrc_connect_timeout must exceed the longest compute phase)"),
        boolean("rail_failover", 5, &Params::rail_failover, true,
                "With several rails, survive the loss of one (a port down past btl_xrc_port_down_grace, a device's "
                "fatal error, sends that exhaust the retry budget): its traffic continues over the others instead "
                "of ending the job, what it had in flight is sent again and the receiver drops a copy of what it "
                "already had. Costs every send on several rails a completion, a number and a failover check, and "
                "ob1 a descriptor instead of an inline send (docs/admin.md, \"Several rails\"); nothing with one "
                "rail. Off: a lost rail ends the job"),
        boolean("other_jobs", 5, &Params::other_jobs, true,
                "Reach the processes of other jobs (MPI_Comm_spawn, MPI_Comm_connect/accept) over xrc too: one "
                "connection per (node, job) met, TGT QPs for their senders in this job's XRC domain, released when "
                "the job's processes leave (docs/connections.md, \"Other jobs\"); off: another BTL (sm, tcp) must "
                "carry messages between jobs"),
        integer("port_down_grace", 4, &Params::port_down_grace, -1,
                ParamRange{-1, 86400, "seconds; -1 = the retry budget, 0 = no limit"},
                "Seconds a port may stay down (link flap, cable reseated, subnet manager re-sweep) "
                "before the job is ended: meanwhile new sends are held and what is in flight is retransmitted by "
                "the HCA (-1: the HCA's own retry budget, 4.096 us * 2^btl_xrc_timeout * (btl_xrc_retry_count + "
                "1), 34 s with the defaults, and without limit when btl_xrc_timeout is 0; 0: without limit; "
                "-1-86400)"),
        integer("outage_limit", 4, &Params::outage_limit, 300, ParamRange{0, 86400, "seconds; 0 = off"},
                "Seconds an outage longer than the HCA's retry budget that no other rail can carry (one rail, or "
                "every rail down at once: a switch reboot, a cable reseated) is ridden through: connections whose "
                "requests went unacknowledged are made again when the port is back, what was not acknowledged is "
                "sent again, numbered, and the receiver drops what it had; the job ends with the port's message "
                "only after this long (and btl_xrc_port_down_grace is raised to it). Costs every send a copy or a "
                "fragment kept until its completion, and each connected node a few tens of KiB (docs/admin.md, "
                "\"Outages past the retry budget\"). 0: a port down past btl_xrc_port_down_grace, or requests "
                "unacknowledged past the retry budget, end the job (0-86400)"),
        integer("cm_receives", 6, &Params::cm_receives, static_cast<int>(transport.cm_receives),
                ParamRange{16, 65536, ""},
                "Connection manager datagrams a process can hold before it drops new ones (they are "
                "retransmitted): raise it for all-to-all starts of very large jobs (16-65536)"),
        integer("finalize_wait", 6, &Params::finalize_wait, 300, ParamRange{1, 86400, "seconds"},
                "Seconds MPI_Finalize waits at most for the process's sends to drain and for the other "
                "ranks of its node to stop receiving before it destroys its QPs (1-86400)"),
        integer("finalize_peer_wait", 6, &Params::finalize_peer_wait, 5, ParamRange{0, 86400, "seconds"},
                "Seconds MPI_Finalize waits at most, once its own sends have drained, for senders on other nodes "
                "to close the XRC receive (TGT) QPs this process made for them. A sender still alive that has not "
                "reached its own finalize by then is told this process leaves: it retires what it posted toward "
                "this node, answers, and signals every later send on that connection, which it closes without a "
                "fence. The answer is awaited for half this time at most; then the TGT QP goes with the last rank "
                "of this node that holds it (0-86400)"),
        integer("status_interval", 5, &Params::status_interval, 10,
                ParamRange{-1, 86400, "seconds; 0 = on connection events only, -1 = no status record"},
                "Seconds between refreshes of the process's status record (what xrc-status lists: "
                "XRC domain, QPs, SRQs, counters), kept next to the XRC domain file; it is also rewritten after "
                "every connection event and removed at MPI_Finalize (0: only on connection events; -1: no status "
                "record; -1-86400)"),
    };
}

}  // namespace

void *ParamSpec::store_default(Params &params) const noexcept {
    switch (type) {
        case ParamType::integer:
            params.*integer = integer_default;
            return &(params.*integer);
        case ParamType::string:
            params.*string = const_cast<char *>(string_default);  // the variable system's to replace, never freed
            return &(params.*string);
        case ParamType::boolean:
            params.*boolean = boolean_default;
            return &(params.*boolean);
    }
    return nullptr;
}

const std::vector<ParamSpec> &param_schema() {
    static const std::vector<ParamSpec> schema = make_schema();
    return schema;
}

std::vector<ParamProblem> check_params(const Params &params, std::size_t max_send_size) {
    std::vector<ParamProblem> problems;
    const std::string include = text_of(params.if_include), exclude = text_of(params.if_exclude);
    if (!include.empty() && !exclude.empty()) {
        ParamProblem both;
        both.kind = ParamProblem::Kind::include_and_exclude;
        both.include = include;
        both.exclude = exclude;
        problems.push_back(std::move(both));
    }
    for (const ParamSpec &spec : param_schema()) {
        std::optional<ParamProblem> problem;
        if (spec.rule != nullptr)
            problem = spec.rule(params, max_send_size);
        else if (spec.range)
            problem = out_of_range(("btl_xrc_" + std::string(spec.name)).c_str(), params.*spec.integer, spec.range->min,
                                   spec.range->max, spec.range->meaning);
        if (problem) problems.push_back(std::move(*problem));
    }
    return problems;
}

std::uint64_t port_down_grace_us(const Params &params) noexcept {
    if (params.port_down_grace >= 0) return static_cast<std::uint64_t>(params.port_down_grace) * 1000000u;
    return retry_budget_us(static_cast<std::uint8_t>(params.timeout), static_cast<std::uint8_t>(params.retry_count));
}

bool connects_eagerly(const Params &params, std::size_t nodes) noexcept {
    const std::string_view mode = params.connect != nullptr ? params.connect : "auto";
    if (mode == "eager") return true;
    if (mode == "on-demand") return false;
    return nodes <= static_cast<std::size_t>(params.eager_max_nodes);
}

bool xrc_required(std::string_view btl_list, std::uint32_t job_size, std::uint32_t local_procs) {
    if (btl_list.empty() || btl_list[0] == '^') return false;
    bool names_xrc = false, on_node_transport = false;
    for (const std::string_view name : split_list(btl_list, ',')) {
        if (name == "xrc") {
            names_xrc = true;
        } else if (name == "vader" || name == "sm" || name == "smcuda") {
            on_node_transport = true;
        } else if (name != "self") {
            return false;  // another network BTL can carry the job
        }
    }
    if (!names_xrc) return false;
    return !on_node_transport || job_size > local_procs;
}

EagerConfig eager_config(const Params &params, std::size_t eager_limit, std::uint32_t my_rank, bool inline_reports) {
    EagerConfig config;
    config.my_rank = my_rank;
    if (!params.use_eager_rdma || params.max_eager_rdma <= 0) return config;
    config.max_peers = static_cast<std::uint32_t>(params.max_eager_rdma);
    config.slots = static_cast<std::uint32_t>(params.eager_rdma_num);
    // Automatic: the largest eager message fits (openib sizes its slots so too), so everything ob1 sends eagerly can
    // take the ring; small messages take only the 64-byte granules they need.
    config.slot_size =
        params.eager_rdma_slot_size != 0
            ? static_cast<std::uint32_t>(params.eager_rdma_slot_size)
            : std::min<std::uint32_t>(eager_span(static_cast<std::uint32_t>(eager_limit)), kEagerMaxSlotSize);
    config.threshold = static_cast<std::uint32_t>(params.eager_rdma_threshold);
    config.inline_reports = inline_reports;
    return config;
}

TransportConfig transport_config(const Params &params, const ReceiveQueueSpec &spec, const JobShape &job,
                                 const char *session_dir, std::uint32_t uid) {
    TransportConfig c;
    c.receive_classes = spec.classes;
    c.cq_size = params.cq_size;
    c.send_queue_depth = params.send_queue_depth;
    c.max_inline = params.max_inline_data;
    c.signal_interval = params.signal_interval;
    c.poll_batch = params.cq_poll_batch;
    c.mtu_bytes = params.mtu;
    c.path.timeout = static_cast<std::uint8_t>(params.timeout);
    c.path.retry_count = static_cast<std::uint8_t>(params.retry_count);
    c.path.rnr_retry = static_cast<std::uint8_t>(params.rnr_retry);
    c.path.min_rnr_timer = static_cast<std::uint8_t>(params.min_rnr_timer);
    c.path.max_rd_atomic = static_cast<std::uint8_t>(params.max_rdma_dst_ops);
    c.path.service_level = static_cast<std::uint8_t>(params.service_level);
    c.path.gid_index = static_cast<std::uint8_t>(params.gid_index);
    // The status record goes to the same directory, under the same job name.
    c.xrcd_dir = params.xrcd_dir != nullptr && params.xrcd_dir[0] != '\0' ? params.xrcd_dir
                 : session_dir != nullptr                                 ? session_dir
                                                                          : "/tmp";
    c.job_name = std::to_string(job.jobid) + "." + std::to_string(uid);
    c.local_ranks = job.local_ranks;
    // Eager mode connects to every remote node at once: room for all of them from the start.
    c.expected_links = job.eager ? static_cast<std::uint32_t>(job.node_count) : 4u;
    c.cm_receives = static_cast<std::uint32_t>(params.cm_receives);
    c.cm.my_rank = job.my_rank;
    c.cm.jobid = job.jobid;
    c.cm.my_node = value_of(job.my_node_id);
    // A LID change of this node's port is told to the job by its ranks together, each to a share of it.
    c.cm.job_size = job.size;
    c.cm.local_count = job.local_ranks;
    c.cm.local_index = job.local_index;
    c.cm.node_mates = job.node_mates;
    c.cm.max_ini_qps = static_cast<std::uint32_t>(params.max_ini_qps);
    c.cm.connect_timeout_us = static_cast<std::uint64_t>(params.connect_timeout) * 1000000u;
    // A creator leaving finalize waits for its slow senders' LEAVING_ACK half as long again as it waited for their
    // CLOSE (finalize's peer wait: btl_xrc_finalize_peer_wait, at most btl_xrc_finalize_wait): a sender in MPI
    // answers within a round trip, and one that is not must not hold finalize much longer.
    c.cm.leaving_wait_us =
        static_cast<std::uint64_t>(std::min(params.finalize_wait, params.finalize_peer_wait)) * 500000u;
    c.served = params.async_progress;
    c.port_down_grace_us = port_down_grace_us(params);
    c.cm.outage_limit_us = static_cast<std::uint64_t>(params.outage_limit) * 1000000u;
    return c;
}

}  // namespace xrc
