"""The UI through its HTTP API (gradio_client), as a remote user would drive it: a real server on
127.0.0.1, real queue, real concurrency limits.  Includes the load test: 8 concurrent clients
generating from a checkpoint all succeed while the server stays responsive."""
from __future__ import annotations

import threading
import time
import urllib.request

import pytest

gr = pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")

import zoo  # noqa: E402

from ui_support import run_checkpoint_name, serve_with_checkpoints  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve_with_checkpoints(tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return gradio_client.Client(server, verbose=False)


def test_only_the_documented_endpoints_are_public(client):
    names = set(client.view_api(return_format="dict", print_info=False)["named_endpoints"])
    assert names == {"/load_preset", "/validate", "/save", "/model_card", "/run", "/inspect", "/calculate",
                     "/compare", "/verify", "/verify_kit"}


def test_run_generates_the_same_text_as_the_library(client):
    name = run_checkpoint_name()
    text, fills = client.predict(name, "床前", 0, 0, 1, 12, 0, api_name="/run")
    model = zoo.load(name) if name != "ui_gpt" else zoo.load(zoo.io.checkpoint.resolve_checkpoint("ui_gpt"))
    assert text == model.generate("床前", 12)


def test_validation_and_save_through_the_api(client):
    yaml_text = client.predict("gpt_tiny", api_name="/load_preset")[0]
    status = client.predict(yaml_text.replace("attention: sdpa", "attention: sdpx"), api_name="/validate")[0]
    assert "attention.kind" in status and "sdpa" in status
    msg = client.predict(yaml_text.replace("num_layers: 4", "num_layers: 1"), "api_model", 0, api_name="/save")
    assert "api_model" in msg
    card = client.predict("api_model", api_name="/model_card")
    assert "decoder" in card and "1 ×" in card


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "ui_gpt/../../x"])
def test_paths_are_refused_with_a_message(client, name):
    with pytest.raises(Exception) as info:
        client.predict(name, "hello", 0, 0, 1, 4, 0, api_name="/run")
    msg = str(info.value)
    assert "checkpoint" in msg and "root:" not in msg and "Traceback" not in msg
    with pytest.raises(Exception):
        client.predict(yaml_text_ok(), name, 0, api_name="/save")


def yaml_text_ok() -> str:
    return zoo.spec("gpt_tiny").to_yaml()


def test_limits_are_enforced_server_side(client):
    with pytest.raises(Exception, match="maximum|max_new_tokens"):
        client.predict("ui_gpt", "hi", 0, 0, 1, 100_000, 0, api_name="/run")
    status = client.predict(yaml_text_ok().replace("num_layers: 4", "num_layers: 1000"), api_name="/validate")[0]
    assert "num_layers" in status and "limit" in status


def test_calculator_and_compare_through_the_api(client):
    from zoo.ui.inspect_tab import SEED_K, SEED_Q, SEED_V, mask_table

    out = client.predict({"headers": ["1", "2"], "data": SEED_Q}, {"headers": ["1", "2"], "data": SEED_K},
                         {"headers": ["1", "2"], "data": SEED_V},
                         {"headers": ["1", "2", "3"], "data": mask_table("none", 3)}, api_name="/calculate")
    weights = out[3]["data"][0]
    assert [round(float(x), 4) for x in weights] == [0.4011, 0.1978, 0.4011]
    assert "6.0165" in out[5] and "3.9835" in out[5]
    rows = client.predict("preset: gpt_tiny", "", "preset: gpt_tiny", "attention: eager", 8, "",
                          api_name="/compare")[0]
    assert rows[5][1] == "—" and float(rows[5][2]) < 1e-4  # the difference once, under B


def test_inspect_through_the_api(client):
    """The API returns the attention data (the page draws it); the weights are the model's."""
    r = client.predict("ui_bert", "床前明月光", "encoder", 1, 2, api_name="/inspect")
    assert r["tokens"] == list("床前明月光") and r["next"] == ""  # an encoder predicts no next token
    model = zoo.load(zoo.io.checkpoint.resolve_checkpoint("ui_bert"))
    want = zoo.trace(model, text="床前明月光")["encoder.blocks.1.attn.weights"][0, 2]
    assert max(abs(a - float(b)) for ra, rb in zip(r["weights"], want) for a, b in zip(ra, rb)) < 1e-4
    assert len(r["attention"]["w"]) == 2 and len(r["attention"]["w"][0]) == 4  # layers x heads
    r = client.predict("ui_gpt", "abc", "decoder", 1, 3, api_name="/inspect")
    assert r["weights"][0][1:] == [0.0, 0.0] and r["next"]  # causal; a decoder predicts the next byte
    with pytest.raises(Exception, match="layer 9"):
        client.predict("ui_gpt", "abc", "decoder", 9, 0, api_name="/inspect")


@pytest.mark.slow
def test_eight_concurrent_clients_all_succeed_and_the_server_stays_responsive(server):
    name = run_checkpoint_name()
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def user(i: int):
        try:
            c = gradio_client.Client(server, verbose=False)
            prompt = "床前" + "明月光疑是地上霜"[i]  # each user its own prompt, in the model's alphabet
            text, _ = c.predict(name, prompt, 0.8, 20, 0.95, 48, i, api_name="/run")
            results[i] = text
        except BaseException as exc:  # noqa: BLE001 - collected and reported below
            errors.append(exc)

    threads = [threading.Thread(target=user, args=(i,)) for i in range(8)]
    start = time.perf_counter()
    for th in threads:
        th.start()
    # while eight generations are queued or running, the page and a cheap call still answer
    time.sleep(0.5)
    t0 = time.perf_counter()
    with urllib.request.urlopen(server, timeout=30) as resp:
        assert resp.status == 200
    page_s = time.perf_counter() - t0
    for th in threads:
        th.join(timeout=300)
    total = time.perf_counter() - start
    assert not errors, errors
    assert sorted(results) == list(range(8)) and all(isinstance(v, str) for v in results.values())
    # different seeds sample different continuations (the requests did not get mixed up)
    assert len(set(results.values())) > 1
    assert page_s < 10, f"the page took {page_s:.1f} s under load"
    print(f"\n8 concurrent generations of 48 tokens: {total:.1f} s; page under load {page_s * 1000:.0f} ms")


def test_importing_the_ui_is_light():
    import subprocess
    import sys

    code = ("import sys, zoo, zoo.ui.app, zoo.ui.common, zoo.ui.i18n; "
            "heavy = [m for m in ('gradio', 'matplotlib', 'transformers') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.slow
def test_zoo_ui_command_serves_on_localhost(tmp_path):
    """The README's main job: `zoo ui` starts the app on 127.0.0.1 (here on a free port)."""
    import os
    import subprocess
    import sys

    from ui_support import free_port

    port = free_port()
    env = {**os.environ, "ZOO_RUNS": str(tmp_path / "runs"), "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen([sys.executable, "-m", "zoo.cli", "ui", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                    assert resp.status == 200 and b"gradio" in resp.read().lower()
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise AssertionError(f"zoo ui did not start:\n{proc.stdout.read() if proc.stdout else ''}")
                time.sleep(1)
        c = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        assert "Valid" in c.predict(zoo.spec("gpt_tiny").to_yaml(), api_name="/validate")[0]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
