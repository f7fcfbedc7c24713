// SPDX-License-Identifier: BSD-3-Clause
#include "fabric.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace simhca {

bool load_fabric(const std::string &path, std::vector<FabricNode> &out, std::string &err) {
    std::ifstream in(path);
    if (!in) {
        err = "cannot open fabric file " + path;
        return false;
    }
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
        ++lineno;
        if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
        std::istringstream ss(line);
        std::string kw;
        if (!(ss >> kw)) continue;
        FabricNode n;
        std::string k1, k2, k3;
        std::string lids;
        unsigned port = 0;
        bool ok = kw == "node" && (ss >> n.name >> k1 >> lids >> k2 >> n.addr >> k3 >> port) && k1 == "lid" &&
                  k2 == "addr" && k3 == "port" && port != 0 && port <= 65535;
        for (size_t at = 0; ok && at <= lids.size();) {
            size_t end = lids.find(',', at);
            if (end == std::string::npos) end = lids.size();
            const std::string one = lids.substr(at, end - at);
            char *stop = nullptr;
            unsigned long v = std::strtoul(one.c_str(), &stop, 0);
            ok = !one.empty() && *stop == 0 && v < 0xc000 && (v != 0 || !n.lids.empty());
            for (uint16_t l : n.lids) ok = ok && (v == 0 || l != v);
            n.lids.push_back(uint16_t(v));
            at = end + 1;
        }
        if (!ok) {
            err = path + ":" + std::to_string(lineno) +
                  ": expected 'node <name> lid <lid>[,<rail 2 lid>...] addr <ipv4> port <port>' (LIDs 1..0xbfff, "
                  "distinct, 0 = rail not cabled)";
            return false;
        }
        n.lid = n.lids[0];
        n.port = uint16_t(port);
        out.push_back(n);
    }
    return true;
}

}  // namespace simhca
