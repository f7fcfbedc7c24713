dnl SPDX-License-Identifier: BSD-3-Clause
dnl --enable-asan: build everything (core, plugin, software HCA, tests) with AddressSanitizer + UBSan.
dnl Programs started by mpirun then need libasan preloaded; tests/smoke does that when ASAN_FLAGS is set.
dnl --enable-tsan: build everything with ThreadSanitizer. Open MPI stays uninstrumented: its MPI processes get the
dnl runtime preloaded (tests/lib/tsan.sh, which tests/btl and tests/cluster use when TSAN_FLAGS is set), and the
dnl plugin tells TSan the ordering Open MPI's lock-free free lists give (BTL_XRC_TSAN, btl_xrc/btl_xrc_tsan.h).
dnl The two runtimes cannot share a process, so the options exclude each other.
AC_DEFUN([BTL_XRC_SANITIZERS], [
  AC_ARG_ENABLE([asan],
    [AS_HELP_STRING([--enable-asan], [build with AddressSanitizer and UndefinedBehaviorSanitizer])],
    [], [enable_asan=no])
  AC_ARG_ENABLE([tsan],
    [AS_HELP_STRING([--enable-tsan], [build with ThreadSanitizer (Open MPI itself uninstrumented)])],
    [], [enable_tsan=no])
  AS_IF([test "x$enable_asan" = xyes && test "x$enable_tsan" = xyes],
    [AC_MSG_ERROR([--enable-asan and --enable-tsan cannot be combined: AddressSanitizer and ThreadSanitizer cannot share a process])])
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
  TSAN_FLAGS=""
  AS_IF([test "x$enable_tsan" = xyes], [
    TSAN_FLAGS="-fsanitize=thread -fno-omit-frame-pointer"
    BTL_XRC_CXXFLAGS="$BTL_XRC_CXXFLAGS $TSAN_FLAGS"
    BTL_XRC_CFLAGS="$BTL_XRC_CFLAGS $TSAN_FLAGS"
    LDFLAGS="$LDFLAGS $TSAN_FLAGS"
    dnl As for ASan: shared-library links done by libtool need the runtime named.
    LIBS="$LIBS -ltsan"
  ])
  AC_SUBST([ASAN_FLAGS])
  AC_SUBST([TSAN_FLAGS])
  AM_CONDITIONAL([ENABLE_ASAN], [test "x$enable_asan" = xyes])
  AM_CONDITIONAL([ENABLE_TSAN], [test "x$enable_tsan" = xyes])
])
