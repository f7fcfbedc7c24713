// SPDX-License-Identifier: BSD-3-Clause
// The component's MCA parameters as data: each one's name, type, ompi_info level, description, default and the
// values it accepts (param_schema()), and the check of a set of values against them (check_params), whose every
// problem names the parameter, the value, what is wrong and the accepted form. The BTL registers each entry with
// Open MPI's variable system, which writes the values into a Params, and shows a help message per problem; what
// the values then mean (the transport's settings, the port's grace, eager connections, whether the job needs xrc)
// is decided here too, so that it is tested without Open MPI.
#pragma once

#include "eager_manager.h"
#include "node_id.h"
#include "port_transport.h"
#include "receive_queue_spec.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xrc {

// Values of the MCA parameters. The variable system writes them (the storage the BTL registers is these fields);
// a string it leaves unset is null.
struct Params {
    int verbose;
    char *if_include;
    char *if_exclude;
    char *xrcd_dir;
    char *receive_queues;
    int cq_size;
    int send_queue_depth;
    int max_inline_data;
    int mtu;
    int timeout;
    int retry_count;
    int rnr_retry;
    int min_rnr_timer;
    int max_rdma_dst_ops;
    int service_level;
    int pkey;
    int gid_index;
    int signal_interval;
    int cq_poll_batch;
    int free_list_num;
    int free_list_max;
    int free_list_inc;
    bool ignore_locality;
    bool use_eager_rdma;
    int eager_rdma_threshold;
    int max_eager_rdma;
    int eager_rdma_num;
    int eager_rdma_slot_size;
    char *connect;        // auto | eager | on-demand
    char *node_id;        // launcher | hostname: where this node's id (a label) comes from
    int eager_max_nodes;  // auto: eager up to this many nodes
    int max_ini_qps;      // 0: no cap
    int connect_timeout;  // seconds
    int port_down_grace;  // seconds a port may stay down; -1: the retry budget of timeout and retry_count
    int outage_limit;     // seconds an outage past the retry budget is ridden through on one rail; 0: not
    int cm_receives;
    int finalize_wait;       // seconds
    int finalize_peer_wait;  // seconds
    int status_interval;     // seconds; 0: status record on connection events only; -1: none
    bool async_progress;     // a service thread answers the connection manager and reads async events
    bool rail_failover;      // several rails: one rail's loss is survived (btl_xrc_failover.cc)
    bool other_jobs;         // other jobs' processes (spawn, connect/accept) are reached over xrc too
};

// A value that is refused: what the BTL's "invalid-param" help message says, or, for include_and_exclude (both
// port lists set), its "include-and-exclude" message with the two lists.
struct ParamProblem {
    enum class Kind : std::uint8_t { invalid_value, include_and_exclude };
    Kind kind = Kind::invalid_value;
    std::string param;  // with its btl_xrc_ prefix
    std::string value;
    std::string why;
    std::string allowed;
    std::string include, exclude;  // include_and_exclude only
};

enum class ParamType : std::uint8_t { integer, string, boolean };

// The values of an integer parameter accepted by its range: from `min` to `max`; `meaning` (may be empty) says
// what a special value stands for or what else caps it.
struct ParamRange {
    int min, max;
    const char *meaning;
};

struct ParamSpec {
    const char *name;  // after the btl_xrc_ prefix
    ParamType type;
    int level;  // ompi_info level, 1-9
    const char *description;
    // The field of its type (the others null), and its default.
    int Params::*integer = nullptr;
    char *Params::*string = nullptr;
    bool Params::*boolean = nullptr;
    int integer_default = 0;
    const char *string_default = nullptr;
    bool boolean_default = false;
    // Accepted values: an integer's range, or a rule of its own (null: any value). `max_send_size` is the
    // largest fragment (btl_max_send_size), which the receive classes must hold.
    std::optional<ParamRange> range = std::nullopt;
    std::optional<ParamProblem> (*rule)(const Params &params, std::size_t max_send_size) = nullptr;

    // Writes the default into the parameter's field and returns that field, for the variable system to fill.
    void *store_default(Params &params) const noexcept;
};

// Every parameter, in the order ompi_info lists them.
const std::vector<ParamSpec> &param_schema();

// Every refused value (none: all accepted), in the schema's order, after the two port lists set together.
std::vector<ParamProblem> check_params(const Params &params, std::size_t max_send_size);

// The port's grace period in microseconds (btl_xrc_port_down_grace, or the retry budget of btl_xrc_timeout and
// btl_xrc_retry_count when it is -1), 0 for no limit.
std::uint64_t port_down_grace_us(const Params &params) noexcept;

// Whether a job of `nodes` nodes connects to every node during MPI_Init (btl_xrc_connect, and with auto
// btl_xrc_eager_max_nodes).
bool connects_eagerly(const Params &params, std::size_t nodes) noexcept;

// True when the job cannot do without xrc, so a missing device is an error worth stopping for rather than a quiet
// fallback: the btl include list `btl_list` names xrc, every other BTL listed only reaches processes on the same
// node (self, vader, sm, smcuda), and either none of those carries on-node traffic or the job spans nodes (more
// than `local_procs` of its `job_size` processes). "self,xrc" requires xrc; "self,vader,xrc" requires it only for
// a multi-node job; an exclusion list ("^...") or an empty one never does.
bool xrc_required(std::string_view btl_list, std::uint32_t job_size, std::uint32_t local_procs);

// The eager RDMA manager's settings (off when btl_xrc_use_eager_rdma or btl_xrc_max_eager_rdma says so): its
// slots hold the largest eager message (`eager_limit`) unless btl_xrc_eager_rdma_slot_size is set. `my_rank` names
// this process in control messages; `inline_reports`: a credit report fits the QPs' inline data.
EagerConfig eager_config(const Params &params, std::size_t eager_limit, std::uint32_t my_rank, bool inline_reports);

// What the job is, as far as the transport's settings depend on it.
struct JobShape {
    std::uint32_t my_rank = 0;
    std::uint32_t size = 0;
    std::uint32_t jobid = 0;
    NodeId my_node_id{};  // this node, in every address this process publishes (not a NodeMap index)
    unsigned local_ranks = 1;
    std::uint32_t local_index = 0;          // this process among the node's ranks
    std::size_t node_count = 1;             // entries of the launcher's node list
    bool eager = false;                     // connect to every node during MPI_Init (else on first use)
    std::vector<std::uint32_t> node_mates;  // the other ranks of this node (PMIx's local peers; empty: unknown)
};

// The transport's settings from the parameters, the receive classes parsed from them and the job. `session_dir`:
// where the XRC domain file goes unless btl_xrc_xrcd_dir says otherwise; `uid` makes the job's name unique per
// user. The port's own settings (its pkey index, port index) are the caller's to fill.
TransportConfig transport_config(const Params &params, const ReceiveQueueSpec &spec, const JobShape &job,
                                 const char *session_dir, std::uint32_t uid);

}  // namespace xrc
