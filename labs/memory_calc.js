(function () {
  // 13.2절 메모리 계산기. 계산은 labs/memory.py의 per_gpu와 같다(테스트가 두 구현을 입력 격자에서 견준다).
  // 파라미터 하나의 바이트는 실습이 잰 값이고, 이 스크립트는 그 값을 페이지에 들어 있는 JSON에서 읽는다.
  var KINDS = ["params", "grads", "buckets", "state", "activations"];
  var NAMES = {params: "파라미터", grads: "그래디언트", buckets: "DDP 버킷(그래디언트 사본)", state: "옵티마이저 상태",
               activations: "활성값(추정)"};
  var COLORS = {params: "#4C78A8", grads: "#F58518", buckets: "#E45756", state: "#54A24B", activations: "#B279A2"};

  function perGpu(config, x) {
    var strategy = config.strategies[x.strategy], perParam = config.bytes[x.precision][x.optimizer];
    var held = {};
    ["params", "grads", "state"].forEach(function (k) {
      held[k] = perParam[k] * x.params / (strategy.sharded.indexOf(k) >= 0 ? x.gpus : 1);
    });
    held.buckets = strategy.buckets && !x.bucket_view ? perParam.buckets * x.params : 0;
    held.activations = config.activation_values * x.batch * x.seq * x.hidden * x.layers * perParam.params;
    return held;
  }
  window.ddpMemoryPerGpu = perGpu;

  function total(held) { return KINDS.reduce(function (s, k) { return s + held[k]; }, 0); }
  function gb(config, bytes) {
    var v = bytes / config.gb;
    return (v >= 100 ? v.toLocaleString("ko-KR", {maximumFractionDigits: 0}) : v < 0.1 ? v.toPrecision(2) : v.toFixed(1)) + " GB";
  }
  function formula(config, x, k) {
    var perParam = config.bytes[x.precision][x.optimizer];
    if (k === "activations") {
      return config.activation_values + " × b × s × h × L × " + perParam.params + " B";
    }
    if (k === "buckets" && (!config.strategies[x.strategy].buckets || x.bucket_view)) {
      return "0 (" + (x.bucket_view ? "gradient_as_bucket_view=True" : "DDP의 버킷 없음") + ")";
    }
    return perParam[k] + " B × Ψ" + (config.strategies[x.strategy].sharded.indexOf(k) >= 0 ? " ÷ N" : "");
  }

  function setup(root) {
    root.setAttribute("data-ready", "1");
    var config = JSON.parse(root.querySelector("script[type='application/json']").textContent);
    function field(name) { return root.querySelector("[name='" + name + "']"); }
    function num(name, low) {
      var v = parseFloat(field(name).value);
      return isFinite(v) && v >= low ? v : low;
    }
    function inputs() {
      return {params: num("params", 0) * 1e9, precision: field("precision").value, optimizer: field("optimizer").value,
              gpus: Math.max(1, Math.round(num("gpus", 1))), strategy: field("strategy").value,
              batch: Math.round(num("batch", 0)), seq: Math.round(num("seq", 0)), hidden: Math.round(num("hidden", 0)),
              layers: Math.round(num("layers", 0)), bucket_view: field("bucket_view").value === "true"};
    }
    function bar(x, key) {
      var held = perGpu(config, Object.assign({}, x, {strategy: key})), sum = total(held);
      var scale = Math.max.apply(null, config.gpus) * 1.3 * config.gb;
      var parts = KINDS.map(function (k) {
        return "<span class='ddp-memcalc-part' style='width:" + (100 * Math.min(held[k], scale) / scale).toFixed(3) +
          "%;background:" + COLORS[k] + "'></span>";
      }).join("");
      var lines = config.gpus.map(function (g) {
        return "<span class='ddp-memcalc-gpu' style='left:" + (100 * g * config.gb / scale).toFixed(3) + "%'></span>";
      }).join("");
      var fitsIn = config.gpus.filter(function (g) { return sum <= g * config.gb; });
      var verdict = fitsIn.length ? fitsIn[0] + " GB부터 들어감" : "어느 GPU에도 안 들어감";
      var label = config.strategies[key].label + ": " + gb(config, sum) + " (" + verdict + ")";
      return "<div class='ddp-memcalc-row" + (key === x.strategy ? " ddp-memcalc-chosen" : "") + "'>" +
        "<div class='ddp-memcalc-label'>" + label + (sum > scale ? " ▶" : "") + "</div>" +
        "<div class='ddp-memcalc-track' role='img' aria-label='" + label + "'>" + parts + lines + "</div></div>";
    }
    function update() {
      var x = inputs(), held = perGpu(config, x), sum = total(held);
      var rows = KINDS.map(function (k) {
        return "<tr><th scope='row'><span class='ddp-memcalc-swatch' style='background:" + COLORS[k] + "'></span>" +
          NAMES[k] + "</th><td>" + gb(config, held[k]) + "</td><td>" + formula(config, x, k) + "</td></tr>";
      }).join("");
      var verdicts = config.gpus.map(function (g) {
        return g + " GB " + (sum <= g * config.gb ? "✓ 들어감" : "✗ 넘침");
      }).join(" · ");
      var scaleText = Math.max.apply(null, config.gpus) * 1.3;
      var axis = config.gpus.map(function (g) {
        return "<span style='left:" + (100 * g / scaleText).toFixed(3) + "%'>" + g + "</span>";
      }).join("");
      root.querySelector(".ddp-memcalc-out").innerHTML =
        "<p class='ddp-memcalc-total'><strong>GPU 하나에 " + gb(config, sum) + "</strong> — " + verdicts + "</p>" +
        "<table><caption>" + config.strategies[x.strategy].label + ", N = " + x.gpus + "에서 GPU 하나가 가진 것</caption>" +
        "<thead><tr><th scope='col'>종류</th><th scope='col'>크기</th><th scope='col'>식</th></tr></thead><tbody>" +
        rows + "</tbody></table>" +
        "<p class='ddp-memcalc-note'>네 전략을 같은 입력으로 (세로줄: " + config.gpus.join(", ") +
        " GB, 막대는 " + scaleText.toFixed(0) + " GB에서 자름, GB = 10⁹바이트)</p>" +
        "<div class='ddp-memcalc-axis' aria-hidden='true'>" + axis + "</div>" +
        Object.keys(config.strategies).map(function (key) { return bar(x, key); }).join("");
    }
    field("preset").addEventListener("change", function () {
      var p = config.presets[parseInt(field("preset").value, 10)];
      if (p) {
        field("params").value = p.params / 1e9;
        field("hidden").value = p.hidden;
        field("layers").value = p.layers;
      }
      update();
    });
    ["params", "hidden", "layers"].forEach(function (name) {
      field(name).addEventListener("input", function () { field("preset").value = "custom"; });
    });
    root.querySelectorAll("input, select").forEach(function (el) {
      el.addEventListener("input", update);
      el.addEventListener("change", update);
    });
    update();
  }
  function setupAll() { document.querySelectorAll(".ddp-memcalc:not([data-ready])").forEach(setup); }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", setupAll); } else { setupAll(); }
})();
