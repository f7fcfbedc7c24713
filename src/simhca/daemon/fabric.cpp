// SPDX-License-Identifier: BSD-3-Clause
#include "fabric.hpp"

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
        unsigned lid = 0, port = 0;
        if (kw != "node" || !(ss >> n.name >> k1 >> lid >> k2 >> n.addr >> k3 >> port) || k1 != "lid" ||
            k2 != "addr" || k3 != "port" || lid == 0 || lid >= 0xc000 || port == 0 || port > 65535) {
            err = path + ":" + std::to_string(lineno) + ": expected 'node <name> lid <lid> addr <ipv4> port <port>'";
            return false;
        }
        n.lid = uint16_t(lid);
        n.port = uint16_t(port);
        out.push_back(n);
    }
    return true;
}

} // namespace simhca
