// SPDX-License-Identifier: BSD-3-Clause
// The module counters (src/core/counters.h) as MPI_T performance variables btl_xrc_<name>, and their summary at
// finalize. Registered with the component's parameters, so `ompi_info --param btl xrc --level 9` lists them too.
// Each is bound to no object and is continuous (readable without MPI_T_pvar_start): COUNTER for what only
// grows, LEVEL for registered bytes, HIGHWATERMARK for their peak. A read sums the process's modules (one per
// port) at that moment: the data path only ever does plain increments of its module's fields.
// mca_base_component_pvar_register and the get-value callback have the same signatures in Open MPI 4.1 and 5.0
// (opal/mca/base/mca_base_pvar.h), so nothing here is version-specific.
#include "btl_xrc.h"

#include "btl_xrc_job.h"
#include "src/core/port_transport.h"

#include <string>

namespace {

int pvar_class(xrc::CounterKind kind) {
    switch (kind) {
        case xrc::CounterKind::Count:
            return MCA_BASE_PVAR_CLASS_COUNTER;
        case xrc::CounterKind::Level:
            return MCA_BASE_PVAR_CLASS_LEVEL;
        case xrc::CounterKind::HighWatermark:
            return MCA_BASE_PVAR_CLASS_HIGHWATERMARK;
    }
    return MCA_BASE_PVAR_CLASS_GENERIC;
}

// Before btl_init (or when the component stood aside) there is no module: every counter reads 0.
int read_counter(const mca_base_pvar_t *pvar, void *value, void *) {
    const auto *info = static_cast<const xrc::CounterInfo *>(pvar->ctx);
    unsigned long long sum = 0;
    for (const auto &m : mca_btl_xrc_component.modules) sum += m->counters.*(info->field);
    *static_cast<unsigned long long *>(value) = sum;
    return OPAL_SUCCESS;
}

}  // namespace

int mca_btl_xrc_register_pvars() noexcept {
    for (const xrc::CounterInfo &info : xrc::kCounterInfo) {
        const int rc = mca_base_component_pvar_register(
            &mca_btl_xrc_component.super.btl_version, info.name, info.description, OPAL_INFO_LVL_4,
            pvar_class(info.kind), MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, nullptr, MCA_BASE_VAR_BIND_NO_OBJECT,
            static_cast<mca_base_pvar_flag_t>(MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS),
            read_counter, nullptr, nullptr, const_cast<xrc::CounterInfo *>(&info));
        if (rc < 0) return rc;
    }
    return OPAL_SUCCESS;
}

void mca_btl_xrc_report_counters(const mca_btl_xrc_module_t *m) noexcept {
    if (opal_output_get_verbosity(mca_btl_xrc_component.output) < 10) return;
    try {
        // The rank first: the tests read a named counter of a named rank from this one line (tests/lib/counters.sh).
        std::string line =
            " rank=" + std::to_string(mca_btl_xrc_component.job != nullptr ? mca_btl_xrc_component.job->my_rank : 0);
        for (const xrc::CounterInfo &info : xrc::kCounterInfo)
            line += std::string(" ") + info.name + "=" + std::to_string(m->counters.*(info.field));
        BTL_XRC_VERBOSE(10, "btl:xrc: %s:%u counters:%s", m->transport->device_name().c_str(), m->transport->port_num(),
                        line.c_str());
    } catch (...) {
    }
}
