#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
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
import fnmatch
import gzip
import json
import os
import shutil
import subprocess
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


def load_gaps(path):
    """(glob, reason) pairs from known-gaps.txt; see that file for the format."""
    gaps = []
    if path and os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line and not line.startswith('#') and '|' in line:
                pattern, why = line.split('|', 1)
                gaps.append((pattern.strip(), why.strip()))
    return gaps


def run_one(workdir, dev, module):
    """Child mode: run one test module, print its outcomes as one JSON line (the parent aggregates)."""
    testdir = os.path.join(workdir, 'tests')
    sys.path.insert(0, testdir)
    # The suite parses its own options from sys.argv (args_parser); give it only the device.
    sys.argv = [sys.argv[0], '--dev', dev]
    from args_parser import parser  # noqa: E402 (needs sys.path)
    from importlib.machinery import SourceFileLoader
    tests = SourceFileLoader('tests', os.path.join(testdir, '__init__.py')).load_module()
    parser.parse_args()
    suite = unittest.TestLoader().loadTestsFromNames([module], tests)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=Recorder)
    result = runner.run(suite)
    sys.stdout.flush()
    print('@@RESULT ' + json.dumps({
        'outcome': result.outcome,
        'skipped': [(t.id(), r) for t, r in result.skipped],
    }))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('workdir')
    ap.add_argument('--dev', default='simhca0')
    ap.add_argument('--require-pass', action='append', default=[])
    ap.add_argument('--one', help=argparse.SUPPRESS)  # child mode
    ap.add_argument('--module-timeout', type=int, default=600)
    ap.add_argument('--known-gaps', help='known-gaps.txt: failures matching it are reported, not counted')
    ap.add_argument('modules', nargs='*')
    opts = ap.parse_intermixed_args()
    if opts.one:
        return run_one(opts.workdir, opts.dev, opts.one)

    testdir = unpack(opts.workdir)
    modules = opts.modules or sorted(f[:-3] for f in os.listdir(testdir)
                                     if f.startswith('test_') and f.endswith('.py'))
    # One process per module: a crash (the library under test may segfault) costs that module only,
    # and is reported as such instead of losing the whole report.
    outcome, skipped, crashed = {}, [], []
    start = time.monotonic()
    for module in modules:
        t0 = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, '-u', os.path.abspath(__file__), opts.workdir, '--dev', opts.dev,
                                   '--one', module], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=opts.module_timeout, text=True, errors='replace')
            out, rc = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b'').decode(errors='replace') if isinstance(e.stdout, bytes) else (e.stdout or ''), 'timeout'
        lines = out.splitlines()
        res = [l for l in lines if l.startswith('@@RESULT ')]
        if res:
            data = json.loads(res[-1][len('@@RESULT '):])
            outcome.update(data['outcome'])
            skipped += data['skipped']
        else:
            crashed.append(module)
            why = 'timed out after %d s' % opts.module_timeout if rc == 'timeout' else \
                ('killed by signal %d' % -rc if isinstance(rc, int) and rc < 0 else 'exit status %s' % rc)
            print('CRASH: %s %s; last test started and output:' % (module, why))
            for l in lines[-15:]:
                print('  | ' + l)
        # Failures and errors with their tracebacks (unittest prints them after a line of '=').
        body = '\n'.join(l for l in lines if not l.startswith('@@RESULT '))
        if '\nFAIL: ' in body or '\nERROR: ' in body:
            i = body.find('\n' + '=' * 70)
            print(body[i:].split('\n' + '-' * 70 + '\nRan ')[0] if i >= 0 else body[-3000:])
        counts = collections.Counter(o for tid, o in outcome.items() if tid.split('.')[1] == module)
        print('module %-28s %3d pass %3d skip %3d fail/error %5.1f s%s' % (
            module, counts['pass'], counts['skip'], counts['fail'] + counts['error'], time.monotonic() - t0,
            '  CRASHED' if module in crashed else ''), flush=True)
    took = time.monotonic() - start

    reasons = collections.Counter(reason for _, reason in skipped)
    print('\n=== pyverbs: %d skipped, by reason ===' % len(skipped))
    for reason, count in reasons.most_common():
        print('  %4d  %s' % (count, reason.strip().replace('\n', ' ')[:200]))
    print('=== pyverbs: every skipped test ===')
    for tid, reason in skipped:
        print('  SKIP %s: %s' % (tid, reason.strip().replace('\n', ' ')[:200]))

    gaps = load_gaps(opts.known_gaps)

    def gap(name):
        return next((why for pat, why in gaps if fnmatch.fnmatchcase(name, pat)), None)

    failed = known = 0
    for tid, o in sorted(outcome.items()):
        if o in ('fail', 'error') or (o == 'pass' and gap(tid)):
            why = gap(tid)
            if o == 'pass':
                print('now passes, remove it from known-gaps.txt: %s (%s)' % (tid, why))
            elif why:
                print('KNOWN-GAP: %s %s (%s)' % (tid, o, why))
                known += 1
            else:
                failed += 1
    for module in crashed:
        why = gap('module:' + module)
        if why:
            print('KNOWN-GAP: module %s crashed (%s)' % (module, why))
            known += 1
        else:
            failed += 1
    for pattern in opts.require_pass:
        hits = {tid: o for tid, o in outcome.items() if pattern in tid}
        if not hits:
            module = pattern.split('.')[0]
            if module in crashed and gap('module:' + module):
                print('KNOWN-GAP: required %s did not run (module %s crashed, a known gap)' % (pattern, module))
                continue
            print('REQUIRED-FAIL: no test result matches %s' % pattern)
            failed += 1
        for tid, o in sorted(hits.items()):
            if o != 'pass':
                print('REQUIRED-FAIL: %s must pass, was %s' % (tid, o))
                failed += 1
    passed = sum(1 for o in outcome.values() if o == 'pass')
    print('pyverbs: %d modules in %.0f s, %d crashed' % (len(modules), took, len(crashed)))
    print('pyverbs: %d known gaps (failed as expected, see known-gaps.txt)' % known)
    print('%d passed, %d failed, %d skipped' % (passed, failed, len(skipped)))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
