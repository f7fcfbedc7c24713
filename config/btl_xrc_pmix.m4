dnl SPDX-License-Identifier: BSD-3-Clause
dnl PMIx headers: Open MPI 5.0's OPAL headers include pmix.h, and the benchmarks' modex probe uses them (4.1's
dnl plugin reaches PMIx only through OPAL). Debian's libpmix-dev keeps them outside the default include path; pkg-config knows where.
dnl --with-pmix=DIR names a prefix whose include/ holds pmix.h.
AC_DEFUN([BTL_XRC_FIND_PMIX], [
  AC_ARG_WITH([pmix],
    [AS_HELP_STRING([--with-pmix=DIR], [PMIx installation prefix (default: pkg-config pmix)])])
  PMIX_CFLAGS=
  AS_IF([test -n "$with_pmix" && test "x$with_pmix" != xyes && test "x$with_pmix" != xno],
    [PMIX_CFLAGS="-I$with_pmix/include"],
    [PMIX_CFLAGS=`pkg-config --cflags pmix 2>/dev/null`])
  btl_xrc_save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $PMIX_CFLAGS"
  AC_CHECK_HEADER([pmix.h], [btl_xrc_have_pmix=yes], [btl_xrc_have_pmix=no])
  CPPFLAGS=$btl_xrc_save_CPPFLAGS
  AS_IF([test "x$btl_xrc_have_pmix" = xno],
    [AC_MSG_WARN([pmix.h not found (Debian package libpmix-dev): the benchmarks will not report modex bytes])])
  AC_SUBST([PMIX_CFLAGS])
  AM_CONDITIONAL([HAVE_PMIX_HEADERS], [test "x$btl_xrc_have_pmix" = xyes])
])
