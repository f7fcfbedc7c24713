// SPDX-License-Identifier: BSD-3-Clause
// Lets opal_show_help find our help file wherever the plugin is loaded from: installed next to Open MPI's own
// help files (found by default), or next to the plugin (the build tree's components/ directory).
#include "btl_xrc.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include <string>

void mca_btl_xrc_add_help_dir() noexcept {
    try {
        Dl_info info{};
        if (dladdr(reinterpret_cast<void *>(&mca_btl_xrc_component), &info) == 0 || info.dli_fname == nullptr) return;
        std::string dir = info.dli_fname;
        const auto slash = dir.rfind('/');
        if (slash == std::string::npos) return;
        dir.resize(slash);
        opal_show_help_add_dir(dir.c_str());
    } catch (...) {
        // Without the extra directories the installed help file is still found; nothing to report.
    }
}

void mca_btl_xrc_show_help(const char *topic, ...) noexcept {
    if (opal_process_info.my_local_rank != 0) return;
    va_list args;
    va_start(args, topic);
    const mca_btl_xrc_malloced_t<char> text(opal_show_help_vstring(kBtlXrcHelpFile, topic, true, args));
    va_end(args);
    if (text == nullptr) return;
    fputs(text.get(), stderr);
    fflush(stderr);
}
