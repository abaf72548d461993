"""What a build and a push say while they run, from the engine's own events; and which image_repo
values are refused."""

from __future__ import annotations

import io
from typing import Any

import pytest

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.schedulers.images.progress import PushProgress, StatusLine, build_step, event_error
from torchx_ext.schedulers.images.registry import check_repository, familiar, registry_of

# A push as Docker 28 streams it (decoded), one layer new and one mounted from another repository.
PUSH: list[dict[str, Any]] = [
    {"status": "The push refers to repository [127.0.0.1:5055/ws]"},
    {"status": "Preparing", "progressDetail": {}, "id": "571dea29981b"},
    {"status": "Preparing", "progressDetail": {}, "id": "c21e83772ac5"},
    {"status": "Pushing", "progressDetail": {"current": 10240, "total": 20480}, "id": "571dea29981b"},
    {"status": "Pushed", "progressDetail": {}, "id": "571dea29981b"},
    {"status": "Mounted from other", "progressDetail": {}, "id": "c21e83772ac5"},
    {"status": "t1: digest: sha256:3c07 size: 523"},
    {"progressDetail": {}, "aux": {"Tag": "t1", "Digest": "sha256:3c07", "Size": 523}},
]


def said(in_place: bool, events: list[tuple[str, bool]]) -> str:
    stream = io.StringIO()
    line = StatusLine(stream, in_place)
    for text, transient in events:
        line.show(text, transient)
    line.close()
    return stream.getvalue()


def test_a_push_says_each_layer_and_the_digest() -> None:
    progress = PushProgress("127.0.0.1:5055/ws")
    lines = [line for event in PUSH if (line := progress.read(event)) is not None]
    assert progress.digest == "sha256:3c07"
    assert lines == [
        ("pushing 127.0.0.1:5055/ws: layer 571dea29981b 10.2 kB of 20.5 kB (0/2 layers)", True),
        ("pushing 127.0.0.1:5055/ws: layer 571dea29981b pushed (1/2 layers)", False),
        ("pushing 127.0.0.1:5055/ws: layer c21e83772ac5 mounted from other (2/2 layers)", False),
        ("pushed 127.0.0.1:5055/ws@sha256:3c07", False),
    ]
    # Into a pipe: a plain line per change, byte counts left out; on a terminal: one line redrawn.
    piped = said(False, lines)
    assert piped.splitlines() == [f"torchx: {text}" for text, transient in lines if not transient]
    assert "\r" not in piped
    drawn = said(True, lines)
    assert drawn.count("\r\x1b[K") == 4 and drawn.endswith("torchx: pushed 127.0.0.1:5055/ws@sha256:3c07\n")
    assert said(False, []) == said(True, []) == ""
    quiet = StatusLine(None, False)
    quiet.show("said to nobody")
    quiet.close()


def test_build_steps_and_errors() -> None:
    assert build_step({"stream": "Step 2/3 : COPY . .\n"}) == "Step 2/3 : COPY . ."
    assert build_step({"stream": "STEP 2/3: COPY . .\n"}) == "STEP 2/3: COPY . ."  # Podman's
    assert build_step({"stream": " ---> 5d1e\n"}) is None and build_step({"aux": {"ID": "sha256:x"}}) is None
    assert build_step({"stream": f"Step 3/3 : LABEL {'x' * 200}"}).endswith("...")  # type: ignore[union-attr]
    assert event_error({"errorDetail": {"message": "COPY failed"}, "error": "COPY failed"}) == "COPY failed"
    assert event_error({"status": "Pushed", "id": "a"}) is None


@pytest.mark.parametrize("repository, registry", [
    ("127.0.0.1:5055/team/train", "127.0.0.1:5055"), ("ghcr.io/org/train", "ghcr.io"),
    ("localhost/x", "localhost"), ("team/train", "docker.io"), ("train", "docker.io"),
])
def test_image_repo_forms(repository: str, registry: str) -> None:
    check_repository(repository)
    assert registry_of(repository) == registry


def test_the_engine_names_docker_hub_repositories_without_docker_io() -> None:
    assert familiar("docker.io/org/train") == familiar("org/train") == "org/train"
    assert familiar("docker.io/library/train") == "train" and familiar("ghcr.io/org/x") == "ghcr.io/org/x"


@pytest.mark.parametrize("bad", ["", "repo:tag", "127.0.0.1:5055/ws:1", "ws@sha256:ab", "Team/train", "a/b,c", " a"])
def test_image_repo_with_a_tag_or_bad_characters_is_refused(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"invalid image_repo .*: expected a repository without tag"):
        check_repository(bad)
