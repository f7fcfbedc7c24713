// Everything that differs between the Open MPI BTL interface versions we build against lives here.
// 310 = Open MPI 4.1.x (supported). 330 = Open MPI 5.0.x (planned: receive callbacks take a
// mca_btl_base_receive_descriptor_t, btl_ft_event is gone, the modex macros call PMIx directly, and
// osc/rdma wants MCA_BTL_FLAGS_RDMA_REMOTE_COMPLETION).
#pragma once

#if BTL_VERSION == 310
#define BTL_XRC_HAVE_FT_EVENT 1
#else
#error "btl-xrc supports the Open MPI 4.1.x BTL interface (BTL_VERSION 310) only; see btl_xrc_ompi_compat.h"
#endif
