// Every Open MPI header the component uses, included in one place. 16 installed OPAL headers lack
// BEGIN_C_DECLS, so C++ would mangle their declarations into references that only fail at dlopen: the whole
// set is wrapped in extern "C". opal_config.h must come first.
#pragma once

extern "C" {
#include "opal_config.h"

#include "opal/class/opal_bitmap.h"
#include "opal/class/opal_free_list.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/event/event.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/rcache.h"
#include "opal/mca/base/mca_base_pvar.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/btl/btl.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/runtime/opal_params.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"
}

#include "btl_xrc_ompi_compat.h"
