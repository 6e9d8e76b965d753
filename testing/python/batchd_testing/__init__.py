"""Helpers shared by the Python tests, the benchmarks and the examples.

- :mod:`batchd_testing.daemon`: starts a batchd daemon process (the one
  Python launcher; testing/shell/batchd_daemon.sh is its shell twin and
  testing/daemon_process.h the C++ one).
- :mod:`batchd_testing.datasets`: finds a dataset's images the way the
  daemon does.

Put ``testing/python`` on ``sys.path`` (ctest's PYTHONPATH has it).
"""
