"""The course in the reader's hands: every page of the built site links a download of the course itself.

- The archive (``ddp-course.zip`` at the site's root, made by ``book/_ext/course_download.py`` at build time) holds
  every file git tracks (what ``make book`` and ``make test`` need) and nothing of the virtual environment, the build
  or caches; outside a git checkout the same files come from the folder less ``.gitignore``.
- Every page's download menu has "코스 전체 (.zip)" pointing at it; in Chromium, with every request to another host
  refused, opening the menu and clicking it downloads exactly the site's archive.
- A chapter notebook taken from the archive runs there: ``jupyter execute`` in the archive's ``book/`` with the
  archive's ``labs`` (not this checkout's), and its first cell says where it must sit.
- A tiny book built with the project's configuration gets the archive and the menu entry, and the repository's
  address when ``_config.yml`` names one.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Iterator
from urllib.parse import urljoin, urlsplit

import pytest
import yaml
from bs4 import BeautifulSoup

sys.path.insert(0, str(Path(__file__).resolve().parent))
import site_server  # noqa: E402
from conftest import clean_env  # noqa: E402
from minibook import build, make_book  # noqa: E402

sys.path.insert(0, str(site_server.REPO / "book" / "_ext"))
import course_download  # noqa: E402

sys.path.insert(0, str(site_server.REPO / "scripts"))
import notebook_setup_cell  # noqa: E402

pytestmark = pytest.mark.timeout(600)
REPO = site_server.REPO
TOP = course_download.TOP


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode()
    return sorted(name for name in out.split("\0") if name and (REPO / name).is_file())


@pytest.fixture(scope="module")
def archive(site_root) -> Iterator[zipfile.ZipFile]:
    path = site_root / course_download.ARCHIVE
    assert path.is_file(), f"사이트에 {course_download.ARCHIVE}가 없습니다: make book을 다시 실행하세요"
    with zipfile.ZipFile(path) as zf:
        yield zf


def _names(zf: zipfile.ZipFile) -> set[str]:
    names = zf.namelist()
    assert all(name.startswith(f"{TOP}/") for name in names), "모든 파일이 한 폴더 안에 있어야 합니다"
    return {name[len(TOP) + 1:] for name in names}


def test_archive_holds_every_tracked_file_and_no_build(archive):
    names = _names(archive)
    missing = [name for name in _tracked() if name not in names]
    assert not missing, f"git이 아는 파일이 압축에 없습니다(빌드 뒤에 더한 파일이면 make book을 다시): {missing[:10]}"
    junk = [n for n in names if n.split("/")[0] in (".venv", "_build", ".git") or "__pycache__" in n or n.endswith(".pyc")]
    assert not junk, junk[:10]


def test_archive_holds_what_make_book_reads(archive):
    names = _names(archive)
    config = yaml.safe_load(archive.read(f"{TOP}/_config.yml"))
    toc = yaml.safe_load(archive.read(f"{TOP}/_toc.yml"))
    needed = {"Makefile", "requirements.txt", "pyproject.toml", "_config.yml", "_toc.yml", "labs/__init__.py",
              "recipe/train_single.py", "recipe/train_ddp.py", f"{toc['root']}.md"}
    needed |= {f"{entry['file']}.ipynb" if f"{entry['file']}.ipynb" in names else f"{entry['file']}.md"
               for entry in toc["chapters"]}
    needed |= {f"{folder}/{name}.py" for name, folder in config["sphinx"]["local_extensions"].items()}
    chapters = [Path(name).stem for name in names if re.fullmatch(r"book/\d\d_\w+\.ipynb", name)]
    needed |= {f"book/quizzes/{stem}.yml" for stem in chapters}  # Quiz("NN_이름")이 노트북 옆에서 읽는다
    assert needed <= names, sorted(needed - names)
    assert oct(archive.getinfo(f"{TOP}/labs/gpu_check.sh").external_attr >> 16)[-3:] == "755", "실행 권한이 남아야 한다"


def _download_links(page: Path) -> list[str]:
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    hrefs = [(str(a["href"]), a.get_text()) for a in soup.select("a[href]")]
    return [href for href, text in hrefs if href.endswith(course_download.ARCHIVE) and "코스 전체" in text]


def test_every_page_links_the_archive(site_root):
    pages = site_server.content_pages(site_root)
    assert len(pages) >= 15
    for rel in pages:
        links = _download_links(site_root / rel)
        assert len(links) == 1, f"{rel}: 코스 전체 내려받기 링크가 {len(links)}개"
        target = urlsplit(urljoin(f"http://site/{rel}", links[0])).path.lstrip("/")
        assert target == course_download.ARCHIVE, (rel, links[0])


def test_the_link_downloads_the_archive_offline(chromium, site_root, tmp_path):
    """From file:// with every non-file request refused: open the ↓ menu, click the entry, get the site's file."""
    context = chromium.new_context(accept_downloads=True)
    refused = []

    def refuse(route) -> None:
        refused.append(route.request.url)
        route.abort()

    context.route(lambda url: not url.startswith("file://"), refuse)
    try:
        page = context.new_page()
        page.goto((site_root / "book" / "14_recipe.html").as_uri())
        page.locator(".dropdown-download-buttons > button").first.click()
        link = page.locator(f"a.btn-{course_download.BUTTON_LABEL}")
        link.wait_for(state="visible", timeout=10_000)
        with page.expect_download(timeout=30_000) as info:
            link.click()
        saved = tmp_path / "downloaded.zip"
        info.value.save_as(saved)
    finally:
        context.close()
    assert saved.read_bytes() == (site_root / course_download.ARCHIVE).read_bytes()
    assert not refused, f"내려받는 동안 다른 곳에 요청했습니다: {refused[:5]}"


def test_a_chapter_from_the_archive_runs_there(archive, tmp_path):
    """The reader's way (the notebook's first cell): the notebook in the archive's book/, the archive's labs."""
    archive.extractall(tmp_path)
    root = tmp_path / TOP
    notebook = root / "book" / "03_backward.ipynb"
    first = json.loads(notebook.read_text(encoding="utf-8"))["cells"][0]
    assert first == notebook_setup_cell.setup_cell(notebook.name)
    # 독자의 make venv 대신: 이 파이썬에 압축을 푼 폴더를 먼저 보게 한다 (이 체크아웃의 labs가 아니라)
    env = clean_env(PYTHONPATH=str(root))
    where = subprocess.run([sys.executable, "-c", "import labs; print(labs.__file__)"], cwd=root / "book", env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).resolve().is_relative_to(root.resolve()), where
    jupyter = Path(sys.executable).parent / "jupyter"
    proc = subprocess.run([str(jupyter), "execute", notebook.name, "--output", str(tmp_path / "ran.ipynb")],
                          cwd=root / "book", env=env, capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ran = json.loads((tmp_path / "ran.ipynb").read_text(encoding="utf-8"))
    outputs = [o for c in ran["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert outputs and not [o for o in outputs if o.get("output_type") == "error"]


# ----------------------------------------------------------------------------- the extension alone

def test_outside_git_the_folder_less_gitignore_is_packed(tmp_path, monkeypatch):
    root = tmp_path / "course"
    for rel in ("Makefile", "book/intro.md", "labs/__init__.py", ".venv/bin/python", "_build/html/index.html",
                "labs/__pycache__/x.pyc", "book/x.pyc", "book/_locale/ko/LC_MESSAGES/sphinx.mo", "build/lib/x.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x", encoding="utf-8")
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # 위 폴더의 저장소를 찾지 않게
    assert course_download.course_files(root) == [".gitignore", "Makefile", "book/intro.md", "labs/__init__.py"]


def test_a_book_gets_the_archive_and_the_menu_entry(tmp_path):
    book = make_book(tmp_path, {"book/intro.md": "# 소개\n\n본문입니다.\n", "book/ch.md": "# 시험 장\n\n본문입니다.\n"})
    config = book / "_config.yml"
    text = config.read_text(encoding="utf-8")
    assert 'repository_url: ""' in text
    config.write_text(text.replace('repository_url: ""', 'repository_url: "https://github.com/example/ddp-course"'),
                      encoding="utf-8")
    proc = build(book)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    site = book / "_build" / "html"
    with zipfile.ZipFile(site / course_download.ARCHIVE) as zf:
        names = _names(zf)
    assert {"_config.yml", "_toc.yml", "book/intro.md", "book/ch.md"} <= names
    assert not [n for n in names if n.startswith("_build/")]
    page = BeautifulSoup((site / "book" / "ch.html").read_text(encoding="utf-8"), "html.parser")
    assert _download_links(site / "book" / "ch.html") == [f"../{course_download.ARCHIVE}"]
    assert page.select_one('a[href="https://github.com/example/ddp-course"]') is not None
