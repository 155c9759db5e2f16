"""Test-suite setup: never pick up zoo plugins that happen to be installed on the machine (tests that
need a third-party plugin install and enable it on purpose), and keep torch deterministic and small."""
import os

os.environ["ZOO_DISABLE_PLUGIN_AUTOLOAD"] = "1"
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import pytest  # noqa: E402
import torch  # noqa: E402

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
