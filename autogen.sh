#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Regenerate the build system (configure, Makefile.in). Run once after a fresh clone.
set -e
cd "$(dirname "$0")"
mkdir -p config/aux
autoreconf --force --install --verbose >/dev/null
echo "autogen.sh: done; now ./configure && make"
