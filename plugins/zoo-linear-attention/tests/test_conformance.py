"""zoo's conformance kit over this plugin's components: the one line every plugin should have.

It runs one test per (component, check, architecture) — build, forward/backward, bfloat16, causality,
padding, KV cache, save/load, ... — through the ``zoo`` pytest plugin that ships with zoo.
"""
import zoo.testing

test_zoo_conformance = zoo.testing.conformance_test(plugin="linear_attention")
