// SPDX-License-Identifier: BSD-3-Clause
// xrc-status: what the btl xrc processes of a node hold, per job and XRC domain, from the status records they
// keep next to their XRC domain file (src/core/status_record.h). Run it on a node while a job runs, and after it
// to see that nothing is left.
#include "find_records.h"
#include "node_view.h"
#include "render.h"

#include "src/core/process_identity.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

constexpr const char *kUsage =
    "Usage: xrc-status [--json] [--counters] [--dir DIR]... [--tmpdir DIR]...\n"
    "\n"
    "Lists what the btl xrc processes of this node hold, per job and XRC domain: the domain (device, port, the\n"
    "inode of its file), its TGT QPs (QPN, state, the remote sender and its node, the local rank that made it,\n"
    "every local rank holding a handle on it), the INI QPs (to which node, through which rank, state), the SRQs\n"
    "(receive class, buffers posted, limit), the connection managers' UD QPs, and each process's counters.\n"
    "\n"
    "The source is the BTL's own state, not the HCA: every btl xrc process keeps a status record next to its\n"
    "job's XRC domain file (in the job session directory, or in btl_xrc_xrcd_dir), rewritten after each\n"
    "connection event and every btl_xrc_status_interval seconds (default 10), removed at MPI_Finalize. A record\n"
    "whose process is gone (killed, crashed) is listed as stale; a file that is not a valid record is listed\n"
    "under problems with the reason.\n"
    "\n"
    "Records are looked for in the launchers' session directories under each temporary directory ($TMPDIR and\n"
    "/tmp, or --tmpdir): ompi.<host>.<uid> (mpirun of Open MPI 4.x), spmix_appdir_<uid>_* (srun --mpi=pmix),\n"
    "prterun.*, prted.*, prte.* (Open MPI 5.x), a few levels down.\n"
    "\n"
    "Options:\n"
    "  --json        the same content as JSON (QPNs as numbers)\n"
    "  --counters    every counter of every process (default: a summary)\n"
    "  --dir DIR     look in DIR (and a few levels below) instead of the session directories: for jobs run\n"
    "                with btl_xrc_xrcd_dir=DIR, or a session directory elsewhere (repeatable)\n"
    "  --tmpdir DIR  look for session directories under DIR instead of $TMPDIR and /tmp (repeatable)\n"
    "  -h, --help    this text\n"
    "\n"
    "Exit status: 0 when every record was read and every process is alive (or there is none), 1 when a record\n"
    "is stale or could not be read, or a directory could not be listed, 2 on a usage error.\n";

std::string this_host() {
    char name[256] = "";
    if (gethostname(name, sizeof(name) - 1) != 0) return "?";
    return name;
}

std::uint64_t wall_clock_us() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000u + std::uint64_t(ts.tv_nsec) / 1000u;
}

int usage_error(const std::string &why) {
    std::fprintf(stderr, "xrc-status: %s\n%s", why.c_str(), "Try 'xrc-status --help'.\n");
    return 2;
}

}  // namespace

int main(int argc, char **argv) {
    bool json = false, all_counters = false;
    std::vector<std::string> dirs, tmp_dirs;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (arg == "--json") {
            json = true;
        } else if (arg == "--counters") {
            all_counters = true;
        } else if (arg == "--dir" || arg == "--tmpdir") {
            if (i + 1 >= argc || argv[i + 1][0] == '\0') return usage_error(arg + " needs a directory");
            (arg == "--dir" ? dirs : tmp_dirs).emplace_back(argv[++i]);
        } else {
            return usage_error("unknown argument '" + arg + "'");
        }
    }
    try {
        xrc_status::FoundRecords found;
        if (!dirs.empty()) {
            found = xrc_status::find_records(dirs, true);
        } else {
            if (tmp_dirs.empty()) tmp_dirs = xrc_status::default_tmp_dirs();
            found = xrc_status::find_records(xrc_status::session_roots(tmp_dirs), false);
            // A process without a session directory (a singleton) keeps its record in the temporary directory.
            const xrc_status::FoundRecords loose = xrc_status::find_records(tmp_dirs, false, 0);
            found.files.insert(found.files.end(), loose.files.begin(), loose.files.end());
        }
        xrc_status::Environment env;
        env.host = this_host();
        env.boot_id = xrc::kernel_boot_id();
        env.now_us = wall_clock_us();
        const xrc_status::NodeView view = xrc_status::build_node_view(found.files, found.unreadable, env);
        const std::string out = json ? xrc_status::render_json(view) : xrc_status::render_table(view, all_counters);
        std::fwrite(out.data(), 1, out.size(), stdout);
        if (std::fflush(stdout) != 0) {
            std::fprintf(stderr, "xrc-status: cannot write the listing: %s\n", std::strerror(errno));
            return 1;
        }
        return view.problems.empty() && !view.any_stale() ? 0 : 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "xrc-status: %s\n", e.what());
        return 1;
    }
}
