/* One date format for every page: "2026-12-01 10:05 UTC" (the archive's dates are UTC,
 * and the people reviewing them may sit in several time zones). */
(function () {
  "use strict";

  function pad(n) { return n < 10 ? "0" + n : String(n); }

  function dateTime(iso) {
    if (!iso) return "—";
    var d = new Date(iso);
    if (isNaN(d.getTime())) return String(iso);
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " +
      pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + " UTC";
  }

  window.ThothDates = { dateTime: dateTime };
})();
