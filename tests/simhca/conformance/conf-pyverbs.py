#!/usr/bin/python3
"""Run rdma-core's pyverbs test suite (as Debian ships it, gzipped, under /usr/share/doc/rdma-core/tests)
against whatever libibverbs the environment selects, and report in a form the conformance harness can use:
every failure and error, every skip WITH its reason (a skip caused by a feature the software HCA lacks is a
gap to close, not a pass), and the plain closing line "N passed, N failed, N skipped".

usage: conf-pyverbs.py WORKDIR [--dev simhca0] [--require-pass PATTERN ...] [MODULE ...]
  WORKDIR         scratch directory; the suite is unpacked into WORKDIR/tests
  MODULE          test modules to run (e.g. test_qpex); default: all of them
  --require-pass  a test id substring (e.g. test_qpex.QpExTestCase.test_qp_ex_rc_xrc_send) that must PASS;
                  skipped or missing counts as a failure. Used for the XRC tests once XRC works.
Exit status: 0 all ran tests passed (and every required one), 1 otherwise.
"""
import argparse
import collections
import gzip
import os
import shutil
import sys
import time
import unittest

SUITE = '/usr/share/doc/rdma-core/tests'


def unpack(workdir):
    """Copy the suite into WORKDIR/tests, gunzipping the .py.gz files Debian compresses."""
    dst = os.path.join(workdir, 'tests')
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for name in os.listdir(SUITE):
        src = os.path.join(SUITE, name)
        if name.endswith('.py.gz'):
            with gzip.open(src, 'rb') as f, open(os.path.join(dst, name[:-3]), 'wb') as out:
                out.write(f.read())
        elif name.endswith('.py'):
            shutil.copy(src, dst)
    return dst


class Recorder(unittest.TextTestResult):
    """TextTestResult that also remembers each outcome by test id."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcome = {}
        self.passed = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1
        self.outcome[test.id()] = 'pass'

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcome[test.id()] = 'skip'

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcome[test.id()] = 'fail'

    def addError(self, test, err):
        super().addError(test, err)
        self.outcome[test.id()] = 'error'

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcome[test.id()] = 'pass'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('workdir')
    ap.add_argument('--dev', default='simhca0')
    ap.add_argument('--require-pass', action='append', default=[])
    ap.add_argument('modules', nargs='*')
    opts = ap.parse_intermixed_args()

    testdir = unpack(opts.workdir)
    sys.path.insert(0, testdir)
    # The suite parses its own options from sys.argv (args_parser); give it only the device.
    sys.argv = [sys.argv[0], '--dev', opts.dev]
    from args_parser import parser  # noqa: E402 (needs sys.path)
    from importlib.machinery import SourceFileLoader
    tests = SourceFileLoader('tests', os.path.join(testdir, '__init__.py')).load_module()
    parser.parse_args()

    loader = unittest.TestLoader()
    if opts.modules:
        suite = loader.loadTestsFromNames(opts.modules, tests)
    else:
        suite = loader.loadTestsFromModule(tests)
    start = time.monotonic()
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=1, resultclass=Recorder)
    result = runner.run(suite)
    took = time.monotonic() - start

    reasons = collections.Counter(reason for _, reason in result.skipped)
    print('\n=== pyverbs: %d skipped, by reason ===' % len(result.skipped))
    for reason, count in reasons.most_common():
        print('  %4d  %s' % (count, reason.strip().replace('\n', ' ')[:200]))
    print('=== pyverbs: every skipped test ===')
    for test, reason in result.skipped:
        print('  SKIP %s: %s' % (test.id(), reason.strip().replace('\n', ' ')[:200]))

    bad = len(result.failures) + len(result.errors)
    for pattern in opts.require_pass:
        hits = {tid: o for tid, o in result.outcome.items() if pattern in tid}
        if not hits:
            print('REQUIRED-FAIL: no test matches %s' % pattern)
            bad += 1
        for tid, outcome in sorted(hits.items()):
            if outcome != 'pass':
                print('REQUIRED-FAIL: %s must pass, was %s' % (tid, outcome))
                bad += 1
    print('pyverbs: ran %d tests in %.0f s (%d failures, %d errors)'
          % (result.testsRun, took, len(result.failures), len(result.errors)))
    print('%d passed, %d failed, %d skipped' % (result.passed, bad, len(result.skipped)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
