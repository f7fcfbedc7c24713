// SPDX-License-Identifier: BSD-3-Clause
// The component's MCA parameters: each entry of the core's schema (src/core/params.h) registered with Open MPI's
// variable system (what `ompi_info --param btl xrc --level 9` lists), the module defaults ob1 reads, and each
// refused value shown as our help message (the BTL then disqualifies itself).
#include "btl_xrc.h"
#include "btl_xrc_job.h"

#include <string>

namespace {

static_assert(OPAL_INFO_LVL_1 == 0 && OPAL_INFO_LVL_9 == 8, "the schema's levels 1-9 are OPAL_INFO_LVL_1-9");

mca_base_var_type_t var_type(xrc::ParamType type) {
    switch (type) {
        case xrc::ParamType::integer:
            return MCA_BASE_VAR_TYPE_INT;
        case xrc::ParamType::string:
            return MCA_BASE_VAR_TYPE_STRING;
        case xrc::ParamType::boolean:
            return MCA_BASE_VAR_TYPE_BOOL;
    }
    return MCA_BASE_VAR_TYPE_INT;
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

}  // namespace

int mca_btl_xrc_register_params() noexcept {
    for (const xrc::ParamSpec &spec : xrc::param_schema())
        (void)mca_base_component_var_register(
            &mca_btl_xrc_component.super.btl_version, spec.name, spec.description, var_type(spec.type), nullptr, 0,
            MCA_BASE_VAR_FLAG_SETTABLE, static_cast<mca_base_var_info_lvl_t>(OPAL_INFO_LVL_1 + spec.level - 1),
            MCA_BASE_VAR_SCOPE_READONLY, spec.store_default(mca_btl_xrc_component.params));
    register_module_defaults();
    return mca_btl_base_param_register(&mca_btl_xrc_component.super.btl_version, &mca_btl_xrc_module_template);
}

int mca_btl_xrc_validate_params() {
    const auto problems =
        xrc::check_params(mca_btl_xrc_component.params, mca_btl_xrc_module_template.btl_max_send_size);
    for (const xrc::ParamProblem &p : problems) {
        if (p.kind == xrc::ParamProblem::Kind::include_and_exclude)
            mca_btl_xrc_show_help("include-and-exclude", opal_process_info.nodename, p.include.c_str(),
                                  p.exclude.c_str());
        else
            mca_btl_xrc_show_help("invalid-param", opal_process_info.nodename, p.param.c_str(), p.value.c_str(),
                                  p.why.c_str(), p.allowed.c_str());
    }
    return problems.empty() ? OPAL_SUCCESS : OPAL_ERR_BAD_PARAM;
}

bool mca_btl_xrc_explicitly_requested() noexcept {
    try {
        const int index = mca_base_var_find("opal", "btl", nullptr, nullptr);
        char **value = nullptr;
        if (index < 0 || mca_base_var_get_value(index, &value, nullptr, nullptr) != OPAL_SUCCESS || value == nullptr ||
            *value == nullptr)
            return false;
        return xrc::xrc_required(*value, mca_btl_xrc_job_size(),
                                 static_cast<uint32_t>(opal_process_info.num_local_peers) + 1);
    } catch (...) {
        return false;
    }
}
