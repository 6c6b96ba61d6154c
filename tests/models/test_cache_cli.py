"""``tulip-nb cache ls/prune/clear`` on a real cache file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tulip_nb.cli import main
from tulip_nb.core import Message
from tulip_nb.models import ModelCache, ModelResponse, Usage, request_key


def fill(path: Path) -> None:
    now = time.time()
    ages = {"openai:gpt-4o": 40 * 86400, "openai:gpt-4o-mini": 60, "scripted": 2 * 86400}
    for i, (model, age) in enumerate(ages.items()):
        cache = ModelCache(path, clock=lambda age=age: now - age)
        req = {"messages": [{"role": "user", "content": str(i)}]}
        cache.put(
            request_key(model, None, req), ModelResponse(Message.assistant("a"), Usage(1, 1, 2, 0, 1)), model=model
        )
        cache.close()


def test_ls_prune_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.sqlite"
    fill(path)
    assert main(["cache", "ls", str(path)]) == 0
    out, err = capsys.readouterr()
    assert [line.split()[2] for line in out.splitlines()] == ["openai:gpt-4o", "scripted", "openai:gpt-4o-mini"]
    assert err.startswith("3 entries")
    assert main(["cache", "ls", str(path), "--model", "scripted"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1

    assert main(["cache", "prune", str(path), "--older-than", "1d", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out.count("would delete") == 2 and "would delete 2 of 3" in err
    assert main(["cache", "prune", str(path), "--older-than", "30d"]) == 0
    assert "deleted 1 of 3" in capsys.readouterr().err
    assert main(["cache", "prune", str(path), "--model", "scripted"]) == 0
    assert "deleted 1 of 2" in capsys.readouterr().err
    assert main(["cache", "clear", str(path)]) == 0
    assert "deleted 1 entries" in capsys.readouterr().err
    assert len(ModelCache(path)) == 0


def test_mistakes_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "ls", str(tmp_path / "missing.sqlite")]) == 2
    assert "no such cache file" in capsys.readouterr().err and not (tmp_path / "missing.sqlite").exists()
    path = tmp_path / "c.sqlite"
    fill(path)
    assert main(["cache", "prune", str(path)]) == 2
    assert "--older-than" in capsys.readouterr().err
    assert main(["cache", "prune", str(path), "--older-than", "soon"]) == 2
    assert "must look like 30d" in capsys.readouterr().err
