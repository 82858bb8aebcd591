"""Hub ids resolve through a locally populated HF cache (HF_HOME, HF_HUB_OFFLINE); no network."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

import flodl.hf as fh
from flodl.hf import parity

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def populate_cache(hf_home, repo_id, source, commit=COMMIT):
    """Lay out ``source``'s files as huggingface_hub stores a downloaded snapshot."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for f in source.iterdir():
        shutil.copy(f, snapshot / f.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture
def offline_home(tmp_path, monkeypatch):
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def test_hub_id_from_the_cache(offline_home, tmp_path):
    parity.make_reference("distilbert", "qa", tmp_path / "src")
    populate_cache(offline_home, "tiny-org/tiny-distilbert-qa", tmp_path / "src")
    model = fh.AutoModelForQuestionAnswering.from_pretrained("tiny-org/tiny-distilbert-qa")
    local = fh.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "src")
    ids = parity.sample_inputs()["input_ids"]
    assert isinstance(model, fh.DistilBertForQuestionAnswering)
    assert all(torch.equal(a, b) for a, b in zip(model(ids), local(ids), strict=True))
    assert model.load_report.source == "tiny-org/tiny-distilbert-qa"
    pinned = fh.AutoModelForQuestionAnswering.from_pretrained(
        "tiny-org/tiny-distilbert-qa", revision=COMMIT
    )
    assert torch.equal(pinned(ids)[0], model(ids)[0])


def test_offline_and_not_cached_names_the_id_and_the_cache(offline_home):
    with pytest.raises(fh.HfHubError) as err:
        fh.AutoModel.from_pretrained("nobody/not-cached")
    message = str(err.value)
    assert "'nobody/not-cached'" in message
    assert str(offline_home / "hub") in message and "HF_HUB_OFFLINE" in message


def test_a_path_that_is_not_a_directory(tmp_path):
    with pytest.raises(fh.HfHubError, match="not a model directory"):
        fh.AutoModel.from_pretrained(tmp_path / "missing" / "dir")


def test_sharded_hub_checkpoint_from_the_cache(offline_home, tmp_path):
    reference = parity.make_reference("albert", "seqcls", tmp_path / "one")
    reference.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    populate_cache(offline_home, "tiny-org/sharded-albert", tmp_path / "sharded")
    model = fh.AutoModelForSequenceClassification.from_pretrained("tiny-org/sharded-albert")
    ids = parity.sample_inputs()["input_ids"]
    whole = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path / "one")
    assert torch.equal(model(ids), whole(ids))


def test_a_hub_ids_tokenizer_config_is_carried_to_the_export(offline_home, tmp_path):
    parity.make_reference("bert", "seqcls", tmp_path / "src")
    (tmp_path / "src" / "tokenizer_config.json").write_text('{"model_max_length": 16}')
    populate_cache(offline_home, "tiny-org/with-tokenizer-config", tmp_path / "src")
    model = fh.AutoModelForSequenceClassification.from_pretrained("tiny-org/with-tokenizer-config")
    out = model.save_pretrained(tmp_path / "out")
    assert (out / "tokenizer_config.json").read_text() == '{"model_max_length": 16}'


# ----------------------------------------------------------------- a hub that cannot be reached
# huggingface_hub reads HF_ENDPOINT when imported: each case runs in a process of its own.
_LOAD = """
import json, sys, time
import flodl.hf as fh
out = {}
for repo in sys.argv[1:]:
    start = time.monotonic()
    try:
        fh.AutoModel.from_pretrained(repo)
        out[repo] = "ok"
    except fh.HfHubError as err:
        out[repo] = str(err)
    out[repo + " seconds"] = time.monotonic() - start
print(json.dumps(out))
"""


def _online_env(home, endpoint):
    """The environment of a process that may use the network (no HF_HUB_OFFLINE), whose hub is
    ``endpoint``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    root = str(Path(__file__).resolve().parents[2])
    env.update(HF_HOME=str(home), HF_HUB_CACHE=str(Path(home) / "hub"), HF_ENDPOINT=endpoint,
               HF_HUB_DISABLE_TELEMETRY="1",
               PYTHONPATH=os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")])))  # fmt: skip
    return env


class _Down(BaseHTTPRequestHandler):
    """A hub that answers every request 503 (down), and counts them."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _down(self):
        self.server.requests.append((self.command, self.path))  # type: ignore[attr-defined]
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _down


@pytest.fixture
def hub_down():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Down)
    httpd.daemon_threads = True
    httpd.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_an_unreachable_hub_is_asked_once_then_the_cache_is_read(hub_down, tmp_path):
    # no tokenizer.json / tokenizer_config.json in the cache: huggingface_hub alone retries each
    # absent file for ~20 s when the hub does not answer
    parity.make_reference("bert", "base", tmp_path / "src")
    populate_cache(tmp_path / "home", "tiny-org/cached", tmp_path / "src")
    endpoint = f"http://127.0.0.1:{hub_down.server_address[1]}"
    result = subprocess.run(
        [sys.executable, "-c", _LOAD, "tiny-org/cached", "tiny-org/not-cached"],
        env=_online_env(tmp_path / "home", endpoint),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["tiny-org/cached"] == "ok"
    assert "could not be reached" in result.stderr  # the warning says the cache was read
    message = out["tiny-org/not-cached"]
    assert "the hub could not be reached" in message and "503" in message
    assert "HF_HUB_OFFLINE" not in message  # not set: not suggested
    assert str(tmp_path / "home" / "hub") in message
    assert len(hub_down.requests) == 2, hub_down.requests  # one per model, no retries
    assert out["tiny-org/cached seconds"] < 10 and out["tiny-org/not-cached seconds"] < 10


@pytest.mark.slow
def test_export_with_no_network_names_the_connection_failure(run_fdl, tmp_path):
    parity.make_reference("bert", "seqcls", tmp_path / "src")
    populate_cache(tmp_path / "home", "tiny-org/cached", tmp_path / "src")
    env = _online_env(tmp_path / "home", f"http://127.0.0.1:{_closed_port()}")
    env.update(HF_HUB_OFFLINE="0", TRANSFORMERS_OFFLINE="0")  # run_fdl adds to os.environ
    cached = run_fdl("hf", "export", "tiny-org/cached", str(tmp_path / "out"), env=env, timeout=60)
    assert cached.returncode == 0, cached.stderr
    assert (tmp_path / "out" / "model.safetensors").is_file()
    missing = run_fdl("hf", "export", "tiny-org/nope", str(tmp_path / "o2"), env=env, timeout=60)
    assert missing.returncode == 3
    assert "the hub could not be reached" in missing.stderr
    assert "HF_HUB_OFFLINE" not in missing.stderr
