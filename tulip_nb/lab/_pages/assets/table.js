/* tulip_nb corpus index: sort and filter the summary table in place.
   Only moves and hides the rows the page already has; never writes markup. */
(function () {
  "use strict";
  var table = document.getElementById("tnb-corpus");
  if (!table) { return; }
  var tbody = table.tBodies[0];
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var rows = Array.prototype.slice.call(tbody.rows);
  var input = document.getElementById("tnb-filter");
  var count = document.getElementById("tnb-count");
  var names = heads.map(function (h) { return h.getAttribute("data-col"); });

  function value(row, i) { return row.cells[i].getAttribute("data-v"); }
  function numeric(i) {
    return rows.every(function (r) { var v = value(r, i); return v === "" || !isNaN(Number(v)); });
  }
  function sortBy(i, dir) {
    var num = numeric(i);
    var sorted = rows.slice().sort(function (a, b) {
      var x = value(a, i), y = value(b, i);
      if (x === "" || y === "") { return (x === "") - (y === ""); } /* NA last, either way */
      var c = num ? Number(x) - Number(y) : x.localeCompare(y);
      return dir === "ascending" ? c : -c;
    });
    heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
    heads[i].setAttribute("aria-sort", dir);
    sorted.forEach(function (r) { tbody.appendChild(r); });
  }
  heads.forEach(function (h, i) {
    function click() {
      var dir = h.getAttribute("aria-sort") === "descending" ? "ascending" : "descending";
      sortBy(i, dir);
    }
    h.addEventListener("click", click);
    h.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); click(); } });
  });

  var COND = /^([A-Za-z_][A-Za-z0-9_]*)(>=|<=|>|<|=)(-?[0-9.]+)$/;
  function test(row, terms) {
    return terms.every(function (t) {
      var m = COND.exec(t);
      if (m && names.indexOf(m[1]) >= 0) {
        var v = value(row, names.indexOf(m[1]));
        if (v === "") { return false; } /* unknown is not a match */
        var x = Number(v), y = Number(m[3]);
        return { ">": x > y, "<": x < y, ">=": x >= y, "<=": x <= y, "=": x === y }[m[2]];
      }
      return row.textContent.toLowerCase().indexOf(t.toLowerCase()) >= 0;
    });
  }
  function filter() {
    var terms = input.value.split(/\s+/).filter(function (t) { return t.length > 0; });
    var shown = 0;
    rows.forEach(function (r) {
      var ok = test(r, terms);
      r.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " threads";
  }
  input.addEventListener("input", filter);
  filter();
})();
