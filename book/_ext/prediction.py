"""Sphinx extension: the ``{prediction}`` directive, a "예측해 보기" box the reader answers before reading on.

In a chapter (MyST markdown)::

    ```{prediction} ch5-adam-bitwise
    :question: 몇 스텝 뒤 랭크들의 파라미터는 어떤 관계일까요?
    :choices: 비트 단위까지 같다 | 반올림 수준으로 조금 다르다 | 점점 벌어진다
    :answer: 1
    :measured: 스텝마다 지문 종류 {glue:text}`ch5-fingerprint-kinds`개
    답의 설명 (MyST; glue 역할을 써도 된다)
    ```

- ``:choices:`` (``|``로 나눈 보기 2개 이상) with ``:answer:`` (the correct choice, 1-based), or
  ``:number:`` (a glue key of the chapter: the reader types a number and the answer is the value the
  build measured, shown as "내 예측: … / 실제로 잰 값: …") with ``:tolerance:`` (absolute, or ``20%``
  relative to the measured value).
- ``:measured:`` (optional inline MyST): the line "실제로 잰 값: …" shown with the answer; its
  numbers come from ``{glue:text}`` roles of cells that ran in this build, never typed.

The page shows the question and the choice buttons (or a number box and 확인); the answer and the
body carry the ``hidden`` attribute (invisible, and not in the accessibility tree) until the reader
commits. The measured data the box asks about waits too: every cell output, table and figure after the box,
up to the next box or the end of its section, keeps its place but is not shown (``.ddp-awaiting``:
``visibility: hidden``, so it is out of the accessibility tree too) under one line
"예측을 고르면 … / 예측 없이 보기" until the reader commits or chooses to look without predicting (that choice
is not saved as a guess). Then the box shows "내 예측: … / 정답: …", the measured line and the body. The guess is kept in
the browser's localStorage under one key (:data:`STORAGE_KEY`), so a committed box stays open after a
reload, and the intro page's ``{quiz-progress}`` table counts predictions made and hit per chapter
from the ids this extension registers for every page (:func:`chapter_predictions`). Everything is in
the page: no kernel, no network.

A chapter's "이 장의 핵심" box that states what a core prediction asks carries the class ``awaits-<id>``
(``:class: chapter-key awaits-ch3-grad-after-backward``): its **주장** and **측정** lines are folded too, in
their place a link to the box and "예측 없이 보기", until the reader commits to that prediction. The build
warns (and ``-W`` fails) when no box of the page has that id.

In live Jupyter (which renders markdown, not MyST directives) the block sits in a closed ``<details>`` fold and
the ``ask`` cell under it shows the same box as widgets, holding the measuring cells' outputs until the reader
chooses (labs/widgets/prediction.py; the layout is scripts/notebook_predictions.py's); a key box that awaits a box
keeps its claim and measurement in such a fold too. The site drops the folds (:func:`_drop_notebook_folds`) and
removes that cell.
"""

from __future__ import annotations

import html
import json
import math
import re

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

STORAGE_KEY = "ddp-course-predictions"  # localStorage key of the reader's guesses (this page script, progress table)
_ID = re.compile(r"^ch(\d+)[a-z]?-[a-z0-9]+(?:-[a-z0-9]+)*$")
_CHAPTER = re.compile(r"(?:^|/)(\d\d)([a-z]?)_[^/]*$")

logger = logging.getLogger(__name__)


class prediction(nodes.General, nodes.Element):
    """The whole box: ``<section class="ddp-prediction" data-pid=…>``."""


class prediction_choice(nodes.General, nodes.Element):
    """One choice button (inline content)."""


class prediction_number(nodes.General, nodes.Element):
    """The number box and its 확인 button."""


class prediction_answer(nodes.General, nodes.Element):
    """What the reader sees only after committing: ``<div hidden>``."""


def _attrs(**values) -> str:
    return "".join(f' {name.replace("_", "-")}="{html.escape(str(v), quote=True)}"' for name, v in values.items())


def _visit_prediction(self, node):
    data = {"data_pid": node["pid"], "data_kind": node["kind"]}
    if node["kind"] == "number":
        data.update(data_value=repr(node["value"]), data_tolerance=repr(node["tolerance"]))
    self.body.append(f'<section class="ddp-prediction"{_attrs(**data)} aria-labelledby="{node["pid"]}-title">'
                     f'<p class="ddp-prediction-title" id="{node["pid"]}-title">예측해 보기</p>')


def _depart_prediction(self, node):
    self.body.append("</section>\n")


def _visit_choice(self, node):
    self.body.append(f'<button type="button" class="ddp-prediction-choice"'
                     f'{_attrs(data_choice=node["choice"], data_correct=int(node["correct"]))}>')


def _depart_choice(self, node):
    self.body.append("</button>")


def _visit_number(self, node):
    pid = node["pid"]
    self.body.append(f'<div class="ddp-prediction-number"><label for="{pid}-guess">내 예측</label> '
                     f'<input type="number" step="any" inputmode="decimal" id="{pid}-guess" '
                     f'class="ddp-prediction-input" aria-describedby="{pid}-q"> '
                     '<button type="button" class="ddp-prediction-submit">확인</button></div>')
    raise nodes.SkipNode


def _visit_answer(self, node):
    self.body.append('<div class="ddp-prediction-answer" hidden>')


def _depart_answer(self, node):
    self.body.append("</div>")


def _visit_other(self, node):
    """Builders other than HTML (none in this book) get the plain content."""


def _depart_other(self, node):
    pass


def _chapter_prefix(docname: str) -> str | None:
    m = _CHAPTER.search(docname)
    return f"ch{int(m.group(1))}{m.group(2)}-" if m else None


class PredictionDirective(SphinxDirective):
    required_arguments = 1
    has_content = True
    option_spec = {
        "question": directives.unchanged_required,
        "choices": directives.unchanged,
        "answer": directives.unchanged,
        "number": directives.unchanged,
        "tolerance": directives.unchanged,
        "measured": directives.unchanged,
    }

    def _fail(self, message: str):
        return [self.state.document.reporter.error(f"예측 상자 {self.arguments[0]}: {message}", line=self.lineno)]

    def _inline(self, text: str) -> list[nodes.Node]:
        parsed, messages = self.parse_inline(text.strip())
        return parsed + messages

    def run(self):
        pid = self.arguments[0]
        prefix = _chapter_prefix(self.env.docname)
        if not _ID.match(pid) or (prefix and not pid.startswith(prefix)):
            return self._fail(f"id는 '{prefix or 'chN-'}'로 시작하고 영어 소문자·숫자·하이픈만 써야 합니다.")
        question = self.options.get("question", "").strip()
        if not question:
            return self._fail(":question:(보이는 질문)이 없습니다.")
        if re.search(r"답\s*[:：]", question):
            return self._fail("질문에 답이 들어 있습니다. 답은 본문에 쓰세요.")
        box = prediction(pid=pid)
        box += nodes.paragraph("", "", *self._inline(question), ids=[f"{pid}-q"], classes=["ddp-prediction-question"])
        measured = self.options.get("measured", "").strip()
        if "number" in self.options:
            made = self._number(box, pid)
            if made is not None:
                return made
        else:
            made = self._choices(box)
            if made is not None:
                return made
        box += nodes.paragraph("", "", classes=["ddp-prediction-result"])
        answer = prediction_answer()
        if measured:
            answer += nodes.paragraph("", "", nodes.strong("", "실제로 잰 값"), nodes.Text(": "),
                                      *self._inline(measured), classes=["ddp-prediction-measured"])
        self.state.nested_parse(self.content, self.content_offset, answer)
        box += answer
        ids = getattr(self.env, "prediction_ids", None)
        if ids is None:
            ids = self.env.prediction_ids = {}  # type: ignore[attr-defined]  # extension state kept on Sphinx's object
        ids.setdefault(self.env.docname, []).append(pid)
        return [box]

    def _choices(self, box):
        texts = [t.strip() for t in self.options.get("choices", "").split("|")]
        if len(texts) < 2 or not all(texts):
            return self._fail(":choices:에 '|'로 나눈 보기가 2개 이상 있어야 합니다(또는 :number:).")
        try:
            answer = int(self.options.get("answer", ""))
        except ValueError:
            answer = 0
        if not 1 <= answer <= len(texts):
            return self._fail(f":answer:는 정답 보기의 번호(1–{len(texts)})여야 합니다.")
        box["kind"] = "choice"
        group = nodes.container(classes=["ddp-prediction-choices"])
        for i, text in enumerate(texts, start=1):
            group += prediction_choice("", *self._inline(text), choice=i, correct=i == answer)
        box += group
        return None

    def _number(self, box, pid):
        from myst_nb.core.variables import RetrievalError
        from myst_nb.ext.glue.utils import retrieve_glue_data

        from labs.prediction import tolerance

        key = self.options["number"].strip()
        try:
            tolerance(self.options.get("tolerance", ""), 1.0)
        except ValueError:
            return self._fail(":number:에는 :tolerance:(예: 0.5 또는 20%)가 있어야 합니다.")
        try:
            value = float(retrieve_glue_data(self.state.document, key).data.get("text/plain", "").strip("'\""))
        except (RetrievalError, ValueError):
            return self._fail(f"이 장의 셀이 glue(\"{key}\", 숫자)로 남긴 값이 없습니다. "
                              "측정한 셀 뒤에서 glue로 값을 남기세요.")
        if not math.isfinite(value):
            return self._fail(f"glue 값 {key}가 유한한 숫자가 아닙니다: {value}")
        box["kind"], box["value"] = "number", value
        box["tolerance"] = tolerance(self.options["tolerance"], value)
        box += prediction_number(pid=pid)
        return None


_SCRIPT = """
(function () {
  // 예측 상자: 보기를 고르거나 숫자를 적어 확인하면 그때 답과 실제로 잰 값값을 보여 주고, 예측을 저장한다.
  var KEY = %(key)s;
  function load() { try { return JSON.parse(localStorage.getItem(KEY) || "{}"); } catch (e) { return {}; } }
  function save(p) { try { localStorage.setItem(KEY, JSON.stringify(p)); } catch (e) { /* 저장 불가: 무시 */ } }
  function fmt(x) { return String(Number(x.toPrecision(6))); }
  function plain(el) { return el ? el.textContent.replace(/\\s+/g, " ").trim() : ""; }
  function reveal(box, guess, hit, remember) {
    var result = box.querySelector(".ddp-prediction-result"), mine, right;
    if (box.getAttribute("data-kind") === "number") {
      var input = box.querySelector(".ddp-prediction-input");
      input.value = guess; input.disabled = true;
      box.querySelector(".ddp-prediction-submit").disabled = true;
      mine = fmt(guess);
      right = fmt(Number(box.getAttribute("data-value"))) + " (±" + fmt(Number(box.getAttribute("data-tolerance"))) +
        " 안이면 맞힘)";
    } else {
      var chosen = box.querySelector('.ddp-prediction-choice[data-choice="' + Number(guess) + '"]');
      if (!chosen) return;
      box.querySelectorAll(".ddp-prediction-choice").forEach(function (b) {
        b.disabled = true;
        if (b.getAttribute("data-correct") === "1") b.classList.add("is-correct");
      });
      chosen.classList.add(hit ? "is-correct" : "is-wrong", "is-chosen");
      chosen.setAttribute("aria-pressed", "true");
      mine = plain(chosen);
      right = plain(box.querySelector('.ddp-prediction-choice[data-correct="1"]'));
    }
    result.className = "ddp-prediction-result " + (hit ? "is-hit" : "is-miss");
    var label = box.getAttribute("data-kind") === "number" ? " / 실제로 잰 값: " : " / 정답: ";
    result.textContent = (hit ? "○ 맞혔습니다. " : "× 빗나갔습니다. ") + "내 예측: " + mine + label + right;
    box.querySelector(".ddp-prediction-answer").hidden = false;
    box.setAttribute("data-committed", "1");
    release(box);
    if (remember) {
      var p = load();
      p[box.getAttribute("data-pid")] = { guess: guess, hit: hit, at: Date.now() };
      save(p);
    }
  }
  // 예측이 묻는 측정값(셀 출력, 표, 그림)은 상자 뒤에서 다음 상자나 절 끝까지 자리만 두고 숨겼다가, 예측하면 보인다
  var DATA = ".cell_output, table, figure, .ddp-prediction";
  function awaited(box) {
    var region = box.parentElement.closest("section:has(> h2)") || box.parentElement.closest("section");
    if (!region) return [];
    var after = false, found = [];
    region.querySelectorAll(DATA).forEach(function (el) {
      if (el === box) { after = true; return; }
      if (!after || box.contains(el) || found.some(function (f) { return f.contains(el); })) return;
      if (el.classList.contains("ddp-prediction")) { after = false; return; }
      if (el.closest(".ddp-quiz")) return;
      found.push(el);
    });
    return found;
  }
  // 장 첫머리의 "이 장의 핵심" 상자가 핵심 예측의 답을 말하면(:class: chapter-key awaits-<예측 id>), 그 주장과 측정 줄도
  // 예측할 때까지 접어 두고 그 자리에 예측으로 가는 링크를 둔다
  function keyParts(box) {
    var found = [];
    document.querySelectorAll(".chapter-key.awaits-" + box.getAttribute("data-pid")).forEach(function (key) {
      key.querySelectorAll("p").forEach(function (p) {
        var label = p.firstElementChild;
        if (label && label.tagName === "STRONG" && /^(주장|측정)$/.test(label.textContent.trim())) found.push(p);
      });
    });
    return found;
  }
  function peekButton(box) {
    var peek = document.createElement("button");
    peek.type = "button"; peek.className = "ddp-awaiting-peek"; peek.textContent = "예측 없이 보기";
    peek.addEventListener("click", function () { release(box); });
    return peek;
  }
  function holdKey(box) {
    var parts = keyParts(box);
    if (!parts.length) return;
    parts.forEach(function (p) { p.classList.add("ddp-key-held"); });
    var note = document.createElement("p"), go = document.createElement("a");
    note.className = "ddp-awaiting-note ddp-key-note";
    go.href = "#" + box.getAttribute("data-pid") + "-q"; go.textContent = "이 장의 예측";
    note.append("이 장의 주장과 측정값은 ", go, "을 고르면 여기에도 열립니다. ", peekButton(box));
    parts[0].parentNode.insertBefore(note, parts[0]);
    box.__ddpKeyParts = parts; box.__ddpKeyNote = note;
  }
  function hold(box) {
    holdKey(box);
    var els = awaited(box);
    if (!els.length) return;
    box.__ddpAwaiting = els;
    els.forEach(function (el) { el.classList.add("ddp-awaiting"); });
    var note = document.createElement("p");
    note.className = "ddp-awaiting-note";
    note.textContent = "위의 예측을 고르면 아래에 측정 결과가 나타납니다. ";
    note.appendChild(peekButton(box));
    els[0].parentNode.insertBefore(note, els[0]);
    box.__ddpAwaitingNote = note;
  }
  function release(box) {
    (box.__ddpAwaiting || []).forEach(function (el) { el.classList.remove("ddp-awaiting"); });
    (box.__ddpKeyParts || []).forEach(function (el) { el.classList.remove("ddp-key-held"); });
    box.__ddpAwaiting = []; box.__ddpKeyParts = [];
    [box.__ddpAwaitingNote, box.__ddpKeyNote].forEach(function (note) { if (note) note.remove(); });
    box.__ddpAwaitingNote = box.__ddpKeyNote = null;
    window.dispatchEvent(new Event("resize"));  // plotly 그림은 보이게 된 뒤 크기를 다시 잡는다
  }
  function commitNumber(box) {
    var input = box.querySelector(".ddp-prediction-input"), guess = parseFloat(input.value);
    if (!isFinite(guess)) {
      input.focus(); box.querySelector(".ddp-prediction-result").textContent = "숫자를 적고 확인을 누르세요."; return;
    }
    var value = Number(box.getAttribute("data-value")), tol = Number(box.getAttribute("data-tolerance"));
    reveal(box, guess, Math.abs(guess - value) <= tol + 1e-12 * Math.abs(value), true);
  }
  function restore() {
    var p = load();
    document.querySelectorAll(".ddp-prediction:not([data-ready])").forEach(function (box) {
      box.setAttribute("data-ready", "1");
      var s = p[box.getAttribute("data-pid")];
      if (s && s.guess !== undefined) reveal(box, s.guess, !!s.hit, false);
      else hold(box);
    });
  }
  if (!window.__ddpPredictionInstalled) {
    window.__ddpPredictionInstalled = true;
    document.addEventListener("click", function (ev) {
      var t = ev.target.closest && ev.target.closest(".ddp-prediction-choice, .ddp-prediction-submit");
      var box = t && t.closest(".ddp-prediction");
      if (!box || box.getAttribute("data-committed")) return;
      if (t.classList.contains("ddp-prediction-submit")) return commitNumber(box);
      reveal(box, Number(t.getAttribute("data-choice")), t.getAttribute("data-correct") === "1", true);
    });
    document.addEventListener("keydown", function (ev) {
      if (ev.key !== "Enter" || !ev.target.classList || !ev.target.classList.contains("ddp-prediction-input")) return;
      var box = ev.target.closest(".ddp-prediction");
      if (box && !box.getAttribute("data-committed")) { ev.preventDefault(); commitNumber(box); }
    });
  }
  restore();
})();
"""


_STYLE = """
.ddp-awaiting { visibility: hidden; }
.ddp-key-held { display: none; }
.ddp-awaiting-note { margin: .5rem 0; padding: .4rem .7rem; border-left: 3px solid var(--pst-color-primary, #3465a4);
  background: var(--pst-color-surface, #f3f4f5); font-size: .95em; }
.ddp-awaiting-note a { color: inherit; text-decoration: underline; }  /* 회색 바탕의 파란 링크는 대비 4.3:1 */
.ddp-awaiting-peek { margin-left: .3rem; padding: .1rem .6rem; border: 1px solid currentColor; border-radius: .3rem;
  background: transparent; color: inherit; cursor: pointer; font: inherit; }
"""


def chapter_predictions(env) -> dict[str, list[str]]:
    """Every page's prediction ids, in page order (known once all pages are read)."""
    return getattr(env, "prediction_ids", {})


def _add_script(app: Sphinx, doctree, docname: str) -> None:
    if any(True for _ in doctree.findall(prediction)):
        from labs.quiz import compact_script  # 퀴즈 스크립트와 같은 방식으로 줄인다 (labs는 torch까지 읽어 늦게)

        script = compact_script(_SCRIPT % {"key": json.dumps(STORAGE_KEY)})
        doctree += nodes.raw("", f"<style>{_STYLE}</style><script>{script}</script>", format="html")


def _check_unique(app: Sphinx, env) -> None:
    seen: dict[str, str] = {}
    for docname, ids in sorted(chapter_predictions(env).items()):
        for pid in ids:
            if pid in seen:
                logger.warning(f"예측 상자 id '{pid}'가 {seen[pid]}와 {docname}에 모두 있습니다. id는 책 전체에서 하나뿐이어야 "
                               "합니다(독자의 예측이 id로 저장됩니다).", location=docname)
            seen[pid] = docname


AWAITS = "awaits-"  # "이 장의 핵심" 상자의 클래스: awaits-<예측 id>이면 그 예측까지 주장과 측정 줄을 접는다


def _check_awaits(app: Sphinx, doctree) -> None:
    """A key box that waits for a prediction must name one of its own page's boxes."""
    docname = app.env.docname
    ids = getattr(app.env, "prediction_ids", {}).get(docname, [])
    for node in doctree.findall(nodes.Element):
        for cls in node.get("classes", []):
            if cls.startswith(AWAITS) and cls[len(AWAITS):] not in ids:
                logger.warning(f"'{cls}': 이 페이지에 id가 '{cls[len(AWAITS):]}'인 예측 상자가 없습니다. "
                               f"상자를 기다리게 하려면 같은 장의 예측 id를 쓰세요.", location=node)


def _drop_notebook_folds(app: Sphinx, doctree) -> None:
    """The ``<details class="prediction-source">`` folds a notebook keeps a box, or a key box's claim, in (for
    Jupyter: ``labs.prediction``) are dropped with their closing tag, the next ``</details>`` beside them."""
    from labs.prediction import FOLD_CLASS, FOLD_CLOSE

    for node in list(doctree.findall(nodes.raw)):
        if node.parent is None or not node.astext().startswith(f'<details class="{FOLD_CLASS}">'):
            continue
        parent = node.parent
        after = parent.children[parent.index(node) + 1:]
        close = next((n for n in after if isinstance(n, nodes.raw) and n.astext().strip() == FOLD_CLOSE), None)
        if close is None:
            logger.warning(f"노트북의 접기 {node.astext().strip()[:40]}…에 닫는 {FOLD_CLOSE}가 같은 블록 안에 없습니다.",
                           location=node)
            continue
        parent.remove(close)
        parent.remove(node)


def _purge(app: Sphinx, env, docname: str) -> None:
    chapter_predictions(env).pop(docname, None)


def _merge(app: Sphinx, env, docnames, other) -> None:
    merged = dict(chapter_predictions(env))
    merged.update({d: ids for d, ids in chapter_predictions(other).items() if d in docnames})
    env.prediction_ids = merged


def setup(app: Sphinx) -> dict:
    other = (_visit_other, _depart_other)
    for node, html_visitors in ((prediction, (_visit_prediction, _depart_prediction)),
                                (prediction_choice, (_visit_choice, _depart_choice)),
                                (prediction_number, (_visit_number, None)),
                                (prediction_answer, (_visit_answer, _depart_answer))):
        app.add_node(node, html=html_visitors, latex=other, text=other, man=other, texinfo=other)
    app.add_directive("prediction", PredictionDirective)
    app.connect("doctree-read", _drop_notebook_folds, priority=400)  # before the core path counts the page
    app.connect("doctree-read", _check_awaits)
    app.connect("doctree-resolved", _add_script)
    app.connect("env-check-consistency", _check_unique)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
