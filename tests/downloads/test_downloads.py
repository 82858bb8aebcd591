"""The download engine against a real loopback server: resume, restarts, failures."""

from __future__ import annotations

import json
import os

import pytest

from fdl.downloads import download
from fdl.downloads.engine import DownloadError
from tests.fixtures.loopback import sha256

BODY = os.urandom(3 * (1 << 20) + 12345)  # a few chunks, not a multiple of the chunk size


def test_plain_download(server, tmp_path):
    server.add("/f.bin", BODY)
    result = download(f"{server.url}/f.bin", tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == BODY
    assert result.sha256 == sha256(BODY) and result.size == len(BODY)
    assert not list(tmp_path.glob("*.part*"))  # nothing left behind


def test_dropped_connection_resumes_only_the_missing_bytes(server, tmp_path):
    server.add("/f.bin", BODY, drop_after=1_000_000, drops_left=1)
    with pytest.raises(DownloadError, match="re-run the command to resume"):
        download(f"{server.url}/f.bin", tmp_path / "f.bin", retries=0, progress=False)
    part = tmp_path / "f.bin.part"
    kept = part.stat().st_size
    assert kept == 1_000_000  # every byte received before the drop is kept
    assert not (tmp_path / "f.bin").exists()

    result = download(f"{server.url}/f.bin", tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == BODY and result.sha256 == sha256(BODY)
    assert result.resumed_from == kept
    assert result.transferred == len(BODY) - kept  # only the missing bytes
    last = server.gets("/f.bin")[-1]
    assert last["Range"] == f"bytes={kept}-" and last["If-Range"] == '"v1"'


def test_retries_resume_within_one_call(server, tmp_path):
    server.add("/f.bin", BODY, drop_after=500_000, drops_left=2)
    result = download(f"{server.url}/f.bin", tmp_path / "f.bin", backoff=0, progress=False)
    assert result.sha256 == sha256(BODY)
    ranges = [h.get("Range") for h in server.gets("/f.bin")]
    assert len(ranges) == 3 and ranges[0] is None
    assert all(r and r.startswith("bytes=") for r in ranges[1:])


def test_server_without_range_support_restarts_cleanly(server, tmp_path):
    served = server.add("/f.bin", BODY, ranges=False, drop_after=700_000, drops_left=1)
    with pytest.raises(DownloadError):
        download(f"{server.url}/f.bin", tmp_path / "f.bin", retries=0, progress=False)
    assert served.drops_left == 0
    result = download(f"{server.url}/f.bin", tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == BODY  # 200 → rewritten, not appended
    assert result.transferred == len(BODY)


def test_changed_file_on_the_server_is_not_spliced(server, tmp_path):
    server.add("/f.bin", BODY, drop_after=800_000, drops_left=1)
    with pytest.raises(DownloadError):
        download(f"{server.url}/f.bin", tmp_path / "f.bin", retries=0, progress=False)
    new = os.urandom(len(BODY))
    server.add("/f.bin", new, etag='"v2"')  # If-Range "v1" no longer matches → full 200
    download(f"{server.url}/f.bin", tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == new


def test_complete_part_gets_416_and_is_accepted(server, tmp_path):
    server.add("/f.bin", BODY)
    dest = tmp_path / "f.bin"
    download(f"{server.url}/f.bin", dest, progress=False)
    dest.rename(tmp_path / "f.bin.part")
    (tmp_path / "f.bin.part.json").write_text(json.dumps({"total": len(BODY), "validator": '"v1"'}))
    result = download(f"{server.url}/f.bin", dest, progress=False)
    assert result.transferred == 0 and dest.read_bytes() == BODY


def test_404_is_a_clear_error_and_leaves_nothing(server, tmp_path):
    with pytest.raises(DownloadError, match=r"does not exist on the server \(404\)") as err:
        download(f"{server.url}/missing.zip", tmp_path / "m.zip", progress=False)
    assert err.value.code == 3
    assert not (tmp_path / "m.zip").exists()


def test_sha256_mismatch_deletes_the_part(server, tmp_path):
    server.add("/f.bin", BODY)
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        download(
            f"{server.url}/f.bin", tmp_path / "f.bin", expected_sha256="0" * 64, progress=False
        )
    assert list(tmp_path.iterdir()) == []


def test_pinned_sha256_that_matches(server, tmp_path):
    server.add("/f.bin", BODY)
    result = download(
        f"{server.url}/f.bin", tmp_path / "f.bin", expected_sha256=sha256(BODY), progress=False
    )
    assert result.sha256 == sha256(BODY)


def test_unreachable_server_fails_after_retries(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError, match=r"failed after 2 attempts.*check the network"):
        download(f"http://127.0.0.1:{port}/x", tmp_path / "x", retries=1, backoff=0, progress=False)


def test_an_unreachable_server_is_given_up_on_within_the_stall_timeout(tmp_path):
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on: every attempt is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(DownloadError) as err:  # 4 retries with backoff 1 s would take 15 s
        download(f"http://127.0.0.1:{port}/x", tmp_path / "x", stall_timeout=1.5, progress=False)
    elapsed = time.monotonic() - started
    assert 1.4 < elapsed < 4, elapsed
    assert "without data (stall timeout 1.5 s)" in str(err.value) and err.value.code == 3


def test_not_enough_disk_space_is_refused_before_writing(server, tmp_path):
    server.add("/huge.bin", b"x" * 1000, announce_length=1 << 60)  # an exabyte
    with pytest.raises(DownloadError, match="not enough disk space") as err:
        download(f"{server.url}/huge.bin", tmp_path / "huge.bin", retries=0, progress=False)
    assert err.value.code == 3
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing left behind


def test_ctrl_c_leaves_a_resumable_part(server, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import clean_env

    served = server.add("/f.bin", BODY, stall_after=600_000)
    dest = tmp_path / "f.bin"
    code = (
        "import sys\nfrom fdl.downloads import download\n"
        "try:\n    download(sys.argv[1], sys.argv[2], progress=False)\n"
        "except KeyboardInterrupt:\n    sys.exit(130)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, f"{server.url}/f.bin", str(dest)],
        env=clean_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    part = tmp_path / "f.bin.part"
    for _ in range(200):  # wait (bounded) until everything before the stall is on disk
        if part.exists() and part.stat().st_size == 600_000:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "kept, re-run to resume" in err
    kept = part.stat().st_size
    assert kept == 600_000  # nothing received is lost to the interrupt

    served.stall_after = None
    result = download(f"{server.url}/f.bin", dest, progress=False)
    assert dest.read_bytes() == BODY and result.resumed_from == kept


def test_content_encoded_body_is_decoded(server, tmp_path):
    import gzip

    encoded = gzip.compress(BODY)
    server.add("/f.bin", encoded, content_encoding="gzip")
    result = download(f"{server.url}/f.bin", tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == BODY  # the decoded bytes are the file
    assert result.sha256 == sha256(BODY) and result.size == len(BODY)
    assert result.transferred == len(encoded)  # what crossed the network
    assert server.gets("/f.bin")[0]["Accept-Encoding"] == "identity"
    assert not list(tmp_path.glob("*.part*"))


def test_interrupted_encoded_download_starts_over_instead_of_splicing(server, tmp_path):
    import gzip

    encoded = gzip.compress(BODY, compresslevel=1)
    server.add("/f.bin", encoded, content_encoding="gzip", drop_after=len(encoded) // 2)
    server.state.files["/f.bin"].drops_left = 1
    with pytest.raises(DownloadError, match="re-run the command to resume"):
        download(f"{server.url}/f.bin", tmp_path / "f.bin", retries=0, progress=False)
    assert (tmp_path / "f.bin.part").stat().st_size > 0  # decoded bytes, kept
    result = download(f"{server.url}/f.bin", tmp_path / "f.bin", progress=False)
    assert (tmp_path / "f.bin").read_bytes() == BODY and result.sha256 == sha256(BODY)
    assert result.resumed_from == 0  # a decoded prefix has no byte offset in the encoded body
    assert "Range" not in server.gets("/f.bin")[-1]


def test_encoded_answer_to_a_range_request_is_not_spliced(server, tmp_path):
    import gzip

    server.add("/f.bin", BODY, drop_after=900_000, drops_left=1)  # plain first, interrupted
    with pytest.raises(DownloadError):
        download(f"{server.url}/f.bin", tmp_path / "f.bin", retries=0, progress=False)
    # the server (a proxy) now gzips, honouring Range over the encoded bytes: a 206 whose bytes
    # do not continue the decoded file — fdl restarts from zero instead of appending them
    server.add("/f.bin", gzip.compress(BODY), content_encoding="gzip")
    result = download(f"{server.url}/f.bin", tmp_path / "f.bin", backoff=0, progress=False)
    assert (tmp_path / "f.bin").read_bytes() == BODY and result.sha256 == sha256(BODY)
    requests_made = server.gets("/f.bin")
    assert requests_made[1]["Range"] == "bytes=900000-"  # it tried to resume…
    assert "Range" not in requests_made[2]  # …saw an encoded 206, and started over


def test_truncated_encoded_body_is_retried(server, tmp_path):
    import gzip

    encoded = gzip.compress(BODY, compresslevel=1)
    served = server.add("/f.bin", encoded, content_encoding="gzip", drop_after=len(encoded) - 100)
    served.drops_left = 2
    download(f"{server.url}/f.bin", tmp_path / "f.bin", backoff=0, progress=False)
    assert (tmp_path / "f.bin").read_bytes() == BODY
    assert len(server.gets("/f.bin")) == 3 and served.drops_left == 0


@pytest.mark.parametrize("ranges", [True, False], ids=["range", "no-range"])
def test_a_stalled_server_fails_within_the_stall_timeout(server, tmp_path, monkeypatch, ranges):
    # every answer hangs at the same byte: resumed (range) or sent again from zero (no-range)
    served = server.add("/f.bin", BODY, stall_at=300_000, ranges=ranges)
    monkeypatch.setenv("FDL_STALL_TIMEOUT", "0.9")  # the environment sets the budget
    with pytest.raises(DownloadError) as err:
        download(f"{server.url}/f.bin", tmp_path / "f.bin", backoff=0.1, progress=False)
    message = str(err.value)
    assert err.value.code == 3
    assert f"stalled: {server.url.removeprefix('http://')} sent nothing for" in message
    assert "stall timeout 0.9 s" in message and "FDL_STALL_TIMEOUT" in message
    assert "re-run the same command to resume (300000 bytes kept" in message
    assert len(server.gets("/f.bin")) >= 2  # it retried within the budget before giving up
    served.stall_at = None
    result = download(f"{server.url}/f.bin", tmp_path / "f.bin", progress=False, stall_timeout=5)
    assert result.resumed_from == (300_000 if ranges else 0)
    assert (tmp_path / "f.bin").read_bytes() == BODY


def test_stall_timeout_values():
    from fdl.downloads import stall_timeout
    from fdl.errors import FdlUsageError

    assert stall_timeout() == 60.0  # the default total budget
    assert stall_timeout("2.5") == 2.5
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(FdlUsageError, match="not a positive number of seconds"):
            stall_timeout(bad)
