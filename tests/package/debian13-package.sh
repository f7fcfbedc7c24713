#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The Debian packages on Debian 13 (trixie, Open MPI 5.0): the same cycle as debian-package.sh on Debian 12, in
# trixie roots (scripts/debroot's cache): built from this checkout, installed with apt into a fresh root, used by a
# plain mpirun (no variable, no option naming the component's directory), purged without a trace.
# Run alone (make -C build/tests/package debian13) it builds the packages through ccache with a cache kept on the
# host (debian-package.sh, DEBIAN_PACKAGE_CCACHE); scripts/check-debian13 gives it those of its own build instead
# (DEBIAN_PACKAGE_DEBS).
exec env DEBIAN_PACKAGE_SUITE=trixie \
    DEBIAN_PACKAGE_CCACHE="${DEBIAN_PACKAGE_CCACHE-/var/cache/btl-xrc/debian-package/ccache-trixie}" \
    bash "$(dirname "$0")/debian-package.sh" "$@"
