dnl SPDX-License-Identifier: BSD-3-Clause
dnl GoogleTest for the C++ unit tests (Debian: googletest / libgtest-dev ship libgtest.a, libgtest_main.a).
AC_DEFUN([BTL_XRC_FIND_GTEST], [
  _bx_save_LIBS=$LIBS
  AC_CHECK_HEADER([gtest/gtest.h], [],
    [AC_MSG_ERROR([gtest/gtest.h not found: install the Debian package googletest (or libgtest-dev)])])
  AC_MSG_CHECKING([for libgtest and libgtest_main])
  LIBS="-lgtest_main -lgtest -pthread $LIBS"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <gtest/gtest.h>]], [[testing::InitGoogleTest();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([libgtest not usable: install the Debian package googletest (or libgtest-dev)])])
  LIBS=$_bx_save_LIBS
  GTEST_CFLAGS=""
  GTEST_LIBS="-lgtest_main -lgtest -pthread"
  AC_SUBST([GTEST_CFLAGS])
  AC_SUBST([GTEST_LIBS])
])
