// SPDX-License-Identifier: BSD-3-Clause
// cm-sim: the real connection manager of btl_xrc at scale, in simulated time (sim_world.h says what is modelled).
// One run = one job start: every rank sends along its pattern from cold; the run ends when nothing is left to
// happen. Prints what it measured, one "key value" per line, or one tab-separated row (--tsv, --tsv-header).
// --check: exit 1 unless every message went out, nothing failed and the QPs per node are the model's.
#include "sim_world.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace sim;

namespace {

[[noreturn]] void usage(const char *why) {
    if (why != nullptr) std::fprintf(stderr, "cm-sim: %s\n", why);
    std::fprintf(
        stderr,
        "usage: cm-sim [options]\n"
        "  --nodes N --ppn P            job shape (8 x 4)\n"
        "  --pattern alltoall|stencil|random|ring   (alltoall); --degree D for random (8)\n"
        "  --owner first|spread         TGT owner: first rank wanted on the node (on demand), or eager mode's\n"
        "  --progress always|every:US|compute:US    when the CM runs (always)\n"
        "  --compute-fraction F         ranks that compute, with compute:US (1)\n"
        "  --service-thread             the CM answers at once whatever the application does\n"
        "  --cm-receives N              UD receive queue depth per process (btl_xrc_cm_receives: 512)\n"
        "  --loss P                     datagram loss probability (0)\n"
        "  --cap N                      btl_xrc_max_ini_qps (0: none)\n"
        "  --queue-depth N              send queue depth per link (memory only; 512)\n"
        "  --first-retry-us U --max-retry-us U --connect-timeout-s S    CM timers (2000, 500000, 60)\n"
        "  --retry-per-connecting-us U  first retry delay added per connection in flight (200)\n"
        "  --no-reciprocate             do not connect back on accept\n"
        "  --qp-create-us U --qp-modify-us U --qp-open-us U --qp-destroy-us U   verbs costs (100, 30, 10, 50)\n"
        "  --cm-cost-ns N --post-cost-ns N   per datagram handled / posted (1000, 250)\n"
        "  --latency-ns N --hop-ns N --leaf-nodes N   fabric (1000, 600, 32)\n"
        "  --start-spread-us U          ranks leave MPI_Init within U (0)\n"
        "  --handles on|off             model TGT handles (on; off: computed for all-to-all)\n"
        "  --seed S --end-s S           (1, 600)\n"
        "  --tsv --tsv-header --check\n");
    std::exit(2);
}

std::uint64_t num(const char *s, const char *opt) {
    char *end = nullptr;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (end == s || *end != 0) usage((std::string("bad number for ") + opt + ": " + s).c_str());
    return v;
}

long rss_peak_kib() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    SimParams p;
    p.cm.queue_depth = 512;
    bool tsv = false, tsv_header = false, check = false;
    const char *progress_text = "always";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto val = [&]() -> const char * {
            if (i + 1 >= argc) usage((a + " needs a value").c_str());
            return argv[++i];
        };
        if (a == "--nodes")
            p.nodes = static_cast<std::uint32_t>(num(val(), "--nodes"));
        else if (a == "--ppn")
            p.ppn = static_cast<std::uint32_t>(num(val(), "--ppn"));
        else if (a == "--pattern") {
            if (!parse_pattern(val(), p.pattern)) usage("unknown pattern");
        } else if (a == "--degree")
            p.random_degree = static_cast<std::uint32_t>(num(val(), "--degree"));
        else if (a == "--owner") {
            const std::string v = val();
            if (v == "first")
                p.owner = OwnerChoice::first;
            else if (v == "spread")
                p.owner = OwnerChoice::spread;
            else
                usage("--owner: first or spread");
        } else if (a == "--progress") {
            progress_text = val();
            const std::string v = progress_text;
            if (v == "always")
                p.progress = Progress::always;
            else if (v.rfind("every:", 0) == 0) {
                p.progress = Progress::periodic;
                p.progress_every_ns = num(v.c_str() + 6, "--progress every:") * 1000;
            } else if (v.rfind("compute:", 0) == 0) {
                p.progress = Progress::compute;
                p.compute_ns = num(v.c_str() + 8, "--progress compute:") * 1000;
            } else
                usage("--progress: always, every:US or compute:US");
        } else if (a == "--compute-fraction")
            p.compute_fraction = std::atof(val());
        else if (a == "--service-thread")
            p.service_thread = true;
        else if (a == "--cm-receives")
            p.cm_receives = static_cast<std::uint32_t>(num(val(), "--cm-receives"));
        else if (a == "--loss")
            p.loss = std::atof(val());
        else if (a == "--cap")
            p.cm.max_ini_qps = static_cast<std::uint32_t>(num(val(), "--cap"));
        else if (a == "--queue-depth")
            p.cm.queue_depth = static_cast<std::uint32_t>(num(val(), "--queue-depth"));
        else if (a == "--first-retry-us")
            p.cm.first_retry_us = num(val(), a.c_str());
        else if (a == "--max-retry-us")
            p.cm.max_retry_us = num(val(), a.c_str());
        else if (a == "--retry-per-connecting-us")
            p.cm.retry_per_connecting_us = num(val(), a.c_str());
        else if (a == "--connect-timeout-s")
            p.cm.connect_timeout_us = num(val(), a.c_str()) * 1000000;
        else if (a == "--no-reciprocate")
            p.cm.reciprocate = false;
        else if (a == "--qp-create-us")
            p.qp_create_ns = num(val(), a.c_str()) * 1000;
        else if (a == "--qp-modify-us")
            p.qp_modify_ns = num(val(), a.c_str()) * 1000;
        else if (a == "--qp-open-us")
            p.qp_open_ns = num(val(), a.c_str()) * 1000;
        else if (a == "--qp-destroy-us")
            p.qp_destroy_ns = num(val(), a.c_str()) * 1000;
        else if (a == "--cm-cost-ns")
            p.cm_cost_ns = num(val(), a.c_str());
        else if (a == "--post-cost-ns")
            p.post_cost_ns = num(val(), a.c_str());
        else if (a == "--latency-ns")
            p.latency_ns = num(val(), a.c_str());
        else if (a == "--hop-ns")
            p.hop_ns = num(val(), a.c_str());
        else if (a == "--leaf-nodes")
            p.leaf_nodes = static_cast<std::uint32_t>(num(val(), a.c_str()));
        else if (a == "--start-spread-us")
            p.start_spread_ns = num(val(), a.c_str()) * 1000;
        else if (a == "--handles") {
            const std::string v = val();
            if (v != "on" && v != "off") usage("--handles: on or off");
            p.handles = v == "on";
        } else if (a == "--seed")
            p.seed = num(val(), a.c_str());
        else if (a == "--end-s")
            p.end_ns = num(val(), a.c_str()) * 1000000000ull;
        else if (a == "--tsv")
            tsv = true;
        else if (a == "--tsv-header")
            tsv_header = true;
        else if (a == "--check")
            check = true;
        else if (a == "--help" || a == "-h")
            usage(nullptr);
        else
            usage(("unknown option " + a).c_str());
    }
    if (p.nodes < 2 || p.ppn < 1 || p.leaf_nodes < 1 || p.cm_receives < 1 || p.cm.queue_depth < 2)
        usage("need --nodes >= 2, --ppn >= 1, --leaf-nodes >= 1, --cm-receives >= 1, --queue-depth >= 2");
    if (p.cm.signal_interval > p.cm.queue_depth / 2) p.cm.signal_interval = p.cm.queue_depth / 2;

    const auto wall0 = std::chrono::steady_clock::now();
    World w(p);
    w.run();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

    const std::uint32_t N = p.nodes, P = p.ppn, ranks = N * P;
    std::int64_t ini_max = 0, tgt_max = 0, h_max = 0, ini_peak = 0, tgt_peak = 0, h_peak = 0;
    std::uint64_t drops_node_max = 0;
    for (const NodeStats &n : w.nodes) {
        ini_max = std::max(ini_max, n.ini);
        tgt_max = std::max(tgt_max, n.tgt);
        h_max = std::max(h_max, n.handles);
        ini_peak = std::max(ini_peak, n.ini_peak);
        tgt_peak = std::max(tgt_peak, n.tgt_peak);
        h_peak = std::max(h_peak, n.handles_peak);
        drops_node_max = std::max(drops_node_max, n.rq_drops);
    }
    std::uint64_t retrans = 0, failures = 0, rq_peak = 0, owned_max = 0, mem_sum = 0, mem_max = 0, mem_peak = 0;
    std::uint64_t dup = 0, stale = 0, links = 0;
    const SimProcess *busiest = w.procs[0].get();
    for (const auto &pp : w.procs) {
        const SimProcess &q = *pp;
        retrans += q.cm->counters().cm_retransmissions;
        dup += q.cm->counters().cm_duplicates;
        stale += q.cm->counters().cm_stale;
        failures += q.failures;
        q.cm->for_each_link([&](const xrc::NodeLink &) { ++links; });
        rq_peak = std::max<std::uint64_t>(rq_peak, q.rq_peak);
        owned_max = std::max<std::uint64_t>(owned_max, q.cm->owned_tgts());
        mem_sum += static_cast<std::uint64_t>(q.mem.live);
        mem_max = std::max<std::uint64_t>(mem_max, static_cast<std::uint64_t>(q.mem.live));
        mem_peak = std::max<std::uint64_t>(mem_peak, static_cast<std::uint64_t>(q.mem.peak));
        if (q.handled > busiest->handled) busiest = &q;
    }
    const double busy_span = double(busiest->last_rx - busiest->first_rx) / 1e9;
    const double busiest_rate = busy_span > 0 ? double(busiest->handled) / busy_span : 0;
    const bool all_sent = w.totals.ops_done == w.totals.ops_posted;
    const bool converged = all_sent && failures == 0;
    // The model: every process with a link to every node it sends to, one TGT QP per (remote sender, node).
    const std::uint64_t model_eager = 2ull * P * (N - 1);
    // Handles when not modelled: every receiver of a TGT QP other than its owner holds one (all-to-all: P - 1).
    const std::int64_t handles_model = p.pattern == Pattern::alltoall ? tgt_max * (P - 1) : -1;

    struct Row {
        const char *key;
        std::string value;
    };
    auto f3 = [](double v) {
        char b[64];
        std::snprintf(b, sizeof b, "%.3f", v);
        return std::string(b);
    };
    const std::vector<Row> rows = {
        {"nodes", std::to_string(N)},
        {"ppn", std::to_string(P)},
        {"pattern", pattern_name(p.pattern)},
        {"owner", p.owner == OwnerChoice::first ? "first" : "spread"},
        {"progress", std::string(progress_text) + (p.service_thread ? "+thread" : "")},
        {"cap", std::to_string(p.cm.max_ini_qps)},
        {"cm_receives", std::to_string(p.cm_receives)},
        {"retry_per_connecting_us", std::to_string(p.cm.retry_per_connecting_us)},
        {"retry_per_connecting_us", std::to_string(p.cm.retry_per_connecting_us)},
        {"loss", f3(p.loss)},
        {"converged", converged ? "yes" : "no"},
        {"links_needed", std::to_string(w.totals.needed_links)},
        {"connections_made", std::to_string(w.totals.connects)},
        {"t_connected_ms", f3(double(w.totals.last_connect_ns) / 1e6)},
        {"t_all_sent_ms", f3(double(w.totals.last_done_ns) / 1e6)},
        {"failures", std::to_string(failures)},
        {"connect_sent", std::to_string(w.totals.sent[1])},
        {"accept_sent", std::to_string(w.totals.sent[2])},
        {"reject_sent", std::to_string(w.totals.sent[3])},
        {"close_sent", std::to_string(w.totals.sent[4])},
        {"retransmissions", std::to_string(retrans)},
        {"duplicates", std::to_string(dup)},
        {"stale", std::to_string(stale)},
        {"lost", std::to_string(w.totals.lost)},
        {"rq_drops", std::to_string(w.totals.rq_drops)},
        {"rq_drops_node_max", std::to_string(drops_node_max)},
        {"rq_peak_proc_max", std::to_string(rq_peak)},
        {"ini_node_max", std::to_string(ini_max)},
        {"tgt_node_max", std::to_string(tgt_max)},
        {"handles_node_max", p.handles ? std::to_string(h_max) : "-"},
        {"handles_node_model", handles_model >= 0 ? std::to_string(handles_model) : "-"},
        {"ini_node_peak", std::to_string(ini_peak)},
        {"tgt_node_peak", std::to_string(tgt_peak)},
        {"model_2P(N-1)", std::to_string(model_eager)},
        {"owned_tgts_proc_max", std::to_string(owned_max)},
        {"cm_bytes_proc_mean", std::to_string(mem_sum / ranks)},
        {"cm_bytes_proc_max", std::to_string(mem_max)},
        {"cm_bytes_proc_peak", std::to_string(mem_peak)},
        {"queue_depth", std::to_string(p.cm.queue_depth)},
        {"links_proc_mean", f3(double(links) / ranks)},
        // What the default btl_xrc_send_queue_depth (512) adds: each link's ring holds depth slots of 16 bytes.
        {"cm_bytes_proc_mean_depth512",
         std::to_string(mem_sum / ranks +
                        (links * (512 - std::min<std::uint64_t>(p.cm.queue_depth, 512)) * 16) / ranks)},
        {"busiest_rank", std::to_string(busiest->rank)},
        {"busiest_datagrams", std::to_string(busiest->handled)},
        {"busiest_datagrams_per_s", f3(busiest_rate)},
        {"events", std::to_string(w.totals.events)},
        {"event_queue_peak", std::to_string(w.queue_peak())},
        {"wall_s", f3(wall)},
        {"rss_mib", std::to_string(rss_peak_kib() / 1024)},
    };
    if (tsv_header) {
        for (std::size_t i = 0; i < rows.size(); ++i)
            std::printf("%s%c", rows[i].key, i + 1 < rows.size() ? '\t' : '\n');
    }
    if (tsv) {
        for (std::size_t i = 0; i < rows.size(); ++i)
            std::printf("%s%c", rows[i].value.c_str(), i + 1 < rows.size() ? '\t' : '\n');
    } else if (!tsv_header) {
        for (const Row &r : rows) std::printf("%-26s %s\n", r.key, r.value.c_str());
    }
    std::fflush(stdout);
    if (check) {
        bool ok = converged;
        if (!ok)
            for (const auto &pp : w.procs) {
                if (pp->ops_done == pp->ops_posted) continue;
                std::fprintf(stderr, "cm-sim: rank %u: %u of %u sends out; busy %d; links:", pp->rank, pp->ops_done,
                             pp->ops_posted, int(pp->cm->busy()));
                pp->cm->for_each_link([](const xrc::NodeLink &l) {
                    std::fprintf(stderr, " %u:%s", l.node(), xrc::link_state_name(l.state()));
                });
                std::fprintf(stderr, "\n");
                break;
            }
        if (!ok)
            std::fprintf(stderr, "cm-sim: check: not converged (%llu of %llu sends, %llu failures)\n",
                         (unsigned long long)w.totals.ops_done, (unsigned long long)w.totals.ops_posted,
                         (unsigned long long)failures);
        if (p.pattern == Pattern::alltoall && p.cm.max_ini_qps == 0) {
            const std::int64_t want = std::int64_t(P) * (N - 1);
            if (ini_max != want || tgt_max != want) {
                std::fprintf(stderr, "cm-sim: check: INI/TGT per node %lld/%lld, the model says %lld each\n",
                             (long long)ini_max, (long long)tgt_max, (long long)want);
                ok = false;
            }
            if (p.handles && h_max != want * (P - 1)) {
                std::fprintf(stderr, "cm-sim: check: %lld handles per node, the model says %lld\n", (long long)h_max,
                             (long long)(want * (P - 1)));
                ok = false;
            }
        }
        if (p.cm.max_ini_qps != 0 && ini_peak > std::int64_t(P) * p.cm.max_ini_qps) {
            std::fprintf(stderr, "cm-sim: check: %lld INI QPs on a node, over the cap\n", (long long)ini_peak);
            ok = false;
        }
        return ok ? 0 : 1;
    }
    return 0;
}
