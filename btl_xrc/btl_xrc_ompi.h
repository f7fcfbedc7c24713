// SPDX-License-Identifier: BSD-3-Clause
// Every Open MPI header the component uses, included in one place. 16 installed OPAL headers lack
// BEGIN_C_DECLS, so C++ would mangle their declarations into references that only fail at dlopen: the whole
// set is wrapped in extern "C". opal_config.h must come first. Which headers exist depends on the Open MPI
// series (OPAL_MAJOR_VERSION, from opal_config.h); everything else that differs is in btl_xrc_ompi_compat.h.
#pragma once

extern "C" {
#include "opal_config.h"

#if OPAL_MAJOR_VERSION >= 5
// opal/util/event.h of every 5.0.x release opens BEGIN_C_DECLS twice and closes it once, so a C++ translation
// unit would end inside extern "C" (and <limits>, which verbs.h includes, fails there). Other OPAL headers pull
// event.h in indirectly, so it is included first, with both macros empty: we are inside our own extern "C".
#pragma push_macro("BEGIN_C_DECLS")
#pragma push_macro("END_C_DECLS")
#undef BEGIN_C_DECLS
#undef END_C_DECLS
#define BEGIN_C_DECLS
#define END_C_DECLS
#include "opal/util/event.h"
#pragma pop_macro("END_C_DECLS")
#pragma pop_macro("BEGIN_C_DECLS")
#include "opal/mca/pmix/pmix-internal.h"
#else
#include "opal/mca/event/event.h"
#include "opal/mca/pmix/pmix.h"
#endif

#include "opal/class/opal_bitmap.h"
#include "opal/class/opal_free_list.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/rcache.h"
#include "opal/mca/base/mca_base_pvar.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/btl/btl.h"
#include "opal/runtime/opal_params.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"
}

#include "btl_xrc_ompi_compat.h"
