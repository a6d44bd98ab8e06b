// Sort a report table by the header clicked (or focused and Enter/Space pressed); again reverses.
// A cell sorts by the number it starts with ("12.3 [11.0, 13.5]" by 12.3), else by its text;
// a missing figure ("-", "- (n=0)", empty) goes last either way, so it never leads a sorted table.
(function () {
  "use strict";
  var NUMBER = /^[-+]?\$?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?/i;
  var MISSING = /^(-(\s.*)?)?$/;  // "", "-" or "- (n=0)": a figure too few requests could give

  function key(cell) {
    var text = cell ? cell.textContent.trim() : "";
    if (MISSING.test(text)) return { missing: true };
    var match = text.match(NUMBER);
    if (match) return { number: parseFloat(match[0].replace(/[$,]/g, "")) };
    return { text: text.toLowerCase() };
  }

  function compare(a, b) {
    if (a.missing || b.missing) return (a.missing ? 1 : 0) - (b.missing ? 1 : 0);
    if (a.number !== undefined && b.number !== undefined) return a.number - b.number;
    if (a.number !== undefined) return -1;
    if (b.number !== undefined) return 1;
    return a.text < b.text ? -1 : a.text > b.text ? 1 : 0;
  }

  function sortBy(table, header, column) {
    var body = table.tBodies[0];
    if (!body) return;
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    var rows = Array.prototype.slice.call(body.rows).map(function (row) {
      return { row: row, key: key(row.cells[column]) };
    });
    rows.sort(function (a, b) {
      var order = compare(a.key, b.key);
      if (a.key.missing || b.key.missing) return order;
      return ascending ? order : -order;
    });
    rows.forEach(function (item) { body.appendChild(item.row); });
    Array.prototype.forEach.call(header.parentNode.cells, function (cell) { cell.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  Array.prototype.forEach.call(document.querySelectorAll("table"), function (table) {
    if (!table.tHead || !table.tHead.rows.length) return;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header, column) {
      header.tabIndex = 0;
      header.title = "sort by this column";
      header.addEventListener("click", function () { sortBy(table, header, column); });
      header.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortBy(table, header, column);
        }
      });
    });
  });
})();
