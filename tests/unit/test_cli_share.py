"""``tulip-nb share``: a thread or a diff of a file store written as one page."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.page_parse import Elements, assert_inert, data_block
from tulip_nb.cli import main
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.testing import MessySpec, build_messy_thread


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("share") / "threads"
    build_messy_thread(FileCheckpointer(base), "case/1", MessySpec(seed=4, turns=12, forks=1))
    return base


@pytest.mark.slow
def test_share_writes_a_thread_page(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "page.html"
    assert main(["share", f"file:{store}", "case/1", "-o", str(out), "--max-chars", "500"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    html = out.read_text()
    assert len(Elements(html).ids(r"turn-\d+")) == 12 and data_block(html, "thread")["thread_id"] == "case/1"
    assert_inert(html)


def test_share_diff_and_the_default_name(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["share", str(store), "case/1", "--diff", "case/1-fork-0", "-U", "1", "--no-plot"]) == 0
    (page,) = tmp_path.glob("*.html")  # one page, named after both threads, in the working directory
    assert page.name.startswith("case_1--case_1-fork-0-")
    html = page.read_text()
    assert "Branch point" in html and Elements(html).count("tr", **{"class": "hunk"}) >= 1


def test_share_corpus_writes_a_site(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "site"
    assert main(["share", f"file:{store}", "case/*", "--corpus", "-o", str(out), "--no-plot"]) == 0
    assert f"wrote {out / 'index.html'} and 2 thread pages" in capsys.readouterr().out
    assert len(list((out / "threads").iterdir())) == 2
    html = (out / "index.html").read_text()
    assert_inert(html)
    assert sorted(a["data-id"] for t, a in Elements(html).tags if t == "tr" and "data-id" in a) == [
        "case/1",
        "case/1-fork-0",
    ]
    assert main(["share", str(store), "nothing-*", "--corpus", "-o", str(tmp_path / "none")]) == 2
    assert "matches 'nothing-*'" in capsys.readouterr().err


def test_share_errors_exit_2(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["share", str(store), "no-such-thread", "-o", str(tmp_path / "x.html")]) == 2
    assert "no-such-thread" in capsys.readouterr().err
    assert main(["share", str(tmp_path / "missing"), "case/1"]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_share_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["share", "--help"])
    assert e.value.code == 0 and "usage: tulip-nb share" in capsys.readouterr().out
