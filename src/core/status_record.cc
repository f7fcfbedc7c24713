#include "status_record.h"

#include <charconv>
#include <limits>

namespace xrc {
namespace {

constexpr std::uint64_t kMaxQpn = 0xffffff;  // QP and SRQ numbers are 24 bits

bool plain(unsigned char c) { return c > 0x20 && c < 0x7f && c != '%' && c != '='; }

bool token_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

bool is_token(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
        if (!token_char(c)) return false;
    return true;
}

// One line being written: `KIND key=value ...`.
class LineWriter {
public:
    LineWriter(std::string &out, const char *kind) : out_(out) { out_ += kind; }
    LineWriter &num(const char *key, std::uint64_t value) {
        start(key);
        out_ += std::to_string(value);
        return *this;
    }
    LineWriter &text(const char *key, std::string_view value) {
        start(key);
        out_ += status_escape(value);
        return *this;
    }
    LineWriter &flag(const char *key, bool value) { return num(key, value ? 1 : 0); }
    void end() { out_ += '\n'; }

private:
    void start(const char *key) {
        out_ += ' ';
        out_ += key;
        out_ += '=';
    }
    std::string &out_;
};

// The fields of one line being read. The first failure is kept; later calls do nothing.
class LineReader {
public:
    LineReader(std::size_t number, std::string_view line) : number_(number) {
        std::size_t pos = 0;
        bool first = true;
        while (error_.empty()) {
            const std::size_t space = line.find(' ', pos);
            const std::string_view word = line.substr(pos, space == std::string_view::npos ? line.npos : space - pos);
            if (word.empty()) {
                fail("an empty field (two spaces, or a space at an end)");
                break;
            }
            if (first) {
                kind_ = word;
                first = false;
                if (!is_token(kind_)) fail("not a line of a status record");
            } else {
                const std::size_t eq = word.find('=');
                if (eq == std::string_view::npos || eq == 0) {
                    fail("\"" + std::string(word.substr(0, 40)) + "\" is not key=value");
                    break;
                }
                const std::string_view key = word.substr(0, eq);
                if (!is_token(key)) fail("a key with characters outside [A-Za-z0-9_-]");
                for (const auto &[k, v] : fields_)
                    if (k == key) fail("the key " + std::string(key) + " appears twice");
                fields_.emplace_back(key, word.substr(eq + 1));
            }
            if (space == std::string_view::npos) break;
            pos = space + 1;
        }
    }

    std::string_view kind() const { return kind_; }
    const std::string &error() const { return error_; }
    void fail(const std::string &why) {
        if (error_.empty())
            error_ = "line " + std::to_string(number_) + (kind_.empty() ? "" : " (" + std::string(kind_) + ")") +
                     ": " + why;
    }

    template <class T>
    void number(const char *key, T &out, std::uint64_t max = std::numeric_limits<T>::max()) {
        const std::string_view *v = find(key);
        if (v == nullptr) return;
        std::uint64_t value = 0;
        const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
        if (ec != std::errc() || end != v->data() + v->size() || v->empty()) {
            fail(std::string(key) + "=" + std::string(v->substr(0, 40)) + " is not a number");
            return;
        }
        if (value > max) {
            fail(std::string(key) + "=" + std::to_string(value) + " is out of range (at most " + std::to_string(max) +
                 ")");
            return;
        }
        out = static_cast<T>(value);
    }
    void qpn(const char *key, std::uint32_t &out) { number(key, out, kMaxQpn); }
    void text(const char *key, std::string &out) {
        const std::string_view *v = find(key);
        if (v != nullptr && !status_unescape(*v, out)) fail(std::string(key) + ": a malformed %-escape");
    }
    // A name from a fixed vocabulary (states): token characters only, may be empty.
    void name(const char *key, std::string &out) {
        const std::string_view *v = find(key);
        if (v == nullptr) return;
        if (!v->empty() && !is_token(*v)) {
            fail(std::string(key) + ": not a name");
            return;
        }
        out = std::string(*v);
    }
    void flag(const char *key, bool &out) {
        unsigned v = 0;
        number(key, v, 1);
        out = v != 0;
    }

private:
    // A key every line of this kind has in version 1: missing, the record is malformed.
    const std::string_view *find(const char *key) {
        if (!error_.empty()) return nullptr;
        for (const auto &[k, v] : fields_)
            if (k == key) return &v;
        fail(std::string("no ") + key + "=");
        return nullptr;
    }

    std::size_t number_;
    std::string_view kind_;
    std::vector<std::pair<std::string_view, std::string_view>> fields_;
    std::string error_;
};

void read_process(LineReader &r, StatusProcess &p) {
    r.number("pid", p.pid);
    r.number("start", p.start_ticks);
    r.text("boot", p.boot_id);
    r.text("host", p.host);
    r.number("uid", p.uid);
    r.number("job", p.jobid);
    r.number("rank", p.rank);
    r.number("local_rank", p.local_rank);
    r.number("local_ranks", p.local_ranks);
    r.number("node", p.node);
    r.name("state", p.state);
    r.number("seq", p.sequence);
    r.number("time_us", p.written_us);
    r.number("interval_s", p.interval_s);
    if (r.error().empty() && p.pid == 0) r.fail("pid=0");
}

void read_port(LineReader &r, StatusPort &p) {
    r.text("device", p.device);
    r.number("port", p.port, 255);
    r.number("lid", p.lid, 0xffff);
    r.text("xrcd", p.xrcd_file);
    r.number("xrcd_dev", p.xrcd_dev);
    r.number("xrcd_ino", p.xrcd_ino);
    r.qpn("cm_qpn", p.cm_qpn);
}

void read_srq(LineReader &r, StatusSrq &s) {
    r.number("class", s.buffer_size);
    r.qpn("srqn", s.srq_num);
    r.number("count", s.count);
    r.number("posted", s.posted);
    r.number("limit", s.limit);
    if (r.error().empty() && s.posted > s.count) r.fail("posted=" + std::to_string(s.posted) + " > count");
}

void read_link(LineReader &r, StatusLink &l) {
    r.number("node", l.node);
    r.text("host", l.host);
    r.name("state", l.state);
    r.qpn("ini_qpn", l.ini_qpn);
    r.name("qp_state", l.qp_state);
    r.number("owner", l.owner);
    r.qpn("tgt_qpn", l.tgt_qpn);
    r.number("gen", l.generation);
    r.number("outstanding", l.outstanding);
    r.flag("queued", l.queued);
}

void read_tgt(LineReader &r, StatusTgt &t) {
    r.qpn("qpn", t.qpn);
    r.name("state", t.state);
    r.number("sender", t.sender);
    r.number("sender_node", t.sender_node);
    r.text("sender_host", t.sender_host);
    r.qpn("ini_qpn", t.ini_qpn);
    r.number("gen", t.generation);
    r.flag("loopback", t.loopback);
}

void read_handle(LineReader &r, StatusHandle &h) {
    r.qpn("qpn", h.qpn);
    r.qpn("ini_qpn", h.ini_qpn);
}

}  // namespace

std::string status_escape(std::string_view value) {
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(value.size());
    for (const char ch : value) {
        const auto c = static_cast<unsigned char>(ch);
        if (plain(c)) {
            out += ch;
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

bool status_unescape(std::string_view text, std::string &value) {
    auto digit = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c == '%') {
            if (i + 2 >= text.size()) return false;
            const int hi = digit(text[i + 1]), lo = digit(text[i + 2]);
            if (hi < 0 || lo < 0) return false;
            out += static_cast<char>(hi * 16 + lo);
            i += 2;
        } else if (plain(c)) {
            out += static_cast<char>(c);
        } else {
            return false;
        }
    }
    value = std::move(out);
    return true;
}

std::string encode_status(const StatusRecord &record) {
    std::string out;
    out += std::string(kStatusMagic) + " " + std::to_string(kStatusVersion) + "\n";
    const StatusProcess &p = record.process;
    LineWriter(out, "process")
        .num("pid", p.pid)
        .num("start", p.start_ticks)
        .text("boot", p.boot_id)
        .text("host", p.host)
        .num("uid", p.uid)
        .num("job", p.jobid)
        .num("rank", p.rank)
        .num("local_rank", p.local_rank)
        .num("local_ranks", p.local_ranks)
        .num("node", p.node)
        .text("state", p.state)
        .num("seq", p.sequence)
        .num("time_us", p.written_us)
        .num("interval_s", p.interval_s)
        .end();
    for (const StatusPort &port : record.ports) {
        LineWriter(out, "port")
            .text("device", port.device)
            .num("port", port.port)
            .num("lid", port.lid)
            .text("xrcd", port.xrcd_file)
            .num("xrcd_dev", port.xrcd_dev)
            .num("xrcd_ino", port.xrcd_ino)
            .num("cm_qpn", port.cm_qpn)
            .end();
        for (const StatusSrq &s : port.srqs)
            LineWriter(out, "srq")
                .num("class", s.buffer_size)
                .num("srqn", s.srq_num)
                .num("count", s.count)
                .num("posted", s.posted)
                .num("limit", s.limit)
                .end();
        for (const StatusLink &l : port.links)
            LineWriter(out, "link")
                .num("node", l.node)
                .text("host", l.host)
                .text("state", l.state)
                .num("ini_qpn", l.ini_qpn)
                .text("qp_state", l.qp_state)
                .num("owner", l.owner)
                .num("tgt_qpn", l.tgt_qpn)
                .num("gen", l.generation)
                .num("outstanding", l.outstanding)
                .flag("queued", l.queued)
                .end();
        for (const StatusTgt &t : port.tgts)
            LineWriter(out, "tgt")
                .num("qpn", t.qpn)
                .text("state", t.state)
                .num("sender", t.sender)
                .num("sender_node", t.sender_node)
                .text("sender_host", t.sender_host)
                .num("ini_qpn", t.ini_qpn)
                .num("gen", t.generation)
                .flag("loopback", t.loopback)
                .end();
        for (const StatusHandle &h : port.handles)
            LineWriter(out, "handle").num("qpn", h.qpn).num("ini_qpn", h.ini_qpn).end();
        for (const auto &[name, value] : port.counters)
            LineWriter(out, "counter").text("name", name).num("value", value).end();
    }
    std::size_t lines = 0;
    for (const char c : out) lines += c == '\n';
    out += "end " + std::to_string(lines) + "\n";
    return out;
}

std::string decode_status(std::string_view bytes, StatusRecord &record) {
    record = StatusRecord{};
    const std::string magic = kStatusMagic;
    if (bytes.substr(0, magic.size() + 1) != magic + " ")
        return "not a btl-xrc status record (it does not start with \"" + magic + " \")";
    if (bytes.find('\0') != std::string_view::npos) return "a NUL byte: not a text record";
    if (bytes.back() != '\n') return "cut short: the last line is incomplete";
    std::vector<std::string_view> lines;
    for (std::size_t pos = 0; pos < bytes.size();) {
        const std::size_t nl = bytes.find('\n', pos);
        lines.push_back(bytes.substr(pos, nl - pos));
        pos = nl + 1;
    }
    const std::string_view version = lines[0].substr(magic.size() + 1);
    if (version != std::to_string(kStatusVersion))
        return "format version " + std::string(version.substr(0, 20)) + " (this reader knows version " +
               std::to_string(kStatusVersion) + ")";
    const std::string_view last = lines.back();
    std::size_t counted = 0;
    if (last.substr(0, 4) != "end ") return "cut short: no end line";
    const auto [end, ec] = std::from_chars(last.data() + 4, last.data() + last.size(), counted);
    if (ec != std::errc() || end != last.data() + last.size() || last.size() == 4) return "a malformed end line";
    if (counted != lines.size() - 1)
        return "the end line counts " + std::to_string(counted) + " lines, the record has " +
               std::to_string(lines.size() - 1);
    bool have_process = false;
    for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
        LineReader r(i + 1, lines[i]);
        if (!r.error().empty()) return r.error();
        const std::string_view kind = r.kind();
        if (i == 1 && kind != "process") return "line 2: the process line must come first";
        if (kind == "process") {
            if (have_process) r.fail("a second process line");
            read_process(r, record.process);
            have_process = true;
        } else if (kind == "port") {
            record.ports.emplace_back();
            read_port(r, record.ports.back());
        } else if (kind == "srq" || kind == "link" || kind == "tgt" || kind == "handle" || kind == "counter") {
            if (record.ports.empty()) return "line " + std::to_string(i + 1) + " (" + std::string(kind) +
                                              "): before any port line";
            StatusPort &port = record.ports.back();
            if (kind == "srq") read_srq(r, port.srqs.emplace_back());
            if (kind == "link") read_link(r, port.links.emplace_back());
            if (kind == "tgt") read_tgt(r, port.tgts.emplace_back());
            if (kind == "handle") read_handle(r, port.handles.emplace_back());
            if (kind == "counter") {
                auto &[name, value] = port.counters.emplace_back();
                r.name("name", name);
                r.number("value", value);
            }
        }
        // Other kinds: written by a later btl-xrc of the same format version; skipped.
        if (!r.error().empty()) return r.error();
    }
    if (!have_process) return "no process line";
    return {};
}

}  // namespace xrc
