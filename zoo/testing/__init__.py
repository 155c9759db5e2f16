"""``zoo.testing``: the conformance kit every component — built-in or from a plugin — must pass.

Three ways to run it:

- ``zoo verify [NAME...]`` prints a pass / fail table with the measured errors;
- :func:`verify` returns the same rows as :class:`CheckResult` objects;
- in a plugin's own test suite, through the ``zoo`` pytest plugin (installed with zoo)::

      import zoo.testing
      test_zoo_conformance = zoo.testing.conformance_test(plugin="linear_attention")

  which runs one test per (component, check, architecture).

The checks are listed in :mod:`zoo.testing.kit`.
"""
from .kit import (ARCHS, CHECKS, BoundCase, Case, CheckResult, Kit, conformance_test, format_table,
                  kit_registry, run_checks, using_registry, verify)

__all__ = ["ARCHS", "CHECKS", "BoundCase", "Case", "CheckResult", "Kit", "conformance_test",
           "format_table", "kit_registry", "run_checks", "using_registry", "verify"]
