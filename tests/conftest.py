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
