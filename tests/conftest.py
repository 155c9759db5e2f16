"""Test-suite setup: never pick up zoo plugins that happen to be installed on the machine (tests that
need a third-party plugin install and enable it on purpose), and keep torch deterministic and small."""
import os

os.environ["ZOO_DISABLE_PLUGIN_AUTOLOAD"] = "1"
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


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
