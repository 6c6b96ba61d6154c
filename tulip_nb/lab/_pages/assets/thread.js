/* tulip_nb thread page: the replay of what the model saw, call by call.
   Reads the JSON block #tnb-thread; every string from the thread goes into the DOM with
   textContent, never as markup. No network, no framework. */
(function () {
  "use strict";
  var block = document.getElementById("tnb-thread");
  var slider = document.getElementById("tnb-slider");
  if (!block || !slider) { return; }
  var data = JSON.parse(block.textContent);
  var calls = data.calls, msgs = data.messages, texts = data.texts;
  var body = document.querySelector("#tnb-view tbody");
  var head = document.getElementById("tnb-head");
  var notes = document.getElementById("tnb-notes");
  var pos = document.getElementById("tnb-pos");
  var KIND = { k: "shown", p: "stubbed", s: "summarised", d: "dropped", S: "summary" };
  var LISTED = 4;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function fmt(n) { return n === null || n === undefined ? "unknown" : Number(n).toLocaleString("en-US"); }
  function msgCell(i) {
    var m = msgs[i], td = el("td", "m");
    td.appendChild(el("b", null, m[0]));
    td.appendChild(document.createTextNode(" " + m[1]));
    if (m[4]) { td.appendChild(el("i", null, " \u2192 " + m[4])); }
    return td;
  }
  function text(ref) {
    if (ref < 0) { return ""; }
    var t = texts[ref];
    return t[0] + (t[1] > t[0].length ? " \u2026 (" + fmt(t[0].length) + " of " + fmt(t[1]) + " characters)" : "");
  }
  function row(kind, a, b, c) {
    var tr = el("tr", "v-" + kind);
    tr.appendChild(el("td", "i", a));
    tr.appendChild(b);
    tr.appendChild(typeof c === "string" ? el("td", "w", c) : c);
    return tr;
  }
  function collapsed(r, summaryAt) {
    var start = r[1], end = r[2], n = end - start, det = el("details"), ul = el("ul");
    det.appendChild(el("summary", null, n + (n === 1 ? " message " : " messages ") + KIND[r[0]] + " \u00b7 " + fmt(r[4]) + " tokens"));
    for (var i = start; i < end; i++) {
      if (n > 2 * LISTED && i === start + LISTED) {
        ul.appendChild(el("li", null, "\u2026 " + (n - 2 * LISTED) + " more \u2026"));
        i = end - LISTED;
      }
      var li = el("li", null, "#" + i + " ");
      li.appendChild(el("b", null, msgs[i][0]));
      li.appendChild(document.createTextNode(" " + msgs[i][1]));
      ul.appendChild(li);
    }
    det.appendChild(ul);
    var td = el("td", "m");
    td.appendChild(det);
    var into = r[0] === "s" && summaryAt !== null ? " (into summary #" + summaryAt + ")" : "";
    var label = n === 1 ? String(start) : start + "-" + (end - 1);
    return row(KIND[r[0]], label, td, "\u2718 " + KIND[r[0]] + into + ": " + n + " msgs, " + fmt(r[4]) + " tokens not sent verbatim");
  }
  function render(k) {
    var c = calls[k];
    slider.value = String(k);
    pos.textContent = "call " + k + " of " + calls.length;
    var turn = c.turn === null ? "before the first turn" : "turn " + c.turn;
    while (body.firstChild) { body.removeChild(body.firstChild); }
    while (notes.firstChild) { notes.removeChild(notes.firstChild); }
    c.notes.forEach(function (n) { notes.appendChild(el("p", "note warn", n)); });
    var table = document.getElementById("tnb-view");
    table.setAttribute("data-call", String(k));
    table.setAttribute("data-history", String(c.history));
    table.setAttribute("data-sent", c.sent === null ? "" : String(c.sent));
    if (c.tulip) {
      head.textContent = "model call " + k + " of " + calls.length + " (" + turn + ") was made by a tulip agent: " +
        "what it was sent is not recorded (" + c.history + " messages of history)";
      return;
    }
    var counts = { shown: 0, stubbed: 0, summarised: 0, dropped: 0 };
    var summaryAt = null;
    c.rows.forEach(function (r) {
      if (r[0] === "S") { summaryAt = r[3]; } else { counts[KIND[r[0]]] += r[2] - r[1]; }
    });
    var parts = [];
    Object.keys(counts).forEach(function (x) { if (counts[x]) { parts.push(counts[x] + " " + x); } });
    var trig = c.trigger ? " \u00b7 compaction before this call: " + c.trigger : "";
    var over = c.over_window ? " \u00b7 over the window" : "";
    head.textContent = "model call " + k + " of " + calls.length + " (" + turn + "): " + c.sent +
      " messages sent of " + c.history + " \u2014 " + parts.join(", ") + " \u00b7 " + fmt(c.context_tokens) +
      " tokens sent, " + fmt(c.full_tokens) + " in the full history" + trig + over;
    var frag = document.createDocumentFragment();
    for (var j = c.rows.length - 1; j >= 0; j--) {
      var r = c.rows[j];
      if (r[0] === "S") {
        var td = el("td", "m");
        td.appendChild(el("i", null, "written by the compactor (not in the history)"));
        var w = el("td", "w");
        w.appendChild(el("b", null, "#" + r[3] + " summary "));
        w.appendChild(el("div", "sum", text(r[5])));
        frag.appendChild(row("summary", "summary", td, w));
      } else if (r[0] === "s" || r[0] === "d") {
        frag.appendChild(collapsed(r, summaryAt));
      } else if (r[0] === "p") {
        var s = el("td", "w", "\u25d0 stubbed as #" + r[3] + ": ");
        s.appendChild(el("i", null, text(r[5])));
        frag.appendChild(row("stubbed", String(r[1]), msgCell(r[1]), s));
      } else {
        for (var i = r[2] - 1; i >= r[1]; i--) {
          frag.appendChild(row("shown", String(i), msgCell(i), "\u2714 shown as #" + (r[3] + i - r[1])));
        }
      }
    }
    body.appendChild(frag);
  }
  function go(k) { render(Math.max(0, Math.min(calls.length - 1, k))); }
  slider.addEventListener("input", function () { go(parseInt(slider.value, 10)); });
  document.getElementById("tnb-prev").addEventListener("click", function () { go(parseInt(slider.value, 10) - 1); });
  document.getElementById("tnb-next").addEventListener("click", function () { go(parseInt(slider.value, 10) + 1); });
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (t && (t.tagName === "TEXTAREA" || (t.tagName === "INPUT" && t.type !== "range"))) { return; }
    var k = parseInt(slider.value, 10), to = null;
    if (e.key === "ArrowLeft" || e.key === "k") { to = k - 1; }
    else if (e.key === "ArrowRight" || e.key === "j") { to = k + 1; }
    else if (e.key === "Home") { to = 0; }
    else if (e.key === "End") { to = calls.length - 1; }
    if (to !== null) { e.preventDefault(); go(to); }
  });
  go(calls.length - 1);
})();
