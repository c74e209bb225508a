(function () {
  // 퀴즈 동작: 보기를 누르면 정답/오답과 해설을 보여 주고, 진행 상황을 localStorage에 저장한다.
  var KEY = "__STORAGE_KEY__";
  function load() { try { return JSON.parse(localStorage.getItem(KEY) || "{}"); } catch (e) { return {}; } }
  function save(p) { try { localStorage.setItem(KEY, JSON.stringify(p)); } catch (e) { /* 저장 불가: 무시 */ } }
  function mark(section, button, remember) {
    var correct = button.getAttribute("data-correct") === "1";
    section.querySelectorAll(".ddp-quiz-choice").forEach(function (b) {
      b.classList.remove("is-correct", "is-wrong"); b.removeAttribute("aria-pressed");
    });
    button.classList.add(correct ? "is-correct" : "is-wrong");
    button.setAttribute("aria-pressed", "true");
    var fb = section.querySelector(".ddp-quiz-feedback");
    fb.className = "ddp-quiz-feedback " + (correct ? "is-correct" : "is-wrong");
    fb.innerHTML = (correct ? "○ 정답입니다. " : "× 오답입니다. ") + button.getAttribute("data-why") +
      (correct ? "" : " 다른 보기도 골라 보세요.");
    section.querySelector(".ddp-quiz-explanation").hidden = !correct;
    if (remember) {
      var p = load(), qid = section.getAttribute("data-qid");
      // correct: 처음 고른 답이 맞았는가(점수는 첫 답으로 센다: 틀린 뒤 다시 골라 맞혀도 그대로).
      // data-choice: 마지막으로 고른 보기의 데이터상 번호(화면 순서와 다름). 복원할 때 같은 보기를 찾는다.
      var first = p[qid] ? Boolean(p[qid].correct) : correct;
      p[qid] = { correct: first, choice: Number(button.getAttribute("data-choice")), at: Date.now() };
      save(p);
    }
    score(section.closest(".ddp-quiz"));
  }
  function score(quiz) {
    if (!quiz) return;
    var qs = quiz.querySelectorAll(".ddp-quiz-q"), p = load(), done = 0, right = 0;
    qs.forEach(function (q) { var s = p[q.getAttribute("data-qid")]; if (s) { done++; if (s.correct) right++; } });
    quiz.querySelector(".ddp-quiz-score").textContent =
      "문제 " + qs.length + "개 중 " + done + "개 답함 · 첫 답이 정답 " + right + "개";
  }
  // 좁은 화면에서는 문제를 PAGE개씩 보여 준다(긴 퀴즈 하나가 휴대폰 화면 여러 장을 차지하지 않게). 넓은 화면은 그대로 전부.
  var PAGE = 4;
  function showPage(quiz, first) {
    var qs = quiz.querySelectorAll(".ddp-quiz-q"), n = qs.length;
    first = Math.max(0, Math.min(first, Math.floor((n - 1) / PAGE) * PAGE));
    qs.forEach(function (q, i) { q.classList.toggle("ddp-quiz-off", i < first || i >= first + PAGE); });
    var nav = quiz.querySelector(".ddp-quiz-nav");
    nav.setAttribute("data-first", first);
    nav.querySelector(".ddp-quiz-where").textContent = "문제 " + (first + 1) + "–" + Math.min(first + PAGE, n) + " / " + n;
    nav.querySelector(".ddp-quiz-prev").disabled = first === 0;
    nav.querySelector(".ddp-quiz-next").disabled = first + PAGE >= n;
  }
  function addPages(quiz) {
    if (quiz.querySelectorAll(".ddp-quiz-q").length <= PAGE) return;
    var nav = document.createElement("div");
    nav.className = "ddp-quiz-nav";
    nav.innerHTML = '<button type="button" class="ddp-quiz-prev">◀ 앞 문제</button><span class="ddp-quiz-where"></span>' +
      '<button type="button" class="ddp-quiz-next">다음 문제 ▶</button>';
    quiz.appendChild(nav);
    nav.addEventListener("click", function (ev) {
      var b = ev.target.closest("button"), first = Number(nav.getAttribute("data-first"));
      if (!b) return;
      showPage(quiz, first + (b.classList.contains("ddp-quiz-next") ? PAGE : -PAGE));
      quiz.scrollIntoView({ block: "start" });
    });
    showPage(quiz, 0);
  }
  function restore() {
    var p = load();
    document.querySelectorAll(".ddp-quiz:not([data-ready])").forEach(function (quiz) {
      quiz.setAttribute("data-ready", "1");
      addPages(quiz);
      quiz.querySelectorAll(".ddp-quiz-q").forEach(function (q) {
        var s = p[q.getAttribute("data-qid")];
        var b = s && q.querySelector('.ddp-quiz-choice[data-choice="' + Number(s.choice) + '"]');
        if (b) mark(q, b, false);
      });
      score(quiz);
    });
  }
  if (!window.__ddpQuizInstalled) {
    window.__ddpQuizInstalled = true;
    document.addEventListener("click", function (ev) {
      var b = ev.target.closest && ev.target.closest(".ddp-quiz-choice");
      if (b) mark(b.closest(".ddp-quiz-q"), b, true);
    });
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", restore);
  }
  restore();
})();
