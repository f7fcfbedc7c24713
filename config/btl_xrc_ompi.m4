dnl SPDX-License-Identifier: BSD-3-Clause
dnl Locate Open MPI's internal (devel) headers, libopen-pal, the component and help-file directories, and the
dnl BTL interface version. Three ways, in order of precedence:
dnl   --with-ompi-src=DIR  a configured and built Open MPI source tree
dnl   --with-ompi=PREFIX   an installation built --with-devel-headers
dnl   (default)            the ompi_info found in PATH
dnl Supported BTL interface versions are listed in BTL_XRC_SUPPORTED_BTL_VERSIONS; everything that differs between
dnl them in the code lives in btl_xrc/btl_xrc_ompi_compat.h, and in the build here: Open MPI 5.0's headers need
dnl PMIx's (pmix.h), the plugin links libpmix and libevent_core itself, and headers an installation lacks are
dnl taken from the matching source (BTL_XRC_OMPI_MISSING_HEADERS in btl_xrc_ompi_headers.m4).
AC_DEFUN([BTL_XRC_FIND_OMPI], [
  BTL_XRC_SUPPORTED_BTL_VERSIONS="310 330"
  AC_ARG_WITH([ompi],
    [AS_HELP_STRING([--with-ompi=PREFIX], [Open MPI installation (built --with-devel-headers)])])
  AC_ARG_WITH([ompi-src],
    [AS_HELP_STRING([--with-ompi-src=DIR], [configured and built Open MPI source tree])])
  AC_ARG_WITH([ompi-component-dir],
    [AS_HELP_STRING([--with-ompi-component-dir=DIR],
      [where make install puts mca_btl_xrc.so (default: Open MPI's pkglibdir)])])
  AC_ARG_WITH([ompi-help-dir],
    [AS_HELP_STRING([--with-ompi-help-dir=DIR],
      [where make install puts help-mpi-btl-xrc.txt (default: Open MPI's pkgdatadir)])])

  OMPI_INFO=""
  AS_IF([test -n "$with_ompi_src" && test "x$with_ompi_src" != xno], [
    AS_IF([test -f "$with_ompi_src/opal/include/opal_config.h"], [],
      [AC_MSG_ERROR([--with-ompi-src=$with_ompi_src: opal/include/opal_config.h not found; configure and build that tree first])])
    OMPI_INCDIR="$with_ompi_src"
    OMPI_CPPFLAGS="-I$with_ompi_src -I$with_ompi_src/opal/include -I$with_ompi_src/ompi/include"
    dnl 4.1 has ORTE; 5.0 builds its bundled PMIx in 3rd-party/openpmix (unless configured with an external one)
    AS_IF([test -d "$with_ompi_src/orte/include"], [OMPI_CPPFLAGS="$OMPI_CPPFLAGS -I$with_ompi_src/orte/include"])
    AS_IF([test -f "$with_ompi_src/3rd-party/openpmix/include/pmix.h"],
      [OMPI_CPPFLAGS="$OMPI_CPPFLAGS -I$with_ompi_src/3rd-party/openpmix/include"
       OMPI_PMIX_LIBDIR="$with_ompi_src/3rd-party/openpmix/src/.libs"])
    OMPI_LIBDIR="$with_ompi_src/opal/.libs"
    AS_IF([test -x "$with_ompi_src/ompi/tools/ompi_info/ompi_info"],
      [OMPI_INFO="$with_ompi_src/ompi/tools/ompi_info/ompi_info"])
    OMPI_COMPONENT_DIR_DEFAULT='${libdir}/openmpi'
    OMPI_HELP_DIR_DEFAULT='${datadir}/openmpi'
  ], [
    AS_IF([test -n "$with_ompi" && test "x$with_ompi" != xno && test "x$with_ompi" != xyes], [
      AS_IF([test -x "$with_ompi/bin/ompi_info"], [OMPI_INFO="$with_ompi/bin/ompi_info"],
        [AC_MSG_ERROR([--with-ompi=$with_ompi: $with_ompi/bin/ompi_info not found])])
    ], [
      AC_PATH_PROG([OMPI_INFO], [ompi_info])
      AS_IF([test -z "$OMPI_INFO"],
        [AC_MSG_ERROR([ompi_info not found in PATH: install the Debian packages openmpi-bin and libopenmpi-dev, or pass --with-ompi=PREFIX / --with-ompi-src=DIR])])
    ])
    _bx_path() { "$OMPI_INFO" --path "$[]1" --parsable 2>/dev/null | sed -n "s/^path:$[]1://p"; }
    OMPI_INCDIR=`_bx_path pkgincludedir`
    OMPI_LIBDIR=`_bx_path libdir`
    OMPI_COMPONENT_DIR_DEFAULT=`_bx_path pkglibdir`
    OMPI_HELP_DIR_DEFAULT=`_bx_path pkgdatadir`
    OMPI_CPPFLAGS="-I$OMPI_INCDIR"
  ])
  dnl (--parsable --version prints a banner in both series; the full listing has the version line)
  dnl (a source tree without a built ompi_info: the version opal/include/opal/version.h was generated with)
  AS_IF([test -n "$OMPI_INFO"],
    [OMPI_VERSION=`"$OMPI_INFO" --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p'`],
    [test -f "$OMPI_INCDIR/opal/include/opal/version.h"],
    [OMPI_VERSION=`sed -n 's/^#define OPAL_VERSION "\(.*\)"$/\1/p' "$OMPI_INCDIR/opal/include/opal/version.h"`])
  AC_MSG_CHECKING([for Open MPI internal headers])
  AC_MSG_RESULT([$OMPI_INCDIR])
  AS_IF([test -f "$OMPI_INCDIR/opal_config.h" || test -f "$OMPI_INCDIR/opal/include/opal_config.h"], [],
    [AC_MSG_ERROR([Open MPI's internal headers (opal_config.h) are missing in $OMPI_INCDIR.
      A BTL is built against them: on Debian install libopenmpi-dev (it ships them); for your own build,
      configure Open MPI with --with-devel-headers, or point --with-ompi-src at its built source tree.])])

  AC_LANG_PUSH([C])
  AC_MSG_CHECKING([Open MPI series])
  _bx_save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $OMPI_CPPFLAGS"
  AC_COMPUTE_INT([BTL_XRC_OPAL_MAJOR], [OPAL_MAJOR_VERSION], [[#include "opal_config.h"]], [BTL_XRC_OPAL_MAJOR=0])
  AC_MSG_RESULT([$BTL_XRC_OPAL_MAJOR.x])
  CPPFLAGS=$_bx_save_CPPFLAGS
  AS_IF([test "$BTL_XRC_OPAL_MAJOR" -ge 5], [
    dnl opal/util/proc.h includes pmix.h, so even the btl.h probe needs PMIx's headers
    AS_IF([test "x$btl_xrc_have_pmix" = xyes || test -n "$OMPI_PMIX_LIBDIR"], [],
      [AC_MSG_ERROR([Open MPI $BTL_XRC_OPAL_MAJOR.x's headers include pmix.h, which was not found: install the Debian package libpmix-dev, or pass --with-pmix=DIR])])
    OMPI_CPPFLAGS="$OMPI_CPPFLAGS $PMIX_CFLAGS"
    BTL_XRC_OMPI_MISSING_HEADERS
  ])
  CPPFLAGS="$CPPFLAGS $OMPI_CPPFLAGS"
  AC_CHECK_HEADER([opal/mca/btl/btl.h], [],
    [AC_MSG_ERROR([opal/mca/btl/btl.h does not compile with $OMPI_CPPFLAGS: Open MPI's devel headers are incomplete (see config.log)])],
    [[#include "opal_config.h"]])
  AC_MSG_CHECKING([Open MPI BTL interface version])
  AC_COMPUTE_INT([BTL_XRC_BTL_VERSION], [BTL_VERSION],
    [[#include "opal_config.h"
#include "opal/mca/btl/btl.h"]],
    [BTL_XRC_BTL_VERSION=unknown])
  AC_MSG_RESULT([$BTL_XRC_BTL_VERSION])
  CPPFLAGS=$_bx_save_CPPFLAGS
  AC_LANG_POP([C])
  _bx_ok=no
  for _bx_v in $BTL_XRC_SUPPORTED_BTL_VERSIONS; do
    AS_IF([test "x$_bx_v" = "x$BTL_XRC_BTL_VERSION"], [_bx_ok=yes])
  done
  AS_IF([test $_bx_ok = yes], [],
    [AC_MSG_ERROR([Open MPI BTL interface version $BTL_XRC_BTL_VERSION is not supported (supported: $BTL_XRC_SUPPORTED_BTL_VERSIONS = Open MPI 4.1.x and 5.0.x; see btl_xrc/btl_xrc_ompi_compat.h).])])
  AS_CASE([$BTL_XRC_BTL_VERSION], [310], [BTL_XRC_BTL_SERIES="Open MPI 4.1.x"], [330], [BTL_XRC_BTL_SERIES="Open MPI 5.0.x"])
  AC_MSG_NOTICE([building against the BTL interface $BTL_XRC_BTL_VERSION ($BTL_XRC_BTL_SERIES)])

  _bx_save_LDFLAGS=$LDFLAGS
  LDFLAGS="$LDFLAGS -L$OMPI_LIBDIR"
  AC_CHECK_LIB([open-pal], [opal_show_help_add_dir], [OMPI_LIBS="-L$OMPI_LIBDIR -lopen-pal"],
    [AC_MSG_ERROR([libopen-pal not found in $OMPI_LIBDIR (install libopenmpi-dev)])])
  LDFLAGS=$_bx_save_LDFLAGS
  dnl An Open MPI built against an external libevent (Debian's is; 5.0 always is) expands opal_event_* into
  dnl libevent calls: the plugin must link libevent_core itself.
  AS_IF([test "$BTL_XRC_OPAL_MAJOR" -ge 5 || test -f "$OMPI_INCDIR/opal/mca/event/external/external.h"], [
    AC_CHECK_LIB([event_core], [event_assign], [OMPI_LIBS="$OMPI_LIBS -levent_core"],
      [AC_MSG_ERROR([Open MPI uses an external libevent, but libevent_core was not found: install the Debian package libevent-dev])])
  ])

  dnl 5.0's modex macros call PMIx themselves
  AS_IF([test "$BTL_XRC_OPAL_MAJOR" -ge 5], [
    _bx_save_LDFLAGS=$LDFLAGS
    _bx_pmix_libs=`pkg-config --libs-only-L pmix 2>/dev/null`
    AS_IF([test -n "$OMPI_PMIX_LIBDIR"], [_bx_pmix_libs="-L$OMPI_PMIX_LIBDIR"],
      [test -n "$with_pmix" && test "x$with_pmix" != xyes && test "x$with_pmix" != xno],
      [_bx_pmix_libs="-L$with_pmix/lib"])
    LDFLAGS="$LDFLAGS $_bx_pmix_libs"
    AC_CHECK_LIB([pmix], [PMIx_Get], [OMPI_LIBS="$OMPI_LIBS $_bx_pmix_libs -lpmix"],
      [AC_MSG_ERROR([libpmix not found (Open MPI 5.0's modex macros call it): install the Debian package libpmix-dev])])
    LDFLAGS=$_bx_save_LDFLAGS
  ])

  AS_IF([test -n "$with_ompi_component_dir"], [OMPI_COMPONENT_DIR=$with_ompi_component_dir],
    [OMPI_COMPONENT_DIR=$OMPI_COMPONENT_DIR_DEFAULT])
  AS_IF([test -n "$with_ompi_help_dir"], [OMPI_HELP_DIR=$with_ompi_help_dir],
    [OMPI_HELP_DIR=$OMPI_HELP_DIR_DEFAULT])
  dnl The default component directory of this Open MPI, needed to build mca_base_component_path values
  dnl that keep Open MPI's own components loadable next to ours.
  OMPI_PKGLIBDIR=$OMPI_COMPONENT_DIR_DEFAULT
  AC_SUBST([OMPI_INFO])
  AC_SUBST([OMPI_VERSION])
  AC_SUBST([OMPI_INCDIR])
  AC_SUBST([OMPI_CPPFLAGS])
  AC_SUBST([OMPI_LIBS])
  AC_SUBST([OMPI_COMPONENT_DIR])
  AC_SUBST([OMPI_HELP_DIR])
  AC_SUBST([OMPI_PKGLIBDIR])
  AC_SUBST([BTL_XRC_BTL_VERSION])
  AC_SUBST([BTL_XRC_BTL_SERIES])
])

dnl mpicc/mpirun for the MPI tests (the ones of the Open MPI we build against when we can tell).
AC_DEFUN([BTL_XRC_FIND_MPI_TOOLS], [
  _bx_mpi_path=$PATH
  AS_IF([test -n "$with_ompi" && test "x$with_ompi" != xno && test "x$with_ompi" != xyes],
    [_bx_mpi_path="$with_ompi/bin:$PATH"])
  AC_PATH_PROG([MPICC], [mpicc], [], [$_bx_mpi_path])
  AC_PATH_PROG([MPIRUN], [mpirun], [], [$_bx_mpi_path])
  AS_IF([test -z "$MPICC" || test -z "$MPIRUN"],
    [AC_MSG_ERROR([mpicc/mpirun not found: install the Debian package openmpi-bin (and libopenmpi-dev)])])
])
