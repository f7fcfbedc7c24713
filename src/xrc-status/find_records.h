// SPDX-License-Identifier: BSD-3-Clause
// Where xrc-status looks for status records (src/core/status_file.h) on a node. Each btl xrc process keeps its
// record next to its job's XRC domain file: in the job session directory, unless btl_xrc_xrcd_dir names another
// directory. The launchers put session directories under the temporary directory ($TMPDIR, else /tmp):
//   mpirun of Open MPI 4.x (ORTE)   ompi.<host>.<uid>/pid.<mpirun pid>/<job>  (the mpirun node)
//                                   ompi.<host>.<uid>/jf.<job family>/<job>   (the other nodes)
//   Slurm's PMIx plugin (srun)      spmix_appdir_<uid>_<job>.<step>
//   PRRTE (Open MPI 5.x)            prterun.<host>.<pid>.<uid>/<job>, prted.<host>.<pid>.<uid>/<job>, prte.*
// (and a process without a session directory keeps its record in /tmp itself).
// So the search is: those directories of each temporary directory, then a few levels down; or, with --dir,
// exactly the directories given (btl_xrc_xrcd_dir, or a session directory elsewhere), a few levels down too.
// Symbolic links are never followed; a directory that cannot be read is reported (another user's job: root sees
// every job, a user their own).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace xrc_status {

struct FoundRecords {
    std::vector<std::string> files;         // paths of btl_xrc_status.* files, sorted
    std::vector<std::pair<std::string, std::string>> unreadable;  // directories that could not be listed, and why
};

// The launchers' session directories under each of `tmp_dirs`.
std::vector<std::string> session_roots(const std::vector<std::string> &tmp_dirs);
// Every record under `dirs`, at most `depth` levels below each. `given`: the user named them, so a missing one is
// reported (a session directory found a moment ago may be gone at the end of its job: that is no problem).
FoundRecords find_records(const std::vector<std::string> &dirs, bool given, int depth = 3);
// The default temporary directories: $TMPDIR and /tmp.
std::vector<std::string> default_tmp_dirs();

}  // namespace xrc_status
