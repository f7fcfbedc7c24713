dnl SPDX-License-Identifier: BSD-3-Clause
dnl libibverbs with the upstream XRC API (rdma-core). The BTL needs IBV_SRQT_XRC, ibv_open_xrcd and
dnl IBV_QPT_XRC_SEND; the legacy OFED XRC API is not supported.
AC_DEFUN([BTL_XRC_FIND_VERBS], [
  AC_CHECK_HEADER([infiniband/verbs.h], [],
    [AC_MSG_ERROR([infiniband/verbs.h not found: install the Debian package libibverbs-dev (rdma-core)])])
  AC_CHECK_LIB([ibverbs], [ibv_get_device_list], [IBVERBS_LIBS=-libverbs],
    [AC_MSG_ERROR([libibverbs not found: install the Debian package libibverbs-dev (rdma-core)])])
  AC_CHECK_DECLS([IBV_SRQT_XRC, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV, ibv_open_xrcd, ibv_open_qp, ibv_get_srq_num],
    [], [AC_MSG_ERROR([libibverbs lacks the upstream XRC API (IBV_SRQT_XRC, ibv_open_xrcd, IBV_QPT_XRC_SEND):
      install rdma-core >= 17 (Debian 12: libibverbs-dev 44)])],
    [[#include <infiniband/verbs.h>]])
  dnl The rdma-core release (44 on Debian 12, 56 on Debian 13): the software HCA's libibverbs exports what it does.
  AC_MSG_CHECKING([rdma-core release])
  RDMA_CORE_RELEASE=`pkg-config --modversion libibverbs 2>/dev/null | cut -d. -f3`
  AS_IF([test -z "$RDMA_CORE_RELEASE"],
    [AC_MSG_RESULT([unknown]); AC_MSG_ERROR([pkg-config does not know libibverbs: install the Debian packages pkg-config and libibverbs-dev])])
  AC_MSG_RESULT([$RDMA_CORE_RELEASE])
  AC_SUBST([RDMA_CORE_RELEASE])
  IBVERBS_CFLAGS=""
  AC_SUBST([IBVERBS_CFLAGS])
  AC_SUBST([IBVERBS_LIBS])
])
