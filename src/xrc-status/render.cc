// SPDX-License-Identifier: BSD-3-Clause
#include "render.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace xrc_status {
namespace {

std::string hex(std::uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof(b), "0x%x", v);
    return b;
}

std::string seconds(double s) {
    char b[32];
    std::snprintf(b, sizeof(b), s < 10 ? "%.1f s" : "%.0f s", s);
    return b;
}

template <class T>
std::string joined(const std::vector<T> &values) {
    std::string s;
    for (const auto &v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
    return s.empty() ? "-" : s;
}

std::string node_name(const std::string &host, std::uint32_t node) {
    return (host.empty() ? std::string("?") : host) + " (node " + std::to_string(node) + ")";
}

// Rows of words, printed in columns two spaces apart, each line indented.
class Table {
public:
    explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    std::string render(const std::string &indent) const {
        std::vector<std::size_t> width;
        for (const auto &row : rows_)
            for (std::size_t i = 0; i < row.size(); ++i) {
                if (width.size() <= i) width.push_back(0);
                width[i] = std::max(width[i], row[i].size());
            }
        std::string out;
        for (const auto &row : rows_) {
            std::string line = indent;
            for (std::size_t i = 0; i < row.size(); ++i) {
                line += row[i];
                if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
            }
            out += line + "\n";
        }
        return out;
    }

private:
    std::vector<std::vector<std::string>> rows_;
};

// A process's counters summed over its ports (one module per port).
std::map<std::string, std::uint64_t> summed_counters(const ProcessView &p) {
    std::map<std::string, std::uint64_t> sums;
    for (const xrc::StatusPort &port : p.record.ports)
        for (const auto &[name, value] : port.counters) sums[name] += value;
    return sums;
}

std::vector<std::string> counter_names(const JobView &job) {
    std::vector<std::string> names;
    for (const ProcessView &p : job.processes)
        for (const xrc::StatusPort &port : p.record.ports)
            for (const auto &[name, value] : port.counters)
                if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    return names;
}

std::string render_domain(const DomainView &d) {
    std::string out = "  XRC domain " + d.device + ":" + std::to_string(d.port) + ", inode " +
                      std::to_string(d.xrcd_ino) + " (device " + std::to_string(d.xrcd_dev) + "), ranks " +
                      joined(d.ranks) + "\n";
    out += "    file " + d.file + " (removed once every local rank holds the domain)\n";
    out += "    TGT QPs: " + std::to_string(d.tgts.size()) + " (one per remote process sending to this node)\n";
    if (!d.tgts.empty()) {
        Table t({"QPN", "STATE", "SENDER", "FROM", "SENDER_INI", "GEN", "OWNER", "HOLDERS"});
        for (const TgtView &v : d.tgts) {
            const bool known = v.owner_known;
            t.add({hex(v.tgt.qpn), known ? v.tgt.state : "?",
                   known ? std::to_string(v.tgt.sender) : "?",
                   !known ? "?" : v.tgt.loopback ? "this node (loopback)" : node_name(v.tgt.sender_host, v.tgt.sender_node),
                   hex(v.tgt.ini_qpn), known ? std::to_string(v.tgt.generation) : "?",
                   known ? std::to_string(v.owner) : "? (no record)", joined(v.holders)});
        }
        out += t.render("      ");
    }
    out += "    INI QPs: " + std::to_string(d.inis.size()) + " (one per process and remote node it sends to)\n";
    if (!d.inis.empty()) {
        Table t({"QPN", "RANK", "TO", "STATE", "QP", "THROUGH", "TGT_QPN", "GEN", "POSTED", "QUEUED"});
        for (const IniView &v : d.inis) {
            const xrc::StatusLink &l = v.link;
            t.add({hex(l.ini_qpn), std::to_string(v.rank),
                   l.state == "loopback" ? "this node (loopback)" : node_name(l.host, l.node), l.state, l.qp_state,
                   std::to_string(l.owner), l.tgt_qpn != 0 ? hex(l.tgt_qpn) : "-", std::to_string(l.generation),
                   std::to_string(l.outstanding), l.queued ? "yes" : "no"});
        }
        out += t.render("      ");
    }
    if (!d.idle_links.empty()) {
        out += "    links without a QP now: " + std::to_string(d.idle_links.size()) + "\n";
        Table t({"RANK", "TO", "STATE", "THROUGH", "QUEUED"});
        for (const IniView &v : d.idle_links)
            t.add({std::to_string(v.rank), node_name(v.link.host, v.link.node), v.link.state,
                   std::to_string(v.link.owner), v.link.queued ? "yes" : "no"});
        out += t.render("      ");
    }
    out += "    SRQs: " + std::to_string(d.srqs.size()) + "\n";
    if (!d.srqs.empty()) {
        Table t({"SRQN", "RANK", "CLASS", "POSTED", "COUNT", "LIMIT"});
        for (const SrqView &v : d.srqs)
            t.add({hex(v.srq.srq_num), std::to_string(v.rank), std::to_string(v.srq.buffer_size),
                   std::to_string(v.srq.posted), std::to_string(v.srq.count), std::to_string(v.srq.limit)});
        out += t.render("      ");
    }
    std::string cms;
    for (const CmView &c : d.cms) cms += (cms.empty() ? "" : ", ") + hex(c.qpn) + " (rank " + std::to_string(c.rank) + ")";
    out += "    connection managers' UD QPs: " + (cms.empty() ? std::string("-") : cms) + "\n";
    return out;
}

std::string render_counters(const JobView &job, bool all) {
    static const char *const kSummary[] = {"connections_open", "connection_failures", "cm_retransmissions",
                                           "bytes_sent",       "bytes_received",      "srq_limit_events",
                                           "send_errors"};
    const std::vector<std::string> names =
        all ? counter_names(job) : std::vector<std::string>(std::begin(kSummary), std::end(kSummary));
    std::string out = all ? "  counters (per process, summed over its ports, as of its record's update)\n"
                          : "  counters (per process, as of its record's update; --counters lists all of them)\n";
    if (!all) {
        std::vector<std::string> header{"RANK"};
        for (const auto &n : names) header.push_back(n);
        Table t(header);
        for (const ProcessView &p : job.processes) {
            const auto sums = summed_counters(p);
            std::vector<std::string> row{std::to_string(p.record.process.rank)};
            for (const auto &n : names) {
                auto it = sums.find(n);
                row.push_back(it != sums.end() ? std::to_string(it->second) : "-");
            }
            t.add(row);
        }
        return out + t.render("    ");
    }
    // Every counter: one row each, eight processes per table.
    for (std::size_t first = 0; first < job.processes.size(); first += 8) {
        const std::size_t last = std::min(job.processes.size(), first + 8);
        std::vector<std::string> header{"COUNTER"};
        std::vector<std::map<std::string, std::uint64_t>> sums;
        for (std::size_t i = first; i < last; ++i) {
            header.push_back("rank " + std::to_string(job.processes[i].record.process.rank));
            sums.push_back(summed_counters(job.processes[i]));
        }
        Table t(header);
        for (const auto &n : names) {
            std::vector<std::string> row{n};
            for (const auto &s : sums) {
                auto it = s.find(n);
                row.push_back(it != s.end() ? std::to_string(it->second) : "-");
            }
            t.add(row);
        }
        out += t.render("    ");
    }
    return out;
}

// --------------------------------------------------------------------------------------------------------- JSON

class Json {
public:
    Json &open(char c) {
        comma();
        out_ += c;
        first_.push_back(true);
        return *this;
    }
    Json &close(char c) {
        out_ += c;
        first_.pop_back();
        return *this;
    }
    Json &key(const char *k) {
        comma();
        string(k);
        out_ += ':';
        after_key_ = true;
        return *this;
    }
    Json &str(const std::string &s) {
        comma();
        string(s);
        return *this;
    }
    Json &num(std::uint64_t v) {
        comma();
        out_ += std::to_string(v);
        return *this;
    }
    Json &real(double v) {
        comma();
        char b[32];
        std::snprintf(b, sizeof(b), "%.3f", v);
        out_ += b;
        return *this;
    }
    Json &boolean(bool v) {
        comma();
        out_ += v ? "true" : "false";
        return *this;
    }
    Json &null() {
        comma();
        out_ += "null";
        return *this;
    }
    template <class T>
    Json &numbers(const std::vector<T> &v) {
        open('[');
        for (const auto &x : v) num(x);
        return close(']');
    }
    std::string take() { return std::move(out_) + "\n"; }

private:
    void comma() {
        if (after_key_) {
            after_key_ = false;
            return;
        }
        if (first_.empty()) return;
        if (!first_.back()) out_ += ',';
        first_.back() = false;
    }
    // Control characters escaped; UTF-8 as it is, any byte that is not part of a valid sequence as U+FFFD.
    void string(const std::string &s) {
        out_ += '"';
        for (std::size_t i = 0; i < s.size();) {
            const auto c = static_cast<unsigned char>(s[i]);
            if (c == '"' || c == '\\') {
                out_ += '\\';
                out_ += s[i++];
            } else if (c < 0x20 || c == 0x7f) {
                char b[8];
                std::snprintf(b, sizeof(b), "\\u%04x", c);
                out_ += b;
                ++i;
            } else if (c < 0x80) {
                out_ += s[i++];
            } else {
                const std::size_t n = utf8_length(s, i);
                if (n == 0) {
                    out_ += "\xef\xbf\xbd";
                    ++i;
                } else {
                    out_.append(s, i, n);
                    i += n;
                }
            }
        }
        out_ += '"';
    }
    // The length of the valid UTF-8 sequence at s[i], 0 if there is none.
    static std::size_t utf8_length(const std::string &s, std::size_t i) {
        const auto c = static_cast<unsigned char>(s[i]);
        const std::size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return 0;
        for (std::size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
        return n;
    }
    std::string out_;
    std::vector<bool> first_;
    bool after_key_ = false;
};

void json_process(Json &j, const ProcessView &p) {
    const xrc::StatusProcess &pr = p.record.process;
    j.open('{');
    j.key("rank").num(pr.rank).key("pid").num(pr.pid).key("host").str(pr.host);
    j.key("local_rank").num(pr.local_rank).key("local_ranks").num(pr.local_ranks).key("node").num(pr.node);
    j.key("state").str(pr.state).key("record").str(is_stale(p.liveness) ? "stale"
                                                   : p.liveness == Liveness::alive ? "alive"
                                                                                     : "other-host");
    j.key("record_note").str(liveness_name(p.liveness));
    j.key("age_s").real(p.age_s).key("sequence").num(pr.sequence).key("interval_s").num(pr.interval_s);
    j.key("path").str(p.path);
    j.key("ini_qps").num(p.ini_qps).key("tgt_qps").num(p.tgt_qps).key("tgt_handles").num(p.handles);
    j.key("ports").open('[');
    for (const xrc::StatusPort &port : p.record.ports) {
        j.open('{').key("device").str(port.device).key("port").num(port.port).key("lid").num(port.lid);
        j.key("counters").open('{');
        for (const auto &[name, value] : port.counters) j.key(name.c_str()).num(value);
        j.close('}').close('}');
    }
    j.close(']').close('}');
}

void json_link(Json &j, const IniView &v) {
    const xrc::StatusLink &l = v.link;
    j.open('{').key("qpn").num(l.ini_qpn).key("rank").num(v.rank).key("pid").num(v.pid);
    j.key("node").num(l.node).key("host").str(l.host).key("state").str(l.state).key("qp_state").str(l.qp_state);
    j.key("through").num(l.owner).key("tgt_qpn").num(l.tgt_qpn).key("generation").num(l.generation);
    j.key("job").num(l.job);
    j.key("outstanding").num(l.outstanding).key("queued").boolean(l.queued).close('}');
}

void json_domain(Json &j, const DomainView &d) {
    j.open('{').key("device").str(d.device).key("port").num(d.port);
    j.key("xrcd_dev").num(d.xrcd_dev).key("xrcd_ino").num(d.xrcd_ino).key("file").str(d.file);
    j.key("ranks").numbers(d.ranks);
    j.key("tgt_qps").open('[');
    for (const TgtView &v : d.tgts) {
        j.open('{').key("qpn").num(v.tgt.qpn);
        if (v.owner_known) {
            j.key("state").str(v.tgt.state).key("sender").num(v.tgt.sender).key("sender_node").num(v.tgt.sender_node);
            j.key("sender_host").str(v.tgt.sender_host).key("generation").num(v.tgt.generation);
            j.key("sender_job").num(v.tgt.sender_job);
            j.key("loopback").boolean(v.tgt.loopback).key("owner").num(v.owner).key("owner_pid").num(v.owner_pid);
        } else {
            j.key("owner").null();
        }
        j.key("sender_ini_qpn").num(v.tgt.ini_qpn);
        j.key("holders").numbers(v.holders).key("holder_pids").numbers(v.holder_pids).close('}');
    }
    j.close(']');
    j.key("ini_qps").open('[');
    for (const IniView &v : d.inis) json_link(j, v);
    j.close(']');
    j.key("links_without_qp").open('[');
    for (const IniView &v : d.idle_links) json_link(j, v);
    j.close(']');
    j.key("srqs").open('[');
    for (const SrqView &v : d.srqs) {
        j.open('{').key("srqn").num(v.srq.srq_num).key("rank").num(v.rank).key("pid").num(v.pid);
        j.key("class").num(v.srq.buffer_size).key("posted").num(v.srq.posted).key("count").num(v.srq.count);
        j.key("limit").num(v.srq.limit).close('}');
    }
    j.close(']');
    j.key("cm_qps").open('[');
    for (const CmView &c : d.cms) j.open('{').key("qpn").num(c.qpn).key("rank").num(c.rank).key("pid").num(c.pid).close('}');
    j.close(']').close('}');
}

}  // namespace

std::string render_table(const NodeView &view, bool all_counters) {
    std::size_t processes = 0;
    for (const JobView &job : view.jobs) processes += job.processes.size();
    std::string out;
    if (view.jobs.empty())
        out = view.host + ": no btl xrc process\n";
    else
        out = view.host + ": " + std::to_string(view.jobs.size()) + (view.jobs.size() == 1 ? " job, " : " jobs, ") +
              std::to_string(processes) + " btl xrc process" + (processes == 1 ? "" : "es") + "\n";
    for (const JobView &job : view.jobs) {
        out += "\njob " + std::to_string(job.jobid) + ", uid " + std::to_string(job.uid) + ": " +
               std::to_string(job.processes.size()) + " process" + (job.processes.size() == 1 ? "" : "es") +
               ", records in " + job.dir + "\n";
        Table t({"RANK", "PID", "LOCAL", "NODE", "STATE", "UPDATED", "INI", "TGT", "HANDLES", "RECORD"});
        for (const ProcessView &p : job.processes) {
            const xrc::StatusProcess &pr = p.record.process;
            t.add({std::to_string(pr.rank), std::to_string(pr.pid),
                   std::to_string(pr.local_rank) + "/" + std::to_string(pr.local_ranks), std::to_string(pr.node),
                   pr.state, seconds(p.age_s) + " ago", std::to_string(p.ini_qps), std::to_string(p.tgt_qps),
                   std::to_string(p.handles),
                   p.liveness == Liveness::other_host ? std::string(liveness_name(p.liveness)) + ": " + pr.host
                                                      : liveness_name(p.liveness)});
        }
        out += t.render("  ");
        for (const DomainView &d : job.domains) out += "\n" + render_domain(d);
        out += "\n" + render_counters(job, all_counters);
    }
    if (!view.problems.empty()) {
        out += "\nproblems: " + std::to_string(view.problems.size()) + "\n";
        for (const Problem &p : view.problems) out += "  " + p.path + ": " + p.error + "\n";
    }
    return out;
}

std::string render_json(const NodeView &view) {
    Json j;
    j.open('{').key("host").str(view.host).key("xrc_status_format").num(1);
    j.key("jobs").open('[');
    for (const JobView &job : view.jobs) {
        j.open('{').key("job").num(job.jobid).key("uid").num(job.uid).key("dir").str(job.dir);
        j.key("processes").open('[');
        for (const ProcessView &p : job.processes) json_process(j, p);
        j.close(']');
        j.key("domains").open('[');
        for (const DomainView &d : job.domains) json_domain(j, d);
        j.close(']').close('}');
    }
    j.close(']');
    j.key("problems").open('[');
    for (const Problem &p : view.problems) j.open('{').key("path").str(p.path).key("error").str(p.error).close('}');
    j.close(']').close('}');
    return j.take();
}

}  // namespace xrc_status
