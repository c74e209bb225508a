(function () {
  // 자기 점검: 내 설명을 적으면 이 브라우저(localStorage)에만 저장하고, 단추를 누르면 모범 답안을 펼친다.
  var KEY = "__STORAGE_KEY__";
  function load() { try { return JSON.parse(localStorage.getItem(KEY) || "{}"); } catch (e) { return {}; } }
  function save(p) { try { localStorage.setItem(KEY, JSON.stringify(p)); } catch (e) { /* 저장 불가: 무시 */ } }
  function answerOf(box) { return document.getElementById(box.getAttribute("data-answer")); }
  function show(box, open) {
    var answer = answerOf(box), button = box.querySelector(".ddp-checklist-reveal");
    if (!answer) { box.querySelector(".ddp-checklist-status").textContent = "모범 답안을 찾지 못했습니다."; return; }
    answer.hidden = !open;
    button.setAttribute("aria-expanded", open ? "true" : "false");
    button.textContent = open ? "모범 답안 접기" : "모범 답안 보기";
  }
  function setup() {
    var saved = load();
    document.querySelectorAll(".ddp-checklist:not([data-ready])").forEach(function (box) {
      box.setAttribute("data-ready", "1");
      var id = box.getAttribute("data-item"), text = box.querySelector(".ddp-checklist-text");
      var status = box.querySelector(".ddp-checklist-status");
      if (saved[id]) { text.value = saved[id]; status.textContent = "이전에 적은 설명을 불러왔습니다."; }
      show(box, false);
      text.addEventListener("input", function () {
        var p = load();
        if (text.value.trim()) { p[id] = text.value; } else { delete p[id]; }
        save(p);
        status.textContent = "이 브라우저에 저장했습니다.";
      });
      box.querySelector(".ddp-checklist-reveal").addEventListener("click", function () {
        var answer = answerOf(box);
        show(box, !!(answer && answer.hidden));
      });
    });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", setup); } else { setup(); }
})();
