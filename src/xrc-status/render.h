// SPDX-License-Identifier: BSD-3-Clause
// xrc-status's two outputs of a node view (node_view.h): a table for people, and JSON with the same content for
// tools (every QPN, rank and pid as a number, every counter by name).
#pragma once

#include "node_view.h"

#include <string>

namespace xrc_status {

// `all_counters`: every counter of every process, not only the summary columns.
std::string render_table(const NodeView &view, bool all_counters);
std::string render_json(const NodeView &view);

}  // namespace xrc_status
