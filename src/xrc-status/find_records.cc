// SPDX-License-Identifier: BSD-3-Clause
#include "find_records.h"

#include "src/core/status_file.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

namespace xrc_status {
namespace {

struct DirCloser {
    void operator()(DIR *d) const { closedir(d); }
};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// The directories of `dir` (never a symbolic link), and its record files.
// A directory given (or found) that is missing is worth saying; one that went while we looked is not.
void scan(const std::string &dir, int depth, FoundRecords &found, bool top) {
    std::unique_ptr<DIR, DirCloser> d(opendir(dir.c_str()));
    if (!d) {
        if (top || errno != ENOENT) found.unreadable.emplace_back(dir, std::strerror(errno));
        return;
    }
    std::vector<std::string> subdirs;
    while (const dirent *e = readdir(d.get())) {
        const std::string_view name = e->d_name;
        if (name == "." || name == "..") continue;
        const std::string path = dir + "/" + std::string(name);
        struct stat st{};
        if (lstat(path.c_str(), &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth > 0) subdirs.push_back(path);
        } else if (xrc::is_status_file_name(name)) {
            found.files.push_back(path);  // whatever it is: the reader says if it is not a record
        }
    }
    d.reset();
    for (const auto &sub : subdirs) scan(sub, depth - 1, found, false);
}

}  // namespace

std::vector<std::string> default_tmp_dirs() {
    std::vector<std::string> dirs;
    if (const char *t = std::getenv("TMPDIR"); t != nullptr && t[0] == '/') dirs.emplace_back(t);
    dirs.emplace_back("/tmp");
    for (auto &d : dirs)
        while (d.size() > 1 && d.back() == '/') d.pop_back();
    std::sort(dirs.begin(), dirs.end());
    dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
    return dirs;
}

std::vector<std::string> session_roots(const std::vector<std::string> &tmp_dirs) {
    static constexpr std::string_view kLaunchers[] = {"ompi.", "spmix_appdir_", "prterun.", "prted.", "prte."};
    std::vector<std::string> roots;
    for (const auto &tmp : tmp_dirs) {
        std::unique_ptr<DIR, DirCloser> d(opendir(tmp.c_str()));
        if (!d) continue;
        while (const dirent *e = readdir(d.get())) {
            const std::string_view name = e->d_name;
            if (std::none_of(std::begin(kLaunchers), std::end(kLaunchers),
                             [&](std::string_view p) { return starts_with(name, p); }))
                continue;
            const std::string path = tmp + "/" + std::string(name);
            struct stat st{};
            if (lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) roots.push_back(path);
        }
    }
    std::sort(roots.begin(), roots.end());
    return roots;
}

FoundRecords find_records(const std::vector<std::string> &dirs, bool given, int depth) {
    FoundRecords found;
    for (const auto &dir : dirs) scan(dir, depth, found, given);
    std::sort(found.files.begin(), found.files.end());
    found.files.erase(std::unique(found.files.begin(), found.files.end()), found.files.end());
    return found;
}

}  // namespace xrc_status
