dnl SPDX-License-Identifier: BSD-3-Clause
dnl --enable-asan: build everything (core, plugin, software HCA, tests) with AddressSanitizer + UBSan.
dnl Programs started by mpirun then need libasan preloaded; tests/smoke does that when ASAN_FLAGS is set.
AC_DEFUN([BTL_XRC_SANITIZERS], [
  AC_ARG_ENABLE([asan],
    [AS_HELP_STRING([--enable-asan], [build with AddressSanitizer and UndefinedBehaviorSanitizer])],
    [], [enable_asan=no])
  ASAN_FLAGS=""
  AS_IF([test "x$enable_asan" = xyes], [
    ASAN_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer"
    BTL_XRC_CXXFLAGS="$BTL_XRC_CXXFLAGS $ASAN_FLAGS"
    BTL_XRC_CFLAGS="$BTL_XRC_CFLAGS $ASAN_FLAGS"
    LDFLAGS="$LDFLAGS $ASAN_FLAGS"
    dnl libtool drops -fsanitize from shared-library links; with -z defs the plugin and the software HCA's
    dnl library must name the runtimes themselves.
    LIBS="$LIBS -lasan -lubsan"
  ])
  AC_SUBST([ASAN_FLAGS])
  AM_CONDITIONAL([ENABLE_ASAN], [test "x$enable_asan" = xyes])
])
