// SPDX-License-Identifier: BSD-3-Clause
// Acting on the device's asynchronous events: which module an event is about (the ports of one device share a
// context and its async fd), what src/core/async_event_policy.h decides for it, and doing that: hold or resume the
// port's sends, re-query the port, re-arm an SRQ, or end the job with a message naming host, device, port, the QP
// and the peer behind it. Called from progress context only.
#include "btl_xrc_endpoint.h"
#include "btl_xrc_job.h"

#include "src/core/async_event_policy.h"
#include "src/core/port_transport.h"

#include <cstdio>
#include <string>

namespace {

bool same_device(const mca_btl_xrc_module_t *a, const mca_btl_xrc_module_t *b) {
    return a->transport != nullptr && b->transport != nullptr && a->transport->context() == b->transport->context();
}

template <class Match>
mca_btl_xrc_module_t *find_module(mca_btl_xrc_module_t *m, Match match) {
    const auto &c = mca_btl_xrc_component;
    for (const auto &module : c.modules)
        if (module != nullptr && same_device(module.get(), m) && match(module.get())) return module.get();
    return nullptr;
}

// "host:device:port" prefix as every other message of the BTL has it.
std::string where(const mca_btl_xrc_module_t *m) {
    return std::string(opal_process_info.nodename) + ": " + m->transport->device_name() + ":" +
           std::to_string(m->transport->port_num());
}

// Whether an active port has a LID other than the one the job knows (LID_CHANGE, CLIENT_REREGISTER after a
// re-sweep, or a port that came back with another LID): then the job is told (PortTransport::lid_changed).
bool lid_moved(const mca_btl_xrc_module_t *m, const ibv_port_attr &attr) {
    return attr.state == IBV_PORT_ACTIVE && attr.lid != 0 && attr.lid != m->transport->address().lid;
}

// The port is active again (PORT_ACTIVE, or a query found it so): held posts resume, and no rail waits for it any
// more. True when it was down until now.
bool port_back(mca_btl_xrc_module_t *m) noexcept {
    if (!m->transport->port_up()) return false;
    m->riding_outage = false;
    return true;
}

// The port's state as the device says now: LID, SM LID, state. Also brings the hold in line with it (an event
// may have been missed or reordered). A new LID (LID_CHANGE, CLIENT_REREGISTER after a re-sweep) is announced to
// the job through the connection manager, which moves every path toward it (docs/connections.md); the same LID
// again changes nothing.
void requery_port(mca_btl_xrc_module_t *m, const std::string &why) {
    ibv_port_attr attr{};
    if (ibv_query_port(m->transport->context(), m->transport->port_num(), &attr) != 0) {
        opal_output(0, "btl:xrc: %s: %s; the port cannot be queried", where(m).c_str(), why.c_str());
        return;
    }
    const uint16_t known = m->transport->address().lid;
    const bool moved = lid_moved(m, attr);
    opal_output(0, "btl:xrc: %s: %s: port state %s, LID %u (was %u), SM LID %u%s", where(m).c_str(), why.c_str(),
                ibv_port_state_str(attr.state), attr.lid, known, attr.sm_lid,
                moved ? "; telling the job the new LID, connections move their paths to it" : "");
    if (attr.state == IBV_PORT_ACTIVE) {
        (void)port_back(m);
        (void)mca_btl_xrc_rejoin_rail(m);
    } else
        (void)m->transport->port_down();
    if (moved) (void)m->transport->lid_changed(attr.lid);
}

}  // namespace

void mca_btl_xrc_act_on_event(mca_btl_xrc_module_t *m, const xrc::AsyncEventRecord &event) noexcept {
    try {
        xrc::EventSubject subject;
        subject.type = event.type;
        mca_btl_xrc_module_t *target = m;
        if (xrc::is_port_event(event.type)) {
            subject.port_num = event.port_num;
            if (auto *owner =
                    find_module(m, [&](mca_btl_xrc_module_t *x) { return x->transport->port_num() == event.port_num; }))
                target = owner;
        } else if (xrc::is_qp_event(event.type) && event.qp_num != 0) {
            subject.qp_num = event.qp_num;
            if (auto *owner = find_module(m, [&](mca_btl_xrc_module_t *x) {
                    return x->transport->role_of(subject.qp_num).kind != xrc::QpRole::Kind::unknown;
                }))
                target = owner;
            subject.role = target->transport->role_of(subject.qp_num);
        } else if (event.type == IBV_EVENT_CQ_ERR && event.cq != nullptr) {
            if (auto *owner = find_module(m, [&](mca_btl_xrc_module_t *x) { return x->transport->cq() == event.cq; }))
                target = owner;
        }
        const xrc::EventDecision d = xrc::decide_event(subject, target->transport->port_num());
        switch (d.verdict) {
            case xrc::EventVerdict::ignore:
                BTL_XRC_VERBOSE(10, "btl:xrc: %s: async event %s", where(target).c_str(), d.what.c_str());
                break;
            case xrc::EventVerdict::note:
                BTL_XRC_VERBOSE(1, "btl:xrc: %s: %s", where(target).c_str(), d.what.c_str());
                break;
            case xrc::EventVerdict::hold:
                if (target->transport->port_down()) {
                    const uint64_t grace = target->transport->health().grace_us();
                    const uint64_t hold = target->transport->health().hold_limit_us();
                    char limit[160];
                    if (grace == 0)
                        snprintf(limit, sizeof(limit), "without limit");
                    else if (hold != grace)
                        snprintf(limit, sizeof(limit),
                                 "for up to %.3g s, then up to %.3g s in all (btl_xrc_outage_limit) where no other "
                                 "rail carries its traffic",
                                 double(grace) / 1e6, double(hold) / 1e6);
                    else
                        snprintf(limit, sizeof(limit), "for up to %.3g s", double(grace) / 1e6);
                    opal_output(0, "btl:xrc: %s: %s (btl_xrc_port_down_grace: %s)", where(target).c_str(),
                                d.what.c_str(), limit);
                }
                break;
            case xrc::EventVerdict::resume: {
                const bool was_down = target->transport->health().down();
                if (port_back(target) && was_down) {
                    const uint64_t lasted = target->transport->health().longest_down_us();
                    opal_output(0,
                                "btl:xrc: %s: the port is active again; held sends resume (down %.2f s at most so far)",
                                where(target).c_str(), double(lasted) / 1e6);
                }
                (void)mca_btl_xrc_rejoin_rail(target);
                // The subnet manager may have given the port another LID while it was down, and a LID_CHANGE
                // then comes before the port is active (requery_port announces only an active port's LID) or not
                // at all: until the job hears of it, every peer drops our datagrams from a LID it does not know.
                ibv_port_attr attr{};
                if (ibv_query_port(target->transport->context(), target->transport->port_num(), &attr) == 0 &&
                    lid_moved(target, attr)) {
                    opal_output(0,
                                "btl:xrc: %s: the port is back with LID %u (was %u); telling the job the new LID, "
                                "connections move their paths to it",
                                where(target).c_str(), attr.lid, target->transport->address().lid);
                    (void)target->transport->lid_changed(attr.lid);
                }
                break;
            }
            case xrc::EventVerdict::requery:
                requery_port(target, d.what);
                break;
            case xrc::EventVerdict::release_tgt:
                (void)target->transport->release_broken_tgt(subject.qp_num);
                BTL_XRC_VERBOSE(1, "btl:xrc: %s: %s", where(target).c_str(), d.what.c_str());
                break;
            case xrc::EventVerdict::rearm_srq:
                ++target->counters.srq_limit_events;
                // Buffers are reposted as soon as each message is consumed: reaching the watermark means the
                // process fell behind its senders. Re-arm and say so (RNR retry is the backstop).
                BTL_XRC_VERBOSE(10,
                                "btl:xrc: SRQ low watermark reached; buffers are reposted as messages are consumed");
                if (event.srq_context != nullptr) (void)static_cast<xrc::RecvPool *>(event.srq_context)->arm_limit();
                break;
            case xrc::EventVerdict::lose_rail:
            case xrc::EventVerdict::fatal: {
                if (target->finalizing) {
                    // Completions discarded (CQ_ERR): what they would have reported is lost without a word, so
                    // the event counts as lost work itself (the process exits 1). Otherwise work still draining
                    // fails through its completions (and is counted there); the event itself only says why.
                    if (d.lost_work)
                        mca_btl_xrc_report_error(target, nullptr, d.what.c_str());
                    else
                        opal_output(0, "btl:xrc: %s: %s (during MPI_Finalize)", where(target).c_str(), d.what.c_str());
                    break;
                }
                // Several rails: a device that failed takes its ports' rails with it; the job goes on if other
                // rails reach every peer of theirs. Never for a completion queue that discarded completions
                // (fatal): what they reported is gone, and no rail knows to send it again.
                if (d.verdict == xrc::EventVerdict::lose_rail) {
                    bool all = true;
                    for (const auto &module : mca_btl_xrc_component.modules)
                        if (module != nullptr && same_device(module.get(), target))
                            all = mca_btl_xrc_lose_rail(module.get(), d.what.c_str()) && all;
                    if (all) break;
                }
                mca_btl_base_endpoint_t *endpoint = nullptr;
                std::string what = d.what;
                if (d.peer_rank != UINT32_MAX) {
                    endpoint = mca_btl_xrc_endpoint_for(target, d.peer_rank);
                    if (endpoint == nullptr || endpoint->proc == nullptr)
                        what += " (peer rank " + std::to_string(d.peer_rank) + " on " +
                                mca_btl_xrc_component.job->hostname_of(d.peer_rank) + ")";
                }
                mca_btl_xrc_report_error(target, endpoint, what.c_str());
                break;
            }
        }
    } catch (...) {
        mca_btl_xrc_report_error(m, nullptr, "out of memory handling an asynchronous event");
    }
}

bool mca_btl_xrc_resume_if_port_active(mca_btl_xrc_module_t *m) noexcept {
    ibv_port_attr attr{};
    if (ibv_query_port(m->transport->context(), m->transport->port_num(), &attr) != 0 || attr.state != IBV_PORT_ACTIVE)
        return false;
    opal_output(0, "btl:xrc: %s: the port is active, its PORT_ACTIVE event not seen within the grace: acting on it now",
                where(m).c_str());
    xrc::AsyncEventRecord active;
    active.type = IBV_EVENT_PORT_ACTIVE;
    active.port_num = m->transport->port_num();
    mca_btl_xrc_act_on_event(m, active);
    return !m->transport->health().down();
}
