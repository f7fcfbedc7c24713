dnl SPDX-License-Identifier: BSD-3-Clause
dnl Compiler settings shared by every part: C++20, warnings, optional -Werror.
AC_DEFUN([BTL_XRC_CXX_FLAGS], [
  AC_ARG_ENABLE([werror],
    [AS_HELP_STRING([--enable-werror], [treat compiler warnings as errors (CI does)])],
    [], [enable_werror=no])
  AX_CHECK_COMPILE_FLAG_SIMPLE([-std=gnu++20], [],
    [AC_MSG_ERROR([$CXX does not accept -std=gnu++20; install g++ >= 11 (Debian package g++)])])
  BTL_XRC_CXXFLAGS="-std=gnu++20 -Wall -Wextra"
  BTL_XRC_CFLAGS="-Wall -Wextra"
  AS_IF([test "x$enable_werror" = xyes], [
    BTL_XRC_CXXFLAGS="$BTL_XRC_CXXFLAGS -Werror"
    BTL_XRC_CFLAGS="$BTL_XRC_CFLAGS -Werror"])
  AC_SUBST([BTL_XRC_CXXFLAGS])
  AC_SUBST([BTL_XRC_CFLAGS])
  AX_PTHREAD_SIMPLE
])

dnl A tiny flag probe (no autoconf-archive dependency).
AC_DEFUN([AX_CHECK_COMPILE_FLAG_SIMPLE], [
  AC_MSG_CHECKING([whether $CXX accepts $1])
  _bx_save_CXXFLAGS=$CXXFLAGS
  CXXFLAGS="$CXXFLAGS $1"
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[]], [[]])],
    [AC_MSG_RESULT([yes]); $2], [AC_MSG_RESULT([no]); $3])
  CXXFLAGS=$_bx_save_CXXFLAGS
])

AC_DEFUN([AX_PTHREAD_SIMPLE], [
  PTHREAD_LIBS="-pthread"
  AC_SUBST([PTHREAD_LIBS])
])
