dnl SPDX-License-Identifier: BSD-3-Clause
dnl Open MPI headers that an installation's opal_config.h names but does not ship. Debian 13's libopenmpi-dev
dnl (Open MPI 5.0.x) lacks opal/mca/threads/pthreads/*.h: upstream installs them nowhere (noinst SOURCES), yet
dnl opal_config.h makes opal/mca/threads/mutex.h include them, so even opal/mca/btl/btl.h does not compile.
dnl They are taken from the matching Open MPI source at build time, never kept in this repository:
dnl   --with-ompi-headers-from=DIR  an unpacked Open MPI source tree of the same version
dnl   (default, Debian)             `apt-get source --download-only` of the package that owns opal_config.h,
dnl                                 at exactly its version (needs a deb-src line in the apt sources)
dnl The headers go to <builddir>/ompi-headers, which is put after Open MPI's own include dir; a later configure
dnl reuses them while the package version stays the same. Sets OMPI_CPPFLAGS and BTL_XRC_OMPI_HEADERS_NOTE.
AC_DEFUN([BTL_XRC_OMPI_MISSING_HEADERS], [
  AC_ARG_WITH([ompi-headers-from],
    [AS_HELP_STRING([--with-ompi-headers-from=DIR],
      [unpacked Open MPI source tree (same version) to take the headers from that the installation lacks
       (default on Debian: apt-get source of the installed package)])])
  _bx_cfg="$OMPI_INCDIR/opal_config.h"
  test -f "$_bx_cfg" || _bx_cfg="$OMPI_INCDIR/opal/include/opal_config.h"
  AC_MSG_CHECKING([for headers named by opal_config.h that are not installed])
  _bx_missing=""
  _bx_dirs=""
  _bx_globs=""
  for _bx_h in `sed -n 's/^#define MCA_@<:@A-Za-z_@:>@*_HEADER "\(..*\)"$/\1/p' "$_bx_cfg"`; do
    AS_IF([test -f "$OMPI_INCDIR/$_bx_h"], [], [
      _bx_missing="$_bx_missing $_bx_h"
      _bx_d=`dirname "$_bx_h"`
      AS_CASE([" $_bx_dirs "], [*" $_bx_d "*], [], [_bx_dirs="$_bx_dirs $_bx_d" _bx_globs="$_bx_globs $_bx_d/*.h"])])
  done
  AS_IF([test -z "$_bx_missing"], [AC_MSG_RESULT([none])], [
    AC_MSG_RESULT([$_bx_missing])
    _bx_shim="`pwd`/ompi-headers"
    AS_IF([test -n "$with_ompi_headers_from" && test "x$with_ompi_headers_from" != xno], [
      AC_MSG_NOTICE([taking the headers of$_bx_dirs from $with_ompi_headers_from])
      rm -rf "$_bx_shim"
      for _bx_d in $_bx_dirs; do
        AS_IF([ls "$with_ompi_headers_from/$_bx_d/"*.h >/dev/null 2>&1], [],
          [AC_MSG_ERROR([--with-ompi-headers-from=$with_ompi_headers_from has no $_bx_d/*.h])])
        AS_MKDIR_P(["$_bx_shim/$_bx_d"])
        cp "$with_ompi_headers_from/$_bx_d/"*.h "$_bx_shim/$_bx_d/"
      done
      BTL_XRC_OMPI_HEADERS_NOTE="${_bx_globs# } from $with_ompi_headers_from"
    ], [
      dnl The Debian package that owns opal_config.h, and its source package at the same version.
      _bx_owner=`dpkg-query -S "$_bx_cfg" 2>/dev/null | sed -n '1s/:.*//p'`
      _bx_src=""
      AS_IF([test -n "$_bx_owner"],
        [_bx_src=`dpkg-query -W -f='${source:Package}=${source:Version}' "$_bx_owner" 2>/dev/null`])
      AS_IF([test -z "$_bx_src"],
        [AC_MSG_ERROR([Open MPI's installed headers lack$_bx_missing, and no Debian package owns $_bx_cfg to fetch its source.
      Pass --with-ompi-headers-from=DIR, an unpacked source tree of the same Open MPI version.])])
      AS_IF([test "x`cat "$_bx_shim/.source" 2>/dev/null`" = "x$_bx_src"], [
        AC_MSG_NOTICE([reusing the headers of$_bx_dirs from $_bx_src's source in $_bx_shim])
      ], [
        AC_MSG_NOTICE([fetching Debian's source of $_bx_src (apt-get source --download-only) for$_bx_dirs])
        rm -rf "$_bx_shim" "$_bx_shim.download"
        AS_MKDIR_P(["$_bx_shim.download"])
        AS_IF([(cd "$_bx_shim.download" && apt-get source --download-only "$_bx_src") >&AS_MESSAGE_LOG_FD 2>&1], [],
          [rm -rf "$_bx_shim.download"
           AC_MSG_ERROR([apt-get source --download-only $_bx_src failed (see config.log). It needs a deb-src line
      for the release in the apt sources, e.g. in /etc/apt/sources.list:
          deb-src http://deb.debian.org/debian trixie main
      then apt-get update. Or pass --with-ompi-headers-from=DIR, an unpacked source of the same Open MPI version.])])
        _bx_orig=`ls "$_bx_shim.download"/*.orig.tar.* 2>/dev/null | head -1`
        AS_MKDIR_P(["$_bx_shim"])
        for _bx_d in $_bx_dirs; do
          AS_IF([test -n "$_bx_orig" &&
                 tar -xf "$_bx_orig" -C "$_bx_shim" --strip-components=1 --wildcards "*/$_bx_d/*.h"],
            [], [AC_MSG_ERROR([could not extract $_bx_d/*.h from ${_bx_orig:-the source package}])])
        done
        rm -rf "$_bx_shim.download"
        echo "$_bx_src" >"$_bx_shim/.source"
      ])
      BTL_XRC_OMPI_HEADERS_NOTE="${_bx_globs# } from Debian's source of $_bx_src, in $_bx_shim"
    ])
    for _bx_h in $_bx_missing; do
      AS_IF([test -f "$_bx_shim/$_bx_h"], [],
        [AC_MSG_ERROR([$_bx_h is still missing after taking$_bx_dirs from the source (a different Open MPI version?)])])
    done
    dnl after Open MPI's own include dir: only what it lacks comes from here
    OMPI_CPPFLAGS="$OMPI_CPPFLAGS -I$_bx_shim"
  ])
  AC_SUBST([BTL_XRC_OMPI_HEADERS_NOTE])
])
