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
  IBVERBS_CFLAGS=""
  AC_SUBST([IBVERBS_CFLAGS])
  AC_SUBST([IBVERBS_LIBS])
])
