"""Test-suite setup: never pick up zoo plugins that happen to be installed on the machine (tests that
need a third-party plugin install and enable it on purpose), keep torch deterministic and small, and
offer the fast lane.

The tests mirror the engine's wings (``tests/model/``, ``tests/run/``, ...; ``docs/ARCHITECTURE.md``).
The shared helpers (``helpers.py``, ``convert_cases.py``, ``tl_support.py``, ``ui_support.py``,
``hostile_corpus.py``) stay here in ``tests/`` and every folder is on ``sys.path``, so a test
imports them -- and a sibling's helpers (``from test_chat import fixture``) -- by name.

**The fast lane** (``python3 -m pytest --lane fast``, about 2-3 minutes on 2 cores) runs the files
of :data:`FAST_LANE`, each wing's core behaviour, without ``slow`` and ``browser`` tests; files
outside it are not even imported.  The full suite (``python3 -m pytest``) is what CI runs.
"""
import os
import sys
from pathlib import Path

os.environ["ZOO_DISABLE_PLUGIN_AUTOLOAD"] = "1"
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import pytest  # noqa: E402
import torch  # noqa: E402

TESTS = Path(__file__).resolve().parent
for _folder in [TESTS, *sorted(p for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").exists() is False
                               and any(p.glob("test_*.py")))]:
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

#: The fast lane: per wing, the files that hold its core behaviour and run in seconds.  A developer
#: runs it after every change (``python3 -m pytest --lane fast``); CI runs everything.
FAST_LANE = {
    "core": ("test_architecture", "test_registry"),
    "model": ("test_spec", "test_models", "test_attention", "test_known_values", "test_resolved_stack",
              "test_torch_reference", "test_modern_components", "test_state_dict_keys", "test_assembly",
              "test_attention_mla", "test_kernels"),
    "io": ("test_io", "test_loader", "test_tokenizers"),
    "run": ("test_generate", "test_beam", "test_chat", "test_generation_options", "test_generation_health",
            "test_generate_compaction", "test_int4", "test_precision_quality", "test_pipelines"),
    "inside": ("test_hooks", "test_trace", "test_lens", "test_patching", "test_costs_plots"),
    "guard": ("test_trust_paths", "test_trust_arguments", "test_trust_numeric", "test_trust_integrity",
              "test_trust_tokenizer_files", "test_outputs", "test_run_budget", "test_hostile",
              "test_transaction", "test_process_budget", "test_sandbox"),
    "convert": ("test_convert", "test_convert_parts", "test_convert_hardening", "test_convert_presets",
                "test_gguf"),
    "train": ("test_train", "test_train_state_typed", "test_train_health", "test_numerals"),
    "experiment": ("test_experiment_spec", "test_experiment_stats", "test_task_generators"),
    "ui": ("test_ui_handlers", "test_ui_switch", "test_ui_paths", "test_ui_budget", "test_ui_messages"),
    "docs": ("test_catalogue_docs", "test_plugin_guide"),
}
LANES = ("full", "fast")


def pytest_addoption(parser):
    parser.addoption("--lane", choices=LANES, default="full",
                     help="fast: each wing's core tests (tests/conftest.py FAST_LANE), no slow or browser "
                          "tests, in about 2-3 minutes; full (default): everything, as CI runs it")


def pytest_sessionstart(session):
    """One line before collection: ``pytest -q`` otherwise prints nothing while it imports the
    suite's references (transformers, TransformerLens, Gradio, ...), which a newcomer watched for four
    silent minutes on a fresh machine (issue 34)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or hasattr(session.config, "workerinput"):
        return
    lane = session.config.getoption("--lane")
    reporter.write_line(f"zoo: collecting the {lane} suite -- its references (transformers, TransformerLens, "
                        "Gradio) are imported first, so the first results can take a few minutes on a fresh "
                        "machine; then a mark per test")


def _in_fast_lane(path: Path) -> bool:
    rel = path.resolve().relative_to(TESTS)
    return len(rel.parts) == 2 and rel.stem in FAST_LANE.get(rel.parts[0], ())


def pytest_ignore_collect(collection_path, config):
    if config.getoption("--lane") != "fast" or collection_path.suffix != ".py" \
            or not collection_path.name.startswith("test_"):
        return None
    try:
        return not _in_fast_lane(collection_path)
    except ValueError:  # a path outside tests/ (a plugin package's own tests): not in the lane
        return True

# One intra-op thread: the suite's tensors are tiny, and on a busy 2-core box two OpenMP threads spin
# on each other (a small training step went from 0.7 s to 10-20 s); subprocess tests add their own.
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models train fastest on one thread; on a busy machine two OpenMP threads spin-wait for
    each other and a step can take 10x longer.  A module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def pytest_collection_modifyitems(config, items):
    if config.getoption("--lane") == "fast":
        slow = [i for i in items if "slow" in i.keywords or "browser" in i.keywords]
        if slow:
            config.hook.pytest_deselected(items=slow)
            gone = set(map(id, slow))
            items[:] = [i for i in items if id(i) not in gone]
    if os.environ.get("ZOO_FORK_FRESH") != "1":
        fresh = pytest.mark.skip(reason="forks: runs in a fresh interpreter (tests/guard/test_forks_fresh.py)")
        for item in items:
            if "forks" in item.keywords:
                item.add_marker(fresh)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# A C++ thread still joinable at interpreter exit (seen once after the UI tests ran together: every
# test passed, then "terminate called without an active exception" and exit code 134) must not turn
# a green run red.  After pytest has printed its summary, leave through os._exit with pytest's own
# exit status; ZOO_TEST_PLAIN_EXIT=1 keeps the ordinary interpreter shutdown (to chase such a thread).
_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS.append(int(exitstatus))


def pytest_unconfigure(config):
    if _EXIT_STATUS and os.environ.get("ZOO_TEST_PLAIN_EXIT") != "1" \
            and not hasattr(config, "workerinput"):
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])
