// Types of the xrc BTL component: the component (with its MCA parameters) and the module (one per usable
// device port). The transport itself lives in src/core; this layer maps BTL calls onto it.
#pragma once

#include "btl_xrc_ompi.h"

#include <cstdint>

// Values of the MCA parameters, filled by the MCA variable system (storage registered in btl_xrc_params.cc).
struct mca_btl_xrc_params_t {
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
};

struct mca_btl_xrc_component_t {
    mca_btl_base_component_3_0_0_t super;  // must be first: Open MPI sees only this
    mca_btl_xrc_params_t params;
    int output;       // opal_output stream, verbosity from btl_xrc_verbose
    int num_modules;
    struct mca_btl_xrc_module_t **modules;
};

namespace xrc {
struct PortState;
}

struct mca_btl_xrc_module_t {
    mca_btl_base_module_t super;  // must be first
    xrc::PortState *port;         // owned; released in finalize
};

extern "C" {
extern mca_btl_xrc_component_t mca_btl_xrc_component;
}

extern mca_btl_xrc_module_t mca_btl_xrc_module_template;

// btl_xrc_params.cc
int mca_btl_xrc_register_params() noexcept;
int mca_btl_xrc_validate_params() noexcept;
bool mca_btl_xrc_explicitly_requested() noexcept;

// btl_xrc_help.cc
void mca_btl_xrc_add_help_dir() noexcept;
inline constexpr const char *kBtlXrcHelpFile = "help-mpi-btl-xrc.txt";
// Shows one of our help messages. Rendered with opal_show_help_string from our help file and written to stderr
// by local rank 0 only (every rank of a node sees the same configuration). Not opal_show_help, because in Open MPI
// 4.1.4 with PMIx 4.2 a help message an MPI process sends during MPI_Init (before the modex fence) travels through
// PMIx_Log and is often lost: mpirun prints "ORTE_ERROR_LOG: Data unpack would read past end of buffer in file
// orte/util/show_help.c" instead (seen in 1 of 5 two-rank runs, up to 3 in 4 under load).
void mca_btl_xrc_show_help(const char *topic, ...) noexcept;

#define BTL_XRC_VERBOSE(level, ...) opal_output_verbose((level), mca_btl_xrc_component.output, __VA_ARGS__)
