dnl SPDX-License-Identifier: BSD-3-Clause
dnl hwloc: device locality (which HCA is nearest to the process).
AC_DEFUN([BTL_XRC_FIND_HWLOC], [
  AC_CHECK_HEADER([hwloc.h], [],
    [AC_MSG_ERROR([hwloc.h not found: install the Debian package libhwloc-dev])])
  AC_CHECK_LIB([hwloc], [hwloc_topology_init], [HWLOC_LIBS=-lhwloc],
    [AC_MSG_ERROR([libhwloc not found: install the Debian package libhwloc-dev])])
  AC_SUBST([HWLOC_LIBS])
])
