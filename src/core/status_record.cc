// SPDX-License-Identifier: BSD-3-Clause
#include "status_record.h"

#include <charconv>
#include <limits>
#include <type_traits>
#include <variant>

namespace xrc {
namespace {

constexpr std::uint64_t kMaxQpn = 0xffffff;  // QP and SRQ numbers are 24 bits

bool plain(unsigned char c) {
    return c > 0x20 && c < 0x7f && c != '%' && c != '=';
}

bool token_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

bool is_token(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
        if (!token_char(c)) return false;
    return true;
}

// One field of a line kind: its key, and the member it holds. Every kind's fields are listed once (below), and
// both the encoder and the decoder walk that list.
enum class Form : std::uint8_t {
    number,  // decimal, at most `max`
    text,    // status_escape()d
    name,    // token characters only (states), may be empty
    flag,    // 0 or 1
};

template <class T>
struct Field {
    const char *key;
    Form form;
    std::variant<std::uint32_t T::*, std::uint64_t T::*, std::string T::*, bool T::*> member;
    std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
};

template <class T>
Field<T> number(const char *key, std::uint32_t T::*m, std::uint64_t max = 0xffffffffu) {
    return {key, Form::number, m, max};
}
template <class T>
Field<T> number64(const char *key, std::uint64_t T::*m) {
    return {key, Form::number, m};
}
template <class T>
Field<T> qpn(const char *key, std::uint32_t T::*m) {
    return {key, Form::number, m, kMaxQpn};
}
template <class T>
Field<T> text(const char *key, std::string T::*m) {
    return {key, Form::text, m};
}
template <class T>
Field<T> name(const char *key, std::string T::*m) {
    return {key, Form::name, m};
}
template <class T>
Field<T> flag(const char *key, bool T::*m) {
    return {key, Form::flag, m, 1};
}

const Field<StatusProcess> kProcessFields[] = {
    number("pid", &StatusProcess::pid),
    number64("start", &StatusProcess::start_ticks),
    text("boot", &StatusProcess::boot_id),
    text("host", &StatusProcess::host),
    number("uid", &StatusProcess::uid),
    number("job", &StatusProcess::jobid),
    number("rank", &StatusProcess::rank),
    number("local_rank", &StatusProcess::local_rank),
    number("local_ranks", &StatusProcess::local_ranks),
    number("node", &StatusProcess::node),
    name("state", &StatusProcess::state),
    number64("seq", &StatusProcess::sequence),
    number64("time_us", &StatusProcess::written_us),
    number("interval_s", &StatusProcess::interval_s),
};
const Field<StatusPort> kPortFields[] = {
    text("device", &StatusPort::device),         number("port", &StatusPort::port, 255),
    number("lid", &StatusPort::lid, 0xffff),     text("xrcd", &StatusPort::xrcd_file),
    number64("xrcd_dev", &StatusPort::xrcd_dev), number64("xrcd_ino", &StatusPort::xrcd_ino),
    qpn("cm_qpn", &StatusPort::cm_qpn),
};
const Field<StatusSrq> kSrqFields[] = {
    number("class", &StatusSrq::buffer_size), qpn("srqn", &StatusSrq::srq_num),   number("count", &StatusSrq::count),
    number("posted", &StatusSrq::posted),     number("limit", &StatusSrq::limit),
};
const Field<StatusLink> kLinkFields[] = {
    number("node", &StatusLink::node),       text("host", &StatusLink::host),
    name("state", &StatusLink::state),       qpn("ini_qpn", &StatusLink::ini_qpn),
    name("qp_state", &StatusLink::qp_state), number("owner", &StatusLink::owner),
    qpn("tgt_qpn", &StatusLink::tgt_qpn),    number("gen", &StatusLink::generation),
    number("job", &StatusLink::job),         number("outstanding", &StatusLink::outstanding),
    flag("queued", &StatusLink::queued),
};
const Field<StatusTgt> kTgtFields[] = {
    qpn("qpn", &StatusTgt::qpn),
    name("state", &StatusTgt::state),
    number("sender", &StatusTgt::sender),
    number("sender_node", &StatusTgt::sender_node),
    text("sender_host", &StatusTgt::sender_host),
    qpn("ini_qpn", &StatusTgt::ini_qpn),
    number("gen", &StatusTgt::generation),
    number("sender_job", &StatusTgt::sender_job),
    flag("loopback", &StatusTgt::loopback),
};
const Field<StatusHandle> kHandleFields[] = {qpn("qpn", &StatusHandle::qpn), qpn("ini_qpn", &StatusHandle::ini_qpn)};

// A counter is an item of its own, so that the set of counters can change freely.
const Field<StatusCounter> kCounterFields[] = {name("name", &StatusCounter::name),
                                               number64("value", &StatusCounter::value)};

void append_escaped(std::string &out, std::string_view value) {
    static const char hex[] = "0123456789ABCDEF";
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
}

void append_number(std::string &out, std::uint64_t value) {
    char digits[24];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), value);
    out.append(digits, end);
}

template <class T, std::size_t N>
void write_line(std::string &out, const char *kind, const T &item, const Field<T> (&fields)[N]) {
    out += kind;
    for (const Field<T> &f : fields) {
        out += ' ';
        out += f.key;
        out += '=';
        std::visit(
            [&](auto member) {
                const auto &value = item.*member;
                using V = std::decay_t<decltype(value)>;
                if constexpr (std::is_same_v<V, std::string>)
                    append_escaped(out, value);
                else
                    append_number(out, static_cast<std::uint64_t>(value));
            },
            f.member);
    }
    out += '\n';
}

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
            error_ =
                "line " + std::to_string(number_) + (kind_.empty() ? "" : " (" + std::string(kind_) + ")") + ": " + why;
    }

    // Every field of the kind must be there (version 1); keys of later additions are skipped.
    template <class T, std::size_t N>
    void read(T &item, const Field<T> (&fields)[N]) {
        for (const Field<T> &f : fields) {
            if (!error_.empty()) return;
            const std::string_view *v = find(f.key);
            if (v == nullptr) return;
            std::visit([&](auto member) { read_value(f, *v, item.*member); }, f.member);
        }
    }

private:
    template <class T, class V>
    void read_value(const Field<T> &f, std::string_view v, V &out) {
        if constexpr (std::is_same_v<V, std::string>) {
            if (f.form == Form::name) {
                if (!v.empty() && !is_token(v)) return fail(std::string(f.key) + ": not a name");
                out = std::string(v);
            } else if (!status_unescape(v, out)) {
                fail(std::string(f.key) + ": a malformed %-escape");
            }
        } else {
            std::uint64_t value = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
            if (ec != std::errc() || end != v.data() + v.size() || v.empty())
                return fail(std::string(f.key) + "=" + std::string(v.substr(0, 40)) + " is not a number");
            if (value > f.max)
                return fail(std::string(f.key) + "=" + std::to_string(value) + " is out of range (at most " +
                            std::to_string(f.max) + ")");
            out = static_cast<V>(value);
        }
    }
    const std::string_view *find(const char *key) {
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

}  // namespace

std::string status_escape(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    append_escaped(out, value);
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
    std::size_t lines = 2;  // the version and process lines
    for (const StatusPort &port : record.ports)
        lines +=
            1 + port.srqs.size() + port.links.size() + port.tgts.size() + port.handles.size() + port.counters.size();
    std::string out;
    out.reserve(64 * lines);
    out = std::string(kStatusMagic) + " " + std::to_string(kStatusVersion) + "\n";
    write_line(out, "process", record.process, kProcessFields);
    for (const StatusPort &port : record.ports) {
        write_line(out, "port", port, kPortFields);
        for (const StatusSrq &srq : port.srqs) write_line(out, "srq", srq, kSrqFields);
        for (const StatusLink &link : port.links) write_line(out, "link", link, kLinkFields);
        for (const StatusTgt &tgt : port.tgts) write_line(out, "tgt", tgt, kTgtFields);
        for (const StatusHandle &handle : port.handles) write_line(out, "handle", handle, kHandleFields);
        for (const StatusCounter &counter : port.counters) write_line(out, "counter", counter, kCounterFields);
    }
    out += "end ";
    append_number(out, lines);
    out += '\n';
    return out;
}

Result<StatusRecord> decode_status(std::string_view bytes) {
    StatusRecord record;
    const std::string magic = kStatusMagic;
    if (bytes.substr(0, magic.size() + 1) != magic + " ")
        return malformed("not a btl-xrc status record (it does not start with \"" + magic + " \")");
    if (bytes.find('\0') != std::string_view::npos) return malformed("a NUL byte: not a text record");
    if (bytes.back() != '\n') return malformed("cut short: the last line is incomplete");
    std::vector<std::string_view> lines;
    for (std::size_t pos = 0; pos < bytes.size();) {
        const std::size_t nl = bytes.find('\n', pos);
        lines.push_back(bytes.substr(pos, nl - pos));
        pos = nl + 1;
    }
    const std::string_view version = lines[0].substr(magic.size() + 1);
    if (version != std::to_string(kStatusVersion))
        return malformed("format version " + std::string(version.substr(0, 20)) + " (this reader knows version " +
                         std::to_string(kStatusVersion) + ")");
    const std::string_view last = lines.back();
    std::size_t counted = 0;
    if (last.substr(0, 4) != "end ") return malformed("cut short: no end line");
    const auto [end, ec] = std::from_chars(last.data() + 4, last.data() + last.size(), counted);
    if (ec != std::errc() || end != last.data() + last.size() || last.size() == 4)
        return malformed("a malformed end line");
    if (counted != lines.size() - 1)
        return malformed("the end line counts " + std::to_string(counted) + " lines, the record has " +
                         std::to_string(lines.size() - 1));
    bool have_process = false;
    for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
        LineReader r(i + 1, lines[i]);
        if (!r.error().empty()) return malformed(r.error());
        const std::string_view kind = r.kind();
        if (i == 1 && kind != "process") return malformed("line 2: the process line must come first");
        if (kind == "process") {
            if (have_process) r.fail("a second process line");
            r.read(record.process, kProcessFields);
            if (r.error().empty() && record.process.pid == 0) r.fail("pid=0");
            have_process = true;
        } else if (kind == "port") {
            r.read(record.ports.emplace_back(), kPortFields);
        } else if (kind == "srq" || kind == "link" || kind == "tgt" || kind == "handle" || kind == "counter") {
            if (record.ports.empty())
                return malformed("line " + std::to_string(i + 1) + " (" + std::string(kind) +
                                 "): before any port line");
            StatusPort &port = record.ports.back();
            if (kind == "srq") {
                StatusSrq &srq = port.srqs.emplace_back();
                r.read(srq, kSrqFields);
                if (r.error().empty() && srq.posted > srq.count)
                    r.fail("posted=" + std::to_string(srq.posted) + " > count");
            }
            if (kind == "link") r.read(port.links.emplace_back(), kLinkFields);
            if (kind == "tgt") r.read(port.tgts.emplace_back(), kTgtFields);
            if (kind == "handle") r.read(port.handles.emplace_back(), kHandleFields);
            if (kind == "counter") r.read(port.counters.emplace_back(), kCounterFields);
        }
        // Other kinds: written by a later btl-xrc of the same format version; skipped.
        if (!r.error().empty()) return malformed(r.error());
    }
    if (!have_process) return malformed("no process line");
    return record;
}

}  // namespace xrc
