"""Sphinx extension: the ``{quiz-progress}`` directive, a table of the reader's quiz and prediction progress.

The quizzes (``book/quizzes/*.yml``, the ``quiz_bank_dir`` setting; rendered by ``labs.quiz``) store each answer in the
browser's localStorage under one key, the "예측해 보기" boxes (``prediction``) their guesses under another; this table
reads both keys and shows, per chapter, how many questions were answered and answered correctly at the first choice, and how many
predictions were made and hit (the prediction ids of every page are registered while the pages are read). It needs
no kernel and no network.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

_SCRIPT = """
(function () {
  var box = document.currentScript.previousElementSibling;
  function read(key) { try { return JSON.parse(localStorage.getItem(key) || "{}"); } catch (e) { return {}; } }
  var progress = read(%(key)s), guesses = read(%(prediction_key)s);
  var totalAnswered = 0, totalRight = 0, total = 0, totalMade = 0, totalHit = 0, totalPredictions = 0;
  box.querySelectorAll("tr[data-ids]").forEach(function (row) {
    var ids = JSON.parse(row.getAttribute("data-ids")), answered = 0, right = 0;
    ids.forEach(function (id) { var p = progress[id]; if (p) { answered++; if (p.correct) right++; } });
    var pids = JSON.parse(row.getAttribute("data-pids")), made = 0, hit = 0;
    pids.forEach(function (id) { var g = guesses[id]; if (g) { made++; if (g.hit) hit++; } });
    row.querySelector(".answered").textContent = ids.length ? answered + " / " + ids.length : "–";
    row.querySelector(".right").textContent = ids.length ? right : "–";
    row.querySelector(".made").textContent = pids.length ? made + " / " + pids.length : "–";
    row.querySelector(".hit").textContent = pids.length ? hit : "–";
    totalAnswered += answered; totalRight += right; total += ids.length;
    totalMade += made; totalHit += hit; totalPredictions += pids.length;
  });
  box.querySelector(".ddp-progress-summary").textContent = (total
    ? "전체 " + total + "문제 중 " + totalAnswered + "문제를 풀었고, 첫 답으로 " + totalRight + "문제를 맞혔습니다."
    : "아직 퀴즈가 없습니다.") + (totalPredictions
    ? " 예측 " + totalPredictions + "개 중 " + totalMade + "개를 했고, " + totalHit + "개가 맞았습니다." : "");
})();
"""


class quiz_progress(nodes.General, nodes.Element):
    """Placeholder, filled in once every chapter's title is known."""


class QuizProgressDirective(SphinxDirective):
    has_content = False

    def run(self):
        if not hasattr(self.env, "quiz_progress_docs"):
            self.env.quiz_progress_docs = set()  # type: ignore[attr-defined]  # extension state kept on Sphinx's object
        self.env.quiz_progress_docs.add(self.env.docname)  # type: ignore[attr-defined]  # extension state kept on Sphinx's object
        return [quiz_progress()]


def _count(ids: list[str]) -> str:
    return f"0 / {len(ids)}" if ids else "–"


def _render(app: Sphinx, docname: str) -> str:
    from prediction import STORAGE_KEY as PREDICTION_KEY
    from prediction import chapter_predictions

    from labs.quiz import STORAGE_KEY, load_all

    quizzes = {f"book/{name}": [q.id for q in questions]
               for name, questions in load_all(Path(app.srcdir) / app.config.quiz_bank_dir).items()}
    predictions = chapter_predictions(app.env)
    rows = []
    for chapter in sorted(set(quizzes) | {d for d, pids in predictions.items() if pids}):
        ids, pids = quizzes.get(chapter, []), predictions.get(chapter, [])
        title = app.env.titles[chapter].astext() if chapter in app.env.titles else chapter.rsplit("/", 1)[-1]
        href = app.builder.get_relative_uri(docname, chapter) if chapter in app.env.found_docs else "#"
        rows.append(f'<tr data-ids="{html.escape(json.dumps(ids))}" data-pids="{html.escape(json.dumps(pids))}">'
                    f'<td><a href="{href}">{html.escape(title)}</a></td>'
                    f'<td class="answered">{_count(ids)}</td><td class="right">{"0" if ids else "–"}</td>'
                    f'<td class="made">{_count(pids)}</td><td class="hit">{"0" if pids else "–"}</td></tr>')
    keys = {"key": json.dumps(STORAGE_KEY), "prediction_key": json.dumps(PREDICTION_KEY)}
    return (
        '<div class="ddp-progress"><p class="ddp-progress-summary" aria-live="polite"></p>'
        '<table class="lab-table"><caption>장별 확인 문제와 예측 진행 상황 (이 브라우저에 저장됨)</caption>'
        '<thead><tr><th scope="col">장</th><th scope="col">푼 문제</th><th scope="col">첫 답으로 맞힌 문제</th>'
        '<th scope="col">한 예측</th><th scope="col">맞힌 예측</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table></div>'
        f"<script>{_SCRIPT % keys}</script>"
    )


def _fill(app: Sphinx, doctree, docname: str) -> None:
    for node in doctree.findall(quiz_progress):
        node.replace_self(nodes.raw("", _render(app, docname), format="html"))


def _always_rewrite(app: Sphinx, env, added, changed, removed) -> list[str]:
    # The table depends on the quiz files, which Sphinx does not track, and on every page's predictions:
    # re-render its pages every build.
    return sorted(getattr(env, "quiz_progress_docs", set()) - set(removed))


def _purge(app: Sphinx, env, docname: str) -> None:
    getattr(env, "quiz_progress_docs", set()).discard(docname)


def _merge(app: Sphinx, env, docnames, other) -> None:
    env.quiz_progress_docs = getattr(env, "quiz_progress_docs", set()) | getattr(other, "quiz_progress_docs", set())


def setup(app: Sphinx) -> dict:
    # The book's quiz bank, relative to the book's root (labs.quiz does not know where the book keeps it).
    app.add_config_value("quiz_bank_dir", "book/quizzes", "env")
    app.connect("env-get-outdated", _always_rewrite)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.add_node(quiz_progress)
    app.add_directive("quiz-progress", QuizProgressDirective)
    app.connect("doctree-resolved", _fill)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
