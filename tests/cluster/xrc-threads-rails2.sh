#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# xrc-threads.sh on two rails (XRC_TEST_RAILS=2, tests/cluster/xrc-common.sh: one device with two ports, a module
# per rail, failover on by default): every thread's traffic spread over both rails. Not in make check's list; the
# ThreadSanitizer leg of scripts/check runs it (make check TESTS=xrc-threads-rails2.sh).
XRC_TEST_RAILS=2 exec bash "$(dirname "$0")/xrc-threads.sh" "$@"
